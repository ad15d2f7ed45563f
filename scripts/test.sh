#!/bin/sh
# Builds gang and runs the whole test suite: the Release build the demo
# uses (-O2 finds warnings -O0 does not) with its packaging and demo tests
# and the Python package's tests (label "python"), the tests of threaded
# code (label "tsan") under ThreadSanitizer, then every C test under
# AddressSanitizer + UndefinedBehaviorSanitizer. Installs missing build
# dependencies first. The last line printed is ctest's summary.
#
# The Python tests run against the Release build only: a CPython extension
# built with ASan would need libasan preloaded into the interpreter (and
# torch's libraries with it), so the sanitizer builds leave the package
# out (-DGANG_PYTHON=OFF); the C library under it is the one the
# sanitizer stages test.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

py="-DPython3_EXECUTABLE=/usr/bin/python3"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DGANG_BUILD_TESTS=ON "$py" >/dev/null
cmake --build build/release -j "$jobs"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DGANG_SANITIZE=address -DGANG_BUILD_TESTS=ON -DGANG_PYTHON=OFF >/dev/null
cmake --build build/asan -j "$jobs"
cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DGANG_SANITIZE=thread -DGANG_BUILD_TESTS=ON -DGANG_PYTHON=OFF >/dev/null
cmake --build build/tsan -j "$jobs"

# As root the two-host test (network namespaces) must run, not skip: it
# holds the only checks of the hierarchical path across hosts. Elsewhere
# it is skipped, and ctest lists it among the tests that did not run.
if [ "$(id -u)" = 0 ]; then
  export GANG_TEST_REQUIRE_NETNS=1
else
  echo "scripts/test.sh: not root: test_netns_hosts will be skipped"
fi

# halt_on_error keeps a sanitizer finding from scrolling past as a pass.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

echo "== Release: packaging, the demo and the Python package =="
(cd build/release && ctest --output-on-failure --no-tests=error -L 'release|python' -j "$jobs")
echo "== ThreadSanitizer: threaded code =="
(cd build/tsan && ctest --output-on-failure --no-tests=error -L tsan -j "$jobs")
echo "== AddressSanitizer + UndefinedBehaviorSanitizer: whole suite =="
cd build/asan && ctest --output-on-failure --no-tests=error -LE compare -j "$jobs"
