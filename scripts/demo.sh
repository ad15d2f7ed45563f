#!/bin/sh
# The main job: installs what is missing, builds gang (Release) and trains a
# small MLP with data x tensor parallelism (tp 2 x dp 2) as 4 ranks under
# gangrun on this machine; the program checks its parameters against the
# same model trained in one process. (examples/hello_gang is the other
# example: gangrun --nproc-per-node 4 build/demo/examples/hello_gang.)
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Debian's python3, whose packages (numpy, torch) the Python package uses.
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DGANG_BUILD_TESTS=OFF \
  -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build build/demo -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec build/demo/tools/gangrun/gangrun --nproc-per-node 4 \
  build/demo/examples/train_tp_dp "$@"
