#!/bin/sh
# Fault tolerance across hosts: examples/train_ft_hosts.py on a cluster in
# a box of four hosts (scripts/cluster), the lighthouse on host 0 and one
# replica group of two ranks on each host, training on the same data.
# Faults: every process of a host killed (its group starts again on it),
# a host off the network for 3-5 s, the lighthouse's host off the
# network. It fails if the final parameters differ from a fault-free run,
# the job's committed step goes back, both sides of a partition commit
# while apart, a group never commits again after its host comes back, the
# survivors of a host's kill take longer than the heartbeat timeout +
# 1 s to commit again, or anything hangs. The job ends 40 steps after
# every group is back from the last fault, and the fault-free run follows
# for as many steps.
#
# Needs root (network namespaces): otherwise it exits 77 (a failure under
# GANG_TEST_REQUIRE_NETNS=1, which scripts/test.sh sets as root).
#
# usage: cluster_ft.sh SOURCE_DIR BUILD_DIR PYTHON
set -u
src=$1
build=$2
py=$3
. "$(dirname "$0")/cluster_test.sh"
cluster_test gf 82
"$py" "$src/examples/train_ft_hosts.py" --build "$build" \
  --cluster "$name" --net "$net" --hosts 4 --groups 4 --nproc 2 \
  --chaos 8 --count 3 --faults host-kill,unplug,unplug-lh \
  --state-mib 4 --step-ms 10 --hang-s 30 --detect-slack-s 1 \
  --end-after-faults
