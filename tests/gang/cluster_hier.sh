#!/bin/sh
# Across hosts, the two-level path must not be slower than the flat TCP
# path it replaces. Two hosts of the cluster in a box (scripts/cluster),
# two ranks each, gangrun across them: gang-bench times all_reduce,
# broadcast, barrier, all_gather and reduce_scatter as the table chooses
# (hierarchical: shared memory in each host, TCP among the leaders or
# along the rails) and with the flat TCP algorithm forced (GANG_ALGO),
# interleaved, three runs each; the log names what ran (GANG_DEBUG=INFO,
# subsystem COLL) and gang-bench checks every result.
# Per collective and size, the median of the hierarchical runs must stay
# within 1.5x + 20 us of the flat one below 64 KiB, and within 3x from 64
# KiB: the box's four ranks share two CPUs, so single runs scatter, and
# from 64 KiB TCP between its namespaces is a memory copy like shared
# memory's, so the two paths do the same work and their medians have been
# seen 1.6-2.7x apart either way (reduce_scatter at 1 MiB, with flat TCP
# on both sides). A size over its bound is measured three times more and
# judged on the median of six: the box flips between speed modes for whole
# runs (broadcast of 128 KiB: 41 or 170 us hierarchical, 48-150 us flat).
# The regression this guards
# against (a rank spinning on the CPU its host's leader or the other host
# needs) cost 6-10x below 64 KiB.
#
# Needs root (network namespaces): otherwise it exits 77 (a failure under
# GANG_TEST_REQUIRE_NETNS=1, which scripts/test.sh sets as root).
#
# usage: cluster_hier.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
. "$(dirname "$0")/cluster_test.sh"
cluster_test gh 79
"$cluster" up 2 --net "$net" >/dev/null || skip "cannot make the cluster here"
echo "hier-test-secret" >"$out/secret"

port=$((21000 + $$ % 20000))
# run TAG OP SIZES FORCE: one gang-bench over 2 hosts x 2 ranks; rank 0's
# output in $out/TAG.h0 and "size time_us" lines appended to $out/TAG.t
run() {
  tag=$1 op=$2 sizes=$3 force=$4
  port=$((port + 2))
  pids=""
  for i in 0 1; do
    "$cluster" exec $i env GANG_ALGO="$force" GANG_DEBUG=INFO \
      GANG_DEBUG_SUBSYS=COLL timeout 120 \
      "$build/tools/gangrun/gangrun" --nnodes 2 --node-rank $i \
      --nproc-per-node 2 --master-addr h0 --master-port $port \
      --secret-file "$out/secret" \
      "$build/tools/gang-bench/gang-bench" --op "$op" $sizes -n 100 -w 10 \
      --outofplace-only --json >"$out/$tag.h$i" 2>&1 &
    pids="$pids $!"
  done
  ok=1
  for p in $pids; do wait "$p" || ok=0; done
  [ $ok = 1 ] || bad "$tag: gang-bench failed: $(tail -n 5 "$out/$tag.h0" "$out/$tag.h1")"
  sed -n 's/.*"size":\([0-9]*\),.*"out_of_place":{"time_us":\([0-9.e+-]*\),.*/\1 \2/p' \
    "$out/$tag.h0" >>"$out/$tag.t"
}

# median of the times per size: "size median" lines
medians() {
  sort -k1,1n -k2,2g "$1" | awk '
    function flush() { if (n) print size, (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2) }
    !seen || $1 != size { flush(); size = $1; n = 0; seen = 1 }
    { v[++n] = $2 }
    END { flush() }'
}

# measure OP SIZES FLAT REPS...: the runs, each path in turn, appended to
# $out/OP.hier and $out/OP.flat
measure() {
  op=$1 sizes=$2 flat=$3
  shift 3
  for rep in "$@"; do
    run "$op.hier.$rep" "$op" "$sizes" ""
    run "$op.flat.$rep" "$op" "$sizes" "$op=$flat"
    cat "$out/$op.hier.$rep.t" >>"$out/$op.hier"
    cat "$out/$op.flat.$rep.t" >>"$out/$op.flat"
    grep -q "$op on a gang of 4: hierarchical (several hosts)" \
      "$out/$op.hier.$rep.h0" ||
      bad "$op: the table's choice did not run hierarchical: $(grep COLL "$out/$op.hier.$rep.h0")"
    grep -q "$op on a gang of 4: $flat (TCP)" "$out/$op.flat.$rep.h0" ||
      bad "$op with $flat forced: $(grep COLL "$out/$op.flat.$rep.h0")"
    grep -q "$op on a gang of 4: hierarchical" "$out/$op.flat.$rep.h0" &&
      bad "$op with $flat forced ran hierarchical"
  done
}

# judge OP: prints each size's verdict into $out/OP.verdicts (every line
# "ok" or "SLOWER")
judge() {
  op=$1
  medians "$out/$op.hier" >"$out/$op.hm"
  medians "$out/$op.flat" >"$out/$op.fm"
  join "$out/$op.hm" "$out/$op.fm" >"$out/$op.both"
  : >"$out/$op.verdicts"
  while read -r size h f; do
    verdict=$(awk -v s="$size" -v h="$h" -v f="$f" 'BEGIN { print (h <= (s < 65536 ? 1.5 * f + 20 : 3 * f)) ? "ok" : "SLOWER" }')
    echo "$op $size B: hierarchical $h us, flat TCP $f us: $verdict" |
      tee -a "$out/$op.verdicts"
  done <"$out/$op.both"
}

for spec in "all_reduce|-b 8 -e 1M -f 128|recursive_doubling" \
  "broadcast|-b 8 -e 1M -f 128|binomial" \
  "barrier||dissemination" \
  "all_gather|-b 64 -e 1M -f 128|ring" \
  "reduce_scatter|-b 64 -e 1M -f 128|ring"; do
  op=${spec%%|*}
  rest=${spec#*|}
  sizes=${rest%%|*}
  flat=${rest#*|}
  measure "$op" "$sizes" "$flat" 1 2 3
  [ -s "$out/$op.hier" ] && [ -s "$out/$op.flat" ] || {
    bad "$op: no timings"
    continue
  }
  judge "$op"
  [ -s "$out/$op.both" ] || bad "$op: no size timed both ways"
  # The box flips between modes for whole runs (broadcast of 128 KiB took
  # 41 or 170 us hierarchical and 48-150 us flat, three runs in a row
  # alike): a size over its bound is measured three times more, and the
  # median of the six decides. A regression stays over it.
  if grep -q SLOWER "$out/$op.verdicts"; then
    echo "$op: over a bound in three runs; three more"
    measure "$op" "$sizes" "$flat" 4 5 6
    judge "$op"
  fi
  while read -r line; do
    case $line in *SLOWER) bad "$line" ;; esac
  done <"$out/$op.verdicts"
done

[ $fail = 0 ] && echo "PASS: across 2 hosts the hierarchical path is within its bounds of flat TCP"
exit $fail
