"""Bad inputs raise the right exception and leave the gang usable; works
are waited from many threads."""

import os

import pytest

from conftest import gangrun, rank_lines


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_errors_and_threads(nproc, workers_dir):
    out = gangrun(nproc, os.path.join(workers_dir, "errors.py"))
    for r in range(nproc):
        assert "ERRORS OK" in rank_lines(out, r), out


@pytest.mark.parametrize("shm", ["0", "1"])
def test_ranks_that_end_early(shm, workers_dir):
    """A rank that ends is not a dead rank: the others' pair goes on, and
    what needs the ranks that left fails at once with PeerLeftError."""
    out = gangrun(4, os.path.join(workers_dir, "early_exit.py"), extra_env={"GANG_SHM_DISABLE": shm})
    for r in (0, 1):
        assert "EARLY EXIT OK" in rank_lines(out, r), out
