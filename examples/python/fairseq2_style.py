"""A fairseq2-style script on gang: root gang, data x tensor parallel
gangs, the current gangs, collectives on torch tensors.

    gangrun --nproc-per-node 4 python3 examples/python/fairseq2_style.py
"""

import torch

from gang import ProcessGroupGang, ReduceOperation, all_sum, broadcast_flag, create_parallel_gangs, get_current_gangs
from gang.device import get_default_device

device = get_default_device()
root = ProcessGroupGang.create_default_process_group(device)
gangs = create_parallel_gangs(root, tp_size=2 if root.size % 2 == 0 else 1)

with gangs:
    g = get_current_gangs()
    # tensor parallel: each tp rank holds a slice of a layer's output
    partial = torch.full((4,), float(g.tp.rank + 1))
    g.tp.all_reduce(partial, ReduceOperation.SUM)
    # data parallel: average a "gradient" over the dp ranks
    grad = torch.full((3,), float(g.dp.rank))
    g.dp.all_reduce(grad, ReduceOperation.MEAN)
    stop = broadcast_flag(g.root, g.root.rank == 0)
    tokens = all_sum(g.root, 100)

print(
    f"rank {root.rank}/{root.size}: tp {gangs.tp.rank}/{gangs.tp.size} dp {gangs.dp.rank}/{gangs.dp.size} "
    f"tp-sum {partial[0].item():g} dp-mean {grad[0].item():g} stop={stop} tokens={int(tokens)}"
)
root.close()
