"""Gang, FakeGang, ProcessGroupGang and ReduceOperation (fairseq2's names).

The collectives themselves are methods of the C type ``_gang._Gang`` that
these classes derive from, so a call such as ``gang.all_reduce(t, op)``
goes straight from Python to the C library. What lives here is what reads
better in Python: fairseq2's constructors and their checks, the device as a
``Device``, and the object-level calls (``broadcast_objects``), which pickle.
"""

import enum
import pickle
import threading

from . import _gang
from ._gang import (
    GangError,
    InvalidArgumentError,
    InvalidUsageError,
    NotSupportedError,
)
from .device import Device, as_device

__all__ = [
    "ReduceOperation",
    "Gang",
    "FakeGang",
    "ProcessGroupGang",
    "get_world_gang",
]


class ReduceOperation(enum.IntEnum):
    """fairseq2's reduce operations; the values are gang_reduce_op's."""

    SUM = 1
    MEAN = 2
    PRODUCT = 3
    MIN = 4
    MAX = 5


class Gang(_gang._Gang):
    """A group of processes that run collectives together (gang_t).

    Collectives are in place on anything with the buffer protocol or
    ``__array_interface__`` (numpy arrays) or a torch CPU tensor; they
    release the GIL while they run and take ``async_op=True`` to return a
    ``Work``. ``source_rank`` and ``ranks`` are ranks of this gang.
    """

    @property
    def device(self):
        kind, index = self._device
        return Device(kind, None if kind == "cpu" else index)

    @property
    def supports_process_group(self):
        return False

    def as_process_group(self):
        raise NotSupportedError(f"`{type(self).__name__}` does not support conversion to a process group.")

    def broadcast_objects(self, objects, source_rank=0):
        """Broadcasts the picklable objects of the list ``objects`` from
        ``source_rank``, in place (fairseq2's broadcast_objects). Every rank
        passes a list of the same length."""
        if self.rank == source_rank:
            data = pickle.dumps(list(objects), protocol=pickle.HIGHEST_PROTOCOL)
            self.broadcast_bytes(data, source_rank)
            return
        received = pickle.loads(self.broadcast_bytes(None, source_rank))
        if len(received) != len(objects):
            raise InvalidArgumentError(
                f"`objects` must have the same length on every rank: {len(objects)} here, "
                f"{len(received)} on rank {source_rank}."
            )
        objects[:] = received

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self.closed:
            return f"<{type(self).__name__} closed>"
        return f"<{type(self).__name__} rank {self.rank} of {self.size} on {self.device}>"


class FakeGang(Gang):
    """One process simulating rank ``rank`` of ``size`` ranks that all hold
    this process's data (gang_create_fake). Unlike fairseq2's, MEAN, MIN and
    MAX and a foreign broadcast source have their same-data results instead
    of raising (docs/gang.md says why)."""

    def __new__(cls, device=None, *, rank=0, size=1):
        if size <= 0:
            raise InvalidArgumentError("`size` must be greater than 0.")
        if rank < 0 or rank >= size:
            raise InvalidArgumentError(
                f"`rank` must be greater than or equal to 0 and less than `size` ({size}), but is {rank} instead."
            )
        device = as_device(device)
        if device.type == "meta":
            raise InvalidArgumentError("`device` must not be of type `meta`.")
        return cls._create_fake(device, rank, size)

    def __init__(self, device=None, *, rank=0, size=1):
        pass


# gang.torch_backend builds on this module, so this module does not import
# it: the package (gang/__init__.py) sets the loader, run on first use.
_torch_backend_loader = None


def _torch_backend():
    if _torch_backend_loader is None:
        raise ImportError("gang.torch_backend is loaded by the gang package; import gang")
    return _torch_backend_loader()


_world_lock = threading.Lock()
_world = None  # the gang of create_default_process_group


def get_world_gang(create=True):
    """The process's root gang: the one create_default_process_group made,
    else (create=True) a new one from the environment, else None."""
    global _world
    with _world_lock:
        if _world is None and create:
            _world = ProcessGroupGang._create_default()
        return _world


class ProcessGroupGang(Gang):
    """The gang of real processes (gang_create_default /
    gang_create_with_store). Its name is fairseq2's; what is underneath is
    gang's shared memory and TCP, not a torch ProcessGroup (as_process_group
    gives one when the torch backend is built)."""

    def __new__(cls, *args, **kwargs):
        raise InvalidUsageError(
            "use ProcessGroupGang.create_default_process_group(device) or ProcessGroupGang.create_with_store(...)"
        )

    @classmethod
    def create_default_process_group(cls, device=None, *, timeout=None, high_priority=False):
        """The root gang of this run, from the environment a launcher set
        (gangrun, torchrun, Slurm, MPI). Collective over the world.
        ``timeout`` (seconds or a timedelta) defaults to 15 minutes."""
        global _world
        device = as_device(device)
        if device.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(
                f"`device` must be of type `cpu` or `cuda`, but is of type `{device.type}` instead."
            )
        if hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        with _world_lock:
            if _world is not None and not _world.closed:
                raise InvalidUsageError("Root process group is already initialized.")
            _world = cls._create_default(device, timeout)
            return _world

    @classmethod
    def create_with_store(cls, store_addr, rank, size, device=None, *, timeout=None):
        """A gang of ``size`` processes meeting at ``store_addr`` (torchft's
        configure(store_addr, rank, world_size))."""
        if hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        return cls._create_with_store(store_addr, rank, size, as_device(device), timeout)

    @property
    def supports_process_group(self):
        try:
            _torch_backend()
        except ImportError:
            return False
        return True

    def as_process_group(self):
        """A torch ProcessGroup over this gang's connections."""
        try:
            backend = _torch_backend()
        except ImportError as e:
            raise NotSupportedError(f"the torch backend of gang is not available: {e}") from e
        return backend.process_group_of(self)

    def close(self):
        global _world
        with _world_lock:
            if _world is self:
                _world = None
        super().close()
