# Sourced by the tests on the cluster in a box (cluster_*.sh), after they
# set `src` and `build`, with the test's letters and the second number of
# its private network: `cluster_test gt 78 [OUT_PARENT]`. It checks what
# every such test needs (root, ip, nsenter: a skip otherwise, see
# netns_skip.sh) and sets:
#   cluster        scripts/cluster
#   name, net      a cluster name and network of this test's own
#                  (GANG_CLUSTER is exported)
#   out            a directory for its files (under OUT_PARENT, default
#                  /tmp), removed at exit unless GANG_TEST_KEEP is set
#   fail, bad()    bad MESSAGE prints FAIL: MESSAGE and sets fail=1
# and takes the cluster down at exit.
. "$(dirname "$0")/netns_skip.sh"
command -v nsenter >/dev/null 2>&1 || skip "no nsenter (util-linux)"

cluster_test() { # LETTERS NET2 [OUT_PARENT]
  cluster=$src/scripts/cluster
  name=$1$(($$ % 10000))
  net=10.$2.$(($$ % 250))
  export GANG_CLUSTER=$name
  out=$(mktemp -d "${3:-/tmp}/cluster_test.XXXXXX")
  fail=0
  trap '"$cluster" down; [ -n "${GANG_TEST_KEEP:-}" ] || rm -rf "$out"' \
    EXIT INT TERM
}

bad() {
  echo "FAIL: $*"
  fail=1
}
