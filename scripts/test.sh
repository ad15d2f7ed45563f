#!/bin/sh
# Builds gang and runs the whole test suite: the Release build the demo
# uses (-O2 finds warnings -O0 does not) with its packaging and demo tests,
# the tests of threaded code (label "tsan") under ThreadSanitizer, then
# every test under AddressSanitizer + UndefinedBehaviorSanitizer. Installs
# missing build dependencies first. The last line printed is ctest's
# summary.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DGANG_BUILD_TESTS=ON >/dev/null
cmake --build build/release -j "$jobs"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DGANG_SANITIZE=address -DGANG_BUILD_TESTS=ON >/dev/null
cmake --build build/asan -j "$jobs"
cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DGANG_SANITIZE=thread -DGANG_BUILD_TESTS=ON >/dev/null
cmake --build build/tsan -j "$jobs"

# halt_on_error keeps a sanitizer finding from scrolling past as a pass.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

echo "== Release: packaging and the demo =="
(cd build/release && ctest --output-on-failure --no-tests=error -L release -j "$jobs")
echo "== ThreadSanitizer: threaded code =="
(cd build/tsan && ctest --output-on-failure --no-tests=error -L tsan -j "$jobs")
echo "== AddressSanitizer + UndefinedBehaviorSanitizer: whole suite =="
cd build/asan && ctest --output-on-failure --no-tests=error -LE compare -j "$jobs"
