"""DistributedDataParallel on CPU over gang's torch.distributed backend.

    gangrun --nproc-per-node 2 python3 examples/python/ddp_train.py
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gang  # noqa: F401  registers backend "gang" with torch.distributed

dist.init_process_group("gang")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)

gen = torch.Generator().manual_seed(rank)  # each rank its own shard of data
w_true = torch.arange(8.0) / 8
for step in range(30):
    x = torch.randn(64, 8, generator=gen)
    y = x @ w_true[:, None]
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()  # gradients are averaged across ranks through gang
    opt.step()
    if rank == 0 and step % 10 == 9:
        print(f"step {step + 1}: loss {loss.item():.4f}")

total = torch.tensor([loss.item()])
dist.all_reduce(total)
if rank == 0:
    print(f"mean final loss over {world} ranks: {total.item() / world:.4f}")
dist.destroy_process_group()
