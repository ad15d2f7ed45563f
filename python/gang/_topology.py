"""Gangs and the topology builders (fairseq2's), over gangs_create_* in C.

The C functions build the sub-gangs; this file maps their handles to
Python objects so identities read as in fairseq2 (``gangs.dp is root`` when
tp_size is 1) and keeps the C ownership record (_Topology) alive as long as
any of its gangs is reachable.

Current gangs are kept per thread and per device in Python, so ``with
gangs:`` nests and ``get_current_gangs() is gangs`` holds; the same push is
made on the C side (gangs_push_current) for C code called from Python.
"""

import dataclasses
import sys
import threading

from . import _gang
from ._core import FakeGang, Gang, ProcessGroupGang
from ._gang import InvalidArgumentError, InvalidUsageError
from .device import CPU, as_device

__all__ = [
    "Gangs",
    "create_fake_gangs",
    "create_parallel_gangs",
    "create_fsdp_gangs",
    "get_current_gangs",
    "maybe_get_current_gangs",
    "get_default_gangs",
    "set_default_gangs",
    "set_gangs",
    "broadcast_flag",
    "all_sum",
]

_FIELDS = ("root", "dp", "rdp", "sdp", "tp", "pp")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gangs:
    """The gangs of one process in a parallel run: root, data parallel (dp,
    with its replicated rdp and sharded sdp parts), tensor parallel (tp) and
    pipeline parallel (pp)."""

    root: Gang
    dp: Gang
    rdp: Gang
    sdp: Gang
    tp: Gang
    pp: Gang
    _topology: object = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        # fairseq2 writes `dp.rank != 0 or (tp.rank != 0 and pp.rank != 0)`
        # by operator precedence; the intent, checked here, is all of them.
        if self.root.rank == 0 and (self.dp.rank != 0 or self.tp.rank != 0 or self.pp.rank != 0):
            raise InvalidArgumentError(
                "Coordinator process of the root gang (i.e. `root.rank == 0`) must be rank 0 in all parallel gangs."
            )

    @property
    def device(self):
        return self.root.device

    def close(self):
        """Closes the root gang (fairseq2: the root's teardown ends its
        children)."""
        self.root.close()

    def __enter__(self):
        _push(self)
        return None

    def __exit__(self, *exc):
        _pop(self)

    def _fields(self):
        return tuple(getattr(self, f) for f in _FIELDS)


def _gang_type(root):
    return type(root) if isinstance(root, Gang) else ProcessGroupGang


def _build(topo, known, root_type):
    """Gangs of a _Topology: fields whose handle is already a Python gang
    (`known`, handle -> object) reuse it; a size-1 gang is a FakeGang."""
    objs = []
    for i, h in enumerate(topo.handles()):
        g = known.get(h)
        if g is None:
            g = topo.wrap(i, root_type)
            if g.size == 1 and root_type is not FakeGang:
                g = topo.wrap(i, FakeGang)
            known[h] = g
        objs.append(g)
    return Gangs(**dict(zip(_FIELDS, objs)), _topology=topo)


def create_fake_gangs(device=None):
    """Six size-1 fake gangs on ``device`` (gangs_create_fake)."""
    topo = _gang.create_fake_gangs(as_device(device))
    return _build(topo, {}, FakeGang)


def create_parallel_gangs(root, *, tp_size=1, pp_size=1):
    """fairseq2's create_parallel_gangs (gangs_create_parallel): tensor
    parallel gangs are runs of ``tp_size`` consecutive ranks, data parallel
    gangs stride by ``tp_size``. ``pp_size`` is gang's extension: the layout
    is then (dp, pp, tp) row-major. Collective over ``root``."""
    W = root.size
    if tp_size < 1:
        raise InvalidArgumentError(f"`tp_size` must be greater than or equal to 1, but is {tp_size} instead.")
    if pp_size < 1:
        raise InvalidArgumentError(f"`pp_size` must be greater than or equal to 1, but is {pp_size} instead.")
    if W % tp_size != 0:
        raise InvalidArgumentError(f"`tp_size` must be a factor of `root_gang.size` ({W}), but is {tp_size} instead.")
    if W % (tp_size * pp_size) != 0:
        raise InvalidArgumentError(
            f"`tp_size * pp_size` must be a factor of `root_gang.size` ({W}), but is {tp_size * pp_size} instead."
        )
    topo = _gang.create_parallel_gangs(root, tp_size, pp_size)
    return _build(topo, {root._handle: root}, _gang_type(root))


def create_fsdp_gangs(gangs, intra_node_size=None):
    """fairseq2's create_fsdp_gangs (gangs_create_fsdp): a new Gangs whose
    sdp/rdp split dp for FSDP (None: sdp = dp, rdp fake) or HSDP
    (``intra_node_size`` consecutive dp ranks per sdp gang, rdp strides)."""
    if intra_node_size is not None:
        if intra_node_size <= 1:
            raise InvalidArgumentError(
                f"`intra_node_size` must be greater than 1, but is {intra_node_size} instead."
            )
        if gangs.dp.size % intra_node_size != 0:
            raise InvalidArgumentError(
                f"`intra_node_size` must be a factor of `gangs.dp.size` ({gangs.dp.size}), but is {intra_node_size} instead."
            )
    fields = gangs._fields()
    topo = _gang.create_fsdp_gangs(fields, gangs, intra_node_size or 0)
    known = {g._handle: g for g in fields}
    return _build(topo, known, _gang_type(gangs.root))


# ---- current gangs ---------------------------------------------------------

_local = threading.local()
_defaults = {}
_defaults_lock = threading.Lock()
_fake_cache = {}


def _key(device):
    d = as_device(device)
    return (d.type, d.index if d.type == "cuda" else None)


def _stacks():
    # Created lazily in every thread (fairseq2 0.6 created it only in the
    # thread that imported the module).
    s = getattr(_local, "stacks", None)
    if s is None:
        s = _local.stacks = {}
        _local.order = []
    return s


def _push(gangs):
    _stacks().setdefault(_key(gangs.device), []).append(gangs)
    _local.order.append(gangs)
    _gang.push_current(gangs._fields())


def _pop(gangs):
    stack = _stacks().get(_key(gangs.device))
    if not stack or stack[-1] is not gangs:
        raise InvalidUsageError("`with gangs:` blocks must exit in the order they were entered.")
    stack.pop()
    _local.order.pop()
    _gang.pop_current()


def set_gangs(gangs):
    """Context manager making ``gangs`` current in this thread."""
    return gangs


def set_default_gangs(gangs):
    """The process-wide default gangs for ``gangs.device``."""
    with _defaults_lock:
        _defaults[_key(gangs.device)] = gangs


def get_default_gangs(device=None):
    """The process default for ``device``, else one cached set of fake
    gangs per device (the same objects on every call)."""
    key = _key(device if device is not None else CPU)
    with _defaults_lock:
        g = _defaults.get(key)
        if g is None:
            g = _fake_cache.get(key)
            if g is None:
                g = _fake_cache[key] = create_fake_gangs(as_device(device) if device is not None else CPU)
        return g


def get_current_gangs(device=None):
    """The innermost ``with gangs:`` of this thread for ``device``, else
    the default (never None)."""
    key = _key(device if device is not None else CPU)
    stack = _stacks().get(key)
    if stack:
        return stack[-1]
    return get_default_gangs(device)


def maybe_get_current_gangs(device=None):
    """The innermost ``with gangs:`` of this thread (for ``device`` when
    given), or None when none is active."""
    _stacks()
    if device is None:
        return _local.order[-1] if _local.order else None
    stack = _local.stacks.get(_key(device))
    return stack[-1] if stack else None


# ---- helpers ---------------------------------------------------------------


def broadcast_flag(gang, flag, source_rank=0):
    """The source's ``flag`` on every rank, as a bool (gang_broadcast_flag)."""
    return _gang.broadcast_flag(gang, bool(flag), source_rank)


def _scalar(value, is_float):
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.tensor(value, dtype=torch.float32 if is_float else torch.int64)
    try:
        import numpy
    except ImportError:
        return value
    return numpy.array(value, dtype=numpy.float32 if is_float else numpy.int64)


def all_sum(gang, value):
    """The sum of ``value`` over the gang as a 0-d tensor, int64 or float32
    as in fairseq2 (gang_all_sum / gang_all_sum_f64). The tensor is torch's
    when torch is loaded, else numpy's."""
    if hasattr(value, "item"):
        value = value.item()
    is_float = isinstance(value, float)
    return _scalar(_gang.all_sum(gang, float(value) if is_float else int(value)), is_float)
