"""fairseq's ``distributed.utils`` helpers over gang.

``group`` is a gang (None: the world gang); ranks named in arguments
(``src``, ``src_rank``) are ranks of that gang. Objects are pickled only
here, in the object-level calls; tensors and arrays go through the
collectives as they are.
"""

import os
import pickle
import socket
import struct
import sys
import warnings

from ._core import ProcessGroupGang, ReduceOperation, get_world_gang
from ._gang import InvalidArgumentError, NotSupportedError

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
    "infer_init_method",
]


def _group(group):
    return group if group is not None else get_world_gang()


def is_master(cfg):
    """Rank 0 of the world (cfg.distributed_rank, or
    cfg.distributed_training.distributed_rank)."""
    dt = getattr(cfg, "distributed_training", cfg)
    return getattr(dt, "distributed_rank", 0) == 0


def _dt(cfg):
    return getattr(cfg, "distributed_training", cfg)


def infer_init_method(cfg, force_distributed=False):
    """Fills cfg's distributed_init_method, distributed_rank and
    distributed_world_size from the launcher's environment (fairseq's
    infer_init_method): RANK and WORLD_SIZE with MASTER_ADDR/MASTER_PORT
    (torchrun) or GANG_STORE_ADDR (gangrun) give "env://"; otherwise, with
    distributed_world_size > 1 or force_distributed, a
    tcp://localhost:<free port> for processes this one spawns, each passing
    its own distributed_rank. A method already set is left alone."""
    dt = _dt(cfg)
    if getattr(dt, "distributed_init_method", None) is not None:
        return
    e = os.environ
    if "RANK" in e and "WORLD_SIZE" in e and (
            ("MASTER_ADDR" in e and "MASTER_PORT" in e) or "GANG_STORE_ADDR" in e):
        dt.distributed_init_method = "env://"
        dt.distributed_world_size = int(e["WORLD_SIZE"])
        dt.distributed_rank = int(e["RANK"])
        if hasattr(dt, "device_id") and "LOCAL_RANK" in e:
            dt.device_id = int(e["LOCAL_RANK"])
    elif getattr(dt, "distributed_world_size", 1) > 1 or force_distributed:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dt.distributed_init_method = f"tcp://localhost:{port}"


def distributed_init(cfg=None):
    """Creates the world gang as cfg says (fairseq's distributed_init) and
    returns this rank. cfg (or cfg.distributed_training) gives
    distributed_init_method, distributed_rank and distributed_world_size:
    "env://" or None takes the launcher's environment (and writes the rank
    and size it found back into cfg); "tcp://HOST:PORT" meets there as
    distributed_rank of distributed_world_size, rank 0 hosting the store
    (what torch.multiprocessing.spawn'ed workers do). A world that exists
    already is kept, with a warning, as fairseq does."""
    dt = _dt(cfg) if cfg is not None else None
    method = getattr(dt, "distributed_init_method", None)
    world = get_world_gang(create=False)
    if world is not None:
        warnings.warn("Distributed is already initialized, cannot initialize twice!")
    elif method is None or method == "env://":
        world = get_world_gang()
    elif method.startswith("tcp://"):
        rank, size = getattr(dt, "distributed_rank", None), getattr(dt, "distributed_world_size", None)
        if not isinstance(rank, int) or not isinstance(size, int) or not 0 <= rank < size:
            raise InvalidArgumentError(
                f"distributed_init: {method} needs distributed_rank in [0, distributed_world_size), "
                f"got rank {rank!r} of {size!r}")
        host, _, port = method[len("tcp://"):].rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgumentError(f"distributed_init: expected tcp://HOST:PORT, got {method!r}")
        over = {"MASTER_ADDR": host.strip("[]"), "MASTER_PORT": port, "RANK": str(rank), "WORLD_SIZE": str(size)}
        # gang_create_default reads these; the process's own are put back.
        saved = {k: os.environ.get(k) for k in list(over) + ["GANG_STORE_ADDR", "LOCAL_RANK", "LOCAL_WORLD_SIZE"]}
        try:
            for k in ("GANG_STORE_ADDR", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
                os.environ.pop(k, None)
            os.environ.update(over)
            world = ProcessGroupGang.create_default_process_group()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    else:
        raise NotSupportedError(
            f"distributed_init: init method {method!r} is not supported (env:// or tcp://HOST:PORT are)")
    if dt is not None:
        rank, size = getattr(dt, "distributed_rank", None), getattr(dt, "distributed_world_size", None)
        if method is not None and method.startswith("tcp://") and (world.rank, world.size) != (rank, size):
            raise InvalidArgumentError(
                f"distributed_init: the world is rank {world.rank} of {world.size}, cfg says {rank} of {size}")
        try:  # fairseq writes them back too
            dt.distributed_rank = world.rank
            dt.distributed_world_size = world.size
        except (AttributeError, TypeError):  # a read-only cfg
            pass
    return world.rank


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
    all_reduce_dict), the order of keys kept. As fairseq's, every value
    comes back as a float64 torch tensor of its own shape (a number as a
    0-d one, so ``d["loss"].item()`` works) when torch is loaded; without
    torch, as a float64 numpy array (0-d for a number)."""
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
    torch = sys.modules.get("torch")
    out, pos = {}, 0
    for k, shape in zip(keys, shapes):
        n = int(numpy.prod(shape)) if shape else 1
        a = flat[pos : pos + n].reshape(shape).copy()
        pos += n
        out[k] = torch.from_numpy(a) if torch is not None else a
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
