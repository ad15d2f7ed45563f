"""DistributedDataParallel trains to the same parameters over Gloo and
over gang's torch backend, with either as the default process group."""

import os

import pytest

from conftest import gangrun, rank_lines


# Every run trains over both backends; `default` only says which one is
# the default process group. Four ranks once, with gang's as the default.
@pytest.mark.parametrize("nproc,default", [(2, "gloo"), (2, "gang"), (4, "gang")])
def test_ddp_gloo_vs_gang(nproc, default, workers_dir):
    out = gangrun(nproc, os.path.join(workers_dir, "ddp.py"), default)
    for r in range(nproc):
        assert any(l.startswith(f"DDP OK default={default} ranks={nproc}") for l in rank_lines(out, r)), out
