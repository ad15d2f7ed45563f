"""One rank of test_collectives.py: every collective of the gang package
on numpy arrays and torch CPU tensors, compared with torch.distributed's
Gloo backend on the same inputs (or with a numpy reference where Gloo has
no such collective); then the object-level calls; then sub-gangs. Prints
"COLLECTIVES OK" at the end."""

import numpy as np
import torch
import torch.distributed as dist

import gang
from gang import ReduceOperation as R

root = gang.ProcessGroupGang.create_default_process_group("cpu")
dist.init_process_group("gloo")
r, n = root.rank, root.size
assert (r, n) == (dist.get_rank(), dist.get_world_size())
rng = np.random.default_rng(1000 + r)

GLOO_OP = {R.SUM: dist.ReduceOp.SUM, R.PRODUCT: dist.ReduceOp.PRODUCT, R.MIN: dist.ReduceOp.MIN, R.MAX: dist.ReduceOp.MAX}
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.float16]


def inputs(dtype, count):
    # small integers: sums and products are exact in every dtype, so gang
    # and Gloo must agree bit for bit whatever order they add in
    lo, hi = (1, 3) if dtype in (np.uint8, np.int8) else (-3, 4)
    return rng.integers(lo, hi, size=count).astype(dtype)


def check(name, got, want):
    got = np.asarray(got)
    want = np.asarray(want)
    if not np.array_equal(got, want):
        raise AssertionError(f"rank {r}: {name}: gang {got.ravel()[:8]} != gloo {want.ravel()[:8]}")


for dtype in DTYPES:
    for count in (0, 1, 7, 1000, 70000):
        x = inputs(dtype, count)
        for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
            if op == R.PRODUCT and count > 7:
                continue  # overflow would make the check about wrapping, not gang
            if dtype == np.float16 and op != R.SUM:
                continue  # Gloo's half support is sum only
            ref = torch.from_numpy(x.copy())
            dist.all_reduce(ref, op=GLOO_OP[op])
            a = x.copy()
            root.all_reduce(a, op)
            check(f"all_reduce {op.name} {np.dtype(dtype).name} x{count} numpy", a, ref.numpy())
            t = torch.from_numpy(x.copy())
            root.all_reduce(t, op)
            check(f"all_reduce {op.name} {np.dtype(dtype).name} x{count} torch", t.numpy(), ref.numpy())
        if np.dtype(dtype).kind == "f":
            m = x.astype(np.float64)
            root.all_reduce(m, R.MEAN)
            ref = torch.from_numpy(x.astype(np.float64))
            dist.all_reduce(ref)
            assert np.allclose(m, ref.numpy() / n), "MEAN"

# bfloat16 exists only in torch: against Gloo's float32 result
t = torch.arange(10, dtype=torch.bfloat16) + r
ref = t.float()
dist.all_reduce(ref)
root.all_reduce(t)
check("all_reduce bfloat16", t.float().numpy(), ref.numpy())

# broadcast from every source
for src in range(n):
    x = inputs(np.float32, 33)
    ref = torch.from_numpy(x.copy())
    dist.broadcast(ref, src)
    a = x.copy()
    root.broadcast(a, src)
    check(f"broadcast from {src}", a, ref.numpy())
    t = torch.from_numpy(x.copy())
    root.broadcast(t, source_rank=src)
    check(f"broadcast torch from {src}", t.numpy(), ref.numpy())

# all_gather (into one [n, ...] array) and all_gather_to_list
x = inputs(np.int64, 5)
refs = [torch.zeros(5, dtype=torch.int64) for _ in range(n)]
dist.all_gather(refs, torch.from_numpy(x))
want = np.stack([t.numpy() for t in refs])
out = np.zeros((n, 5), np.int64)
root.all_gather(out, x)
check("all_gather", out, want)
outs = [torch.zeros(5, dtype=torch.int64) for _ in range(n)]
root.all_gather_to_list(outs, torch.from_numpy(x))
check("all_gather_to_list", np.stack([o.numpy() for o in outs]), want)

# reduce_scatter: Gloo has none in torch 1.13; numpy reference from the
# gathered inputs
x = inputs(np.float32, 4 * n)
allx = [torch.zeros(4 * n) for _ in range(n)]
dist.all_gather(allx, torch.from_numpy(x))
want = np.sum([t.numpy() for t in allx], axis=0)[4 * r : 4 * r + 4]
out = np.zeros(4, np.float32)
root.reduce_scatter(out, x)
check("reduce_scatter", out, want)

# FSDP's pair on buffers from gang_mem_alloc (gang.mem_empty), numpy and
# torch, large enough for the direct steps and single copy: the same
# results as Gloo and numpy on ordinary memory
for k in (3000, 300001):
    x = inputs(np.float32, k)
    refs = [torch.zeros(k) for _ in range(n)]
    dist.all_gather(refs, torch.from_numpy(x))
    want = np.stack([t.numpy() for t in refs])
    out = gang.mem_empty((n, k), np.float32)
    xin = gang.mem_empty(k, np.float32)
    xin[:] = x
    root.all_gather(out, xin)
    check(f"all_gather x{k} mem_empty", out, want)
    tout = gang.mem_empty((n, k), torch.float32)
    root.all_gather(tout, torch.from_numpy(x))
    check(f"all_gather x{k} mem_empty torch", tout.numpy(), want)
    full = gang.mem_empty(n * k, torch.float32)
    full.copy_(torch.from_numpy(np.concatenate([t.numpy() for t in refs])))
    part = gang.mem_empty(k, torch.float32)
    root.reduce_scatter(part, full)
    check(f"reduce_scatter x{k} mem_empty", part.numpy(), n * want[r])

# all_to_all against Gloo's all_to_all_single
x = inputs(np.float32, 3 * n)
ref = torch.zeros(3 * n)
dist.all_to_all_single(ref, torch.from_numpy(x.copy()))
out = np.zeros(3 * n, np.float32)
root.all_to_all(out, x)
check("all_to_all", out, ref.numpy())

# barrier, async barrier
root.barrier()
assert root.barrier(async_op=True).wait()

# object-level calls against torch's object collectives
objs = [{"rank": r, "x": [r] * 3}, "s" * r] if r == 0 else [None, None]
ref = list(objs)
dist.broadcast_object_list(ref, 0)
root.broadcast_objects(objs, 0)
assert objs == ref, (objs, ref)
ref = [None] * n
dist.all_gather_object(ref, {"r": r})
assert gang.all_gather_list({"r": r}) == ref
assert gang.broadcast_object({"from": r}, n - 1) == {"from": n - 1}
d = gang.all_reduce_dict({"loss": float(r), "v": np.arange(3.0) * r, "t": torch.ones(2) * r})
tot = n * (n - 1) / 2
assert isinstance(d["loss"], torch.Tensor) and d["loss"].dtype == torch.float64 and d["loss"].item() == tot, d
assert d["loss"] == tot and np.allclose(d["v"], np.arange(3.0) * tot) and torch.allclose(d["t"], torch.full((2,), tot, dtype=torch.float64)), d
du = gang.distributed_utils
cfg = type("cfg", (), {})()
cfg.distributed_init_method, cfg.distributed_rank, cfg.distributed_world_size = None, 0, 1
du.infer_init_method(cfg)  # gangrun's environment
assert (cfg.distributed_init_method, cfg.distributed_rank, cfg.distributed_world_size) == ("env://", r, n), vars(cfg)
assert du.distributed_init(cfg) == r  # the world exists already: kept, with a warning
assert (du.get_rank(), du.get_world_size(), du.get_global_rank()) == (r, n, r)
assert du.get_default_group() is root and du.is_master(type("cfg", (), {"distributed_rank": r})) == (r == 0)
t = torch.full((2,), float(r))
assert du.all_reduce(t, op="max") is t and (t == n - 1).all()
t = torch.full((2,), float(r))
du.broadcast(t, n - 1)
assert (t == n - 1).all()
try:
    du.all_reduce(t, op="min")
except NotImplementedError:
    pass
else:
    raise AssertionError("fairseq's all_reduce takes only sum and max")
try:
    gang.all_gather_list(list(range(10000)), max_size=64)
except ValueError as e:
    assert "exceeds max_size (64)" in str(e)
else:
    raise AssertionError("max_size was not enforced")
assert gang.broadcast_flag(root, r == 0) is True
s = gang.all_sum(root, r)
assert int(s) == tot and s.dtype == torch.int64
f = gang.all_sum(root, 0.5)
assert float(f) == 0.5 * n and f.dtype == torch.float32

# sub-gangs against Gloo groups of the same ranks
if n >= 2:
    gs = gang.create_parallel_gangs(root, tp_size=2)
    tp_ranks = [r - r % 2, r - r % 2 + 1]
    groups = [dist.new_group([i, i + 1]) for i in range(0, n, 2)]
    mine = groups[r // 2]
    x = inputs(np.float32, 10)
    ref = torch.from_numpy(x.copy())
    dist.all_reduce(ref, group=mine)
    a = x.copy()
    gs.tp.all_reduce(a, R.SUM)
    check("tp all_reduce", a, ref.numpy())
    assert gs.tp.rank == r % 2 and gs.dp.rank == r // 2 and gs.dp.size == n // 2
    sub = root.create_gang([n - 1 - i for i in range(n)])  # list order: reversed
    assert sub.rank == n - 1 - r

# the device mesh: (2, n/2) named (dp, tp), torch's layout
if n % 2 == 0 and n >= 2:
    mesh = gang.init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
    cols = n // 2
    assert mesh.get_coordinate() == [r // cols, r % cols]
    assert mesh.get_local_rank("dp") == r // cols and mesh.get_local_rank("tp") == r % cols
    assert mesh.get_rank() == r and mesh.shape == (2, cols)
    assert mesh.mesh.tolist() == [list(range(cols)), list(range(cols, n))]
    dp_groups = [dist.new_group([c, c + cols]) for c in range(cols)]
    x = inputs(np.float32, 6)
    ref = torch.from_numpy(x.copy())
    dist.all_reduce(ref, group=dp_groups[r % cols])
    a = x.copy()
    mesh.get_group("dp").all_reduce(a, R.SUM)
    check("mesh dp all_reduce", a, ref.numpy())
    tp = mesh["tp"]
    assert tp.mesh.tolist() == [(r // cols) * cols + i for i in range(cols)]
    assert tp.get_group().size == cols and mesh.get_group(1).size == cols
    flat = mesh._flatten()
    assert mesh.get_group("dp_tp").size == n and flat.get_group().rank == r
    try:
        mesh.get_group("nope")
    except KeyError:
        pass
    else:
        raise AssertionError("an unknown mesh dimension was accepted")

print("COLLECTIVES OK")
