#!/bin/sh
# Fails if the shared library exports a symbol that is not gang_* / gangs_*
# (API.md names the topology container gangs_*) / GANG_*,
# or exports nothing at all (which would mean the export macro is broken).
set -eu
lib="$1"
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
