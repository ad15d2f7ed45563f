#!/bin/sh
# Configures the source tree as a machine without cmocka would: with the
# default GANG_BUILD_TESTS=AUTO the configure must succeed and say the
# tests are off and why; with GANG_BUILD_TESTS=ON it must fail naming
# cmocka. (cmake/Findcmocka.cmake honours CMAKE_DISABLE_FIND_PACKAGE_cmocka.)
# The Python package is left out (-DGANG_PYTHON=OFF): looking for torch
# took two thirds of each configure, and the tests' switch does not
# depend on it.
set -eu
src="$1"
cc="$2"
tmp=$(mktemp -d /tmp/gang-configure-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cmake -S "$src" -B "$tmp/auto" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_DISABLE_FIND_PACKAGE_cmocka=ON -DGANG_PYTHON=OFF \
  >"$tmp/auto.log" 2>&1 ||
  { cat "$tmp/auto.log"; echo "configure without cmocka failed"; exit 1; }
grep -q 'gang: tests: off (cmocka not found' "$tmp/auto.log" ||
  { cat "$tmp/auto.log"; echo "configure did not say the tests are off"; exit 1; }
[ ! -e "$tmp/auto/tests" ] ||
  { echo "tests were configured without cmocka"; exit 1; }

if cmake -S "$src" -B "$tmp/on" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_DISABLE_FIND_PACKAGE_cmocka=ON -DGANG_BUILD_TESTS=ON -DGANG_PYTHON=OFF \
  >"$tmp/on.log" 2>&1; then
  cat "$tmp/on.log"
  echo "GANG_BUILD_TESTS=ON configured without cmocka"
  exit 1
fi
grep -q 'cmocka was not found' "$tmp/on.log" ||
  { cat "$tmp/on.log"; echo "the failure did not name cmocka"; exit 1; }
echo "configure test passed (AUTO without cmocka: tests off; ON: refused)"
