"""A plain torch.distributed program (env:// rendezvous) that runs
all_reduce over Gloo and over gang's backend. Prints "TORCH OK"."""

import torch
import torch.distributed as dist

import gang.torch_backend  # noqa: F401

dist.init_process_group("gang")
n = dist.get_world_size()
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
assert (t == n * (n + 1) / 2).all(), t
g = dist.new_group(backend="gloo")
t2 = torch.ones(3)
dist.all_reduce(t2, group=g)
assert (t2 == n).all()
print(f"TORCH OK rank={dist.get_rank()} of {n}")
dist.destroy_process_group()
