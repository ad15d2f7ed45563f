"""torchft's process groups as torch.distributed ProcessGroups, over gang.

Each class is a Python subclass of ``torch.distributed.ProcessGroup`` (what
torchft's are), so torch takes it wherever it takes a group:
``dist.all_reduce(t, group=pg)``, ``DistributedDataParallel(model,
process_group=pg)``. Underneath is a gang (``pg.gang``) and a C++ view of
it (gang._gang_torch.GangProcessGroup) that posts each collective on the
tensors' own memory; the view reads the gang's rank and size at every call,
so one object stays right across every ``configure``.

torch 1.13 keeps a group's rank and size fixed from its construction
(c10d's getRank/getSize are not virtual), and its DDP divides gradients by
that size. So, as torchft does for DeviceMesh, a group whose size changes
tells torch rank 0 of 1 and does any scaling itself: ``size()`` called from
Python reports the live size, the fixed one is what C++ sees.
``ManagedProcessGroup``'s all_reduce is the manager's mean over the
participants for SUM and AVG alike: torch, told the size is 1, divided by 1.
"""

import datetime

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    BroadcastOptions,
    ReduceOp,
    _create_work_from_future,
)

from . import _gang, _gang_torch
from ._gang import InvalidArgumentError, InvalidUsageError, NotSupportedError
from .device_mesh import DeviceMesh
from ._ft import (
    BabyGang,
    DummyGang,
    ErrorSwallowingGang,
    Manager,
    ManagedGang,
    ReconfigurableGang,
    _exception,
)

__all__ = [
    "ProcessGroup",
    "ProcessGroupWrapper",
    "ProcessGroupGloo",
    "ProcessGroupBaby",
    "ProcessGroupBabyGloo",
    "ProcessGroupDummy",
    "ErrorSwallowingProcessGroupWrapper",
    "ManagedProcessGroup",
    "DistributedDataParallel",
    "extend_device_mesh",
    "create_store_client",
    "StoreClient",
]


def _timeout(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return timeout


def _done(result):
    """A completed c10d Work whose future holds ``result``."""
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


# ---- torchft's overloads ------------------------------------------------------


def _allreduce_args(args, kwargs):
    """(tensors, AllreduceOptions) from torchft's three shapes: (tensors,
    opts), (tensors, op), (tensor, op)."""
    args = list(args)
    first = args.pop(0) if args else kwargs.pop("tensors", kwargs.pop("tensor", None))
    second = args.pop(0) if args else kwargs.pop("opts", kwargs.pop("op", None))
    if args or kwargs:
        raise TypeError(f"allreduce: unexpected arguments {args or ''}{kwargs or ''}")
    if isinstance(first, torch.Tensor):
        tensors = [first]
    elif isinstance(first, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in first):
        tensors = list(first)
    else:
        raise TypeError(f"allreduce: expected a tensor or a list of tensors, got {type(first).__name__}")
    if isinstance(second, AllreduceOptions):
        return tensors, second
    opts = AllreduceOptions()
    if second is not None:
        if not isinstance(second, ReduceOp) and not isinstance(second, type(ReduceOp.SUM)):
            raise TypeError(f"allreduce: expected AllreduceOptions or a ReduceOp, got {type(second).__name__}")
        opts.reduceOp = second
    return tensors, opts


def _allgather_args(args, kwargs):
    """(outputs: list[list[Tensor]], inputs: list[Tensor], opts) from
    (output_tensors, input_tensors, opts) or (output_tensors, input_tensor)."""
    args = list(args)
    out = args.pop(0) if args else kwargs.pop("output_tensors")
    inp = args.pop(0) if args else kwargs.pop("input_tensors", kwargs.pop("input_tensor", None))
    opts = args.pop(0) if args else kwargs.pop("opts", None)
    if args or kwargs:
        raise TypeError(f"allgather: unexpected arguments {args or ''}{kwargs or ''}")
    if isinstance(inp, torch.Tensor):
        return [list(out)], [inp], opts or AllgatherOptions()
    return [list(o) for o in out], list(inp), opts or AllgatherOptions()


def _broadcast_args(args, kwargs):
    """(tensors, BroadcastOptions) from (tensors, opts) or (tensor, root)."""
    args = list(args)
    first = args.pop(0) if args else kwargs.pop("tensors", kwargs.pop("tensor", None))
    second = args.pop(0) if args else kwargs.pop("opts", kwargs.pop("root", None))
    if args or kwargs:
        raise TypeError(f"broadcast: unexpected arguments {args or ''}{kwargs or ''}")
    tensors = [first] if isinstance(first, torch.Tensor) else list(first)
    if isinstance(second, BroadcastOptions):
        return tensors, second
    opts = BroadcastOptions()
    if second is not None:
        opts.rootRank = int(second)
    return tensors, opts


# ---- the base ------------------------------------------------------------------


class ProcessGroup(dist.ProcessGroup):
    """A torch ProcessGroup over a gang (torchft's ProcessGroup). ``gang``
    is any gang.Gang; ``told_rank``/``told_size`` what torch's C++ side is
    told (default: the gang's at construction)."""

    def __init__(self, gang=None, told_rank=None, told_size=None):
        if told_rank is None:
            told_rank = max(gang.rank, 0) if gang is not None else 0
        if told_size is None:
            told_size = max(gang.size, 1) if gang is not None else 1
        super().__init__(int(told_rank), int(told_size))
        self._gang = None
        self._view = None
        self._group_name = None
        if gang is not None:
            self._attach(gang, told_rank, told_size)

    def _attach(self, gang, told_rank=-1, told_size=-1):
        self._gang = gang
        self._view = _gang_torch.GangProcessGroup(gang._handle, False, gang, told_rank, told_size)

    @property
    def gang(self):
        """The gang underneath."""
        if self._gang is None:
            raise InvalidUsageError(f"{type(self).__name__} has no gang (it was wrapped, or never had one)")
        return self._gang

    def _v(self):
        if self._view is None:
            raise InvalidUsageError(
                f"{type(self).__name__}: its gang was taken by a wrapper; use the wrapper")
        return self._view

    # torchft's call shapes
    def allreduce(self, *args, **kwargs):
        tensors, opts = _allreduce_args(args, kwargs)
        return self._allreduce(tensors, opts)

    def _allreduce(self, tensors, opts):
        return self._v().allreduce(tensors, opts)

    def allgather(self, *args, **kwargs):
        outputs, inputs, opts = _allgather_args(args, kwargs)
        return self._v().allgather(outputs, inputs, opts)

    def broadcast(self, *args, **kwargs):
        tensors, opts = _broadcast_args(args, kwargs)
        return self._v().broadcast(tensors, opts)

    def broadcast_one(self, tensor, root):
        opts = BroadcastOptions()
        opts.rootRank = int(root)
        return self.broadcast([tensor], opts)

    def allreduce_coalesced(self, tensors, opts=None):
        o = AllreduceOptions()
        if opts is not None:
            o.reduceOp = opts.reduceOp
        return self._allreduce(list(tensors), o)

    def barrier(self, opts=None):
        return self._v().barrier() if opts is None else self._v().barrier(opts)

    def reduce_scatter(self, *args, **kwargs):
        return self._v().reduce_scatter(*args, **kwargs)

    def _allgather_base(self, *args, **kwargs):
        return self._v()._allgather_base(*args, **kwargs)

    def _reduce_scatter_base(self, *args, **kwargs):
        return self._v()._reduce_scatter_base(*args, **kwargs)

    def alltoall_base(self, *args, **kwargs):
        return self._v().alltoall_base(*args, **kwargs)

    def send(self, tensors, dst, tag=0):
        return self._v().send(tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._v().recv(tensors, src, tag)

    # what it is
    def size(self):
        """The gang's size now (torch's C++ side keeps the one it was told)."""
        return self._gang.size if self._gang is not None else 0

    def rank(self):
        return self._gang.rank if self._gang is not None else -1

    def getBackendName(self):
        return "gang"

    def _get_backend_name(self):
        return self.getBackendName()

    def configure(self, store_addr, rank, world_size):
        """Rebuilds the gang under ``store_addr`` ('host:port/prefix', a
        prefix never used before) as ``rank`` of ``world_size``; blocks
        until it is ready or raises (torchft's configure)."""
        gang = self.gang
        if not hasattr(gang, "configure"):
            raise NotSupportedError(f"{type(self).__name__} over {type(gang).__name__} is not reconfigurable")
        gang.configure(store_addr, rank, world_size)

    @property
    def group_name(self):
        """The name given to register(), else one made from the object."""
        return self._group_name or f"{self.getBackendName()}:{id(self):x}"

    def register(self, name):
        """Names this group in gang.ft_torch's registry (resolve(name)
        finds it); once."""
        if self._group_name is not None:
            raise InvalidUsageError(f"register: already registered as '{self._group_name}'")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("register: `name` must be a non-empty str")
        full = f"{self.getBackendName()}:{name}"
        if full in _registry:
            raise InvalidArgumentError(f"register: '{full}' is registered already")
        _registry[full] = self
        self._group_name = full
        return self

    def unregister(self):
        """Takes the name register() gave back."""
        if self._group_name is None:
            raise InvalidUsageError("unregister: the group was not registered")
        _registry.pop(self._group_name, None)
        self._group_name = None

    def __repr__(self):
        return f"{type(self).__name__}(rank={self.rank()}, size={self.size()})"


_registry = {}


def resolve(name):
    """The group registered under ``name`` ('backend:name')."""
    try:
        return _registry[name]
    except KeyError:
        raise InvalidArgumentError(f"no process group is registered as '{name}'") from None


class ProcessGroupWrapper(ProcessGroup):
    """A group over another (``parent``), reconfigured through it."""

    def __init__(self, pg=None, told_rank=0, told_size=1):
        super().__init__(None, told_rank, told_size)
        self._parent = pg
        if pg is not None:
            self._attach(pg.gang, told_rank, told_size)

    @property
    def parent(self):
        return self._parent

    def configure(self, store_addr, rank, world_size):
        if self._parent is not None and self._parent._view is not None:
            self._parent.configure(store_addr, rank, world_size)
        else:
            super().configure(store_addr, rank, world_size)


# ---- the reconfigurable ones ----------------------------------------------------


class ProcessGroupGloo(ProcessGroupWrapper):
    """torchft's reconfigurable CPU group: unconfigured until configure();
    underneath a ReconfigurableGang (gang's shared memory and TCP, not
    Gloo). ``timeout`` (seconds or a timedelta) is each incarnation's
    collective timeout."""

    _gang_class = ReconfigurableGang

    def __init__(self, timeout=datetime.timedelta(seconds=60)):
        super().__init__(ProcessGroup(self._gang_class(timeout=_timeout(timeout)), 0, 1))

    def getBackendName(self):
        return "torchft-gang"


class ProcessGroupBaby(ProcessGroupGloo):
    """A reconfigurable group whose communicator runs in a child process
    (BabyGang): a child that hangs or dies costs this process an error, not
    a hang. Tensors cross through shared memory."""

    _gang_class = BabyGang

    def getBackendName(self):
        return "torchft-baby-gang"


class ProcessGroupBabyGloo(ProcessGroupBaby):
    """torchft's name for the subprocess group over CPU tensors."""


class ProcessGroupDummy(ProcessGroup):
    """Rank ``rank`` of ``world`` whose collectives move nothing and
    succeed (DummyGang): DDP's setup and a hook that bypasses the group run
    over it."""

    def __init__(self, rank=0, world=1):
        super().__init__(DummyGang(rank, world), rank, world)

    def getBackendName(self):
        return "torchft-dummy"

    def configure(self, store_addr, rank, world_size):
        # torchft's dummy accepts and ignores a configuration.
        pass


class ErrorSwallowingProcessGroupWrapper(ProcessGroupWrapper):
    """Wraps ``pg`` (a group of this module), taking its gang
    (ErrorSwallowingGang): after the first error every collective returns
    a completed work and leaves the tensors alone; the error is kept
    (``error()``) until ``configure``."""

    def __init__(self, pg):
        if not isinstance(pg, ProcessGroup):
            raise InvalidArgumentError(
                f"ErrorSwallowingProcessGroupWrapper wraps a gang.ft process group, not {type(pg).__name__}")
        inner = pg.gang
        wrapped = ErrorSwallowingGang(inner)
        # The parent's gang now belongs to the wrapper.
        pg._gang = pg._view = None
        if isinstance(pg, ProcessGroupWrapper) and pg._parent is not None:
            pg._parent._gang = pg._parent._view = None
        super().__init__(None, 0, 1)
        self._parent = pg
        self._attach(wrapped, 0, 1)

    def getBackendName(self):
        return "torchft-error-swallowing"

    def configure(self, store_addr, rank, world_size):
        self.gang.configure(store_addr, rank, world_size)

    def error(self):
        """The first error kept, None when none."""
        return self.gang.error()

    def report_error(self, e):
        """Makes every later collective a no-op until configure."""
        self.gang.report_error(e)

    def _swallow(self, call, result):
        if self.error() is not None:
            return _done(result)
        try:
            work = call()
            work.wait()
            return work
        except Exception as e:  # the wrapper's purpose: keep it, carry on
            self.report_error(e)
            return _done(result)

    def _allreduce(self, tensors, opts):
        return self._swallow(lambda: self._v().allreduce(tensors, opts), tensors)

    def allgather(self, *args, **kwargs):
        outputs, inputs, opts = _allgather_args(args, kwargs)
        return self._swallow(lambda: self._v().allgather(outputs, inputs, opts), outputs)

    def broadcast(self, *args, **kwargs):
        tensors, opts = _broadcast_args(args, kwargs)
        return self._swallow(lambda: self._v().broadcast(tensors, opts), tensors)


# ---- the managed one --------------------------------------------------------------


class ManagedProcessGroup(ProcessGroupWrapper):
    """The data-parallel group of a Manager (torchft's ManagedProcessGroup).

    torch's C++ side is told rank 0 of 1 (its DDP then divides by 1 and
    issues its setup and bucket-rebuild collectives as a group of one
    would); the group scales itself: allreduce (SUM or AVG) is the
    manager's mean over the replica groups taking part, a failure kept for
    should_commit and never raised. ``size()`` from Python is the number of
    participants, as torchft's. The other collectives are those of a group
    of one -- broadcast from 0 leaves the tensor, allgather into one output
    copies -- and an allgather into ``size()`` outputs runs on the replica
    gang; the replica gang's other collectives are at ``manager.gang``.

    torch's DDP over it needs ``find_unused_parameters=True``: otherwise
    DDP lays its gradient buckets out anew after its first step, so a
    replica that (re)starts later would average its first step's
    gradients in another layout than the others'. DDP announces that
    re-layout with a broadcast after its first all_reduce, which this
    group refuses with that advice."""

    def __init__(self, manager):
        if not isinstance(manager, Manager):
            raise InvalidArgumentError(f"ManagedProcessGroup(manager): expected a Manager, not {type(manager).__name__}")
        super().__init__(None, 0, 1)
        self._manager = manager
        self._served = False
        self._attach(manager.gang, 0, 1)

    @property
    def manager(self):
        return self._manager

    def getBackendName(self):
        return "torchft-managed"

    def size(self):
        return self._manager.num_participants()

    def rank(self):
        return max(self._manager.replica_rank(), 0)

    def configure(self, store_addr, rank, world_size):
        raise NotSupportedError("ManagedProcessGroup is configured by its manager at each quorum")

    def _allreduce(self, tensors, opts):
        op = opts.reduceOp
        if op != ReduceOp.SUM and op != ReduceOp.AVG:
            raise NotSupportedError(
                "ManagedProcessGroup.allreduce is the mean over the replica groups (SUM or AVG); "
                "use manager.gang for other reductions")
        self._served = True
        for t in tensors:
            self._manager.allreduce(t)
        return _done(tensors)

    def allgather(self, *args, **kwargs):
        outputs, inputs, opts = _allgather_args(args, kwargs)
        if all(len(outs) == 1 for outs in outputs):
            for outs, inp in zip(outputs, inputs):
                outs[0].copy_(inp)
            return _done(outputs)
        return self._v().allgather(outputs, inputs, opts)

    def broadcast(self, *args, **kwargs):
        tensors, opts = _broadcast_args(args, kwargs)
        if opts.rootRank != 0:
            raise InvalidArgumentError(
                f"ManagedProcessGroup.broadcast: torch sees a group of one, so the root is 0, not "
                f"{opts.rootRank}; broadcast across the replica groups on manager.gang")
        if self._served:
            raise NotSupportedError(
                "ManagedProcessGroup.broadcast after an all_reduce: torch's DDP is laying out its gradient "
                "buckets anew, which would make a replica that joins later average gradients in another "
                "layout; construct DDP with find_unused_parameters=True (or use "
                "gang.ft.DistributedDataParallel); broadcast across the replica groups on manager.gang")
        return _done(tensors)

    def barrier(self, opts=None):
        return _done([])


# ---- DDP and the mesh ---------------------------------------------------------------


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """torchft's DDP: ``module`` under torch's DDP, its gradients averaged
    over the replica groups by ``manager`` (a comm hook), setup over a
    dummy group. Used with OptimizerWrapper (or start_quorum / should_commit
    around each step). find_unused_parameters is True: DDP then keeps its
    first gradient-bucket layout, the same in every replica whenever it
    started (otherwise it lays the buckets out anew after its first step,
    and a replica joining later would average in another layout)."""

    def __init__(self, manager, module, **kwargs):
        if not isinstance(manager, Manager):
            raise InvalidArgumentError(f"DistributedDataParallel(manager, module): expected a Manager, not {type(manager).__name__}")
        if not kwargs.setdefault("find_unused_parameters", True):
            raise InvalidArgumentError(
                "gang.ft.DistributedDataParallel: find_unused_parameters=False would let DDP lay its "
                "gradient buckets out anew after the first step, differently in a replica that joins later")
        super().__init__(module, process_group=ProcessGroupDummy(0, 1), **kwargs)
        self.register_comm_hook(manager, self._comm_hook)

    @staticmethod
    def _comm_hook(manager, bucket):
        buf = bucket.buffer()
        manager.allreduce(buf)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut


class _ExtendedMesh:
    """A gang DeviceMesh with one more dimension, of size 1 to the mesh,
    whose group is a torchft process group (extend_device_mesh)."""

    def __init__(self, mesh, pg, name, dim):
        self._inner = mesh
        self._pg = pg
        self._name = name
        self._dim = dim
        names = list(mesh.mesh_dim_names or [f"dim{i}" for i in range(mesh.ndim)])
        names.insert(dim, name)
        self.mesh_dim_names = tuple(names)
        shape = list(mesh.shape)
        shape.insert(dim, 1)
        self._shape = tuple(shape)
        self.device_type = mesh.device_type

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            return self._inner.size()
        return self._shape[self._index(mesh_dim)]

    def _index(self, mesh_dim):
        if isinstance(mesh_dim, int):
            if not 0 <= mesh_dim < self.ndim:
                raise KeyError(f"Mesh dimension {mesh_dim} does not exist.")
            return mesh_dim
        if mesh_dim not in self.mesh_dim_names:
            raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist.")
        return self.mesh_dim_names.index(mesh_dim)

    def _inner_dim(self, i):
        j = i if i < self._dim else i - 1
        names = self._inner.mesh_dim_names
        return names[j] if names else j

    def get_group(self, mesh_dim=None):
        if mesh_dim is None:
            raise RuntimeError("Optional kwarg `mesh_dim` needs to be specified when device_mesh.ndim > 1.")
        i = self._index(mesh_dim)
        if i == self._dim:
            return self._pg
        return self._inner.get_group(self._inner_dim(i))

    def get_all_groups(self):
        return [self.get_group(i) for i in range(self.ndim)]

    def get_local_rank(self, mesh_dim=None):
        i = self._index(mesh_dim)
        if i == self._dim:
            return 0
        return self._inner.get_local_rank(self._inner_dim(i))

    def get_rank(self):
        return self._inner.get_rank()

    def get_coordinate(self):
        c = self._inner.get_coordinate()
        if c is None:
            return None
        c.insert(self._dim, 0)
        return c

    def __getitem__(self, names):
        names = (names,) if isinstance(names, str) else tuple(names)
        if names == (self._name,):
            return _ExtendedMesh.__new__(_ExtendedMesh)._one(self)
        if self._name in names:
            rest = tuple(n for n in names if n != self._name)
            return _ExtendedMesh(self._inner[rest], self._pg, self._name, list(names).index(self._name))
        return self._inner[names]

    def _one(self, outer):
        self._inner = None
        self._pg = outer._pg
        self._name = outer._name
        self._dim = 0
        self.mesh_dim_names = (outer._name,)
        self._shape = (1,)
        self.device_type = outer.device_type
        return self

    def __repr__(self):
        return f"DeviceMesh('{self.device_type}', shape={self._shape}, mesh_dim_names={self.mesh_dim_names})"


def extend_device_mesh(mesh, pg, name="dp", dim=0):
    """``mesh`` (a gang DeviceMesh) with a new dimension ``name`` at
    ``dim`` whose group is ``pg`` (torchft's extend_device_mesh). The mesh
    sees the new dimension as size 1, as torch does: a fault-tolerant group
    changes size, and does its own scaling."""
    if not isinstance(mesh, (DeviceMesh, _ExtendedMesh)):
        raise InvalidArgumentError(f"extend_device_mesh: expected a gang DeviceMesh, not {type(mesh).__name__}")
    if not isinstance(pg, dist.ProcessGroup):
        raise InvalidArgumentError(f"extend_device_mesh: expected a torch ProcessGroup, not {type(pg).__name__}")
    if not 0 <= dim <= mesh.ndim:
        raise InvalidArgumentError(f"extend_device_mesh: dim {dim} is outside 0..{mesh.ndim}")
    if mesh.mesh_dim_names is not None and name in mesh.mesh_dim_names:
        raise InvalidArgumentError(f"extend_device_mesh: the mesh has a dimension '{name}' already")
    return _ExtendedMesh(mesh, pg, name, dim)


# ---- the store ------------------------------------------------------------------------------


class StoreClient(dist.Store):
    """A torch Store over a client of a gang store (gang_store_connect):
    torch's PrefixStore and anything else that takes a Store take it. Keys
    are str, values bytes."""

    def __init__(self, store_addr, timeout=datetime.timedelta(seconds=60)):
        super().__init__()
        self._st = _gang._store_connect(store_addr, _timeout(timeout) or 0.0)

    def set(self, key, value):
        self._st.set(key, value)

    def get(self, key):
        return self._st.get(key)

    def add(self, key, value):
        return self._st.add(key, int(value))

    def compare_set(self, key, expected_value, desired_value):
        return self._st.compare_set(key, expected_value, desired_value)

    def check(self, keys):
        return self._st.check(list(keys))

    def wait(self, keys, timeout=None):
        self._st.wait(list(keys), -1.0 if timeout is None else _timeout(timeout))

    def delete_key(self, key):
        return self._st.delete_key(key)

    def num_keys(self):
        return self._st.num_keys()

    def set_timeout(self, timeout):
        self._st.set_timeout(_timeout(timeout))

    def close(self):
        self._st.close()


def create_store_client(store_addr, timeout=datetime.timedelta(seconds=60)):
    """A client of the gang store at ``store_addr`` ('host:port/prefix':
    the prefix a view, as torchft's PrefixStore(TCPStore(...))), as a torch
    Store (torchft's create_store_client). It speaks gang's store protocol:
    the lighthouse's store, gangrun's, a gang-store."""
    return StoreClient(store_addr, timeout)
