"""gang: collectives between processes (shared memory + TCP) for Python.

fairseq2's gang API (Gang, FakeGang, ProcessGroupGang, Gangs and the
topology builders), PyTorch's DeviceMesh, fairseq's distributed helpers and,
in gang.ft, torchft's fault-tolerance pieces (LighthouseServer, Manager,
the reconfigurable, error-swallowing and dummy gangs) over the C library
libgang. docs/python.md maps every name to its C call.
"""

import sys

from . import _core, _gang
from ._core import FakeGang, Gang, ProcessGroupGang, ReduceOperation, get_world_gang
from ._gang import (
    AbortedError,
    AuthError,
    GangError,
    GangSystemError,
    GangTimeoutError,
    InProgressError,
    InternalError,
    InvalidArgumentError,
    InvalidUsageError,
    Memory,
    MismatchError,
    NoMemoryError,
    NotFoundError,
    NotSupportedError,
    PeerLeftError,
    PeerLostError,
    ProtocolError,
    Work,
    flight_dump,
    world_info,
)
from ._topology import (
    Gangs,
    all_sum,
    broadcast_flag,
    create_fake_gangs,
    create_fsdp_gangs,
    create_parallel_gangs,
    get_current_gangs,
    get_default_gangs,
    maybe_get_current_gangs,
    set_default_gangs,
    set_gangs,
)
from ._mem import mem_empty
from .device import Device, get_default_device
from .device_mesh import DeviceMesh, init_device_mesh
from .distributed_utils import all_gather_list, all_reduce_dict, broadcast_object
from . import ft  # noqa: E402  (torchft's names: gang.ft.Manager, ...)


def _load_torch_backend():
    from . import torch_backend

    return torch_backend


_core._torch_backend_loader = _load_torch_backend


def _register_torch_backend(dist):
    """Backend "gang" for torch.distributed.init_process_group; the creator
    loads gang.torch_backend (and its C++ extension) when first used."""
    if "GANG" in dist.Backend._plugins:
        return

    def create(store, rank, size, timeout):
        from . import torch_backend

        return torch_backend.create_process_group(store, rank, size, timeout)

    dist.Backend.register_backend("gang", create)


class _AfterTorchDistributed:
    """Registers the backend once torch.distributed is imported, so that
    ``import gang`` before or after ``import torch`` both make
    init_process_group("gang") work, without gang importing torch."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.distributed":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _register_torch_backend(module)
            except Exception:  # an unusual torch: leave the explicit import gang.torch_backend
                pass

        spec.loader.exec_module = exec_module
        return spec


if "torch.distributed" in sys.modules:
    _register_torch_backend(sys.modules["torch.distributed"])
elif not any(isinstance(f, _AfterTorchDistributed) for f in sys.meta_path):
    sys.meta_path.insert(0, _AfterTorchDistributed())

# fairseq2's other names for the same classes
InvalidOperationError = InvalidUsageError
OperationalError = GangError

__version__ = _gang.__version__

__all__ = [
    "ReduceOperation",
    "Gang",
    "FakeGang",
    "ProcessGroupGang",
    "Gangs",
    "Work",
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
    "DeviceMesh",
    "init_device_mesh",
    "all_gather_list",
    "all_reduce_dict",
    "broadcast_object",
    "Device",
    "get_default_device",
    "get_world_gang",
    "world_info",
    "flight_dump",
    "GangError",
    "InProgressError",
    "InvalidArgumentError",
    "InvalidUsageError",
    "InvalidOperationError",
    "NotSupportedError",
    "GangTimeoutError",
    "PeerLostError",
    "PeerLeftError",
    "AbortedError",
    "MismatchError",
    "ProtocolError",
    "AuthError",
    "NoMemoryError",
    "GangSystemError",
    "InternalError",
    "NotFoundError",
    "OperationalError",
    "ft",
]
