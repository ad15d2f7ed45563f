"""Shared fixtures of the Python tests.

The tests run against a build tree: GANG_BUILD_DIR names it (CTest sets
it; by default ../../build/release). Multi-rank tests start real processes
under that tree's gangrun; every run has a watchdog (a timeout that kills
gangrun, whose workers die with it through PR_SET_PDEATHSIG) and prints
every rank's output when it fails. Nothing waits on sleeps."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("GANG_BUILD_DIR", os.path.join(HERE, "..", "..", "build", "release")))
PYDIR = os.path.join(BUILD, "python")
GANGRUN = os.path.join(BUILD, "tools", "gangrun", "gangrun")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

# Generous: two cores shared with other builds and tests.
WATCHDOG = float(os.environ.get("GANG_TEST_WATCHDOG", "300"))


def env(extra=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("GANG_TIMEOUT", "240s")
    e.setdefault("OMP_NUM_THREADS", "1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GANG_STORE_ADDR"):
        e.pop(k, None)
    if extra:
        e.update(extra)
    return e


def run(cmd, timeout=WATCHDOG, expect_rc=0, extra_env=None):
    """Runs cmd; on an unexpected exit status or a timeout, fails with the
    whole output."""
    try:
        p = subprocess.run(cmd, env=env(extra_env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        pytest.fail(f"watchdog: {cmd} still running after {timeout} s; output so far:\n{out}")
    out = p.stdout.decode(errors="replace")
    if expect_rc is not None and p.returncode != expect_rc:
        pytest.fail(f"{cmd} exited with {p.returncode} (expected {expect_rc}); output:\n{out}")
    return out


def gangrun(nproc, script, *args, **kw):
    """Runs a Python script as `nproc` ranks under gangrun; returns the
    output (lines prefixed [rankN]:)."""
    cmd = [GANGRUN, "--nproc-per-node", str(nproc), "--master-port", "0", PYTHON, script, *args]
    return run(cmd, **kw)


def torchrun_like(nproc, script, *args, **kw):
    """Runs a Python script as `nproc` ranks the way torchrun would
    (torchrun_env.py: a torch TCPStore on MASTER_PORT held by the launcher,
    TORCHELASTIC_USE_AGENT_STORE=True)."""
    cmd = [PYTHON, os.path.join(HERE, "torchrun_env.py"), "--nproc-per-node", str(nproc), PYTHON, script, *args]
    return run(cmd, **kw)


def rank_lines(out, rank):
    prefix = f"[rank{rank}]:"
    return [l[len(prefix):] for l in out.splitlines() if l.startswith(prefix)]


@pytest.fixture
def workers_dir():
    return os.path.join(HERE, "workers")
