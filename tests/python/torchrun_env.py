"""Runs a program the way torchrun would, for tests: Debian's torchrun
crashes at start-up, so this reproduces what its agent sets up instead: a
torch TCPStore server on MASTER_PORT held by the launcher
(TCPStore(is_master=True)), and workers with torchrun's variables,
TORCHELASTIC_USE_AGENT_STORE=True among them.

    python3 torchrun_env.py --nproc-per-node N program [args...]

Exits with the first non-zero worker status (0 when all succeed). Each
worker's output goes to this process's stdout/stderr unprefixed.
"""

import argparse
import datetime
import os
import subprocess
import sys
import uuid

import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc-per-node", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    # Port 0: the kernel picks a free one; the store says which.
    store = dist.TCPStore(
        "127.0.0.1", 0, a.nproc_per_node, True, timeout=datetime.timedelta(seconds=a.timeout), wait_for_workers=False
    )
    port = store.port
    run_id = uuid.uuid4().hex[:12]
    procs = []
    for i in range(a.nproc_per_node):
        env = dict(os.environ)
        for k in ("GANG_STORE_ADDR", "GANG_STORE_SECRET", "GANG_RUN_ID", "GANG_RESTART_COUNT"):
            env.pop(k, None)
        env.update(
            RANK=str(i),
            LOCAL_RANK=str(i),
            WORLD_SIZE=str(a.nproc_per_node),
            LOCAL_WORLD_SIZE=str(a.nproc_per_node),
            GROUP_RANK="0",
            GROUP_WORLD_SIZE="1",
            ROLE_RANK=str(i),
            ROLE_WORLD_SIZE=str(a.nproc_per_node),
            ROLE_NAME="default",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            TORCHELASTIC_USE_AGENT_STORE="True",
            TORCHELASTIC_RUN_ID=run_id,
            TORCHELASTIC_RESTART_COUNT="0",
            TORCHELASTIC_MAX_RESTARTS="0",
            OMP_NUM_THREADS="1",
        )
        procs.append(subprocess.Popen(a.cmd, env=env))
    rc = 0
    for pr in procs:
        try:
            r = pr.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            r = 124
        if r != 0 and rc == 0:
            rc = r if r > 0 else 128 - r
    del store
    return rc


if __name__ == "__main__":
    sys.exit(main())
