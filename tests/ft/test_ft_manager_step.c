/* The manager's step protocol (gang/ft.h), rank by rank, under a
 * lighthouse in a process of its own:
 *
 *   - report_error on one rank of a group makes the whole group vote no,
 *     the step does not advance, the error stays with the rank that had
 *     it, and the next step commits;
 *   - max_retries: should_commit fails once the consecutive failures pass
 *     it, and a commit starts the count again;
 *   - a replica that is behind and may not heal takes no part: it sends
 *     zeros, MEAN divides by the participants (not the replicas), it never
 *     commits, and the managed gang's size is the participants. */
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"
#include "lh_proc.h"

#include "gang/ft.h"
#include "gang/gang.h"
#include "gang/store.h"

enum { N = 64 };

static lh_proc g_lh;

static gang_manager *manager(const char *name, gang_t *group, int max_retries) {
  char lh[64];
  snprintf(lh, sizeof lh, "127.0.0.1:%d", g_lh.port);
  gang_manager_options mo = GANG_MANAGER_OPTIONS_INIT;
  mo.lighthouse = lh;
  mo.name = name;
  mo.group = group;
  mo.timeout_ms = 5000;
  mo.quorum_timeout_ms = 20000;
  mo.max_retries = max_retries;
  gang_manager *m = NULL;
  RCHECK_OK(gang_manager_create(&mo, &m));
  return m;
}

/* One step with a gradient of `value` everywhere; the committed flag, the
 * reduced value in *out. */
static bool step(gang_manager *m, bool allow_heal, float value, float *out,
                 gang_status *commit_status) {
  float buf[N];
  for (int i = 0; i < N; i++)
    buf[i] = value;
  RCHECK_OK(gang_manager_start_quorum(m, allow_heal, false));
  RCHECK_OK(gang_manager_wait_quorum(m));
  RCHECK_OK(gang_manager_all_reduce(m, buf, N, GANG_FLOAT32, GANG_MEAN));
  for (int i = 1; i < N; i++)
    RCHECK(buf[i] == buf[0]);
  if (out != NULL)
    *out = buf[0];
  bool commit = false;
  gang_status st = gang_manager_should_commit(m, &commit);
  if (commit_status != NULL)
    *commit_status = st;
  else
    RCHECK_OK(st);
  return commit;
}

static gang_store *sync_store(void) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gt_store_port());
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = 60000;
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(addr, &so, &st));
  return st;
}

/* ---- report_error: the group votes no --------------------------------------
 */

static int report_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *group = gt_join("report-", 0, rank, size, 20000, 0);
  gang_manager *m = manager("report", group, -1);
  float v = 0;
  RCHECK(step(m, true, 1.0f, &v, NULL));
  RCHECK(gang_manager_step(m) == 1 && v == 1.0f);
  /* Rank 1 finds its batch bad. */
  RCHECK_OK(gang_manager_start_quorum(m, true, false));
  RCHECK_OK(gang_manager_wait_quorum(m));
  if (rank == 1)
    gang_manager_report_error(m, GANG_INTERNAL, "a NaN in the loss");
  float buf[N] = {0};
  RCHECK_OK(gang_manager_all_reduce(m, buf, N, GANG_FLOAT32, GANG_SUM));
  bool commit = true;
  RCHECK_OK(gang_manager_should_commit(m, &commit));
  RCHECK(!commit);
  RCHECK(gang_manager_step(m) == 1);
  char why[256] = "";
  gang_status e = gang_manager_errored(m, why, sizeof why);
  if (rank == 1)
    RCHECK(e == GANG_INTERNAL && strstr(why, "a NaN in the loss") != NULL);
  else
    RCHECK(e == GANG_OK);
  /* The next step is a new one. */
  RCHECK(step(m, true, 2.0f, &v, NULL));
  RCHECK(gang_manager_step(m) == 2 && v == 2.0f);
  RCHECK(gang_manager_errored(m, why, sizeof why) == GANG_OK);
  gang_manager_destroy(m);
  gang_destroy(group);
  return 0;
}

static void test_report_error_the_group_votes_no(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(2, report_rank, NULL, 120000), 0);
}

/* ---- max_retries
 * -------------------------------------------------------------- */

static bool failing_step(gang_manager *m, gang_status *st) {
  RCHECK_OK(gang_manager_start_quorum(m, true, false));
  RCHECK_OK(gang_manager_wait_quorum(m));
  gang_manager_report_error(m, GANG_INTERNAL, NULL);
  float buf[N] = {0};
  RCHECK_OK(gang_manager_all_reduce(m, buf, N, GANG_FLOAT32, GANG_SUM));
  bool commit = true;
  *st = gang_manager_should_commit(m, &commit);
  return commit;
}

static int retries_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  gang_manager *m = manager("retries", NULL, 1);
  RCHECK(step(m, true, 1.0f, NULL, NULL));
  /* State is registered before the first step, not between steps. */
  static char late[8];
  RCHECK(gang_manager_register_state(m, "late", late, sizeof late) ==
         GANG_INVALID_USAGE);
  RCHECK(strstr(gang_last_error(), "'late'") != NULL);
  gang_status st;
  RCHECK(!failing_step(m, &st) && st == GANG_OK);      /* 1 failure: allowed */
  RCHECK(!failing_step(m, &st) && st == GANG_ABORTED); /* 2 > max_retries */
  RCHECK(strstr(gang_last_error(), "max_retries 1") != NULL);
  RCHECK(step(m, true, 1.0f, NULL, NULL)); /* a commit starts again */
  RCHECK(!failing_step(m, &st) && st == GANG_OK);
  RCHECK(gang_manager_step(m) == 2);
  gang_manager_destroy(m);
  return 0;
}

static void test_max_retries(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(1, retries_rank, NULL, 60000), 0);
}

/* ---- A replica behind, not healing ------------------------------------------
 */

/* Rank 0 is replica "ahead": it commits 3 steps alone, then steps on
 * until rank 1 is done. Rank 1 is replica "behind": it starts at step 0
 * and never heals (allow_heal false everywhere, as a job must pass one
 * value to every replica), so it takes no part. Ahead's gradients are 3,
 * behind's 5: every reduced value is 3 (behind sent zeros; divided by 1
 * participant, not 2 replicas). Behind commits all the same, as torchft's
 * does (its step moves on with the others', still behind), so the quorum
 * keeps its id: no commit failure makes the lighthouse issue a new one
 * and rebuild every replica gang each step. */
static int behind_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  gang_store *st = sync_store();
  if (rank == 0) {
    gang_manager *m = manager("ahead", NULL, -1);
    float v = 0;
    while (gang_manager_step(m) < 3) {
      if (step(m, false, 3.0f, &v, NULL))
        RCHECK(v == 3.0f);
    }
    RCHECK_OK(gang_store_set(st, "behind/ahead", "1", 1));
    for (int i = 0; i < 400; i++) {
      bool here = false;
      RCHECK_OK(
          gang_store_check(st, (const char *const[]){"behind/done"}, 1, &here));
      if (here)
        break;
      if (step(m, false, 3.0f, &v, NULL))
        RCHECK(v == 3.0f);
      RCHECK(gang_manager_participants(m) == 1);
    }
    gang_manager_destroy(m);
  } else {
    void *v = NULL;
    size_t n = 0;
    RCHECK_OK(gang_store_get(st, "behind/ahead", &v, &n));
    gang_store_free(v);
    gang_manager *m = manager("behind", NULL, -1);
    gang_t *managed = gang_manager_gang(m);
    int seen = 0;
    int64_t qid = -1;
    for (int i = 0; i < 200 && seen < 3; i++) {
      float buf[N];
      for (int k = 0; k < N; k++)
        buf[k] = 5.0f;
      RCHECK_OK(gang_manager_start_quorum(m, false, false));
      RCHECK_OK(gang_manager_wait_quorum(m));
      int part = gang_manager_participants(m);
      /* Through the managed gang: the same all_reduce as the manager's. */
      RCHECK_OK(gang_all_reduce(managed, buf, N, GANG_FLOAT32, GANG_MEAN));
      bool commit = true;
      RCHECK_OK(gang_manager_should_commit(m, &commit));
      if (gang_manager_replica_rank(m) < 0 || part == 0)
        continue; /* no quorum this time */
      /* With ahead in the quorum: 1 participant, and it is not us. */
      RCHECK(part == 1);
      RCHECK(gang_size(managed) == 1);
      RCHECK(buf[0] == 3.0f && buf[N - 1] == 3.0f);
      RCHECK(commit);
      RCHECK(gang_manager_step(m) == seen + 1);
      RCHECK(qid < 0 || gang_manager_quorum_id(m) == qid);
      qid = gang_manager_quorum_id(m);
      seen++;
    }
    RCHECK(seen == 3);
    gang_manager_destroy(m);
    RCHECK_OK(gang_store_set(st, "behind/done", "1", 1));
  }
  gang_store_close(st);
  return 0;
}

static void test_behind_without_healing_sends_zeros(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(2, behind_rank, NULL, 120000), 0);
}

/* ---- Bad input --------------------------------------------------------------
 */

static void test_bad_input(void **state) {
  (void)state;
  assert_int_equal(gang_manager_step(NULL), -1);
  assert_int_equal(gang_manager_quorum_id(NULL), -1);
  assert_int_equal(gang_manager_participants(NULL), 0);
  assert_int_equal(gang_manager_replica_rank(NULL), -1);
  assert_null(gang_manager_gang(NULL));
  bool commit = true;
  assert_int_equal(gang_manager_should_commit(NULL, &commit),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_manager_start_quorum(NULL, true, false),
                   GANG_INVALID_ARGUMENT);
  gang_manager_destroy(NULL);
  gang_manager_report_error(NULL, GANG_INTERNAL, "x");
  /* No lighthouse anywhere. */
  unsetenv("GANG_LIGHTHOUSE");
  gang_manager_options mo = GANG_MANAGER_OPTIONS_INIT;
  gang_manager *m = NULL;
  assert_int_equal(gang_manager_create(&mo, &m), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "GANG_LIGHTHOUSE"));
  assert_null(m);
  /* Nothing listening there: an error within the quorum timeout. */
  mo.lighthouse = "127.0.0.1:1";
  mo.quorum_timeout_ms = 500;
  assert_int_not_equal(gang_manager_create(&mo, &m), GANG_OK);
  assert_null(m);
}

/* ---- Setup
 * ---------------------------------------------------------------------- */

static int setup(void **state) {
  if (gt_store_group_setup(state) != 0)
    return -1;
  lh_cfg lc = {0, 1, 500, 1000};
  g_lh = lh_start(&lc);
  return g_lh.pid > 0 ? 0 : -1;
}

static int teardown(void **state) {
  lh_kill(&g_lh);
  return gt_store_group_teardown(state);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_report_error_the_group_votes_no),
      GT_TEST(test_max_retries),
      GT_TEST(test_behind_without_healing_sends_zeros),
      GT_TEST(test_bad_input),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
