#!/bin/sh
# scripts/cluster, the cluster in a box: three hosts with a rate limit;
# each has its own host name and address and resolves the others by name;
# gangrun across them (one node each, the store on h0 found by name, a
# shared secret) runs hello_gang, whose every rank checks its results and,
# with more ranks on the machine than CPUs, spins briefly in TCP waits; a
# second `up` of the same cluster is refused; `down` leaves no namespace,
# bridge or state, also when run twice; with --delay 2ms --rate 100mbit
# (the delay hub) the fastest 8-byte all_reduce across two hosts takes 2-9 ms,
# the world measures its link model near 2 ms and 12.5 MB/s, and down
# stops the hub and leaves no device. Needs root: otherwise it exits 77
# (a failure under GANG_TEST_REQUIRE_NETNS=1, which scripts/test.sh sets
# as root).
#
# usage: cluster_box.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
. "$(dirname "$0")/cluster_test.sh"
cluster_test gt 78

"$cluster" up 3 --net "$net" --rate 1gbit || skip "cannot make the cluster here"
"$cluster" up 3 --net "$net" >"$out/again" 2>&1 && bad "a second up succeeded"
grep -q "is up already" "$out/again" || bad "a second up: $(cat "$out/again")"
for i in 0 1 2; do
  got=$("$cluster" exec $i sh -c 'hostname; getent hosts h2 | cut -d" " -f1')
  want=$(printf 'h%s\n%s.12' $i "$net")
  [ "$got" = "$want" ] || bad "host $i says '$got', expected '$want'"
done
"$cluster" exec 5 true 2>"$out/no5" && bad "exec on a host that is not there"
grep -q "no host 5" "$out/no5" || bad "exec 5: $(cat "$out/no5")"

secret=$out/secret
echo "cluster-box-secret" >"$secret"  # the secret stays off every command line
pids=""
for i in 0 1 2; do
  "$cluster" exec $i env GANG_DEBUG=INFO GANG_DEBUG_SUBSYS=INIT timeout 60 \
    "$build/tools/gangrun/gangrun" --nnodes 3 --node-rank $i \
    --nproc-per-node 1 --master-addr h0 --master-port 29750 \
    --secret-file "$secret" \
    "$build/examples/hello_gang" >"$out/h$i" 2>&1 &
  pids="$pids $!"
done
for p in $pids; do wait "$p" || fail=1; done
for i in 0 1 2; do
  grep -q "rank $i/3 .*all checks pass" "$out/h$i" ||
    bad "host $i: $(tail -n 5 "$out/h$i")"
  grep -q "without authentication" "$out/h$i" &&
    bad "host $i ran without a secret: $(cat "$out/h$i")"
  # One rank per host, but three on this machine's CPUs: where that is
  # more than the CPUs, the TCP waits must not spin long (the peers on the
  # other "hosts" need the CPU).
  if [ "$(nproc)" -lt 3 ]; then
    grep -q "3 ranks of this world on this machine (1 on this host), $(nproc) CPUs here: TCP waits spin briefly" "$out/h$i" ||
      bad "host $i: no short spin with 3 ranks on $(nproc) CPUs: $(grep INIT "$out/h$i" | head -n 5)"
  fi
done

"$cluster" down
"$cluster" down || bad "a second down failed"
ip netns list | grep -q "^$name-" && bad "namespaces left: $(ip netns list)"

# With a one-way delay (the delay hub in place of the bridge): no 8-byte
# all_reduce of two ranks ends sooner than the delay (one exchange), and
# the fastest (a call and its rank's wait for the slower one) is about a
# round trip. The median is printed, not bounded: beside the suite's other
# tests (every build runs this one beside them) the hub, a process of its
# own, waits for a CPU too (a median of 7.8 ms was seen there, the
# fastest 4.3, and in another run a median of 8.0 and the fastest of 20
# calls 7.5): the fastest of 50 calls is bounded at 9 ms.
"$cluster" up 2 --net "$net" --delay 2ms --rate 100mbit >"$out/up" 2>&1 ||
  bad "up --delay: $(cat "$out/up")"
pids=""
for i in 0 1; do
  "$cluster" exec $i timeout 60 \
    env GANG_DEBUG=INFO GANG_DEBUG_SUBSYS=INIT,TCP \
    "$build/tools/gangrun/gangrun" --nnodes 2 --node-rank $i \
    --nproc-per-node 1 --master-addr h0 --master-port 29760 \
    --secret-file "$secret" "$build/tools/gang-bench/gang-bench" -b 8 -e 8 \
    -n 50 -w 2 --outofplace-only --json >"$out/d$i" 2>&1 &
  pids="$pids $!"
done
for p in $pids; do wait "$p" || bad "gang-bench across the delay: $(tail -n 3 "$out/d$p" 2>/dev/null)"; done
us=$(sed -n 's/.*"size":8,.*"out_of_place":{"time_us":\([0-9.]*\),.*/\1/p' "$out/d0")
min=$(sed -n 's/.*"size":8,.*"min_us":\([0-9.]*\),.*/\1/p' "$out/d0")
echo "8 B all_reduce across a 2 ms one-way delay: median ${us:-?} us, fastest ${min:-?} us"
awk -v m="${min:-0}" 'BEGIN { exit !(m >= 2000 && m <= 9000) }' ||
  bad "8 B all_reduce across 2 ms one way: median ${us:-?} us, fastest ${min:-?} us (want the fastest >= 2000 and <= 9000): $(tail -n 3 "$out/d0")"
# The world measured the link at creation (GANG_NET_PROBE): alpha at
# least the delay, the bandwidth about the rate (12.5 MB/s). Alpha is the
# world's mean round, waits for a CPU included, so its bound is the
# all_reduce's above: 2.5 ms alone, 4.5 ms seen beside the sanitizer
# stage's other tests. The bandwidth is the hub's forwarding too: 11-12
# MB/s alone or beside busy loops, 5.6 MB/s seen beside the TSan stage's
# other tests, so the floor is a third of the rate (an unmeasured model,
# the settings' 10 Gbit/s, is still far outside).
model=$(grep -o "link model: alpha [0-9.]* us, bandwidth [0-9.e+-]* GB/s (measured" "$out/d0")
echo "${model:-no link model measured}"
a=$(echo "$model" | sed -n 's/.*alpha \([0-9.]*\) us.*/\1/p')
bw=$(echo "$model" | sed -n 's/.*bandwidth \([0-9.e+-]*\) GB.*/\1/p')
awk -v a="${a:-0}" -v b="${bw:-0}" 'BEGIN { exit !(a >= 1900 && a <= 7000 && b >= 0.004 && b <= 0.0135) }' ||
  bad "measured link model '${model:-none}': want alpha 1900-7000 us and 0.004-0.0135 GB/s"
# Each connection knows its round trip (at least two delays), by which
# its exchanges may run pieces ahead (docs/fabric.md, "Paced exchanges").
for i in 0 1; do
  rtt=$(sed -n 's/.*another host, pieces of [0-9]*, round trip \([0-9]*\) us.*/\1/p' "$out/d$i" | head -n 1)
  awk -v r="${rtt:-0}" 'BEGIN { exit !(r >= 4000) }' ||
    bad "host $i: round trip '${rtt:-none}' us across 2 ms one way (want >= 4000): $(grep 'pieces of' "$out/d$i" | head -n 2)"
done
hubpid=$(cat "/run/gang-cluster/$name/hub.pid" 2>/dev/null)
"$cluster" down
# (a zombie until the machine's init reaps it: not running)
st=$(ps -o stat= -p "${hubpid:-0}" 2>/dev/null)
[ -n "$st" ] && [ "${st#Z}" = "$st" ] && bad "the delay hub is still running"
ip -o link show | grep -q "$name-" && bad "devices left: $(ip -o link show | grep "$name-")"
ip netns list | grep -q "^$name-" && bad "namespaces left: $(ip netns list)"
ip link show "$name-br" >/dev/null 2>&1 && bad "bridge $name-br left"
[ -e "/run/gang-cluster/$name" ] && bad "state left in /run/gang-cluster"
[ $fail = 0 ] && echo "PASS: 3 hosts up, gangrun across them, all down"
exit $fail
