"""One rank of test_errors.py: bad inputs each raise the right exception,
on every rank alike, and leave the gang usable; works are waited from many
threads at once. Prints "ERRORS OK" at the end."""

import threading

import numpy as np
import torch

import gang
from gang import ReduceOperation as R

root = gang.ProcessGroupGang.create_default_process_group("cpu")
r, n = root.rank, root.size


def usable():
    a = np.ones(3, np.float32)
    root.all_reduce(a)
    assert (a == n).all(), a


def expect(exc, text, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        assert text in str(e), f"{text!r} not in {e!r}"
        assert isinstance(e, gang.GangError), type(e).__mro__
        usable()
        return e
    raise AssertionError(f"{fn.__name__}{args} did not raise {exc.__name__}")


A = gang.InvalidArgumentError
# non-contiguous
expect(A, "must be contiguous", root.all_reduce, np.ones((4, 4), np.float32)[:, 1])
expect(A, "must be contiguous", root.all_reduce, torch.ones(4, 4).t())
expect(A, "must be contiguous", root.broadcast, np.ones((4, 4))[::2])
# wrong dtype
expect(A, "element type", root.all_reduce, np.ones(3, np.complex64))
expect(A, "element type", root.all_reduce, torch.ones(3, dtype=torch.complex64))
expect(A, "element type", root.all_reduce, np.ones(3, np.uint16))
expect(A, "must be an array", root.all_reduce, [1.0, 2.0])
# read-only buffers
ro = np.ones(3, np.float32)
ro.flags.writeable = False
expect(A, "read-only", root.all_reduce, ro)
# a broadcast's receivers write, its source only reads: refused on a
# receiver (before any traffic, so the source is not called), taken from
# the source (test_local.py)
if n > 1 and root.rank == 1:
    expect(A, "read-only", root.broadcast, b"abcd", 0)
elif n > 1:
    usable()  # the check expect() makes after the refusal, in step
out_ro = np.zeros((n, 3), np.float32)
out_ro.flags.writeable = False
expect(A, "read-only", root.all_gather, out_ro, np.ones(3, np.float32))
# wrong sizes
expect(A, "first dimension", root.all_gather, np.zeros((n + 1, 3), np.float32), np.ones(3, np.float32))
expect(A, "compatible with all-gather", root.all_gather, np.zeros(3 * n, np.float32), np.ones(3, np.float32))
expect(A, "must hold", root.all_gather, torch.zeros(n, 4), torch.ones(3))
expect(A, "same dtype", root.all_gather, np.zeros((n, 3), np.float64), np.ones(3, np.float32))
expect(A, "Length of `output_tensors`", root.all_gather_to_list, [np.zeros(3)] * (n + 1), np.ones(3))
expect(A, "must hold", root.reduce_scatter, np.zeros(2, np.float32), np.ones(3 * n, np.float32))
# bad op and ranks (ValueError, as fairseq2 raises)
expect(A, "`op` must be", root.all_reduce, np.ones(2), 9)
expect(ValueError, "source_rank", root.broadcast, np.ones(2), n)
expect(ValueError, "is not in", root.create_gang, [n])
expect(ValueError, "listed twice" if n > 1 else "ranks listed", root.create_gang, [0, 0])
# fairseq2's FakeGang checks
expect(ValueError, "`size` must be greater than 0.", gang.FakeGang, size=0)
expect(ValueError, "`rank` must be", gang.FakeGang, rank=2, size=2)
expect(ValueError, "must not be of type `meta`", gang.FakeGang, "meta")
# create_default twice
expect(gang.InvalidOperationError, "already initialized", gang.ProcessGroupGang.create_default_process_group, "cpu")
# a closed gang
g2 = root.create_gang(list(range(n)))
g2.close()
expect(gang.InvalidUsageError, "closed", g2.all_reduce, np.ones(2))

# works waited from many threads at once, and polled
for size in (1, 1 << 20):
    a = np.full(size, r + 1, np.float32)
    w = root.all_reduce(a, R.SUM, async_op=True)
    results, errors = [], []

    def waiter():
        try:
            results.append(w.wait(timeout=120))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [True] * 4, (results, errors)
    assert w.is_completed() and w.exception() is None
    assert (a == n * (n + 1) / 2).all()

# wait(0) polls: on an unfinished work it raises GangTimeoutError and the
# gang is unaffected. Rank 0 posts only after the others have polled (a
# barrier on a second gang tells it), so their poll cannot find it done.
side = root.create_gang(list(range(n)))
a = np.ones(4)
if r != 0:
    w = root.all_reduce(a, async_op=True)
    try:
        w.wait(0)
    except gang.GangTimeoutError as e:
        assert "not complete" in str(e)
    else:
        raise AssertionError("wait(0) found a collective done before rank 0 joined")
    side.barrier()
else:
    side.barrier()
    w = root.all_reduce(a, async_op=True)
assert w.wait(120) and (a == n).all()
usable()

# a work waited in another thread while this one computes
a = np.full(1000, 1.0)
w = root.all_reduce(a, async_op=True)
box = []
t = threading.Thread(target=lambda: box.append(w.wait()))
t.start()
t.join()
assert box == [True] and (a == n).all()

# several outstanding works in order, each waited by its own thread
arrs = [np.full(100, float(i)) for i in range(8)]
works = [root.all_reduce(x, async_op=True) for x in arrs]
threads = [threading.Thread(target=wk.wait) for wk in reversed(works)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, x in enumerate(arrs):
    assert (x == i * n).all()

# the GIL is released during a collective: a thread runs while rank 0
# holds the others in a barrier until its thread has counted
counter = []
if r == 0:
    th = threading.Thread(target=lambda: counter.extend(range(1000)))
    th.start()
    th.join()
root.barrier()
usable()
print("ERRORS OK")
