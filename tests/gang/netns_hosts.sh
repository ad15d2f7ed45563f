#!/bin/sh
# Two hosts on one machine: network namespaces A and B joined by a veth
# pair, two ranks in each. A world of 4 ranks then has two same-host pairs
# (shared memory inside each namespace) and TCP between them, so the world
# gang runs the hierarchical collectives, the host-local sub-gangs shared
# memory, and the rest TCP. gang-bench checks every result (-c 1) of every
# collective, every dtype and reduce op where it has them. Needs root (it
# makes the namespaces itself, on addresses nobody else uses, and removes
# them on exit); otherwise it says why and exits 77 (ctest: skipped).
#
# usage: netns_hosts.sh BUILD_DIR
set -u
build=$1
bench=$build/tools/gang-bench/gang-bench

# GANG_TEST_REQUIRE_NETNS=1 (scripts/test.sh sets it when run as root)
# makes a skip a failure: this test holds the only check that the
# hierarchical path is chosen across hosts, and the only one of rank 0
# hosting the store.
. "$(dirname "$0")/netns_skip.sh"

tag=$(( $$ % 100000 ))
A=gang-a-$tag
B=gang-b-$tag
net=10.213.$(( $$ % 250 ))
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
}
trap cleanup EXIT INT TERM
ip netns add "$A" 2>/dev/null || skip "cannot make a network namespace here"
ip netns add "$B" || skip "cannot make a second network namespace"
ip link add "va$tag" type veth peer name "vb$tag" ||
  skip "cannot make a veth pair"
ip link set "va$tag" netns "$A"
ip link set "vb$tag" netns "$B"
ip -n "$A" addr add "$net.1/24" dev "va$tag"
ip -n "$B" addr add "$net.2/24" dev "vb$tag"
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
done
ip -n "$A" link set "va$tag" up
ip -n "$B" link set "vb$tag" up

out=$(mktemp -d)
fail=0
extra=""
port=$(( 20000 + $$ % 20000 ))
run() { # op, extra flags...
  op=$1
  shift
  port=$(( port + 1 ))
  pids=""
  for r in 0 1 2 3; do
    ns=$A
    [ $r -ge 2 ] && ns=$B
    # shellcheck disable=SC2086 # $extra: assignments, split on purpose
    ip netns exec "$ns" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$(( r % 2 )) LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR="$net.1" MASTER_PORT=$port GANG_TIMEOUT=60s \
      GANG_DEBUG=INFO GANG_DEBUG_SUBSYS=SHM,TCP $extra \
      timeout 120 "$bench" --op "$op" -b 8 -e 1M -f 64 -n 2 -w 1 -c 1 "$@" \
      >"$out/$op.$r" 2>&1 &
    pids="$pids $!"
  done
  for p in $pids; do
    if ! wait "$p"; then
      echo "FAIL: $op: a rank failed"
      fail=1
    fi
  done
  pids=""
}
run all_reduce -d all -o all
run broadcast -r all
run barrier
run all_gather
run reduce_scatter -d all -o all
run all_to_all

# The transports were the ones meant: an arena in each namespace, and the
# world gang hierarchical on every rank.
for r in 0 1 2 3; do
  grep -q "arena of 2 local ranks mapped" "$out/all_reduce.$r" || {
    echo "FAIL: rank $r mapped no shared-memory arena"
    fail=1
  }
  grep -q "over 2 hosts: hierarchical" "$out/all_reduce.$r" || {
    echo "FAIL: rank $r did not run hierarchical collectives"
    fail=1
  }
done
# Congestion control (GANG_TCP_CONGESTION, docs/fabric.md): by default
# only connections inside a host get reno, a connection to the other host
# keeps the namespace's own choice; a name applies to every connection.
# Rank 0 logs each of its connections (ranks 1 and 2 are enough).
expect_cc() { # log file, peer rank, where, congestion control
  grep -q "connection to rank $2[ :].*congestion control $4, $3," "$1" || {
    echo "FAIL: rank 0's connection to rank $2 ($3) should use $4:"
    grep "connection to rank $2[ :]" "$1"
    fail=1
  }
}
sys_cc=$(ip netns exec "$A" sysctl -n net.ipv4.tcp_congestion_control)
expect_cc "$out/all_reduce.0" 1 "this host" reno
expect_cc "$out/all_reduce.0" 2 "another host" "$sys_cc"
named=cubic
[ "$sys_cc" = cubic ] && named=reno
extra="GANG_TCP_CONGESTION=$named"
run barrier
mv "$out/barrier.0" "$out/named.0"
expect_cc "$out/named.0" 1 "this host" "$named"
expect_cc "$out/named.0" 2 "another host" "$named"

# Ranks that end early (tests/gang/exit_rank.c): one pair leaves at a
# random moment and in a random way (returning from main or exit() with
# its gangs open, destroy, ...) while the other runs 200 checked
# all_reduces, then needs the leavers in a barrier of the world, which
# must fail at once saying they left. Pairs inside a host (shared memory)
# and across the two (TCP), rank 0, the store's host, leaving too. A rank
# that returns with its gangs open holds them to its end, which
# LeakSanitizer would report: the program's choice, not a library leak.
rank_prog=$build/tests/gang/exit_rank
exits=0
exit_trials=${GANG_TEST_EXIT_TRIALS:-12}
if [ -x "$rank_prog" ]; then
  t=0
  while [ $t -lt "$exit_trials" ]; do
    t=$(( t + 1 ))
    port=$(( port + 1 ))
    layout=""
    [ $(( t % 2 )) = 0 ] && layout="--stride"
    pids=""
    for r in 0 1 2 3; do
      ns=$A
      [ $r -ge 2 ] && ns=$B
      ip netns exec "$ns" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$(( r % 2 )) \
        LOCAL_WORLD_SIZE=2 MASTER_ADDR="$net.1" MASTER_PORT=$port \
        GANG_TIMEOUT=30s ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
        timeout 120 "$rank_prog" $(( 5000 + t )) $layout \
        --need >"$out/exit.$t.$r" 2>&1 &
      pids="$pids $!"
    done
    ok=1
    for p in $pids; do
      if ! wait "$p"; then
        echo "FAIL: exit trial $t ($layout): a rank failed"
        ok=0
        fail=1
      fi
    done
    pids=""
    if [ $ok = 1 ]; then
      exits=$(( exits + 1 ))
      rm -f "$out"/exit.$t.*
    fi
  done
  echo "netns_hosts: $exits of $exit_trials worlds with ranks that end early passed"
else
  echo "FAIL: $rank_prog is missing"
  fail=1
fi

if [ $fail -ne 0 ]; then
  for f in "$out"/*; do
    echo "---- $f"
    cat "$f"
  done
fi
rm -rf "$out"
[ $fail -eq 0 ] && echo "netns_hosts: every collective correct over 2 hosts x 2 ranks"
exit $fail
