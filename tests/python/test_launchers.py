"""torchrun and gangrun both ways: a torch.distributed program under
gangrun (MASTER_PORT is left free for torch's rank 0), and a gang program
and a gang-backend torch program under torchrun's environment (the agent's
TCPStore holds MASTER_PORT; gang meets there in torch's protocol).
`python3 -m gang.run` is gangrun."""

import os
import socket

import pytest

from conftest import GANGRUN, PYDIR, PYTHON, gangrun, rank_lines, run, torchrun_like


# Four ranks once, where the most meets: torch's gang backend under
# torchrun's store. Every rank process imports torch (about 1.4 CPU-s), so
# the launchers' other cases run two.
@pytest.mark.parametrize("nproc", [2])
def test_torch_program_under_gangrun(nproc, workers_dir):
    out = gangrun(nproc, os.path.join(workers_dir, "torch_program.py"))
    for r in range(nproc):
        assert f"TORCH OK rank={r} of {nproc}" in rank_lines(out, r), out


def test_gloo_under_gangrun_fixed_port(workers_dir):
    """The case of the issue: a fixed --master-port (as the default 29500,
    which other programs on a shared machine may hold) and Gloo."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = "import torch, torch.distributed as d; d.init_process_group('gloo'); t = torch.ones(1); d.all_reduce(t); print('GLOO', t.item())"
    out = run([GANGRUN, "--nproc-per-node", "2", "--master-port", str(port), PYTHON, "-c", script])
    assert "[rank0]:GLOO 2.0" in out and "[rank1]:GLOO 2.0" in out, out


@pytest.mark.parametrize("nproc", [2])
def test_gang_program_under_torchrun(nproc, workers_dir):
    out = torchrun_like(nproc, os.path.join(workers_dir, "gang_program.py"))
    for r in range(nproc):
        assert f"GANG OK rank={r} of {nproc} via torchrun store=torch" in out, out


@pytest.mark.parametrize("nproc", [2, 4])
def test_torch_gang_backend_under_torchrun(nproc, workers_dir):
    out = torchrun_like(nproc, os.path.join(workers_dir, "torch_program.py"))
    for r in range(nproc):
        assert f"TORCH OK rank={r} of {nproc}" in out, out


def test_gang_program_under_gangrun(workers_dir):
    out = gangrun(2, os.path.join(workers_dir, "gang_program.py"))
    assert "[rank1]:GANG OK rank=1 of 2 via torchrun store=127.0.0.1" in out, out


def test_python_m_gang_run(workers_dir):
    """`python3 -m gang.run` execs gangrun with the same arguments."""
    out = run([PYTHON, "-m", "gang.run", "--nproc-per-node", "2", "--master-port", "0", PYTHON, os.path.join(workers_dir, "gang_program.py")])
    assert "[rank0]:GANG OK rank=0 of 2" in out, out
    out = run([PYTHON, "-m", "gang.run", "--help"])
    assert "nproc-per-node" in out
    run([PYTHON, "-m", "gang.run", "--nproc-per-node", "0", "true"], expect_rc=2)
