# Sourced by the tests that make network namespaces (netns_hosts.sh,
# cluster_box.sh): skip() says why such a test cannot run here and exits
# 77 (ctest: not run), or fails under GANG_TEST_REQUIRE_NETNS=1, which
# scripts/test.sh sets when it runs as root, where they must run. Then the
# checks every such test needs: root, and the ip command.
skip() {
  if [ "${GANG_TEST_REQUIRE_NETNS:-0}" = 1 ]; then
    echo "FAIL (GANG_TEST_REQUIRE_NETNS=1): $*"
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
