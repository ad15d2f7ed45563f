"""One rank of test_ddp.py: the same model trained with
DistributedDataParallel over Gloo and over gang's torch backend, from the
same initial parameters on the same batches; the parameters must agree
within float tolerance. argv[1] says which backend is the default process
group ("gloo": gang is a new_group; "gang": Gloo is)."""

import copy
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gang.torch_backend  # noqa: F401  registers "gang"

default = sys.argv[1] if len(sys.argv) > 1 else "gloo"
dist.init_process_group(default)
other = dist.new_group(backend="gang" if default == "gloo" else "gloo")
r, n = dist.get_rank(), dist.get_world_size()
pg = {default: None, ("gang" if default == "gloo" else "gloo"): other}

torch.manual_seed(0)
base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
models, opts, ddps = {}, {}, {}
for name in ("gloo", "gang"):
    m = copy.deepcopy(base)
    ddps[name] = DDP(m, process_group=pg[name])
    opts[name] = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    models[name] = m

gen = torch.Generator().manual_seed(100 + r)
for step in range(25):
    x = torch.randn(32, 16, generator=gen)
    y = torch.randn(32, 4, generator=gen)
    for name in ("gloo", "gang"):
        opts[name].zero_grad()
        loss = torch.nn.functional.mse_loss(ddps[name](x), y)
        loss.backward()
        opts[name].step()

worst = 0.0
for (pn, a), (_, b) in zip(models["gloo"].named_parameters(), models["gang"].named_parameters()):
    worst = max(worst, (a - b).abs().max().item())
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (pn, (a - b).abs().max())
# every rank holds the same model
flat = torch.cat([p.detach().reshape(-1) for p in models["gang"].parameters()])
allp = [torch.zeros_like(flat) for _ in range(n)]
dist.all_gather(allp, flat)
assert all(torch.equal(allp[0], p) for p in allp)
print(f"DDP OK default={default} ranks={n} max|gloo-gang|={worst:.3g}")
dist.destroy_process_group()
