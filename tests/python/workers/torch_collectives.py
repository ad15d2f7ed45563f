"""One rank of test_torch_backend.py: torch.distributed's collectives on
backend "gang" against the same calls on Gloo (both groups in one
process). Prints "TORCH BACKEND OK"."""

import torch
import torch.distributed as dist

import gang.torch_backend  # noqa: F401

dist.init_process_group("gang")
gloo = dist.new_group(backend="gloo")
r, n = dist.get_rank(), dist.get_world_size()
gen = torch.Generator().manual_seed(7 + r)


def same(name, a, b):
    assert torch.equal(a, b), f"rank {r}: {name}: gang {a} != gloo {b}"


def ints(*shape, dtype=torch.float32):
    return torch.randint(-3, 4, shape, generator=gen).to(dtype)


for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16):
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
        if dtype in (torch.float16, torch.bfloat16) and op != dist.ReduceOp.SUM:
            continue
        x = ints(17, dtype=dtype)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, op=op)
        ref = b.float() if dtype == torch.bfloat16 else b
        dist.all_reduce(ref, op=op, group=gloo)
        same(f"all_reduce {dtype} {op}", a.float() if dtype == torch.bfloat16 else a, ref)

for src in range(n):
    x = ints(9)
    a, b = x.clone(), x.clone()
    dist.broadcast(a, src)
    dist.broadcast(b, src, group=gloo)
    same(f"broadcast {src}", a, b)
    a, b = x.clone(), x.clone()
    dist.reduce(a, src)
    dist.reduce(b, src, group=gloo)
    if r == src:
        same(f"reduce to {src}", a, b)
    else:
        same(f"reduce leaves rank {r}'s tensor", a, x)

x = ints(5)
outs_a = [torch.zeros(5) for _ in range(n)]
outs_b = [torch.zeros(5) for _ in range(n)]
dist.all_gather(outs_a, x)
dist.all_gather(outs_b, x, group=gloo)
same("all_gather", torch.stack(outs_a), torch.stack(outs_b))
big = torch.zeros(n * 5)
dist.all_gather_into_tensor(big, x) if hasattr(dist, "all_gather_into_tensor") else dist._all_gather_base(big, x)
same("all_gather_into_tensor", big, torch.cat(outs_b))

# reduce_scatter (Gloo has none in torch 1.13: reference from all_gather)
ins = [ints(3) for _ in range(n)]
out = torch.zeros(3)
dist.reduce_scatter(out, ins)
every = [torch.zeros(3 * n) for _ in range(n)]
dist.all_gather(every, torch.cat(ins), group=gloo)
same("reduce_scatter", out, sum(e[3 * r : 3 * r + 3] for e in every))

# all_to_all_single, even and uneven splits
x = ints(2 * n)
a, b = torch.zeros(2 * n), torch.zeros(2 * n)
dist.all_to_all_single(a, x)
dist.all_to_all_single(b, x, group=gloo)
same("all_to_all_single", a, b)
in_splits = [(r + j) % 3 + 1 for j in range(n)]  # rows to rank j
out_splits = [(j + r) % 3 + 1 for j in range(n)]  # rows from rank j
x = ints(sum(in_splits), 2)
a, b = torch.zeros(sum(out_splits), 2), torch.zeros(sum(out_splits), 2)
dist.all_to_all_single(a, x, out_splits, in_splits)
dist.all_to_all_single(b, x, out_splits, in_splits, group=gloo)
same("all_to_all_single uneven", a, b)

# send / recv around a ring
if n > 1:
    t = torch.full((4,), float(r))
    got = torch.zeros(4)
    if r % 2 == 0:
        dist.send(t, (r + 1) % n)
        dist.recv(got, (r - 1) % n)
    else:
        dist.recv(got, (r - 1) % n)
        dist.send(t, (r + 1) % n)
    same("send/recv", got, torch.full((4,), float((r - 1) % n)))

# async works and errors
w = dist.all_reduce(torch.ones(3), async_op=True)
assert w.wait()
try:
    dist.all_reduce(torch.ones(4, 4).t())
except RuntimeError as e:
    assert "contiguous" in str(e), e
else:
    raise AssertionError("a non-contiguous tensor was accepted")
t = torch.ones(2)
dist.all_reduce(t)
assert (t == n).all()
dist.barrier()

# Gang.as_process_group: a torch group over a gang's own connections
import gang  # noqa: E402

world = gang.get_world_gang()
pg = world.as_process_group()
assert world.supports_process_group and pg.size() == n and pg.rank() == r
t = torch.full((3,), float(r))
pg.allreduce([t]).wait()
assert (t == n * (n - 1) / 2).all(), t
del pg
print("TORCH BACKEND OK")
dist.destroy_process_group()
