"""The README's Python examples (examples/python/) run under gangrun."""

import os

from conftest import HERE, gangrun, rank_lines

EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def test_fairseq2_style_example():
    out = gangrun(4, os.path.join(EXAMPLES, "fairseq2_style.py"))
    for r in range(4):
        (line,) = [l for l in rank_lines(out, r) if l.startswith(f"rank {r}/4")]
        assert "tp-sum 3 dp-mean 0.5 stop=True tokens=400" in line, out


def test_ddp_example():
    out = gangrun(2, os.path.join(EXAMPLES, "ddp_train.py"))
    last = [l for l in rank_lines(out, 0) if l.startswith("mean final loss")]
    assert last and float(last[0].split()[-1]) < 0.5, out
