"""torch.distributed's collectives on backend "gang" against Gloo."""

import os

import pytest

from conftest import gangrun, rank_lines


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_torch_backend_matches_gloo(nproc, workers_dir):
    out = gangrun(nproc, os.path.join(workers_dir, "torch_collectives.py"))
    for r in range(nproc):
        assert "TORCH BACKEND OK" in rank_lines(out, r), out
