#!/bin/sh
# Open MPI's mpirun across two hosts of the cluster in a box
# (scripts/cluster), two ranks each, starting its daemons on the hosts
# through an rsh agent that enters them, as users run it across machines:
#   - with MASTER_ADDR / MASTER_PORT: hello_gang checks its results;
#   - with neither: gang asks the launcher's PMIx server where rank 0 is
#     (rank 0 publishes its store's address and a fresh secret), and the
#     store connections are authenticated -- no variable, no warning;
#   - with neither and no PMIx (its variables removed): every rank fails
#     at once, saying what to set;
#   - gang-bench over the PMIx rendezvous checks all_gather and all_reduce
#     results across the hosts.
# Needs root (network namespaces) and Open MPI: otherwise it exits 77 (a
# failure under GANG_TEST_REQUIRE_NETNS=1, which scripts/test.sh sets as
# root).
#
# usage: cluster_mpirun.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
. "$(dirname "$0")/cluster_test.sh"
cluster_test gm 80
mpirun --version 2>/dev/null | grep -q "Open MPI" ||
  skip "no Open MPI mpirun (scripts/install-deps.sh installs openmpi-bin)"
"$cluster" up 2 --net "$net" >/dev/null || skip "cannot make the cluster here"

# mpirun's rsh agent: "agent [ssh options] hN command..." runs the command
# (orted) on host N of the box.
cat >"$out/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
h=\$1
shift
GANG_CLUSTER=$name exec "$cluster" exec "\${h#h}" sh -c "\$*"
EOF
chmod +x "$out/agent"
printf 'h0 slots=2\nh1 slots=2\n' >"$out/hosts"

# mpi ARGS...: mpirun over both hosts, 4 ranks
mpi() {
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
    --hostfile "$out/hosts" --mca plm_rsh_agent "$out/agent" \
    --mca oob_tcp_if_include "$net.0/24" --mca mpi_yield_when_idle 1 \
    -x GANG_DEBUG=INFO -x GANG_DEBUG_SUBSYS=LAUNCH,STORE "$@"
}
hello=$build/examples/hello_gang

# On the hosts they were placed on: ranks 0, 1 on h0 and 2, 3 on h1.
placed() {
  for r in 0 1 2 3; do
    grep -q "rank $r/4 (openmpi, local rank $((r % 2))/2.*all checks pass" "$1" ||
      bad "$2: rank $r: $(grep "rank $r/4" "$1")"
  done
}

mpi -x MASTER_ADDR=h0 -x MASTER_PORT=29870 "$hello" >"$out/master" 2>&1 ||
  bad "with MASTER_ADDR: mpirun failed: $(tail -n 5 "$out/master")"
placed "$out/master" "with MASTER_ADDR"

mpi "$hello" >"$out/pmix" 2>&1 ||
  bad "through PMIx: mpirun failed: $(tail -n 5 "$out/pmix")"
placed "$out/pmix" "through PMIx"
n=$(grep -c "PMIx: rank [0-3] of job .* met rank 0 through the launcher" "$out/pmix")
[ "$n" = 4 ] || bad "through PMIx: $n of 4 ranks met rank 0 through the launcher"
grep -q "^h0:.*store server listening on $net.10:[0-9]* (authenticated" "$out/pmix" ||
  bad "through PMIx: rank 0's store is not on h0's address with a secret: $(grep 'store server' "$out/pmix")"
n=$(grep -c "store client connected .* (authenticated)" "$out/pmix")
[ "$n" = 4 ] || bad "through PMIx: $n of 4 store connections authenticated"
grep -q "without a secret" "$out/pmix" && bad "through PMIx: a store without a secret"
grep -q "^h1:.*met rank 0" "$out/pmix" || bad "through PMIx: no rank ran on h1"

mpi env -u PMIX_NAMESPACE -u PMIX_RANK "$hello" >"$out/none" 2>&1 &&
  bad "without MASTER_ADDR or PMIx: mpirun succeeded"
# mpirun ends the job at the first rank that fails: every rank that got
# as far as printing said what to set, none went on.
grep -q "failed: invalid argument (gang_create_default: world of 4 ranks (from openmpi) but no rendezvous address: set MASTER_ADDR (the host of rank 0" "$out/none" ||
  bad "without MASTER_ADDR or PMIx: $(head -n 5 "$out/none")"
grep -q "all checks pass" "$out/none" && bad "without MASTER_ADDR or PMIx: a rank went on"

for op in all_gather all_reduce; do
  mpi "$build/tools/gang-bench/gang-bench" --op $op -b 8 -e 1M -f 64 -n 5 \
    -w 1 -c 1 >"$out/$op" 2>&1 ||
    bad "gang-bench $op through PMIx: $(tail -n 5 "$out/$op")"
  grep -q "Out of bounds values : 0 OK" "$out/$op" ||
    bad "gang-bench $op through PMIx found wrong values: $(tail -n 5 "$out/$op")"
done

[ $fail = 0 ] && echo "PASS: mpirun across 2 hosts, with MASTER_ADDR and through PMIx"
exit $fail
