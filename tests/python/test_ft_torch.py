"""gang.ft's torchft process groups as torch.distributed ProcessGroups.

torchft's call shapes on each class; a reconfigurable group that one
object follows across configure; the error-swallowing wrapper; the
subprocess group; torch DDP over ManagedProcessGroup (and gang.ft's
DistributedDataParallel) with a replica that joins late from other
weights, whose parameters must end equal to one model trained alone on
the same batches (the oracle); the backend registered by `import gang`;
the manager's state_dict; extend_device_mesh."""

import datetime
import os
import subprocess
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch._C._distributed_c10d import AllreduceOptions, BroadcastOptions  # noqa: E402

import gang  # noqa: E402
from gang import ft  # noqa: E402
import gang.ft_torch  # noqa: E402,F401
from conftest import BUILD, PYTHON, env  # noqa: E402


@pytest.fixture
def lighthouse():
    with ft.LighthouseServer("127.0.0.1:0", min_replicas=1, quorum_tick_ms=20, join_timeout_ms=300,
                             heartbeat_timeout_ms=1000) as lh:
        yield lh


_n = iter(range(1_000_000))


def fresh(lh, what):
    return f"{lh.address()}/pytest-torch-{os.getpid()}-{what}-{next(_n)}"


def in_threads(*fns):
    """Runs fns concurrently; re-raises the first exception."""
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive(), "a thread of the test hung"
    if errors:
        raise errors[0]


# ---- call shapes ----------------------------------------------------------------


def test_dummy_is_a_process_group_with_torchfts_shapes():
    pg = ft.ProcessGroupDummy(0, 1)
    assert isinstance(pg, dist.ProcessGroup)
    assert (pg.size(), pg.rank(), pg.getBackendName()) == (1, 0, "torchft-dummy")
    assert dist.get_world_size(pg) == 1
    t = torch.arange(4.0)
    # allreduce: (tensors, opts), (tensors, op), (tensor, op)
    pg.allreduce([t], AllreduceOptions()).wait()
    pg.allreduce([t], dist.ReduceOp.SUM).wait()
    pg.allreduce(t, dist.ReduceOp.MAX).wait()
    pg.allreduce(t).wait()
    assert torch.equal(t, torch.arange(4.0))  # a dummy moves nothing
    dist.all_reduce(t, group=pg)
    # allgather: (outputs, inputs, opts) and (outputs, input)
    out = [torch.zeros(4)]
    pg.allgather([out], [t]).wait()
    assert torch.equal(out[0], t)
    out = [torch.zeros(4)]
    pg.allgather(out, t).wait()
    assert torch.equal(out[0], t)
    # broadcast: (tensors, opts), (tensor, root), broadcast_one
    opts = BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([t], opts).wait()
    pg.broadcast(t, 0).wait()
    pg.broadcast_one(t, 0).wait()
    pg.barrier().wait()
    pg.configure("ignored:1/x", 0, 1)  # torchft's dummy takes any
    with pytest.raises(TypeError):
        pg.allreduce("not a tensor")
    # register / unregister
    assert pg.register("d1") is pg and pg.group_name == "torchft-dummy:d1"
    assert gang.ft_torch.resolve("torchft-dummy:d1") is pg
    with pytest.raises(gang.InvalidUsageError):
        pg.register("again")
    pg.unregister()
    with pytest.raises(gang.InvalidArgumentError):
        gang.ft_torch.resolve("torchft-dummy:d1")
    with pytest.raises(gang.InvalidUsageError):
        pg.unregister()


def test_gloo_follows_every_configure(lighthouse):
    pgs = [ft.ProcessGroupGloo(timeout=20) for _ in range(2)]
    assert all(isinstance(p, dist.ProcessGroup) for p in pgs)
    assert pgs[0].size() == 0 and pgs[0].parent.gang.configured is False
    with pytest.raises(RuntimeError, match="not configured"):
        pgs[0].allreduce(torch.ones(2)).wait()
    for incarnation in range(2):
        addr = fresh(lighthouse, "two")
        in_threads(*(lambda r=r: pgs[r].configure(addr, r, 2) for r in range(2)))
        assert [p.size() for p in pgs] == [2, 2] and [p.rank() for p in pgs] == [0, 1]
        ts = [torch.full((3,), float(r + 1 + incarnation)) for r in range(2)]
        outs = [[torch.zeros(3) for _ in range(2)] for _ in range(2)]
        bs = [torch.full((2,), float(10 * r + 7)) for r in range(2)]

        def rank(r):
            pgs[r].allreduce([ts[r]], dist.ReduceOp.SUM).wait()
            pgs[r].allgather(outs[r], torch.full((3,), float(r))).wait()
            pgs[r].broadcast(bs[r], 1).wait()
            dist.barrier(group=pgs[r])

        in_threads(*(lambda r=r: rank(r) for r in range(2)))
        want = float(3 + 2 * incarnation)
        for r in range(2):
            assert torch.equal(ts[r], torch.full((3,), want))
            assert [o[0].item() for o in outs[r]] == [0.0, 1.0]
            assert torch.equal(bs[r], torch.full((2,), 17.0))
    # The same object, a world of one now.
    pgs[0].configure(fresh(lighthouse, "one"), 0, 1)
    assert pgs[0].size() == 1
    t = torch.ones(2)
    dist.all_reduce(t, group=pgs[0])
    assert torch.equal(t, torch.ones(2))
    for p in pgs:
        p.parent.gang.close()


def test_error_swallowing_wrapper(lighthouse):
    inner = ft.ProcessGroupGloo(timeout=10)
    w = ft.ErrorSwallowingProcessGroupWrapper(inner)
    assert w.parent is inner and isinstance(w, dist.ProcessGroup)
    t = torch.full((2,), 5.0)
    w.allreduce([t], dist.ReduceOp.SUM).wait()  # unconfigured: swallowed
    assert isinstance(w.error(), gang.InvalidUsageError) and "not configured" in str(w.error())
    assert torch.equal(t, torch.full((2,), 5.0))
    w.broadcast(t, 0).wait()  # skipped from now on
    with pytest.raises(gang.InvalidUsageError, match="wrapper"):
        inner.allreduce(t)  # its gang is the wrapper's now
    w.configure(fresh(lighthouse, "swallow"), 0, 1)
    assert w.error() is None and w.size() == 1
    w.allreduce(t).wait()
    assert torch.equal(t, torch.full((2,), 5.0))
    boom = RuntimeError("the step broke")
    w.report_error(boom)
    assert w.error() is boom
    w.gang.close()


def test_baby_gloo(lighthouse, monkeypatch):
    monkeypatch.setenv("GANG_BABY_PATH", os.path.join(BUILD, "tools", "gang-baby", "gang-baby"))
    pgs = [ft.ProcessGroupBabyGloo(timeout=20) for _ in range(2)]
    assert pgs[0].getBackendName() == "torchft-baby-gang"
    addr = fresh(lighthouse, "baby")
    in_threads(*(lambda r=r: pgs[r].configure(addr, r, 2) for r in range(2)))
    ts = [torch.full((1000,), float(r + 1)) for r in range(2)]
    in_threads(*(lambda r=r: pgs[r].allreduce(ts[r], dist.ReduceOp.SUM).wait() for r in range(2)))
    assert all(torch.equal(t, torch.full((1000,), 3.0)) for t in ts)
    for p in pgs:
        p.parent.gang.close()


# ---- DDP across replica groups ---------------------------------------------------------


IN, OUT, STEPS, LR = 6, 3, 12, 0.1


def batch(step):
    g = torch.Generator().manual_seed(500 + step)
    x = torch.randn(16, IN, generator=g)
    return x, torch.tanh(x @ torch.linspace(-1, 1, IN * OUT).reshape(IN, OUT))


def model_of(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, 8), torch.nn.Tanh(), torch.nn.Linear(8, OUT))


def reference():
    """One model, no faults, the same batches: what every replica must end
    with (the same data on every replica)."""
    model = model_of(1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def replica(lh, name, seed, kind, results, at_step4=None):
    model = model_of(seed)
    m = ft.Manager(lighthouse_addr=lh.address(), replica_id=name, timeout=10, quorum_timeout=20)
    for n, p in model.named_parameters():
        m.register_state(n, p.data)
    if kind == "torchft":
        net = ft.DistributedDataParallel(m, model)
    else:
        net = torch.nn.parallel.DistributedDataParallel(model, process_group=ft.ManagedProcessGroup(m),
                                                        find_unused_parameters=True)
    opt = ft.OptimizerWrapper(m, torch.optim.SGD(model.parameters(), lr=LR))
    parts = []
    while m.current_step() < STEPS:
        step = m.current_step()
        opt.zero_grad()  # the quorum runs during the forward and backward
        x, y = batch(step)
        torch.nn.functional.mse_loss(net(x), y).backward()
        if opt.step():
            parts.append(m.num_participants())
        if at_step4 is not None and m.current_step() == 4:
            at_step4.set()
        threading.Event().wait(0.05)  # leaves the other replica time to join
    results[name] = (torch.cat([p.detach().reshape(-1) for p in model.parameters()]), parts)
    m.shutdown()


@pytest.mark.parametrize("kind", ["torch", "torchft"])
def test_ddp_over_managed_group_late_joiner_matches_the_fault_free_run(kind, lighthouse):
    """Replica 'first' trains 4 steps alone; 'late' starts from other
    weights, heals in the middle of its first DDP step (the quorum
    overlaps its forward and backward) and both then train together:
    both must end with the parameters of one model trained alone."""
    torch.set_num_threads(1)
    go = threading.Event()
    results = {}

    def late():
        assert go.wait(60)
        replica(lighthouse, "late", 99, kind, results)

    in_threads(lambda: replica(lighthouse, "first", 1, kind, results, go), late)
    want = reference()
    for name in ("first", "late"):
        got, parts = results[name]
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (name, (got - want).abs().max())
    assert 2 in results["first"][1], results["first"][1]  # they did train together
    assert torch.equal(results["first"][0], results["late"][0])


def test_ddp_without_find_unused_parameters_is_refused(lighthouse):
    model = model_of(1)
    with ft.Manager(lighthouse_addr=lighthouse.address(), replica_id="strict", timeout=5, quorum_timeout=10) as m:
        for n, p in model.named_parameters():
            m.register_state(n, p.data)
        net = torch.nn.parallel.DistributedDataParallel(model, process_group=ft.ManagedProcessGroup(m))
        opt = ft.OptimizerWrapper(m, torch.optim.SGD(model.parameters(), lr=LR))
        opt.zero_grad()
        x, y = batch(0)
        torch.nn.functional.mse_loss(net(x), y).backward()
        assert opt.step()
        with pytest.raises(gang.NotSupportedError, match="find_unused_parameters=True"):
            net(x)  # DDP lays its buckets out anew here
        with pytest.raises(gang.InvalidArgumentError, match="find_unused_parameters"):
            ft.DistributedDataParallel(m, model, find_unused_parameters=False)


def test_managed_group_size_is_the_participants(lighthouse):
    with ft.Manager(lighthouse_addr=lighthouse.address(), replica_id="solo", timeout=5, quorum_timeout=10) as m:
        pg = ft.ManagedProcessGroup(m)
        assert pg.size() == 0 and pg.getBackendName() == "torchft-managed"
        m.start_quorum()
        t = torch.full((3,), 4.0)
        pg.allreduce([t], dist.ReduceOp.SUM).wait()  # the mean: torch was told 1
        assert torch.equal(t, torch.full((3,), 4.0)) and pg.size() == 1
        with pytest.raises(gang.NotSupportedError, match="mean"):
            pg.allreduce(t, dist.ReduceOp.MAX)
        assert m.should_commit()
        with pytest.raises(gang.NotSupportedError):
            pg.configure("x:1/y", 0, 1)


# ---- the backend, the manager's state, the mesh ---------------------------------------------


@pytest.mark.parametrize("order", ["gang first", "torch first"])
def test_init_process_group_after_import_gang(order):
    first, second = ("gang", "torch.distributed as dist") if order == "gang first" else \
        ("torch.distributed as dist", "gang")
    code = (f"import {first}\nimport {second}\nimport torch\nimport torch.distributed as dist\n"
            "dist.init_process_group('gang', rank=0, world_size=1)\n"
            "t = torch.ones(2); dist.all_reduce(t)\n"
            "print(dist.get_backend(), t.tolist())\n")
    p = subprocess.run([PYTHON, "-c", code], env=env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode()
    assert p.returncode == 0 and "gang [1.0, 1.0]" in out, out


def test_manager_state_dict(lighthouse):
    with ft.Manager(lighthouse_addr=lighthouse.address(), replica_id="ckpt", timeout=5, quorum_timeout=10) as m:
        assert m.state_dict() == {"step": 0, "batches_committed": 0}
        with pytest.raises(gang.InvalidArgumentError):
            m.load_state_dict({"step": 3})
        m.load_state_dict({"step": 5, "batches_committed": 12})
        assert (m.current_step(), m.batches_committed()) == (5, 12)
        m.start_quorum()
        m.allreduce(torch.ones(2))
        assert m.should_commit()
        assert m.state_dict() == {"step": 6, "batches_committed": 13}
        with pytest.raises(gang.InvalidUsageError, match="before the first start_quorum"):
            m.load_state_dict({"step": 1, "batches_committed": 1})


def test_extend_device_mesh():
    mesh = gang.DeviceMesh("cpu", [0], mesh_dim_names=("tp",), _gang_over=gang.FakeGang(size=1))
    pg = ft.ProcessGroupDummy(0, 1)
    ext = ft.extend_device_mesh(mesh, pg, "dp", 0)
    assert ext.mesh_dim_names == ("dp", "tp") and ext.shape == (1, 1) and ext.ndim == 2
    assert ext.get_group("dp") is pg and ext.get_group(0) is pg
    assert ext.get_group("tp") is mesh.get_group("tp")
    assert ext.get_local_rank("dp") == 0 and ext.get_coordinate() == [0, 0]
    assert ext["dp"].get_group("dp") is pg
    with pytest.raises(gang.InvalidArgumentError, match="already"):
        ft.extend_device_mesh(mesh, pg, "tp")
    with pytest.raises(gang.InvalidArgumentError):
        ft.extend_device_mesh(mesh, "not a group")


def test_create_store_client(lighthouse):
    st = ft.create_store_client(fresh(lighthouse, "store"), timeout=5)
    assert isinstance(st, dist.Store)
    st.set("k", "v")
    assert st.get("k") == b"v"
    assert st.add("n", 2) == 2 and st.add("n", 3) == 5
    assert st.check(["k", "n"]) and not st.check(["k", "missing"])
    assert st.compare_set("k", "v", "w") == b"w"
    st.wait(["k"])
    with pytest.raises(gang.GangTimeoutError):
        st.wait(["never"], datetime.timedelta(milliseconds=200))
    assert st.delete_key("k") and not st.delete_key("k")
    pre = dist.PrefixStore("sub", st)  # torch's own wrapper takes it
    pre.set("x", "1")
    assert st.get("sub/x") == b"1"
    assert st.num_keys() >= 2
    st.close()
    with pytest.raises(gang.InvalidUsageError, match="closed"):
        st.get("n")
    with pytest.raises(gang.InvalidArgumentError):
        ft.create_store_client("no port here")
