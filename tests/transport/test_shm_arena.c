/* The shared-memory arena through its header (transport/shm.h), with no
 * gang on top: two ranks map one arena, attach a channel, publish and wait
 * for steps; a member calling another collective is a mismatch; a failure
 * of the arena ends a member's wait with that failure; a channel's entry
 * outlives a member that left before the other attached; and the
 * directory refuses a 257th channel with a clear error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/clock.h"
#include "gang/store.h"
#include "transport/shm.h"

#define SIG_A 0x1111ull
#define SIG_B 0x2222ull

static char g_path[64];
static int g_round;

typedef struct side {
  gang_store *file, *st;
  gang__fabric *f;
  gang__shm *shm;
} side;

static side open_side(int rank, int size) {
  side s = {0};
  RCHECK_OK(gang_store_file_open(g_path, NULL, &s.file));
  char prefix[32];
  snprintf(prefix, sizeof prefix, "round%d/", g_round);
  RCHECK_OK(gang_store_prefix(s.file, prefix, &s.st));
  int64_t deadline = gang__deadline_in_ms(20000);
  gang__fabric_config cfg = {.rank = rank,
                             .size = size,
                             .store = s.st,
                             .host = "127.0.0.1",
                             .deadline = deadline};
  RCHECK_OK(gang__fabric_create(&cfg, &s.f));
  int hosts[2];
  bool everywhere = false;
  int kernel = 0;
  RCHECK_OK(gang__shm_create(s.st, rank, size, s.f, deadline, hosts, &kernel,
                             &s.shm, &everywhere));
  RCHECK(kernel == size); /* one machine */
  RCHECK(s.shm != NULL && everywhere && hosts[0] == hosts[1]);
  return s;
}

static void close_side(side *s) {
  gang__shm_destroy(s->shm);
  gang__fabric_destroy(s->f);
  gang_store_close(s->st);
  gang_store_close(s->file);
}

static gang__shm_chan *attach(side *s, uint64_t ctx, int rank) {
  static const int world[2] = {0, 1};
  gang__shm_chan *c = NULL;
  RCHECK_OK(gang__shm_chan_attach(s->shm, ctx, world, 2, rank, &c));
  c->timeout_ms = 20000;
  c->op = "test step";
  return c;
}

/* Publishes step t with signature sig, with this rank's number inline. */
static void publish(gang__shm_chan *c, uint64_t t, uint64_t sig) {
  c->sig = sig;
  c->ctl[c->rank]->line[GANG_SHM_LINE(t)].data[0] =
      (unsigned char)(c->rank + 1);
  gang__shm_publish(c, t);
}

/* ---- Steps ----------------------------------------------------------------
 */

static int steps_rank(int rank, int size, void *arg) {
  (void)arg;
  side s = open_side(rank, size);
  gang__shm_chan *c = attach(&s, 42, rank);
  int other = 1 - rank;
  /* 40 steps: more than the ring of step lines, so lines are reused. */
  for (uint64_t t = 1; t <= 40; t++) {
    RCHECK_OK(gang__shm_begin_line(c, t));
    publish(c, t, SIG_A);
    RCHECK_OK(gang__shm_wait(c, other, t));
    RCHECK(c->ctl[other]->line[GANG_SHM_LINE(t)].data[0] == other + 1);
  }
  /* Another call: rank 1 publishes step 41 with another signature. */
  RCHECK_OK(gang__shm_begin_line(c, 41));
  publish(c, 41, rank == 0 ? SIG_A : SIG_B);
  c->sig = SIG_A;
  gang_status st = gang__shm_wait(c, other, 41);
  RCHECK(rank == 0 ? st == GANG_MISMATCH : st == GANG_OK);
  if (rank == 0)
    RCHECK(strstr(gang_last_error(), "disagree") != NULL);
  /* A failure of the arena ends a wait for a step that never comes. */
  if (rank == 0) {
    gang__shm_fail(s.shm, GANG_ABORTED, "the test fails the arena");
  } else {
    st = gang__shm_wait(c, other, 99);
    RCHECK(st == GANG_ABORTED);
    RCHECK(strstr(gang_last_error(), "the test fails the arena") != NULL);
  }
  RCHECK(gang__shm_failed(s.shm) == GANG_ABORTED);
  gang__shm_chan_detach(c);
  close_side(&s);
  return 0;
}

static void test_steps_mismatch_and_failure(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, steps_rank, NULL, 60000), 0);
}

/* ---- The directory --------------------------------------------------------
 */

/* Rank 1 attaches, publishes three steps and detaches before rank 0
 * attaches (told through the store); rank 0 still finds the steps. */
static int late_rank(int rank, int size, void *arg) {
  (void)arg;
  side s = open_side(rank, size);
  const char *key = "left";
  if (rank == 1) {
    gang__shm_chan *c = attach(&s, 77, rank);
    for (uint64_t t = 1; t <= 3; t++) {
      RCHECK_OK(gang__shm_begin_line(c, t));
      publish(c, t, SIG_A);
    }
    gang__shm_chan_detach(c);
    RCHECK_OK(gang_store_set(s.st, key, "1", 1));
  } else {
    RCHECK_OK(gang_store_wait(s.st, &key, 1, 20000));
    gang__shm_chan *c = attach(&s, 77, rank);
    c->sig = SIG_A;
    for (uint64_t t = 1; t <= 3; t++)
      RCHECK_OK(gang__shm_wait(c, 1, t));
    gang__shm_chan_detach(c);
  }
  /* Both leave the arena in step, so neither unmaps it under the other. */
  RCHECK_OK(gang_store_set(s.st, rank ? "done1" : "done0", "1", 1));
  const char *both[2] = {"done0", "done1"};
  RCHECK_OK(gang_store_wait(s.st, both, 2, 20000));
  close_side(&s);
  return 0;
}

static void test_entry_outlives_an_early_leaver(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, late_rank, NULL, 60000), 0);
}

/* 256 channels fit; the 257th is refused, and one detached frees a place. */
static int full_rank(int rank, int size, void *arg) {
  (void)arg;
  side s = open_side(rank, size);
  if (rank == 0) {
    static gang__shm_chan *c[256];
    for (int i = 0; i < 256; i++)
      c[i] = attach(&s, 1000 + (uint64_t)i, rank);
    gang__shm_chan *extra = NULL;
    static const int world[2] = {0, 1};
    gang_status st = gang__shm_chan_attach(s.shm, 5000, world, 2, 0, &extra);
    RCHECK(st == GANG_NO_MEMORY && extra == NULL);
    RCHECK(strstr(gang_last_error(), "channels") != NULL);
    /* A channel its other member never joined stays: detaching all of
     * them as the only member leaves the directory full... */
    for (int i = 0; i < 256; i++)
      gang__shm_chan_detach(c[i]);
    st = gang__shm_chan_attach(s.shm, 5000, world, 2, 0, &extra);
    RCHECK(st == GANG_NO_MEMORY);
  }
  RCHECK_OK(gang_store_set(s.st, rank ? "done1" : "done0", "1", 1));
  const char *both[2] = {"done0", "done1"};
  RCHECK_OK(gang_store_wait(s.st, both, 2, 20000));
  close_side(&s);
  return 0;
}

static void test_directory_full(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, full_rank, NULL, 60000), 0);
}

static int make_store(void **state) {
  (void)state;
  snprintf(g_path, sizeof g_path, "/tmp/gang-test-arena-%d", (int)getpid());
  unlink(g_path);
  return 0;
}

static int remove_store(void **state) {
  (void)state;
  unlink(g_path);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_steps_mismatch_and_failure),
      GT_TEST(test_entry_outlives_an_early_leaver),
      GT_TEST(test_directory_full),
  };
  return cmocka_run_group_tests(tests, make_store, remove_store);
}
