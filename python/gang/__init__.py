"""gang: collectives between processes (shared memory + TCP) for Python.

fairseq2's gang API (Gang, FakeGang, ProcessGroupGang, Gangs and the
topology builders), PyTorch's DeviceMesh, fairseq's distributed helpers and,
in gang.ft, torchft's fault-tolerance pieces (LighthouseServer, Manager,
the reconfigurable, error-swallowing and dummy gangs) over the C library
libgang. docs/python.md maps every name to its C call.
"""

from . import _gang
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
from .device import Device, get_default_device
from .device_mesh import DeviceMesh, init_device_mesh
from .distributed_utils import all_gather_list, all_reduce_dict, broadcast_object
from . import ft  # noqa: E402  (torchft's names: gang.ft.Manager, ...)

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
