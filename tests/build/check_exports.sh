#!/bin/sh
# Fails if the shared library exports a symbol that is not gang_* / gangs_*
# (API.md names the topology container gangs_*) / GANG_*,
# or exports nothing at all (which would mean the export macro is broken);
# and, given the static library too, if that defines a global symbol
# outside gang's namespace (gang_*, gangs_*, internals gang__*), which
# would collide with, or be silently replaced by, a user's own (the
# sanitizers' own instrumentation symbols aside).
set -eu
lib="$1"
static="${2:-}"
if [ -n "$static" ]; then
  loose=$(nm -g --defined-only "$static" |
    awk 'NF == 3 && $2 ~ /^[TDBRVWCG]$/ {print $3}' |
    grep -v -E '^(gangs?_|GANG_)' |
    grep -v -E '^(__odr_asan|__asan|__ubsan|__tsan|__sancov)' | sort -u || true)
  if [ -n "$loose" ]; then
    echo "global symbols outside gang's namespace in $static:"
    printf '%s\n' "$loose"
    exit 1
  fi
  echo "every global of $static is gang_*, gangs_* or gang__*"
fi
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWw]$/ {print $3}')
count=$(printf '%s\n' "$syms" | grep -c -E '^gangs?_' || true)
bad=$(printf '%s\n' "$syms" | grep -v -E '^(gangs?_|GANG_)' | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' || true)
if [ -n "$bad" ]; then
  echo "unexpected exported symbols in $lib:"
  printf '%s\n' "$bad"
  exit 1
fi
internal=$(printf '%s\n' "$syms" | grep '^gang__' || true)
if [ -n "$internal" ]; then
  echo "internal gang__ symbols exported from $lib:"
  printf '%s\n' "$internal"
  exit 1
fi
if [ "$count" -lt 10 ]; then
  echo "only $count gang_ symbols exported from $lib; expected the public API"
  exit 1
fi
echo "$count public symbols exported, nothing else"
# The public headers name nothing of the private namespace (gang__*,
# gangs__*): a user would see it, and could come to depend on it.
inc="$(dirname "$0")/../../include/gang"
private=$(grep -n -E '\bgangs?__[a-z]' "$inc"/*.h || true)
if [ -n "$private" ]; then
  echo "private names in the public headers:"
  printf '%s\n' "$private"
  exit 1
fi
echo "the public headers name nothing private"
