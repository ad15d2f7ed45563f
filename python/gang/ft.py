"""Fault tolerance with torchft's names, over gang/ft.h.

A job is R replica groups, each holding a whole copy of the model; rank r of
every group joins one replica gang across the groups, rebuilt whenever the
groups taking part change. A lighthouse (``LighthouseServer``) decides step
by step which groups take part (the quorum); a ``Manager`` on every rank
runs the step: ``start_quorum``, ``allreduce`` of the gradients (the mean
over the groups taking part), ``should_commit``. A group that is behind
receives the state it registered (``register_state``) from one that is up to
date before its step: that is healing.

The gangs underneath are gang_t handles like any other, so they are
``Gang`` objects: ``ReconfigurableGang`` (``configure(store_addr, rank,
world_size)``), ``BabyGang`` (the same, its communicator in a child
process), ``ErrorSwallowingGang``, ``DummyGang`` and ``ManagedGang``.
torchft's names for them (``ProcessGroupGloo``, ``ProcessGroupBabyGloo``,
``ErrorSwallowingProcessGroupWrapper``, ``ProcessGroupDummy``,
``ManagedProcessGroup``, with ``ProcessGroup``, ``ProcessGroupWrapper``,
``ProcessGroupBaby``, ``DistributedDataParallel``, ``extend_device_mesh``,
``create_store_client``)
are torch.distributed ProcessGroups over those gangs, in gang.ft_torch,
loaded from here when torch is first asked for. docs/python.md maps every
name to its C call, and docs/fault-tolerance.md tells how the pieces work.

Where torchft passes Python callbacks, gang registers memory: the C manager
moves raw bytes, so the state of a replica is the contiguous writable
buffers (numpy arrays, torch CPU tensors, a model's parameters) given to
``register_state``, which are written in place when the replica heals.
"""

from . import _ft
from ._ft import *  # noqa: F401,F403  (every name of its __all__)
from ._ft import __all__  # noqa: F401

# torchft's names: torch ProcessGroups, in gang.ft_torch (needs torch).
_TORCH_NAMES = {
    "ProcessGroup": "ReconfigurableGang",
    "ProcessGroupWrapper": "ReconfigurableGang",
    "ProcessGroupGloo": "ReconfigurableGang",
    "ProcessGroupBaby": "BabyGang",
    "ProcessGroupBabyGloo": "BabyGang",
    "ProcessGroupDummy": "DummyGang",
    "ErrorSwallowingProcessGroupWrapper": "ErrorSwallowingGang",
    "ManagedProcessGroup": "ManagedGang",
    "DistributedDataParallel": "Manager.allreduce",
    "extend_device_mesh": "DeviceMesh",
    "create_store_client": "LighthouseServer's store, through gang._gang._store_connect",
    "StoreClient": "gang._gang._store_connect",
}


def __getattr__(name):
    if name not in _TORCH_NAMES:
        raise AttributeError(f"module 'gang.ft' has no attribute '{name}'")
    try:
        from . import ft_torch
    except ImportError as e:
        raise AttributeError(
            f"gang.ft.{name} is a torch.distributed ProcessGroup helper and needs torch, which "
            f"cannot be imported ({e}); without torch, use gang.ft.{_TORCH_NAMES[name]}") from e
    return getattr(ft_torch, name)


def __dir__():
    return sorted(list(globals()) + list(_TORCH_NAMES))


# The classes are defined in gang._ft; they are gang.ft's to users.
for _name in __all__:
    getattr(_ft, _name).__module__ = __name__
del _name
