"""Backend "gang" for torch.distributed.

``import gang`` registers the backend (when torch.distributed is loaded,
before or after gang), so

    import gang
    torch.distributed.init_process_group("gang")

runs torch's collectives (and DistributedDataParallel) over libgang. The
process group is the C++ class gang._gang_torch.GangProcessGroup; this
module only does the rendezvous and hands it the gang.

Rendezvous: torch passes the creator a store scoped to the group. gang
needs a store it can connect to itself, by address: GANG_STORE_ADDR when
gangrun set it, else the TCPStore torch already runs at
MASTER_ADDR:MASTER_PORT, spoken to with torch's own protocol ("torch://",
src/store/torch_client.c). Rank 0 of the group draws a token and puts it
in torch's store; every member reads it and meets under that token, so
two groups (and two runs of one group) never share keys.
"""

import os
import secrets

import torch
import torch.distributed as dist

from . import _gang_torch
from ._core import ProcessGroupGang

__all__ = ["create_process_group", "process_group_of", "BACKEND"]

BACKEND = "gang"


def _store_base():
    addr = os.environ.get("GANG_STORE_ADDR")
    if addr:
        return addr
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if host and port:
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"torch://{host}:{port}"
    raise RuntimeError(
        "gang backend: no store to meet at: run under gangrun (GANG_STORE_ADDR) or set MASTER_ADDR and MASTER_PORT"
    )


def create_process_group(store, rank, size, timeout):
    """torch.distributed's creator for backend "gang" (Backend.register_backend)."""
    key = "gang_backend_token"
    if rank == 0:
        store.set(key, secrets.token_hex(8))
    token = store.get(key).decode()
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    g = ProcessGroupGang.create_with_store(f"{_store_base()}/torch_pg/{token}", rank, size, timeout=seconds)
    # The process group owns the handle from here on.
    handle = g._release()
    return _gang_torch.GangProcessGroup(handle, True)


def process_group_of(gang):
    """A torch ProcessGroup over an existing gang's connections (it keeps
    the gang alive)."""
    return _gang_torch.GangProcessGroup(gang._handle, False, gang)


if "GANG" not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, create_process_group)
