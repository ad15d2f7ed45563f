/* GANG_SOCKET_IFNAME: NCCL's interface list syntax (table-driven), the
 * choice of an address among this machine's interfaces, and a 2-rank gang
 * that listens on the loopback interface chosen by name.
 *
 * With --own-netns (ctest: test_ifname_netns) the test moves into a
 * network namespace of its own with two non-loopback interfaces
 * (gt_private_netns) and checks that ranks publish, listen on and connect
 * to the address of the interface the setting names, not the loopback
 * address that reaches the store. It needs root; otherwise it is skipped
 * (77), or fails under GANG_TEST_REQUIRE_NETNS=1. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"
#include "pg.h"
#include "transport/fabric.h"
#include "transport/ifname.h"

static void test_match_table(void **state) {
  (void)state;
  static const struct {
    const char *spec, *name;
    bool want;
  } cases[] = {
      /* prefixes */
      {"eth", "eth0", true},
      {"eth", "eth", true},
      {"eth", "et", false},
      {"eth", "veth0", false},
      {"eth,ib", "ib0", true},
      {"eth,ib", "lo", false},
      {"e", "eth0", true},
      /* exclusion */
      {"^docker,lo", "docker0", false},
      {"^docker,lo", "lo", false},
      {"^docker,lo", "eth0", true},
      {"^lo", "loopy", false},
      /* exact */
      {"=eth0", "eth0", true},
      {"=eth0", "eth01", false},
      {"=eth0", "eth", false},
      {"=eth0,ib1", "ib1", true},
      {"=eth0,ib1", "ib10", false},
      /* both */
      {"^=lo", "lo", false},
      {"^=lo", "lo0", true},
      {"^=lo,eth0", "eth0", false},
      {"^=lo,eth0", "eth1", true},
      /* empty items and lists */
      {"", "eth0", false},
      {"=", "eth0", false},
      {"^", "eth0", true},
      {"eth,,ib", "ib0", true},
      {",lo,", "lo", true},
      {"^,", "lo", true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (gang__ifname_match(cases[i].spec, cases[i].name) != cases[i].want)
      fail_msg("'%s' on %s: expected %s", cases[i].spec, cases[i].name,
               cases[i].want ? "a match" : "no match");
}

static void test_addr(void **state) {
  (void)state;
  char addr[64], ifn[64];
  assert_gang_ok(
      gang__ifname_addr("=lo", NULL, addr, sizeof addr, ifn, sizeof ifn));
  assert_string_equal(ifn, "lo");
  assert_string_equal(addr, "127.0.0.1");
  /* A preferred address on a selected interface wins. */
  assert_gang_ok(
      gang__ifname_addr("lo", "127.0.0.1", addr, sizeof addr, NULL, 0));
  assert_string_equal(addr, "127.0.0.1");
  assert_int_equal(
      gang__ifname_addr("=no-such-if0", NULL, addr, sizeof addr, NULL, 0),
      GANG_INVALID_ARGUMENT);
  const char *e = gang_last_error();
  if (strstr(e, "GANG_SOCKET_IFNAME") == NULL ||
      strstr(e, "no-such-if0") == NULL || strstr(e, "lo") == NULL)
    fail_msg("error should name the variable, the value and the "
             "interfaces: %s",
             e);
}

static int lo_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("ifname", 1, rank, size, 60000, 0);
  float v[4] = {1, 2, 3, (float)rank};
  RCHECK_OK(gang_all_reduce(g, v, 4, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 2 && v[1] == 4 && v[2] == 6 && v[3] == 1);
  gang_destroy(g);
  return 0;
}

static int bad_rank(int rank, int size, void *arg) {
  (void)arg;
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/ifname-bad", gt_store_port());
  gang_t *g = NULL;
  gang_status st = gang_create_with_store(NULL, addr, rank, size, &g);
  RCHECK(st == GANG_INVALID_ARGUMENT && g == NULL);
  RCHECK(strstr(gang_last_error(), "GANG_SOCKET_IFNAME") != NULL);
  return 0;
}

static void test_gang_on_lo(void **state) {
  (void)state;
  setenv("GANG_SOCKET_IFNAME", "lo", 1);
  int rc = gt_run_ranks(2, lo_rank, NULL, 60000);
  setenv("GANG_SOCKET_IFNAME", "=no-such-if0", 1);
  int rc2 = gt_run_ranks(2, bad_rank, NULL, 60000);
  unsetenv("GANG_SOCKET_IFNAME");
  assert_int_equal(rc, 0);
  assert_int_equal(rc2, 0);
}

/* ---- A non-loopback interface, by name --------------------------------- */

typedef struct ifcase {
  const char *spec; /* GANG_SOCKET_IFNAME */
  const char *addr; /* the address of the interface it names */
  int round;
} ifcase;

/* The numeric address of a socket's own end (peer 0) or the far end. */
static void sock_addr(int fd, int peer, char *out, size_t cap) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
                : getsockname(fd, (struct sockaddr *)&ss, &len);
  RCHECK(rc == 0 && ss.ss_family == AF_INET);
  RCHECK(inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out,
                   (socklen_t)cap) != NULL);
}

static int nonlo_rank(int rank, int size, void *arg) {
  const ifcase *c = arg;
  gang_t *g = gt_join("ifname-nonlo", c->round, rank, size, 60000, 0);
  /* What every rank published for its peers to connect to. */
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/ifname-nonlo%d", gt_store_port(),
           c->round);
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(addr, NULL, &st));
  char want[64];
  snprintf(want, sizeof want, "%s:", c->addr);
  for (int q = 0; q < size; q++) {
    char key[32];
    snprintf(key, sizeof key, "fabric/addr/%d", q);
    void *v = NULL;
    size_t n = 0;
    RCHECK_OK(gang_store_get(st, key, &v, &n));
    fprintf(stderr, "%s: rank %d published %.*s\n", c->spec, q, (int)n,
            (const char *)v);
    RCHECK(n > strlen(want) && memcmp(v, want, strlen(want)) == 0);
    gang_store_free(v);
  }
  gang_store_close(st);
  /* And the connection between the ranks runs between those addresses. */
  int fd = gang__fabric_peer_fd(gang__pg_fabric(g), 1 - rank);
  RCHECK(fd >= 0);
  char mine[64], theirs[64];
  sock_addr(fd, 0, mine, sizeof mine);
  sock_addr(fd, 1, theirs, sizeof theirs);
  fprintf(stderr, "%s: rank %d's connection: %s to %s\n", c->spec, rank, mine,
          theirs);
  RCHECK(strcmp(mine, c->addr) == 0 && strcmp(theirs, c->addr) == 0);
  float v[4] = {1, 2, 3, (float)rank};
  RCHECK_OK(gang_all_reduce(g, v, 4, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 2 && v[3] == 1);
  gang_destroy(g);
  return 0;
}

/* The store listens on 127.0.0.1, which is the address that routes to it:
 * without the setting, that is what ranks publish. gangt0 and gangt1 come
 * in an order of the kernel's, so each is named, by prefix, by exact name
 * and by excluding the others. */
static void test_nonloopback_interface(void **state) {
  (void)state;
  ifcase cases[] = {
      {"gangt1", "198.18.1.1", 0},
      {"=gangt0", "198.18.0.1", 0},
      {"^lo,gangt1", "198.18.0.1", 0},
      {"^=lo,gangt0", "198.18.1.1", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cases[i].round = (int)i;
    setenv("GANG_SOCKET_IFNAME", cases[i].spec, 1);
    int rc = gt_run_ranks(2, nonlo_rank, &cases[i], 60000);
    unsetenv("GANG_SOCKET_IFNAME");
    if (rc != 0)
      fail_msg("GANG_SOCKET_IFNAME=%s", cases[i].spec);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--own-netns") == 0) {
    char why[512];
    if (gt_private_netns(why, sizeof why) != 0)
      return gt_cannot_run(gt_required("GANG_TEST_REQUIRE_NETNS", "ifname"),
                           "GANG_TEST_REQUIRE_NETNS", "%s", why);
    const struct CMUnitTest own[] = {GT_TEST(test_nonloopback_interface)};
    return cmocka_run_group_tests(own, gt_store_group_setup,
                                  gt_store_group_teardown);
  }
  const struct CMUnitTest tests[] = {
      GT_TEST(test_match_table),
      GT_TEST(test_addr),
      GT_TEST(test_gang_on_lo),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
