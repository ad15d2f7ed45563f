#!/bin/sh
# Real Slurm (Debian's slurm-wlm, munge) across four hosts of the cluster
# in a box (scripts/cluster up 4 --slurm: slurmctld on h0, a slurmd on
# every host), with srun and sbatch run on a host as from a login node:
#   - srun -N 4 --ntasks-per-node 2 of hello_gang: 8 ranks from Slurm's
#     variables (master: the first node, port from the job id);
#   - srun --mpi=pmix: the same through the PMIx rendezvous, its store
#     authenticated with the secret PMIx carried;
#   - sbatch of a script whose steps run srun of hello_gang and
#     gangrun inside the allocation (one per node, --secret-file);
#   - a node that drops off the network mid-job (h2's link down, its
#     processes running on): every survivor (h0, h1) fails within
#     GANG_TIMEOUT (4 s) + 6 s, naming h2's ranks as the ones that did not
#     answer;
#   - a node that dies mid-job (every process on h3 killed): every
#     survivor fails within 5 s with PEER_LOST naming a rank of h3 (one
#     that closed its connection, or whose connection was reset).
# Needs root, network namespaces and Slurm: otherwise it exits 77 (a
# failure under GANG_TEST_REQUIRE_NETNS=1, which scripts/test.sh sets as
# root; scripts/install-deps.sh installs slurm-wlm and munge).
#
# usage: cluster_slurm.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
. "$(dirname "$0")/cluster_test.sh"
cluster_test gs 81 "$build" # beside the build, not in /tmp: jobs write there
for t in slurmctld slurmd srun sbatch munged; do
  command -v $t >/dev/null 2>&1 || skip "no $t (Debian: slurm-wlm, munge)"
done
"$cluster" up 4 --net "$net" --slurm >"$out/up" 2>&1 ||
  skip "cannot make the Slurm cluster here: $(cat "$out/up")"
hello=$build/examples/hello_gang
on() { # I CMD...: on host I, as from a login node
  i=$1
  shift
  "$cluster" exec "$i" timeout 120 "$@"
}
# all N: hello_gang's N ranks all passed in FILE, as ranks of SOURCE
all() { # FILE N SOURCE WHAT
  r=0
  while [ $r -lt "$2" ]; do
    grep -q "^\(\[rank$r\]:\)\{0,1\}rank $r/$2 ($3,.*all checks pass" "$1" ||
      bad "$4: rank $r: $(grep "rank $r/" "$1" || tail -n 3 "$1")"
    r=$((r + 1))
  done
}

on 1 srun -N 4 --ntasks-per-node 2 "$hello" >"$out/srun" 2>&1 ||
  bad "srun -N 4: $(tail -n 5 "$out/srun")"
all "$out/srun" 8 slurm "srun -N 4 --ntasks-per-node 2"

on 2 srun --mpi=pmix -N 4 --ntasks-per-node 2 env GANG_DEBUG=INFO \
  GANG_DEBUG_SUBSYS=LAUNCH,STORE "$hello" >"$out/pmix" 2>&1 ||
  bad "srun --mpi=pmix: $(tail -n 5 "$out/pmix")"
all "$out/pmix" 8 slurm "srun --mpi=pmix"
n=$(grep -c "met rank 0 through the launcher" "$out/pmix")
[ "$n" = 8 ] || bad "srun --mpi=pmix: $n of 8 ranks met through PMIx"
n=$(grep -c "store client connected .* (authenticated)" "$out/pmix")
[ "$n" = 8 ] || bad "srun --mpi=pmix: $n of 8 store connections authenticated"
for h in h0 h1 h2 h3; do
  grep -q "^$h:.*met rank 0 through the launcher" "$out/pmix" ||
    bad "srun --mpi=pmix: no rank ran on $h"
done

echo "slurm-box-secret" >"$out/secret"
cat >"$out/job" <<EOF
#!/bin/sh
#SBATCH -N 2
#SBATCH --ntasks-per-node 2
#SBATCH -o $out/job.out
srun "$hello" > "$out/job.srun" 2>&1 || echo "srun step failed"
first=\$(scontrol show hostnames "\$SLURM_JOB_NODELIST" | head -n 1)
srun --ntasks \$SLURM_NNODES --ntasks-per-node 1 sh -c 'exec "$build/tools/gangrun/gangrun" --nnodes \$SLURM_NNODES --node-rank \$SLURM_NODEID --master-addr '\$first' --master-port 29830 --nproc-per-node 2 --secret-file "$out/secret" "$hello"' > "$out/job.gangrun" 2>&1 || echo "gangrun step failed"
EOF
# (sbatch --wait looks every 10 s: squeue is asked every 0.2 s instead.)
job=$(on 0 sbatch --parsable "$out/job" 2>"$out/sbatch") ||
  bad "sbatch: $(cat "$out/sbatch")"
t=0
while [ -n "$(on 0 squeue -h -j "$job" -o %i 2>/dev/null)" ]; do
  t=$((t + 1))
  [ $t -lt 300 ] || { bad "sbatch: job $job still there after 60 s"; break; }
  sleep 0.2
done
grep -q "step failed" "$out/job.out" && bad "sbatch: $(cat "$out/job.out")"
all "$out/job.srun" 4 slurm "sbatch, srun step"
all "$out/job.gangrun" 4 torchrun "sbatch, gangrun step"
grep -q "without authentication" "$out/job.gangrun" &&
  bad "sbatch, gangrun step ran without the secret"

# fault WHAT VICTIM LIMIT_S WANT ENV...: srun of 6 ranks of gang-bench on
# h0, h1 and host VICTIM, then `cluster WHAT VICTIM`; every survivor must
# print its error, matching WANT, within LIMIT_S. Lines are stamped as
# they come. Each fault takes a host of its own.
fault() {
  what=$1 victim=$2 limit=$3 want=$4
  shift 4
  nodes=3
  f=$out/fault.$victim
  on 0 srun -w "h0,h1,h$victim" -N 3 --ntasks-per-node 2 \
    --kill-on-bad-exit=0 env "$@" \
    "$build/tools/gang-bench/gang-bench" -b 64K -e 64K -n 10000000 -w 1 \
    -c 0 2>&1 | while IFS= read -r l; do
    echo "$(date +%s%N) $l"
  done >"$f" &
  spid=$!
  t=0
  until grep -q "out-of-place" "$f" 2>/dev/null; do
    t=$((t + 1))
    [ $t -lt 120 ] || break
    sleep 0.5
  done
  sleep 1
  t0=$(date +%s%N)
  "$cluster" "$what" "$victim"
  survivors=$(((nodes - 1) * 2))
  t=0
  while [ "$(grep -c "gang-bench rank [0-9]*: all_reduce failed" "$f")" -lt $survivors ]; do
    t=$((t + 1))
    [ $t -lt $((limit * 4 + 20)) ] || break
    sleep 0.25
  done
  # As a health check would: the host is down, so Slurm lets the job's
  # other hosts go now rather than after its own timeouts.
  on 0 scontrol update nodename="h$victim" state=down reason=gang-test
  on 0 scancel --full "$(on 0 squeue -h -o %i | head -n 1)" 2>/dev/null
  kill "$spid" 2>/dev/null
  r=0
  while [ $r -lt $survivors ]; do
    line=$(grep "gang-bench rank $r: all_reduce failed" "$f" | head -n 1)
    if [ -z "$line" ]; then
      bad "$what h$victim: rank $r printed no error: $(tail -n 3 "$f")"
    else
      ms=$(((${line%% *} - t0) / 1000000))
      echo "$what h$victim: rank $r failed after $ms ms: ${line#* }"
      [ $ms -le $((limit * 1000)) ] || bad "$what h$victim: rank $r took $ms ms"
      echo "$line" | grep -Eq "$want" || bad "$what h$victim: rank $r: ${line#* }"
    fi
    r=$((r + 1))
  done
}
# Unplugged: nothing arrives any more; the survivors' deadline finds it.
fault unplug 2 10 "TIMEOUT.*did not answer within [0-9]* ms: 4,5" GANG_TIMEOUT=4s
# Killed: the kernel closes its connections, the survivors see them go.
fault kill 3 5 "PEER_LOST.*(rank [45] closed the connection|connection to rank [45] failed)" GANG_TIMEOUT=4s

[ $fail = 0 ] && echo "PASS: Slurm across 4 hosts: srun, srun --mpi=pmix, sbatch with gangrun, a node killed and one unplugged"
exit $fail
