#!/bin/sh
# Installs, from Debian's archive, whatever gang needs that this machine
# lacks. Safe to run again: it installs nothing when all is there.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --bench    also the peers measured by bench/compare
set -eu
need="cmake gcc make pkg-config libssl-dev libcmocka-dev"
if [ "${1:-}" = "--bench" ]; then
  need="$need openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev python3-torch python3-numpy gnuplot-nox"
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
