"""The seed documents' examples (seeds/), changed only in their imports,
under gangrun with 1, 2 and 4 ranks (those that fail alike at every size
with one and four, or two and four); where an example all_reduces over the
world its result is compared with torch.distributed's Gloo on the same
input. One gangrun per world size runs every example of that size
(run_seed.py --batch: each in a process of its own, forked after torch's
import), and each example's test reads its lines in that run's output."""

import json
import os

import pytest

from conftest import HERE, gangrun, rank_lines

SEEDS = os.path.join(HERE, "seeds")
TP8 = "ValueError:`tp_size` must be a factor of `root_gang.size` ({n}), but is 8 instead."

# example -> (expectation per world size, compare with gloo over the world,
# world sizes: the ones where the example's outcome differs)
ALL = (1, 2, 4)
CASES = {
    "fairseq2_tp.py": (lambda n: TP8.format(n=n), False, (1, 4)),
    "fairseq2_simulated.py": (lambda n: "ok", True, ALL),
    "fairseq2_init_pg.py": (lambda n: "ok", True, ALL),
    "fairseq2_dp_tp.py": (lambda n: TP8.format(n=n), False, (1, 4)),
    "fairseq2_fsdp.py": (lambda n: "ok", False, ALL),
    "fairseq2_hsdp.py": (
        lambda n: "ok"
        if n % 4 == 0
        else f"ValueError:`intra_node_size` must be a factor of `gangs.dp.size` ({n}), but is 4 instead.",
        False,
        (2, 4),
    ),
    "fairseq2_current_gangs.py": (lambda n: "ok", False, ALL),
    "fairseq2_api_basic.py": (lambda n: "ok", False, ALL),
    "fairseq2_api_distributed.py": (
        lambda n: "ok" if n % 2 == 0 else f"ValueError:`tp_size` must be a factor of `root_gang.size` ({n}), but is 2 instead.",
        False,
        ALL,
    ),
    "torch_device_mesh.py": (lambda n: "ok" if n == 8 else "ValueError:", False, (2, 4)),
}


_batches = {}


def batch(nproc, tmp_path_factory):
    """The output of one gangrun of every example that runs at nproc."""
    if nproc not in _batches:
        specs = [
            {"example": os.path.join(SEEDS, e), "expect": CASES[e][0](nproc), "compare": CASES[e][1]}
            for e in sorted(CASES)
            if nproc in CASES[e][2]
        ]
        gloo = tmp_path_factory.mktemp(f"gloo{nproc}")
        _batches[nproc] = gangrun(
            nproc, os.path.join(SEEDS, "run_seed.py"), "--batch", json.dumps(specs), "--gloo-dir", str(gloo), expect_rc=None
        )
    return _batches[nproc]


@pytest.mark.parametrize("example,nproc", [(e, n) for e in sorted(CASES) for n in CASES[e][2]])
def test_seed_example(example, nproc, tmp_path_factory):
    out = batch(nproc, tmp_path_factory)
    for r in range(nproc):
        assert f"SEED OK {example}" in rank_lines(out, r), out


def test_device_mesh_example_on_8_ranks():
    """The DeviceMesh example is written for 8 devices: it runs there."""
    out = gangrun(8, os.path.join(SEEDS, "run_seed.py"), os.path.join(SEEDS, "torch_device_mesh.py"), "--expect", "ok")
    for r in range(8):
        assert "SEED OK torch_device_mesh.py" in rank_lines(out, r), out


def test_fairseq2_api_basic_output(tmp_path_factory):
    out = batch(1, tmp_path_factory)
    assert "[rank0]:Root gang size: 1" in out and "[rank0]:Data parallel gang size: 1" in out, out


def test_tp2_example_prints_layout(tmp_path_factory):
    out = batch(4, tmp_path_factory)
    for r in range(4):
        lines = rank_lines(out, r)
        assert f"Process rank: {r}" in lines and "World size: 4" in lines and "TP gang size: 2" in lines, out
