"""DistributedDataParallel trains to the same parameters over Gloo and
over gang's torch backend, with either as the default process group."""

import os

import pytest

from conftest import gangrun, rank_lines


@pytest.mark.parametrize("default", ["gloo", "gang"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_ddp_gloo_vs_gang(nproc, default, workers_dir):
    out = gangrun(nproc, os.path.join(workers_dir, "ddp.py"), default)
    for r in range(nproc):
        assert any(l.startswith(f"DDP OK default={default} ranks={nproc}") for l in rank_lines(out, r)), out
