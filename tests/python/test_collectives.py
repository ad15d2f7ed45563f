"""Every collective of the package against torch.distributed's Gloo on the
same inputs, numpy and torch, every dtype and op, under gangrun."""

import os

import pytest

from conftest import gangrun, rank_lines


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_collectives_match_gloo(nproc, workers_dir):
    out = gangrun(nproc, os.path.join(workers_dir, "collectives.py"))
    for r in range(nproc):
        assert "COLLECTIVES OK" in rank_lines(out, r), out
