#!/bin/sh
# The main job: installs what is missing, builds gang (Release) and runs the
# multi-rank demo under gangrun with 4 ranks on this machine.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DGANG_BUILD_TESTS=OFF >/dev/null
cmake --build build/demo -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec build/demo/tools/gangrun/gangrun --nproc-per-node 4 \
  build/demo/examples/hello_gang "$@"
