/* GANG_SOCKET_IFNAME: NCCL's interface list syntax (table-driven), the
 * choice of an address among this machine's interfaces, and a 2-rank gang
 * that listens on the loopback interface chosen by name. */
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"
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

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_match_table),
      GT_TEST(test_addr),
      GT_TEST(test_gang_on_lo),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
