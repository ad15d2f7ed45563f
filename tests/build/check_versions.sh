#!/bin/sh
# Every place that reports gang's version reports the one of
# include/gang/version.h: gang-info, gang.pc (pkg-config), the CMake
# package's version file, the Python package (the version of the library
# it loads and of the header its extension was built with), setup.py (what
# pip installs) and the first heading of CHANGELOG.md.
set -eu
src="$1"
build="$2"
python="${3:-}"
h="$src/include/gang/version.h"
v=$(for p in MAJOR MINOR PATCH; do
  sed -n "s/^#define GANG_VERSION_$p \([0-9]*\)$/\1/p" "$h"; done | paste -sd.)
echo "version.h: $v"
fail=0
check() { # what, value
  if [ "$2" = "$v" ]; then echo "$1: $2"; else
    echo "$1 says '$2', version.h says '$v'"; fail=1; fi
}
check gang-info "$("$build/tools/gang-info/gang-info" | sed -n '1s/^gang //p')"
check gang.pc "$(PKG_CONFIG_PATH="$build" pkg-config --modversion gang)"
check gangConfigVersion.cmake \
  "$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/gangConfigVersion.cmake")"
check CHANGELOG.md "$(sed -n 's/^## \([0-9][0-9.]*\).*/\1/p' "$src/CHANGELOG.md" | head -n 1)"
check setup.py "$(cd "$src" && /usr/bin/python3 setup.py --version 2>/dev/null | tail -n 1)"
if [ -n "$python" ]; then
  check "python gang.__version__" \
    "$(PYTHONPATH="$build/python" "$python" -c 'import gang; print(gang.__version__)')"
  check "python extension built with" \
    "$(PYTHONPATH="$build/python" "$python" -c 'import gang._gang as g; print(g._built_with)')"
fi
exit $fail
