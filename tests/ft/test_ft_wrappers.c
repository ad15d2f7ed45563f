/* The dummy gang and the error-swallowing wrapper (gang/ft.h). */
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/ft.h"
#include "gang/gang.h"
#include "gang/store.h"

static int g_round;

/* ---- Dummy ----------------------------------------------------------------
 */

static void test_dummy(void **state) {
  (void)state;
  gang_t *g = NULL;
  assert_int_equal(gang_create_dummy(4, 4, &g), GANG_INVALID_ARGUMENT);
  assert_gang_ok(gang_create_dummy(2, 4, &g));
  assert_int_equal(gang_rank(g), 2);
  assert_int_equal(gang_size(g), 4);
  float v[3] = {1, 2, 3};
  assert_gang_ok(gang_all_reduce(g, v, 3, GANG_FLOAT32, GANG_SUM));
  assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3);
  assert_gang_ok(gang_broadcast(g, v, 3, GANG_FLOAT32, 0));
  assert_true(v[0] == 1);
  float out[12];
  memset(out, 0, sizeof out);
  assert_gang_ok(gang_all_gather(g, out, v, 3, GANG_FLOAT32));
  for (int r = 0; r < 4; r++)
    assert_true(out[3 * r] == 1 && out[3 * r + 2] == 3);
  float in[8] = {0, 1, 2, 3, 4, 5, 6, 7}, rs[2] = {-1, -1};
  assert_gang_ok(gang_reduce_scatter(g, rs, in, 2, GANG_FLOAT32, GANG_SUM));
  assert_true(rs[0] == 4 && rs[1] == 5); /* this rank's block, alone */
  float a2a[8];
  memset(a2a, 0, sizeof a2a);
  assert_gang_ok(gang_all_to_all(g, a2a, in, 2, GANG_FLOAT32));
  assert_true(a2a[4] == 4 && a2a[5] == 5);
  assert_gang_ok(gang_barrier(g));
  /* No peers: send is refused, and the gang stays usable. */
  assert_int_equal(gang_send(g, v, 4, 0, 1), GANG_NOT_SUPPORTED);
  assert_gang_ok(gang_all_reduce(g, v, 3, GANG_FLOAT32, GANG_MEAN));
  gang_t *half = NULL;
  assert_gang_ok(gang_split(g, 1, 0, &half));
  assert_non_null(half);
  gang_destroy(half);
  gang_destroy(g);
}

/* ---- Error swallowing ------------------------------------------------------
 */

static void addr_of(char *buf, size_t cap, const char *what, int n) {
  snprintf(buf, cap, "127.0.0.1:%d/sw-%s-%d-%d", gt_store_port(), what, g_round,
           n);
}

static int swallow_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 20000;
  gang_t *ft = NULL, *g = NULL;
  RCHECK_OK(gang_ft_create(&o, &ft));
  RCHECK_OK(gang_error_swallowing_wrap(ft, &g));
  char addr[160], sync[160];
  addr_of(addr, sizeof addr, "a", 0);
  addr_of(sync, sizeof sync, "sync", 0);
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(sync, NULL, &st));
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  RCHECK(gang_size(g) == size && gang_rank(g) == rank);
  float v[2] = {(float)rank, 1};
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 1 && v[1] == 2);
  RCHECK(gang_error_swallowing_error(g, NULL, 0) == GANG_OK);
  /* Poisoned by hand: all_reduce is a no-op that succeeds. */
  gang_error_swallowing_report(g, GANG_INTERNAL, "the step went wrong");
  v[0] = 7;
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 7 && v[1] == 2);
  char why[128];
  RCHECK(gang_error_swallowing_error(g, why, sizeof why) == GANG_INTERNAL);
  RCHECK(strcmp(why, "the step went wrong") == 0);
  /* Only configure clears it. */
  addr_of(addr, sizeof addr, "a", 1);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  RCHECK(gang_error_swallowing_error(g, NULL, 0) == GANG_OK);
  v[0] = (float)rank, v[1] = 1;
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 1 && v[1] == 2);
  /* A real failure: rank 1 leaves (destroys its gang); rank 0's next
   * all_reduce meets it, succeeds, and records that it left. */
  if (rank == 1) {
    gang_destroy(g);
    RCHECK_OK(gang_store_set(st, "left", "1", 1));
    gang_store_close(st);
    return 0;
  }
  void *x = NULL;
  size_t n = 0;
  RCHECK_OK(gang_store_get(st, "left", &x, &n));
  gang_store_free(x);
  v[0] = 3, v[1] = 4;
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  gang_status err = gang_error_swallowing_error(g, why, sizeof why);
  fprintf(stderr, "recorded: %s: %s\n", gang_status_name(err), why);
  RCHECK(err == GANG_PEER_LEFT);
  /* Later all_reduces: no-ops; other collectives fail with the inner
   * gang's error. */
  v[0] = 9;
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 9 && v[1] == 4);
  gang_status bst = gang_broadcast(g, v, 2, GANG_FLOAT32, 0);
  fprintf(stderr, "broadcast after the failure: %s\n", gang_status_name(bst));
  RCHECK(bst == GANG_PEER_LEFT || bst == GANG_ABORTED);
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  /* Configured anew (alone): clear again. */
  addr_of(addr, sizeof addr, "alone", 0);
  RCHECK_OK(gang_ft_configure(g, addr, 0, 1, 20000));
  RCHECK(gang_error_swallowing_error(g, NULL, 0) == GANG_OK);
  v[0] = 5;
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
  RCHECK(v[0] == 5);
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_error_swallowing(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, swallow_rank, NULL, 60000), 0);
}

static void test_wrong_handles(void **state) {
  (void)state;
  gang_t *d = NULL;
  assert_gang_ok(gang_create_dummy(0, 1, &d));
  assert_int_equal(gang_error_swallowing_error(d, NULL, 0),
                   GANG_INVALID_ARGUMENT);
  gang_error_swallowing_report(d, GANG_INTERNAL, "ignored"); /* no effect */
  assert_int_equal(gang_ft_configure(d, "127.0.0.1:1/x", 0, 1, 100),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "cannot be configured"));
  assert_false(gang_ft_configured(d));
  gang_destroy(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_dummy),
      GT_TEST(test_wrong_handles),
      GT_TEST(test_error_swallowing),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
