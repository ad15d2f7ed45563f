"""One rank of test_errors.py's early-exit test (4 ranks): ranks 2 and 3
do one all_reduce in their pair and end the script without closing
anything; ranks 0 and 1 then run 200 all_reduces in theirs, which must
all succeed, and a barrier of the world, which needs ranks 2 and 3 and
must raise PeerLeftError (a PeerLostError, so a ConnectionError) saying
they left. Prints "EARLY EXIT OK" on ranks 0 and 1."""

import numpy as np

import gang

root = gang.ProcessGroupGang.create_default_process_group("cpu")
r, n = root.rank, root.size
assert n == 4, n
first = root.create_gang([0, 1])
second = root.create_gang([2, 3])
mine = first if r < 2 else second

a = np.full(1000, r + 1.0, np.float32)
mine.all_reduce(a)
if r >= 2:
    assert (a == 7).all(), a
    print("leaves with its gangs open", flush=True)
    raise SystemExit(0)

for i in range(200):
    a = np.full(1 << (i % 17), float(r + i), np.float32)
    mine.all_reduce(a)
    assert (a == 2 * i + 1).all(), (i, a[:4])
try:
    root.barrier()
except gang.PeerLeftError as e:
    assert isinstance(e, gang.PeerLostError) and isinstance(e, ConnectionError), type(e).__mro__
    assert e.status_name == "PEER_LEFT" and " left (" in str(e), e
    print(f"world barrier: {e}", flush=True)
else:
    raise AssertionError("the world barrier succeeded without ranks 2 and 3")
print("EARLY EXIT OK", flush=True)
