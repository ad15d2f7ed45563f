#!/bin/sh
# Runs the demo the README runs (train_tp_dp as 4 ranks, tp 2 x dp 2) and
# checks it trained and matched the single-process reference; then the
# second example, hello_gang, under gangrun and on a fake gang. The runs
# are the README's with --standalone: a store on a free port, not gangrun's
# default 29500, which another job on this host may hold.
set -eu
gangrun="$1"
hello="$2"
train="$3"

out=$("$gangrun" --standalone --nproc-per-node 4 "$train" 2>&1) || {
  rc=$?
  echo "$out"
  echo "gangrun train_tp_dp exited with $rc"
  exit 1
}
echo "$out"
printf '%s\n' "$out" | grep -q '^\[rank0\]:train_tp_dp: 4 ranks = dp 2 x tp 2;' ||
  { echo "train_tp_dp did not run as dp 2 x tp 2"; exit 1; }
steps=$(printf '%s\n' "$out" | grep -c '^\[rank0\]:step  *[0-9]*  loss [0-9.]*$' || true)
[ "$steps" -eq 40 ] || { echo "expected 40 loss lines, saw $steps"; exit 1; }
printf '%s\n' "$out" |
  grep -q '^\[rank0\]:parameters vs single-process reference: max relative difference .* match$' ||
  { echo "no matching comparison with the single-process reference"; exit 1; }
printf '%s\n' "$out" | grep -q '^\[rank0\]:train_tp_dp: PASS$' ||
  { echo "no PASS line"; exit 1; }

out=$("$gangrun" --standalone --nproc-per-node 4 "$hello" 2>&1) || {
  rc=$?
  echo "$out"
  echo "gangrun hello_gang exited with $rc"
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
