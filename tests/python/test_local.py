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
