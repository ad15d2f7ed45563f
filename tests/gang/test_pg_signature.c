/* The cross-rank signature check (gang_options.check, GANG_CHECK) field by
 * field: three ranks make the same call but for one field on rank 1 —
 * count, dtype (with the same number of bytes, which nothing else would
 * catch), reduce op, broadcast root, collective kind — and every rank must
 * fail with GANG_MISMATCH naming rank 1 and both values, before any data
 * moves; the gang stays broken (sticky). Without the check, a broadcast
 * whose receivers expect more than the source sends: every receiver fails
 * at once naming both calls, and the source, whose data is out when its
 * call returns (as with MPI_Bcast), fails at its next call on the gang,
 * naming the broadcast that disagreed. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"

typedef enum { F_COUNT, F_DTYPE, F_OP, F_ROOT, F_KIND, F_N } field;

static const char *const field_name[F_N] = {"count", "dtype", "op", "root",
                                            "kind"};
/* What each side's text must show, rank 1's value second. */
static const char *const want[F_N][2] = {{"count 16", "count 17"},
                                         {"float32", "int32"},
                                         {"sum", "max"},
                                         {"root 0", "root 2"},
                                         {"all_reduce", "all_gather"}};

static int g_round;

static int sig_rank(int rank, int size, void *arg) {
  field f = *(const field *)arg;
  gang_t *g = gt_join("signature", g_round, rank, size, 30000, 1);
  int32_t buf[64] = {0};
  int32_t out[64 * 3] = {0};
  bool odd = rank == 1;
  gang_status st = GANG_OK;
  switch (f) {
  case F_COUNT:
    st = gang_all_reduce(g, buf, odd ? 17 : 16, GANG_FLOAT32, GANG_SUM);
    break;
  case F_DTYPE:
    st = gang_all_reduce(g, buf, 16, odd ? GANG_INT32 : GANG_FLOAT32, GANG_SUM);
    break;
  case F_OP:
    st = gang_all_reduce(g, buf, 16, GANG_FLOAT32, odd ? GANG_MAX : GANG_SUM);
    break;
  case F_ROOT:
    st = gang_broadcast(g, buf, 16, GANG_FLOAT32, odd ? 2 : 0);
    break;
  case F_KIND:
    st = odd ? gang_all_gather(g, out, buf, 16, GANG_FLOAT32)
             : gang_all_reduce(g, buf, 16, GANG_FLOAT32, GANG_SUM);
    break;
  default:
    break;
  }
  const char *e = gang_last_error();
  fprintf(stderr, "rank %d, %s: %s: %s\n", rank, field_name[f],
          gang_status_name(st), e);
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(e, "rank 1") != NULL);
  RCHECK(strstr(e, want[f][0]) != NULL);
  RCHECK(strstr(e, want[f][1]) != NULL);
  RCHECK(gang_barrier(g) == GANG_MISMATCH); /* sticky */
  gang_destroy(g);
  return 0;
}

static int bcast_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("signature-bcast", g_round, rank, size, 30000, 0);
  float buf[64] = {0};
  RCHECK_OK(gang_all_reduce(g, buf, 4, GANG_FLOAT32, GANG_SUM)); /* #1 */
  gang_status st = gang_broadcast(g, buf, rank == 0 ? 4 : 8, GANG_FLOAT32, 0);
  const char *e = gang_last_error();
  fprintf(stderr, "rank %d, broadcast: %s: %s\n", rank, gang_status_name(st),
          st == GANG_OK ? "" : e);
  if (rank == 0) {
    RCHECK(st == GANG_OK);
    st = gang_all_reduce(g, buf, 4, GANG_FLOAT32, GANG_SUM);
    e = gang_last_error();
    fprintf(stderr, "rank 0, next call: %s: %s\n", gang_status_name(st), e);
  }
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(e, "broadcast #2") != NULL);
  RCHECK(strstr(e, "16 bytes") != NULL && strstr(e, "32 bytes") != NULL);
  RCHECK(gang_barrier(g) == GANG_MISMATCH); /* sticky */
  gang_destroy(g);
  return 0;
}

static void test_bcast_unchecked(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(3, bcast_rank, NULL, 60000), 0);
}

static void run_field(field f) {
  g_round++;
  assert_int_equal(gt_run_ranks(3, sig_rank, &f, 60000), 0);
}

static void test_count(void **state) {
  (void)state;
  run_field(F_COUNT);
}
static void test_dtype(void **state) {
  (void)state;
  run_field(F_DTYPE);
}
static void test_op(void **state) {
  (void)state;
  run_field(F_OP);
}
static void test_root(void **state) {
  (void)state;
  run_field(F_ROOT);
}
static void test_kind(void **state) {
  (void)state;
  run_field(F_KIND);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_count), GT_TEST(test_dtype), GT_TEST(test_op),
      GT_TEST(test_root),  GT_TEST(test_kind),  GT_TEST(test_bcast_unchecked),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
