#!/bin/sh
# Installs, from Debian's archive, whatever gang needs that this machine
# lacks. Safe to run again: it installs nothing when all is there.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --bench    also the peers measured by bench/compare
set -eu
# The Python package (python/) is built for Debian's python3 and tested
# with Debian's pytest; its torch backend needs torch's C++ headers
# (libtorch-dev) and a C++ compiler. `pip install .` (and its test) needs
# pip, setuptools, wheel and venv. PMIx's headers build the rendezvous
# through a launcher's PMIx server, which the tests run under Open MPI's
# mpirun and Slurm (slurm-wlm, munge) across the cluster in a box.
# Ninja builds the trees scripts/test.sh makes (less overhead than Make).
# Headless Chromium opens the lighthouse's status page in test_lh_tool
# (its script, its DOM and a screenshot), as an operator's browser would.
need="cmake ninja-build gcc g++ make pkg-config libssl-dev libcmocka-dev chromium
  python3 python3-dev python3-numpy python3-torch libtorch-dev python3-pytest
  python3-pip python3-setuptools python3-wheel python3-venv
  libpmix-dev openmpi-bin slurm-wlm munge"
if [ "${1:-}" = "--bench" ]; then
  need="$need openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev gnuplot-nox python3-mpi4py"
fi
missing=""
for p in $need; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq $missing >/dev/null
