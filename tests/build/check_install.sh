#!/bin/sh
# Installs the build tree into a temporary prefix, then checks that what
# was installed runs from there, with no help from the build tree or the
# environment: every installed tool starts; the installed gangrun runs the
# installed gang-bench as 2 ranks; and a tiny consumer program, built
# against the prefix, runs twice: once built with the README's pkg-config
# line (which gives the rpath), once with CMake's find_package(gang) and
# gang::gang.
set -eu
build="$1"
consumer="$2"
cc="$3"
flags="${4:-}"
tmp=$(mktemp -d /tmp/gang-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
# Only what the installed files say may find libgang.so.
unset LD_LIBRARY_PATH

bin="$tmp/prefix/bin"
for tool in gang-info gang-store gangrun gang-bench gang-lighthouse gang-flight; do
  [ -x "$bin/$tool" ] || { echo "$tool was not installed"; exit 1; }
  if readelf -d "$bin/$tool" | grep -F "$build" >/dev/null; then
    echo "installed $tool still looks for libraries in the build tree:"
    readelf -d "$bin/$tool" | grep -E 'RPATH|RUNPATH'
    exit 1
  fi
  "$bin/$tool" --help >"$tmp/help.log" 2>&1 ||
    { cat "$tmp/help.log"; echo "installed $tool --help failed"; exit 1; }
done
"$bin/gangrun" --standalone --nproc-per-node 2 "$bin/gang-bench" \
  -b 8 -e 1k -f 8 -n 2 -w 1 >"$tmp/bench.log" 2>&1 ||
  { cat "$tmp/bench.log"; echo "installed gangrun + gang-bench failed"; exit 1; }
grep -q 'busbw' "$tmp/bench.log" ||
  { cat "$tmp/bench.log"; echo "installed gang-bench printed no table"; exit 1; }

pcdir=$(dirname "$(find "$tmp/prefix" -name gang.pc | head -n 1)")
[ -n "$pcdir" ] || { echo "gang.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir"
# The README's line for a prefix outside the loader's search path.
# shellcheck disable=SC2046
"$cc" $flags -o "$tmp/consumer_pc" "$consumer/consumer.c" \
  $(pkg-config --cflags --libs gang) \
  -Wl,-rpath,"$(pkg-config --variable=libdir gang)"
"$tmp/consumer_pc"

cmake -S "$consumer" -B "$tmp/cbuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cbuild" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; exit 1; }
"$tmp/cbuild/consumer"
echo "install test passed (installed tools, pkg-config and find_package)"
