/* Per-call deadlines on a real gang (gang.h: gang_work_wait with a
 * timeout; docs/gang.md, "A wait that times out"). Rank 0 posts an
 * all_reduce and waits 200 ms for it; rank 1 enters only 1.5 s later.
 *
 * Rank 0: the wait returns GANG_TIMEOUT after 200 ms and the diagnosis
 * (at most a second asking the others which reached the call), not after
 * the gang's 30 s default; the work is then done, with that status, and
 * frees cleanly; the gang and a sub-gang made before are broken (the next
 * call fails at once with GANG_TIMEOUT) and the error names the call and
 * the rank not heard from.
 * Rank 1: what rank 0 contributed before giving up is there, so its
 * all_reduce may still finish, with the right sum; either way its next
 * call fails with GANG_TIMEOUT naming rank 0 (within the diagnosis's half
 * second), instead of waiting for a partner that gave up.
 * Both over shared memory and over TCP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK_S 1.0
#else
#define SLACK_S 0.3
#endif

static int deadline_rank(int rank, int size, void *arg) {
  const char *mode = arg;
  if (strcmp(mode, "tcp") == 0)
    setenv("GANG_SHM_DISABLE", "1", 1);
  char ns[32];
  snprintf(ns, sizeof ns, "deadline-%s-", mode);
  gang_t *g = gt_join(ns, 0, rank, size, 30000, 0);
  gang_t *sub = NULL;
  RCHECK_OK(gang_create_subgang(g, (const int[]){0, 1}, 2, &sub));
  float buf[256];
  for (int i = 0; i < 256; i++)
    buf[i] = 1.0f;
  RCHECK_OK(gang_barrier(g)); /* #1 */
  if (rank == 0) {
    gang_work *w = NULL;
    RCHECK_OK(gang_all_reduce_post(g, buf, 256, GANG_FLOAT32, GANG_SUM, &w));
    double t0 = gt_now_s();
    gang_status st = gang_work_wait(w, 200);
    double took = gt_now_s() - t0;
    fprintf(stderr, "rank 0 (%s): wait(200 ms) -> %s after %.3f s: %s\n", mode,
            gang_status_name(st), took, gang_get_last_error(g));
    RCHECK(st == GANG_TIMEOUT);
    RCHECK(took >= 0.19 && took < 0.2 + 0.5 + SLACK_S);
    int done = 0;
    RCHECK(gang_work_test(w, &done) == GANG_TIMEOUT && done);
    gang_work_free(w);
    const char *e = gang_get_last_error(g);
    RCHECK(strstr(e, "all_reduce") != NULL);
    /* "still waiting for ... rank 1" (shared memory) or the diagnosis's
     * "that did not answer within 1000 ms: 1" (TCP). */
    RCHECK(strstr(e, "rank 1") != NULL || strstr(e, "answer within") != NULL);
    RCHECK(strstr(e, "caller's deadline") != NULL);
    /* Shared memory says where rank 1 is in the gang's calls (the
     * numbers the caller and the flight recorder use). */
    RCHECK(strcmp(mode, "shm") != 0 ||
           strstr(e, "which has not come to this call (its last was #1, 1 "
                     "behind") != NULL);
    t0 = gt_now_s();
    RCHECK(gang_barrier(g) == GANG_TIMEOUT);
    RCHECK(gang_barrier(sub) == GANG_TIMEOUT);
    RCHECK(gt_now_s() - t0 < 0.05 + SLACK_S / 10);
  } else {
    gt_nap_ms(1500);
    double t0 = gt_now_s();
    gang_status st = gang_all_reduce(g, buf, 256, GANG_FLOAT32, GANG_SUM);
    double took = gt_now_s() - t0;
    fprintf(stderr, "rank 1 (%s): all_reduce -> %s after %.3f s: %s\n", mode,
            gang_status_name(st), took, gang_get_last_error(g));
    RCHECK(st == GANG_TIMEOUT ||
           (st == GANG_OK && buf[0] == 2.0f && buf[255] == 2.0f));
    if (st == GANG_OK) {
      t0 = gt_now_s();
      st = gang_barrier(g);
      took = gt_now_s() - t0;
    }
    fprintf(stderr, "rank 1 (%s): then %s after %.3f s: %s\n", mode,
            gang_status_name(st), took, gang_get_last_error(g));
    RCHECK(st == GANG_TIMEOUT);
    RCHECK(took < 0.5 + SLACK_S);
    RCHECK(strstr(gang_get_last_error(g), "rank 0") != NULL);
  }
  gang_destroy(sub);
  gang_destroy(g);
  return 0;
}

static void test_wait_deadline_shm(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(2, deadline_rank, "shm", 60000), 0);
}

static void test_wait_deadline_tcp(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(2, deadline_rank, "tcp", 60000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_wait_deadline_shm),
      GT_TEST(test_wait_deadline_tcp),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
