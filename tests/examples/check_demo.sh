#!/bin/sh
# Runs the demo the README runs and checks every rank reported success.
set -eu
gangrun="$1"
hello="$2"
out=$("$gangrun" --nproc-per-node 4 "$hello" 2>&1) || {
  echo "$out"
  echo "gangrun exited with $?"
  exit 1
}
echo "$out"
pass=$(printf '%s\n' "$out" | grep -c 'all checks pass' || true)
[ "$pass" -eq 4 ] || { echo "expected 4 ranks passing, saw $pass"; exit 1; }
for r in 0 1 2 3; do
  printf '%s\n' "$out" | grep -q "^\[rank$r\]:rank $r/4 " ||
    { echo "no report from rank $r"; exit 1; }
done
fake=$("$hello" --fake 4 2>&1) || { echo "$fake"; exit 1; }
echo "$fake"
printf '%s\n' "$fake" | grep -q 'rank 0/4 (fake gang.*all checks pass' ||
  { echo "fake gang run failed"; exit 1; }
