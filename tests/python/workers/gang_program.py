"""A gang program (fairseq2 style) that checks where it met: under
torchrun's environment the store must be the agent's torch TCPStore.
Prints "GANG OK"."""

import os

import numpy as np

import gang

info = gang.world_info()
if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
    assert info["store_addr"].startswith("torch://"), info
root = gang.ProcessGroupGang.create_default_process_group("cpu")
gangs = gang.create_parallel_gangs(root, tp_size=2 if root.size % 2 == 0 else 1)
a = np.full(4, float(root.rank + 1), np.float32)
gangs.root.all_reduce(a, gang.ReduceOperation.SUM)
n = root.size
assert (a == n * (n + 1) / 2).all(), a
b = np.ones(2, np.float32)
gangs.tp.all_reduce(b, gang.ReduceOperation.SUM)
assert (b == gangs.tp.size).all()
print(f"GANG OK rank={root.rank} of {n} via {info['source']} store={info['store_addr'].split(':')[0]}")
