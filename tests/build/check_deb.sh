#!/bin/sh
# Builds the Debian package from the build tree (cpack -G DEB) and checks
# it as a user would meet it, with nothing from the build tree:
# - its control fields: name, version (gang's), architecture, dependencies;
# - unpacked into a throw-away directory: the packaged gangrun runs the
#   packaged hello_gang as 2 ranks, and the packaged Python package
#   imports, loads the packaged libgang and finds the packaged gangrun
#   (python3 -m gang.info);
# - as root, installed with dpkg into an empty root (its own dpkg
#   database) and removed again, leaving no file behind.
# Exits 77 (skipped) where dpkg-deb is missing.
set -eu
build="$1"
version="$2"
command -v dpkg-deb >/dev/null 2>&1 || { echo "no dpkg-deb: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/gang-deb-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$build" && cpack -G DEB -B "$tmp/out") >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; echo "cpack -G DEB failed"; exit 1; }
deb=$(find "$tmp/out" -maxdepth 1 -name 'gang_*.deb' | head -n 1)
[ -n "$deb" ] || { cat "$tmp/cpack.log"; echo "no gang_*.deb made"; exit 1; }
echo "package: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"

field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = gang ] || { echo "Package is '$(field Package)'"; exit 1; }
[ "$(field Version)" = "$version" ] ||
  { echo "Version is '$(field Version)', gang is $version"; exit 1; }
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] ||
  { echo "Architecture is '$(field Architecture)'"; exit 1; }
field Depends | grep -q 'libssl3' ||
  { echo "Depends lacks libssl3: '$(field Depends)'"; exit 1; }

# Unpacked: only what the package's files say may find libgang.
unset LD_LIBRARY_PATH PYTHONPATH GANGRUN GANG_BABY_PATH
root="$tmp/unpacked"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/gangrun usr/bin/gang-info usr/include/gang/gang.h \
  usr/libexec/gang/gang-baby usr/libexec/gang/examples/hello_gang; do
  [ -e "$root/$f" ] || { echo "the package has no /$f"; exit 1; }
done
"$root/usr/bin/gang-info" | head -n 1 | grep -qx "gang $version" ||
  { "$root/usr/bin/gang-info" | head -n 3; echo "packaged gang-info: wrong version"; exit 1; }
"$root/usr/bin/gangrun" --standalone --nproc-per-node 2 \
  "$root/usr/libexec/gang/examples/hello_gang" >"$tmp/hello.log" 2>&1 ||
  { cat "$tmp/hello.log"; echo "packaged gangrun + hello_gang failed"; exit 1; }
[ "$(grep -c 'all checks pass' "$tmp/hello.log")" -eq 2 ] ||
  { cat "$tmp/hello.log"; echo "hello_gang: not every rank passed its checks"; exit 1; }

pydir=$(find "$root/usr/lib" -maxdepth 3 -type d -name gang -path '*-packages/gang' | head -n 1)
if [ -n "$pydir" ]; then
  py=/usr/bin/python3
  PYTHONPATH=$(dirname "$pydir") "$py" -m gang.info --json >"$tmp/info.json" ||
    { cat "$tmp/info.json"; echo "packaged python3 -m gang.info failed"; exit 1; }
  "$py" "$(dirname "$0")/check_info.py" "$tmp/info.json" "$root" "$version" \
    "from the package"
fi

if [ "$(id -u)" = 0 ]; then
  r="$tmp/root"
  mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" \
    "$r/var/lib/dpkg/triggers"
  : >"$r/var/lib/dpkg/status"
  dpkg --root="$r" --force-depends --log=/dev/null -i "$deb" >"$tmp/dpkg.log" 2>&1 ||
    { cat "$tmp/dpkg.log"; echo "dpkg -i failed"; exit 1; }
  [ -x "$r/usr/bin/gangrun" ] || { echo "dpkg -i installed no gangrun"; exit 1; }
  dpkg --root="$r" --log=/dev/null -s gang | grep -q '^Status: install ok installed' ||
    { echo "dpkg does not list gang as installed"; exit 1; }
  dpkg --root="$r" --force-depends --log=/dev/null --purge gang >"$tmp/dpkg.log" 2>&1 ||
    { cat "$tmp/dpkg.log"; echo "dpkg --purge failed"; exit 1; }
  left=$(find "$r" -path "$r/var/lib/dpkg" -prune -o \( -type f -o -type l \) -print)
  [ -z "$left" ] || { echo "left behind after purge:"; echo "$left"; exit 1; }
  echo "dpkg: installed into an empty root and purged cleanly"
fi
echo "deb test passed"
