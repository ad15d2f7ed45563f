"""The package in one process: the fake gang, names and values, devices,
current gangs across threads, buffers of every kind."""

import array
import threading

import numpy as np
import pytest

import gang
from gang import ReduceOperation as R


def test_reduce_operation_values():
    assert [(o.name, o.value) for o in R] == [("SUM", 1), ("MEAN", 2), ("PRODUCT", 3), ("MIN", 4), ("MAX", 5)]


def test_error_classes():
    for name in ("InvalidArgumentError", "InvalidUsageError", "NotSupportedError", "GangTimeoutError",
                 "PeerLostError", "AbortedError", "MismatchError", "ProtocolError", "AuthError",
                 "NoMemoryError", "GangSystemError", "InternalError", "NotFoundError", "InProgressError",
                 "PeerLeftError"):
        cls = getattr(gang, name)
        assert issubclass(cls, gang.GangError)
    assert issubclass(gang.InvalidArgumentError, ValueError)
    assert issubclass(gang.GangTimeoutError, TimeoutError)
    assert issubclass(gang.PeerLostError, ConnectionError)
    assert issubclass(gang.PeerLeftError, gang.PeerLostError)
    with pytest.raises(gang.InvalidArgumentError) as e:
        gang.FakeGang(size=2).all_reduce(np.ones((2, 2))[:, 0])
    assert e.value.status_name == "INVALID_ARGUMENT" and e.value.status == 2


def test_fake_gang_semantics():
    g = gang.FakeGang(gang.Device("cpu"), rank=1, size=3)
    assert (g.rank, g.size, g.device) == (1, 3, "cpu") and g.device.type == "cpu"
    a = np.full(4, 2.0)
    g.all_reduce(a, R.SUM)
    assert (a == 6).all()
    g.all_reduce(a, R.PRODUCT)
    assert (a == 216).all()
    out = np.zeros((3, 2))
    g.all_gather(out, np.array([1.0, 2.0]))
    assert (out == [[1, 2]] * 3).all()
    sub = g.create_gang([2, 1])
    assert isinstance(sub, gang.FakeGang) and (sub.rank, sub.size) == (1, 2)
    assert g.create_gang([0, 2]) is None
    assert not g.supports_process_group
    with pytest.raises(gang.NotSupportedError):
        g.as_process_group()


def test_buffers_of_every_kind():
    g = gang.FakeGang(size=2)
    for buf in (bytearray(b"\x01\x02"), array.array("i", [1, 2]), memoryview(bytearray(4)), np.ones(3, np.int16)):
        g.all_reduce(buf)
    b = bytearray(b"\x01\x02")
    g.all_reduce(b)
    assert b == bytearray(b"\x02\x04")

    class Iface:  # only __array_interface__
        def __init__(self):
            self.a = np.ones(5, np.float32)
            self.__array_interface__ = self.a.__array_interface__

    o = Iface()
    g.all_reduce(o)
    assert (o.a == 2).all()


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    g = gang.FakeGang(size=4)
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8, torch.uint8):
        t = torch.ones(3, dtype=dt)
        g.all_reduce(t)
        assert (t.float() == 4).all(), dt
    with pytest.raises(gang.InvalidArgumentError, match="contiguous"):
        g.all_reduce(torch.ones(3, 3).t())
    t = torch.zeros(())
    g.all_reduce(t)


def test_current_gangs_per_thread():
    gs = gang.create_fake_gangs("cpu")
    assert gang.maybe_get_current_gangs() is None
    d1, d2 = gang.get_current_gangs(), gang.get_current_gangs()
    assert d1 is d2 and d1.root.size == 1
    seen = []
    with gs:
        assert gang.get_current_gangs() is gs and gang.maybe_get_current_gangs() is gs
        inner = gang.create_fake_gangs("cpu")
        with gang.set_gangs(inner):
            assert gang.get_current_gangs() is inner
        assert gang.get_current_gangs() is gs
        t = threading.Thread(target=lambda: seen.append(gang.maybe_get_current_gangs()))
        t.start()
        t.join()
    assert seen == [None]
    assert gang.maybe_get_current_gangs() is None


def test_topology_on_fake_gangs():
    gs = gang.create_fake_gangs("cpu")
    assert all(g.size == 1 for g in (gs.root, gs.dp, gs.rdp, gs.sdp, gs.tp, gs.pp))
    with pytest.raises(ValueError, match="must be greater than or equal to 1"):
        gang.create_parallel_gangs(gs.root, tp_size=0)
    f = gang.create_fsdp_gangs(gs)
    assert f.sdp is gs.dp and f is not gs
    with pytest.raises(ValueError, match="must be greater than 1"):
        gang.create_fsdp_gangs(gs, intra_node_size=1)


def test_broadcast_objects_on_fake():
    g = gang.FakeGang()
    objs = [1, "a"]
    g.broadcast_objects(objs)
    assert objs == [1, "a"]


def test_device():
    d = gang.Device("cuda:1")
    assert (d.type, d.index, str(d)) == ("cuda", 1, "cuda:1")
    with pytest.raises(ValueError):
        gang.Device("tpu")
    assert gang.get_default_device() == "cpu"


def test_world_info_single():
    info = gang.world_info()
    assert info["world_size"] >= 1 and "source" in info


def test_build_tree_imports_only_gang():
    """PYTHONPATH=<build>/python offers the package and nothing else a
    program imports: a directory there named like a module (CMake's binary
    directory of python/torch was one) would shadow it, and under an
    interpreter without torch `import torch` would give an empty namespace
    package instead of ImportError."""
    import importlib.machinery
    import pkgutil

    from conftest import PYDIR

    names = {m.name for m in pkgutil.iter_modules([PYDIR])}
    assert names == {"gang"}, names
    for name in ("torch", "numpy"):
        assert importlib.machinery.PathFinder.find_spec(name, [PYDIR]) is None, name


def test_fairseq_distributed_init_tcp():
    """fairseq's spawn path: two processes handed tcp://localhost:PORT and
    their own distributed_rank meet as ranks 0 and 1 of 2, rank 0 hosting
    the store; without a rank the call says what is missing."""
    import os
    import subprocess
    import sys

    from conftest import PYTHON, env

    cfg = type("cfg", (), {})()
    cfg.distributed_init_method, cfg.distributed_world_size, cfg.distributed_rank = None, 2, 0
    gang.distributed_utils.infer_init_method(cfg)
    assert cfg.distributed_init_method.startswith("tcp://localhost:")
    code = (
        "import sys, numpy as np, gang\n"
        "from gang import distributed_utils as du\n"
        "cfg = type('cfg', (), {})()\n"
        "cfg.distributed_init_method, cfg.distributed_rank, cfg.distributed_world_size = sys.argv[1], int(sys.argv[2]), 2\n"
        "r = du.distributed_init(cfg)\n"
        "a = np.full(3, float(r + 1)); du.all_reduce(a)\n"
        "print('rank', r, 'of', du.get_world_size(), 'sum', a[0])\n")
    ps = [subprocess.Popen([PYTHON, "-c", code, cfg.distributed_init_method, str(r)], env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    outs = [p.communicate(timeout=120)[0].decode() for p in ps]
    for r, (p, out) in enumerate(zip(ps, outs)):
        assert p.returncode == 0 and f"rank {r} of 2 sum 3.0" in out, out
    bad = type("cfg", (), {})()
    bad.distributed_init_method, bad.distributed_rank, bad.distributed_world_size = "tcp://localhost:1", None, 2
    with pytest.raises(gang.InvalidArgumentError, match="distributed_rank"):
        gang.distributed_utils.distributed_init(bad)
    bad.distributed_init_method = "file:///tmp/x"
    with pytest.raises(gang.NotSupportedError, match="env://"):
        gang.distributed_utils.distributed_init(bad)


def test_torch_reduce_op_accepted():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    g = gang.FakeGang(size=1)
    t = torch.ones(3)
    g.all_reduce(t, dist.ReduceOp.SUM)
    g.all_reduce(t, dist.ReduceOp.AVG)
    g.all_reduce(t, dist.ReduceOp.RedOpType.MAX)
    assert torch.equal(t, torch.ones(3))
    with pytest.raises(gang.InvalidArgumentError, match="op"):
        g.all_reduce(t, dist.ReduceOp.BAND)


def test_broadcast_source_may_be_read_only_and_sparse_is_refused():
    g = gang.FakeGang(size=1)
    src = np.arange(4, dtype=np.float32)
    src.setflags(write=False)
    g.broadcast(src, 0)  # the source only reads
    torch = pytest.importorskip("torch")
    with pytest.raises(gang.InvalidArgumentError, match="sparse"):
        g.all_reduce(torch.eye(3).to_sparse())


def test_init_device_mesh_cuda_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    # Said, not silent; the mesh is made all the same (a world of one
    # here), as torch's examples that name "cuda" expect.
    with pytest.warns(RuntimeWarning, match="no CUDA device"):
        mesh = gang.init_device_mesh("cuda", (1,))
    assert mesh.shape == (1,)


def _fds():
    import os

    return len(os.listdir("/proc/self/fd"))


def test_mem_empty_numpy_torch_and_lifetime():
    import gc

    torch = pytest.importorskip("torch")
    f0 = _fds()
    a = gang.mem_empty((3, 4), np.float32)
    assert a.shape == (3, 4) and a.dtype == np.float32 and not a.any()
    assert a.ctypes.data % 4096 == 0 and a.flags.writeable
    t = gang.mem_empty(10, torch.bfloat16)
    assert t.shape == (10,) and t.dtype == torch.bfloat16 and not t.any()
    assert _fds() == f0 + 2  # one memfd each
    v = t[2:5]
    del t
    gc.collect()
    assert _fds() == f0 + 2  # the view holds the memory
    v.fill_(2.0)
    del v, a
    gc.collect()
    assert _fds() == f0
    m = gang.Memory(100)
    assert len(m) == m.nbytes == 100 and m.address % 4096 == 0
    assert bytes(memoryview(m)[:4]) == b"\0\0\0\0"
    # A fake gang's collectives on it, as on any buffer.
    g = gang.FakeGang(size=2)
    b = gang.mem_empty(4, np.float64)
    b[:] = 1.5
    g.all_reduce(b, R.SUM)
    assert (b == 3.0).all()
    for bad in (0, -1):
        with pytest.raises(gang.InvalidArgumentError, match="nbytes must be at least 1"):
            gang.Memory(bad)
