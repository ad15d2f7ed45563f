"""fairseq's ``distributed.utils`` helpers over gang.

``group`` is a gang (None: the world gang); ranks named in arguments
(``src``, ``src_rank``) are ranks of that gang. Objects are pickled only
here, in the object-level calls; tensors and arrays go through the
collectives as they are.
"""

import pickle
import struct

from ._core import ReduceOperation, get_world_gang
from ._gang import InvalidArgumentError

__all__ = [
    "is_master",
    "get_rank",
    "get_world_size",
    "get_global_group",
    "get_default_group",
    "get_global_rank",
    "get_global_world_size",
    "all_reduce",
    "broadcast",
    "all_gather_list",
    "all_reduce_dict",
    "broadcast_object",
    "distributed_init",
]


def _group(group):
    return group if group is not None else get_world_gang()


def is_master(cfg):
    """Rank 0 of the world (cfg.distributed_rank, or
    cfg.distributed_training.distributed_rank)."""
    dt = getattr(cfg, "distributed_training", cfg)
    return getattr(dt, "distributed_rank", 0) == 0


def distributed_init(cfg=None):
    """Creates the world gang from the environment and returns this rank."""
    return get_world_gang().rank


def get_rank(group=None):
    return _group(group).rank


def get_world_size(group=None):
    return _group(group).size


def get_global_group():
    return get_world_gang()


get_default_group = get_global_group


def get_global_rank():
    return get_world_gang().rank


def get_global_world_size():
    return get_world_gang().size


def all_reduce(tensor, group=None, op="sum"):
    """In place; returns ``tensor``. op is "sum" or "max"."""
    if op == "sum":
        rop = ReduceOperation.SUM
    elif op == "max":
        rop = ReduceOperation.MAX
    else:
        raise NotImplementedError
    _group(group).all_reduce(tensor, rop)
    return tensor


def broadcast(tensor, src, group=None):
    _group(group).broadcast(tensor, src)


def all_gather_list(data, group=None, max_size=16384):
    """Every rank's picklable ``data``, as a list in rank order.

    fairseq's record is a 4-byte big-endian length then the pickle, and a
    record over ``max_size`` is an error; both are kept. The records travel
    with gang_all_gather_bytes (each rank's bytes, any length) instead of
    fairseq's zero-filled buffer and SUM all-reduce."""
    g = _group(group)
    enc = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    size = len(enc)
    if size + 4 > max_size:
        raise ValueError(f"encoded data size ({size + 4}) exceeds max_size ({max_size})")
    records = g.all_gather_bytes(struct.pack(">I", size) + enc)
    result = []
    for rec in records:
        (n,) = struct.unpack(">I", rec[:4])
        if n > 0:
            try:
                result.append(pickle.loads(rec[4 : 4 + n]))
            except pickle.UnpicklingError:
                raise Exception(
                    "Unable to unpickle data from other workers. all_gather_list requires all "
                    "workers to enter the function together, so this error usually indicates "
                    "that the workers have fallen out of sync somehow."
                ) from None
    return result


def _is_tensor(v):
    return hasattr(v, "data_ptr") and hasattr(v, "detach")


def all_reduce_dict(data, device=None, group=None):
    """Sums every value of ``data`` across ranks in one all_reduce (fairseq's
    all_reduce_dict): values become float64, the order of keys is kept.
    Numbers come back as floats, arrays as float64 numpy arrays, torch
    tensors as float64 tensors, each of its own shape."""
    import numpy

    keys = list(data.keys())
    parts, shapes = [], []
    for k in keys:
        v = data[k]
        if _is_tensor(v):
            a = v.detach().cpu().double().contiguous().numpy()
        else:
            a = numpy.asarray(v, dtype=numpy.float64)
        shapes.append(a.shape)
        parts.append(a.reshape(-1))
    flat = numpy.concatenate(parts) if parts else numpy.zeros(0, numpy.float64)
    flat = numpy.ascontiguousarray(flat, dtype=numpy.float64)
    _group(group).all_reduce(flat, ReduceOperation.SUM)
    out, pos = {}, 0
    for k, shape in zip(keys, shapes):
        n = int(numpy.prod(shape)) if shape else 1
        a = flat[pos : pos + n].reshape(shape)
        pos += n
        v = data[k]
        if _is_tensor(v):
            import torch

            out[k] = torch.from_numpy(a.copy())
        elif isinstance(v, (int, float)) or numpy.ndim(v) == 0 and not isinstance(v, numpy.ndarray):
            out[k] = float(a)
        else:
            out[k] = a.copy()
    return out


def broadcast_object(obj, src_rank, group=None, dist_device=None):
    """``obj`` from rank ``src_rank`` on every rank (pickled;
    gang_broadcast_bytes)."""
    g = _group(group)
    if not 0 <= src_rank < g.size:
        raise InvalidArgumentError(f"`src_rank` must be in [0, {g.size}), but is {src_rank}")
    if g.rank == src_rank:
        g.broadcast_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), src_rank)
        return obj
    return pickle.loads(g.broadcast_bytes(None, src_rank))
