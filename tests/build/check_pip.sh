#!/bin/sh
# `pip install .` of a checkout as a user runs it, offline: into a fresh
# venv (Debian's python3 refuses pip installs outside one) that sees the
# system's numpy and torch, with --no-build-isolation (no index to fetch
# setuptools from). Then, with nothing from the build tree or the
# environment: python3 -m gang.info names the venv's package, libgang and
# gangrun and one version; the venv's gangrun script runs a 2-rank
# all_reduce in Python (and, where the torch backend was built, one over
# torch.distributed's "gang" backend); pip uninstall removes it all.
# Exits 77 (skipped) where venv or pip is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$1"
version="$2"
py=/usr/bin/python3
"$py" -c 'import venv, ensurepip, setuptools, wheel' 2>/dev/null ||
  { echo "no python3 venv/pip/setuptools/wheel: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/gang-pip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"
v="$tmp/venv/bin"
t0=$(date +%s)
"$v/pip" install --no-build-isolation --no-index --no-deps "$src" \
  >"$tmp/pip.log" 2>&1 || { tail -n 40 "$tmp/pip.log"; echo "pip install . failed"; exit 1; }
echo "pip install . took $(($(date +%s) - t0)) s"

unset PYTHONPATH LD_LIBRARY_PATH GANGRUN GANG_BABY_PATH
cd "$tmp"
"$v/python" -m gang.info --json >"$tmp/info.json" ||
  { cat "$tmp/info.json"; echo "python3 -m gang.info failed"; exit 1; }
"$v/python" "$here/check_info.py" "$tmp/info.json" "$tmp/venv" "$version" \
  "installed by pip" --pip

cat >"$tmp/hello.py" <<'PY'
import numpy as np
import gang
g = gang.get_world_gang()
x = np.full(4, g.rank + 1.0, dtype=np.float32)
g.all_reduce(x, gang.ReduceOperation.SUM)
assert x.tolist() == [3.0] * 4, x
assert gang.__file__.startswith(__import__("sys").prefix), gang.__file__
print("hello: rank", g.rank, "ok")
PY
"$v/gangrun" --standalone --nproc-per-node 2 "$v/python" "$tmp/hello.py" \
  >"$tmp/hello.log" 2>&1 || { cat "$tmp/hello.log"; echo "2-rank Python run failed"; exit 1; }
[ "$(grep -c 'ok$' "$tmp/hello.log")" -eq 2 ] ||
  { cat "$tmp/hello.log"; echo "not every rank passed"; exit 1; }

if "$v/python" -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1]))["torch_backend"])' "$tmp/info.json" &&
  "$v/python" -c 'import torch' 2>/dev/null; then
  cat >"$tmp/torch_hello.py" <<'PY'
import torch
import torch.distributed as dist
import gang  # noqa: F401  (registers the backend)
dist.init_process_group("gang")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
assert t.tolist() == [3.0] * 4, t
print("torch: rank", dist.get_rank(), "ok")
dist.destroy_process_group()
PY
  "$v/gangrun" --standalone --nproc-per-node 2 "$v/python" "$tmp/torch_hello.py" \
    >"$tmp/torch.log" 2>&1 || { cat "$tmp/torch.log"; echo "torch backend run failed"; exit 1; }
  [ "$(grep -c 'ok$' "$tmp/torch.log")" -eq 2 ] ||
    { cat "$tmp/torch.log"; echo "torch: not every rank passed"; exit 1; }
  echo "torch.distributed backend \"gang\" from the installed package: ok"
fi

"$v/pip" uninstall -y gang >"$tmp/uninstall.log" 2>&1 ||
  { cat "$tmp/uninstall.log"; echo "pip uninstall failed"; exit 1; }
left=$(find "$tmp/venv" -path '*-packages/gang*' -o -name gangrun | head -n 5)
[ -z "$left" ] || { echo "left after pip uninstall:"; echo "$left"; exit 1; }
echo "pip test passed"
