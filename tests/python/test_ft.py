"""gang.ft: torchft's names over gang/ft.h.

In one process: the dummy gang, the error-swallowing wrapper, the
reconfigurable gang's configure, the lighthouse, and a manager of a single
replica with bad inputs. Then three replica processes under a lighthouse
in this process train through Manager.allreduce / should_commit; one is
killed with SIGKILL mid-run and started again: the survivors go on, the new
one heals, and all end bit-identical at the target step."""

import json
import os
import secrets
import signal
import subprocess
import threading
import time
import urllib.request

import numpy as np
import pytest

import gang
from gang import ft
from conftest import GANGRUN, HERE, PYTHON, env, run

# Short timeouts keep the kill test well under a minute.
HEARTBEAT_TIMEOUT_MS = 1000


@pytest.fixture
def lighthouse():
    with ft.LighthouseServer("127.0.0.1:0", min_replicas=1, quorum_tick_ms=50,
                             heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS) as lh:
        yield lh


_prefixes = iter(range(1_000_000))


def fresh(lh, what):
    return f"{lh.address()}/pytest-{os.getpid()}-{what}-{next(_prefixes)}"


# ---- gangs ----------------------------------------------------------------------


def test_dummy_gang():
    g = ft.DummyGang(1, 3)
    assert isinstance(g, gang.Gang) and (g.rank, g.size) == (1, 3)
    a = np.arange(4, dtype=np.float32)
    g.all_reduce(a, gang.ReduceOperation.SUM)
    assert (a == np.arange(4)).all()  # a no-op
    out = np.zeros((3, 2), np.float32)
    g.all_gather(out, np.array([5, 6], np.float32))
    assert (out[1] == [5, 6]).all()
    g.barrier()
    with pytest.raises(gang.NotSupportedError):
        g.send(a, 0)
    assert (ft.DummyGang().rank, ft.DummyGang().size) == (0, 1)
    with pytest.raises(gang.InvalidArgumentError):
        ft.DummyGang(3, 3)


def test_error_swallowing_wrapper(lighthouse):
    inner = gang.FakeGang(size=2)
    w = ft.ErrorSwallowingGang(inner)
    assert inner.closed and (w.rank, w.size) == (0, 2)
    assert w.error() is None
    a = np.ones(3, np.float32)
    w.all_reduce(a)
    assert (a == 2).all()  # passes through while healthy
    boom = RuntimeError("the step broke")
    w.report_error(boom)
    assert w.error() is boom
    w.report_error(ValueError("later"))
    assert w.error() is boom  # the first one is kept
    w.all_reduce(a)
    assert (a == 2).all()  # swallowed: returns at once, buffer unchanged
    b = np.full(3, 4.0, np.float32)
    w.broadcast(b)  # other collectives are not guarded
    assert (b == 4).all()
    w.close()

    # An inner gang that fails: an unconfigured reconfigurable gang.
    w = ft.ErrorSwallowingGang(ft.ReconfigurableGang(timeout=5))
    a = np.full(2, 7.0)
    w.all_reduce(a)  # no exception
    e = w.error()
    assert isinstance(e, gang.InvalidUsageError) and "not configured" in str(e)
    assert e.status_name == "INVALID_USAGE"
    assert (a == 7).all()
    w.configure(fresh(lighthouse, "swallow"), 0, 1, timeout=10)  # clears it
    assert w.error() is None and w.configured
    w.all_reduce(a, gang.ReduceOperation.SUM)
    assert (a == 7).all()
    w.close()
    with pytest.raises(gang.InvalidUsageError, match="closed"):
        ft.ErrorSwallowingGang(w)
    with pytest.raises(gang.InvalidArgumentError):
        ft.ErrorSwallowingGang(np.zeros(2))


def test_reconfigurable_gang(lighthouse):
    g = ft.ReconfigurableGang(timeout=10)
    assert (g.rank, g.size, g.configured) == (-1, 0, False)
    a = np.ones(2, np.float32)
    with pytest.raises(gang.InvalidUsageError, match="not configured"):
        g.all_reduce(a)
    addr = fresh(lighthouse, "one")
    g.configure(addr, 0, 1, timeout=10)
    assert (g.rank, g.size, g.configured) == (0, 1, True)
    g.all_reduce(a)
    assert (a == 1).all()
    with pytest.raises(gang.InvalidUsageError, match="used before"):
        g.configure(addr, 0, 1, timeout=10)
    assert not g.configured
    with pytest.raises(gang.InvalidArgumentError):
        g.configure(lighthouse.address(), 0, 1)  # no prefix
    g.configure(fresh(lighthouse, "again"), 0, 1)
    g.all_reduce(a)
    g.close()


def test_reconfigurable_gang_two_ranks_in_threads(lighthouse):
    """Two ranks configured from two threads: configure and all_reduce
    release the GIL, or this would deadlock."""
    gs = [ft.ReconfigurableGang(timeout=20) for _ in range(2)]
    for incarnation in range(3):
        addr = fresh(lighthouse, "two")
        results = [None, None]

        def rank(r):
            try:
                gs[r].configure(addr, r, 2, timeout=20)
                a = np.full(3, float(r + incarnation), np.float32)
                gs[r].all_reduce(a)
                results[r] = a
            except Exception as e:  # reported below
                results[r] = e

        ts = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        expect = 1.0 + 2 * incarnation
        for r in range(2):
            assert isinstance(results[r], np.ndarray), results[r]
            assert (results[r] == expect).all()
            assert (gs[r].rank, gs[r].size) == (r, 2)
    for g in gs:
        g.close()


# ---- the lighthouse --------------------------------------------------------------


def test_lighthouse_server():
    with ft.LighthouseServer("127.0.0.1:0", min_replicas=2, join_timeout_ms=500) as lh:
        host, port = lh.address().rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) == lh.port > 0
        with urllib.request.urlopen(lh.status_url(), timeout=10) as r:
            status = json.loads(r.read())
        assert status["min_replicas"] == 2 and status["join_timeout_ms"] == 500
        assert status["quorum_id"] == 0 and status["replicas"] == []
        assert status["allow_kill"] is False and status["events"] == []
    assert "shut down" in repr(lh)
    with pytest.raises(gang.InvalidUsageError):
        lh.port
    lh.shutdown()  # idempotent
    with ft.LighthouseServer("127.0.0.1:0", http_port=-1) as lh:
        assert lh.status_url() is None
    with ft.LighthouseServer("127.0.0.1:0", allow_kill=True) as lh:
        with urllib.request.urlopen(lh.status_url(), timeout=10) as r:
            assert json.loads(r.read())["allow_kill"] is True
    with pytest.raises(gang.InvalidArgumentError):
        ft.LighthouseServer("no-port")
    with pytest.raises(gang.InvalidArgumentError):
        ft.LighthouseServer("127.0.0.1:0", min_replicas=0 - 1)


# ---- a manager of one replica ------------------------------------------------------


def step(m, grad, op=None):
    m.start_quorum()
    work = m.allreduce(grad) if op is None else m.allreduce(grad, reduce_op=op)
    # wait() says whether the step is still free of errors
    assert work.wait() == (m.errored() is None) and (work.exception() is None) == (m.errored() is None)
    return m.should_commit()


def test_manager_single_replica(lighthouse):
    with pytest.raises(gang.NotSupportedError, match="register_state"):
        ft.Manager(lighthouse_addr=lighthouse.address(), state_dict=lambda: {})
    m = ft.Manager(lighthouse_addr="http://" + lighthouse.address(), replica_id="solo", timeout=5,
                   quorum_timeout=10)
    assert m.replica_id().startswith("solo:")
    assert (m.current_step(), m.quorum_id(), m.replica_rank(), m.batches_committed()) == (0, 0, -1, 0)
    params = np.arange(6, dtype=np.float32)

    # Bad state buffers: the right exception, nothing registered.
    with pytest.raises(gang.InvalidArgumentError, match="contiguous"):
        m.register_state("strided", np.zeros((4, 4))[:, 1])
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(gang.InvalidArgumentError, match="read-only"):
        m.register_state("ro", ro)
    with pytest.raises(gang.InvalidArgumentError, match="read-only"):
        m.register_state("bytes", b"12345678")
    with pytest.raises(gang.InvalidArgumentError):
        m.register_state(3, params)
    m.register_state("params", params)
    with pytest.raises(gang.InvalidArgumentError, match="already"):
        m.register_state("params", np.zeros(2))
    m.register_state("complex", np.zeros(3, np.complex64))  # any element type: bytes

    # Bad all_reduce inputs: raised, the manager still usable.
    m.start_quorum()
    m.wait_quorum()
    with pytest.raises(gang.InvalidArgumentError, match="contiguous"):
        m.allreduce(np.zeros((4, 4), np.float32)[:, 0])
    with pytest.raises(gang.InvalidArgumentError, match="read-only"):
        m.allreduce(ro)
    with pytest.raises(gang.InvalidArgumentError):
        m.allreduce(np.zeros(2, np.complex64))
    with pytest.raises(gang.InvalidArgumentError):
        m.allreduce(np.zeros(2, np.float32), reduce_op="median")
    with pytest.raises(gang.NotSupportedError):
        m.allreduce(np.zeros(2, np.float32), should_quantize=True)
    g = np.full(6, 3.0, np.float32)
    m.allreduce(g)
    assert (g == 3).all()  # the mean over one participant
    assert m.errored() is None and m.should_commit()
    assert (m.current_step(), m.quorum_id(), m.replica_rank(), m.num_participants()) == (1, 1, 0, 1)
    assert m.batches_committed() == 1

    # After the first start_quorum: too late to register.
    with pytest.raises(gang.InvalidUsageError, match="first"):
        m.register_state("late", np.zeros(2))

    # report_error: that step does not commit; the next one does.
    m.start_quorum()
    assert m.errored() is None
    boom = ValueError("bad batch")
    m.report_error(boom)
    assert m.errored() is boom
    assert not m.allreduce(np.ones(2, np.float32)).wait()
    assert m.should_commit() is False
    assert m.current_step() == 1
    assert step(m, np.ones(2, np.float32), op="sum")
    assert m.errored() is None and m.current_step() == 2 and m.batches_committed() == 2
    assert step(m, np.ones(2, np.float32), op=gang.ReduceOperation.MAX)

    # The managed gang: size = participants, all_reduce through the manager.
    pg = m.gang
    assert isinstance(pg, ft.ManagedGang) and ft.ManagedGang(m) is pg
    m.start_quorum()
    assert (pg.rank, pg.size) == (0, 1)
    v = np.full(3, 5.0)
    pg.all_reduce(v, gang.ReduceOperation.MEAN)
    assert (v == 5).all() and m.should_commit()
    with pytest.raises(gang.InvalidUsageError, match="borrows"):
        ft.ErrorSwallowingGang(pg)  # the manager's handle
    assert set(m.last_timings()) == {"quorum_ms", "configure_ms", "heal_ms", "heal_bytes", "error_ns"}
    assert "step 4" in repr(m)

    m.shutdown()
    assert pg.closed
    with pytest.raises(gang.InvalidUsageError):
        m.current_step()
    m.shutdown()  # idempotent


def test_manager_torch(lighthouse):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    model = torch.nn.Linear(4, 2)
    with ft.Manager(lighthouse_addr=lighthouse.address(), replica_id="torch", timeout=5, quorum_timeout=10) as m:
        for name, p in model.named_parameters():
            m.register_state(name, p)
        with pytest.raises(gang.InvalidArgumentError, match="contiguous"):
            m.register_state("t", torch.zeros(3, 3).t())
        opt = ft.OptimizerWrapper(m, torch.optim.SGD(model.parameters(), lr=0.1))
        before = model.weight.detach().clone()
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.ones(5, 4)).pow(2).sum()
            loss.backward()
            for p in model.parameters():
                m.allreduce(p.grad, reduce_op=dist.ReduceOp.AVG)
            opt.step()
        assert m.current_step() == 3
        assert not torch.equal(before, model.weight.detach())
        with pytest.raises(gang.InvalidArgumentError, match="contiguous"):
            m.allreduce(torch.zeros(3, 3).t())
        t = torch.ones(3)
        m.start_quorum()
        m.allreduce(t, reduce_op=dist.ReduceOp.SUM)
        assert m.should_commit() and (t == 1).all()


def test_manager_needs_a_lighthouse(monkeypatch):
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    monkeypatch.delenv("GANG_LIGHTHOUSE", raising=False)
    with pytest.raises(gang.InvalidArgumentError, match="lighthouse"):
        ft.Manager()


def test_replica_groups_under_gangrun():
    """Two replica groups of two ranks under `gangrun --replica-groups`:
    the manager over each group's gang, the lighthouse named by
    GANG_LIGHTHOUSE, and rank r of both groups ending with the same shard.
    The lighthouse wants both groups in every quorum (min_replicas 2): on a
    busy machine one group could otherwise finish its 20 steps alone
    before the other starts. gangrun's workers authenticate to stores with
    GANG_STORE_SECRET, so the lighthouse is given the same secret."""
    secret = secrets.token_hex(32)
    with ft.LighthouseServer("127.0.0.1:0", min_replicas=2, quorum_tick_ms=50, secret=secret) as lh:
        out = run([GANGRUN, "--replica-groups", "2", "--nproc-per-node", "2", "--master-port", "0", PYTHON,
                   os.path.join(HERE, "workers", "ft_group.py"), "20"], timeout=120,
                  extra_env={"GANG_LIGHTHOUSE": lh.address(), "GANG_STORE_SECRET": secret})
    done = {}
    for line in out.splitlines():
        if "]:done " in line:
            fields = dict(kv.split("=", 1) for kv in line.split("]:done ", 1)[1].split())
            done.setdefault(fields["rank"], []).append(fields)
    assert sorted(done) == ["0", "1"] and all(len(v) == 2 for v in done.values()), out
    for rank, groups in done.items():
        assert {g["step"] for g in groups} == {"20"}, out
        # 20 steps of 2 groups, but for step 0, where init_sync makes the
        # second group heal from the primary: it sends zeros and is not
        # counted (torchft counts it; its mean is then half the gradient)
        assert {g["batches"] for g in groups} == {"39"}, out
        assert len({g["hash"] for g in groups}) == 1, out  # rank r healed from rank r
    assert done["0"][0]["hash"] != done["1"][0]["hash"]  # shards of their own


# ---- replicas killed and restarted -------------------------------------------------


class Replica:
    def __init__(self, tmp, lh, name, inc, target_file):
        self.name = name
        self.log = os.path.join(tmp, f"{name}-{inc}.log")
        self.out = open(os.path.join(tmp, f"{name}-{inc}.out"), "wb")
        self.p = subprocess.Popen(
            [PYTHON, os.path.join(HERE, "workers", "ft_replica.py"), "--lighthouse", lh.address(), "--name", name,
             "--log", self.log, "--target-file", target_file, "--step-ms", "20"],
            env=env(), stdout=self.out, stderr=subprocess.STDOUT)

    def lines(self, kind=None):
        try:
            with open(self.log) as f:
                rows = [dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv) | {"kind": l.split()[0]}
                        for l in f.read().splitlines() if l]
        except FileNotFoundError:
            return []
        return [r for r in rows if kind is None or r["kind"] == kind]

    def commits(self):
        return [r for r in self.lines("step") if r["commit"] == "1"]

    def output(self):
        self.out.flush()
        with open(self.out.name, "rb") as f:
            return f"--- {self.name} (pid {self.p.pid}, rc {self.p.poll()}) ---\n{f.read().decode(errors='replace')}" \
                   f"\n{open(self.log).read() if os.path.exists(self.log) else ''}"


def wait_for(what, cond, replicas, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        for r in replicas:
            if r.p.poll() not in (None, 0, -signal.SIGKILL):
                pytest.fail(f"{r.name} exited while waiting for {what}\n" + "\n".join(x.output() for x in replicas))
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}\n" + "\n".join(x.output() for x in replicas))


def test_kill_restart_heal(tmp_path):
    tmp = str(tmp_path)
    target_file = os.path.join(tmp, "target")
    lh = ft.LighthouseServer("127.0.0.1:0", min_replicas=2, join_timeout_ms=500, quorum_tick_ms=50,
                             heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    reps = {n: Replica(tmp, lh, n, 0, target_file) for n in ("a", "b", "c")}
    everyone = list(reps.values())
    try:
        # All three train together for a few steps.
        wait_for("three replicas committing together",
                 lambda: all(any(int(c["part"]) == 3 and int(c["step"]) >= 5 for c in r.commits())
                             for r in reps.values()), everyone)
        victim = reps["c"]
        victim.p.send_signal(signal.SIGKILL)
        t_kill = time.time()
        victim.p.wait(10)

        # The survivors commit steps with two participants.
        def survivors_commit():
            return all(any(int(c["part"]) == 2 and float(c["t"]) > t_kill for c in reps[n].commits())
                       for n in ("a", "b"))

        wait_for("the survivors to commit without c", survivors_commit, everyone)
        t_on = max(min(float(c["t"]) for c in reps[n].commits() if int(c["part"]) == 2 and float(c["t"]) > t_kill)
                   for n in ("a", "b"))
        # Detection by the heartbeat timeout, plus a tick and a step.
        assert t_on - t_kill < 10 * HEARTBEAT_TIMEOUT_MS / 1000, t_on - t_kill
        before = max(int(c["step"]) for n in ("a", "b") for c in reps[n].commits())

        # Started again: a new member that heals before its first step.
        again = Replica(tmp, lh, "c", 1, target_file)
        everyone.append(again)
        first = wait_for("the restarted replica to commit", lambda: again.commits()[:1], everyone)[0]
        assert int(first["step"]) > before, (first, before)
        healed = [r for r in again.lines("step") if int(r["heal"]) > 0]
        assert healed, again.output()

        # Everyone stops at one step, a little ahead of the fastest.
        lead = max(int(c["step"]) for r in (reps["a"], reps["b"], again) for c in r.commits())
        target = lead + 10
        with open(target_file + ".tmp", "w") as f:
            f.write(str(target))
        os.rename(target_file + ".tmp", target_file)
        for r in (reps["a"], reps["b"], again):
            try:
                rc = r.p.wait(60)
            except subprocess.TimeoutExpired:
                pytest.fail("a replica did not finish\n" + "\n".join(x.output() for x in everyone))
            assert rc == 0, r.output()
        done = [r.lines("done")[0] for r in (reps["a"], reps["b"], again)]
        assert {d["step"] for d in done} == {str(target)}, done
        assert len({d["hash"] for d in done}) == 1, done
        assert len({d["batches"] for d in done}) == 1, done
        # The restarted replica took part in steps with all three again.
        assert any(int(c["part"]) == 3 for c in again.commits())
    finally:
        for r in everyone:
            if r.p.poll() is None:
                r.p.kill()
                r.p.wait()
            r.out.close()
        lh.shutdown()
