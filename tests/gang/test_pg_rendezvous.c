/* A gang's rendezvous that a rank never comes to: every rank that came
 * fails with GANG_TIMEOUT once its timeout passes, and the error names
 * the ranks that never came -- rank 0 (whose choice of algorithm the
 * others wait for first) and a rank past it -- instead of only the store
 * key some rank was waiting for. */
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK_S 1.0
#else
#define SLACK_S 0.3
#endif

typedef struct {
  int absent;
  char want[64];
} case_t;

static int g_round;

static int come_rank(int rank, int size, void *arg) {
  const case_t *c = arg;
  if (rank == c->absent)
    return 0; /* never comes */
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/rdzv-absent%d", gt_store_port(),
           g_round);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 800;
  gang_t *g = NULL;
  double t0 = gt_now_s();
  gang_status st = gang_create_with_store(&o, addr, rank, size, &g);
  double took = gt_now_s() - t0;
  const char *e = gang_last_error();
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", rank, gang_status_name(st),
          took, e);
  RCHECK(st == GANG_TIMEOUT && g == NULL);
  RCHECK(took >= 0.75 && took < 0.8 + 1.0 + SLACK_S);
  RCHECK(strstr(e, c->want) != NULL);
  return 0;
}

static void run_absent(int absent) {
  case_t c = {absent, ""};
  snprintf(c.want, sizeof c.want, "rank %d of 4 never came to the rendezvous",
           absent);
  g_round++;
  assert_int_equal(gt_run_ranks(4, come_rank, &c, 60000), 0);
}

static void test_rank0_absent(void **state) {
  (void)state;
  run_absent(0);
}

static void test_last_absent(void **state) {
  (void)state;
  run_absent(3);
}

int main(void) {
  const struct CMUnitTest tests[] = {GT_TEST(test_rank0_absent),
                                     GT_TEST(test_last_absent)};
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
