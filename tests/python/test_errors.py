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
