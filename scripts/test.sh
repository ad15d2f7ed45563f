#!/bin/sh
# Builds gang three times and runs the whole test suite in one CTest run:
# from the Release build the demo uses (-O2 finds warnings -O0 does not)
# its packaging and demo tests and the Python package's tests (label
# "python"), the tests of threaded code (label "tsan") under
# ThreadSanitizer, and every C test under AddressSanitizer +
# UndefinedBehaviorSanitizer. Installs missing build dependencies first.
# The last line printed is ctest's summary.
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
# Many tests spend much of their time waiting (for a timeout, a stopped
# peer, a child to start) with a CPU idle: one more test than CPUs at a
# time fills it. The tests whose time bounds do not allow it run alone
# (RUN_SERIAL) whatever -j says.
ajobs=$((jobs + 1))

# A new build directory gets Ninja (install-deps.sh installs it): Make's
# generator spends a fifth of a build's CPU in its own cmake -E steps. One
# made earlier keeps the generator it has (CMake refuses to change it).
# The builds link with gold (binutils'): the ASan build took 55 s with
# ld.bfd and 48 with gold (its links 30 s and 19 s; lld 50 and 23).
configure() {
  dir=$1
  shift
  gen=""
  [ -f "$dir/CMakeCache.txt" ] || gen="-G Ninja"
  # shellcheck disable=SC2086
  cmake -S . -B "$dir" $gen -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=gold \
    -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=gold "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}
configure build/release -DCMAKE_BUILD_TYPE=Release -DGANG_BUILD_TESTS=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3 "-DGANG_TEST_LABELS=release;python"
configure build/asan -DCMAKE_BUILD_TYPE=Debug -DGANG_SANITIZE=address \
  -DGANG_BUILD_TESTS=ON -DGANG_PYTHON=OFF
configure build/tsan -DCMAKE_BUILD_TYPE=Debug -DGANG_SANITIZE=thread \
  -DGANG_BUILD_TESTS=ON -DGANG_PYTHON=OFF -DGANG_TEST_LABELS=tsan

# Tests that need what a machine may lack are ctest entries of their own
# that exit 77 when they cannot run, which ctest lists among the tests
# that did not run. Where they can run here they are required: a skip is
# then a failure.
#
# As root the tests that make network namespaces must run: the two-host
# test holds the only checks of the hierarchical path across hosts,
# test_ifname_netns the only one of GANG_SOCKET_IFNAME choosing a
# non-loopback interface, test_pg_host_own_address the congestion
# control of ranks on a host's own non-loopback address.
if [ "$(id -u)" = 0 ]; then
  export GANG_TEST_REQUIRE_NETNS=1
else
  echo "scripts/test.sh: not root: test_netns_hosts, test_ifname_netns" \
    "(and test_pg_host_own_address without a non-loopback interface)" \
    "will be skipped"
fi
# Congestion controls the fabric sets by name (test_pg_host_cc_*):
# required where this user may set them, which for root is every one the
# kernel has (bbr may be a module: loaded if it can be), for others those
# net.ipv4.tcp_allowed_congestion_control lists.
ccdir=/proc/sys/net/ipv4
if [ "$(id -u)" = 0 ]; then
  grep -qw bbr $ccdir/tcp_available_congestion_control 2>/dev/null ||
    modprobe tcp_bbr 2>/dev/null || true
  settable=$(cat $ccdir/tcp_available_congestion_control 2>/dev/null || true)
else
  settable=$(cat $ccdir/tcp_allowed_congestion_control 2>/dev/null || true)
fi
GANG_TEST_REQUIRE_CC=""
for cc in cubic bbr; do
  if printf ' %s ' "$settable" | grep -q " $cc "; then
    GANG_TEST_REQUIRE_CC="$GANG_TEST_REQUIRE_CC${GANG_TEST_REQUIRE_CC:+,}$cc"
  else
    echo "scripts/test.sh: congestion control $cc cannot be set here:" \
      "test_pg_host_cc_$cc will be skipped"
  fi
done
export GANG_TEST_REQUIRE_CC

# halt_on_error keeps a sanitizer finding from scrolling past as a pass.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Leaks in other projects' libraries, each with its reason (tests/lsan.supp).
export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

# The three builds' selections run as one CTest run (scripts/ctest_join.py
# names them release/..., tsan/..., asan/...): each build's last long
# tests then share the CPUs with the next build's instead of leaving one
# idle, and the RUN_SERIAL tests of all three still run with nothing
# beside them, at the end.
#   release  packaging, the demo, the Python package, the timed tests
#   tsan     the tests of threaded code under ThreadSanitizer
#   asan     every C test under AddressSanitizer + UndefinedBehaviorSanitizer
scripts/ctest_join.py build/suite \
  "release=build/release:-L:release|python" \
  tsan=build/tsan:-L:tsan \
  asan=build/asan:-LE:compare
cd build/suite && ctest --output-on-failure --no-tests=error -j "$ajobs"
