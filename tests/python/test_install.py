"""The package installs: `cmake --install` into a fresh prefix gives an
importable `gang` (the extensions find libgang by their own RPATH), the
torch backend, and `python3 -m gang.run` finding the installed gangrun."""

import glob
import os
import subprocess

from conftest import BUILD, PYTHON, run


def test_install_tree(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", str(prefix)])
    pkgs = glob.glob(str(prefix / "lib" / "python3*" / "*-packages"))
    assert len(pkgs) == 1, pkgs
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pkgs[0], "HOME": str(tmp_path)}
    code = (
        "import gang, numpy as np; g = gang.FakeGang(size=2); a = np.ones(2); g.all_reduce(a); "
        "assert (a == 2).all(); import gang.run; print(gang.run.find_gangrun()); print(gang.__file__)"
    )
    out = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    gangrun_path, init = out.stdout.split()
    assert os.path.realpath(gangrun_path) == os.path.realpath(prefix / "bin" / "gangrun")
    assert init.startswith(pkgs[0])
    if glob.glob(os.path.join(pkgs[0], "gang", "_gang_torch*.so")):
        out = subprocess.run([PYTHON, "-c", "import gang.torch_backend"], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
