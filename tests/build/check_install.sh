#!/bin/sh
# Installs the build tree into a temporary prefix, then builds and runs a
# tiny consumer program against it twice: once with pkg-config, once with
# CMake's find_package(gang) and gang::gang.
set -eu
build="$1"
consumer="$2"
cc="$3"
flags="${4:-}"
tmp=$(mktemp -d /tmp/gang-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }

pcdir=$(dirname "$(find "$tmp/prefix" -name gang.pc | head -n 1)")
[ -n "$pcdir" ] || { echo "gang.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir"
libdir=$(pkg-config --variable=libdir gang)
# shellcheck disable=SC2046
"$cc" $flags -o "$tmp/consumer_pc" "$consumer/consumer.c" \
  $(pkg-config --cflags --libs gang) -Wl,-rpath,"$libdir"
"$tmp/consumer_pc"

cmake -S "$consumer" -B "$tmp/cbuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cbuild" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; exit 1; }
"$tmp/cbuild/consumer"
echo "install test passed (pkg-config and find_package)"
