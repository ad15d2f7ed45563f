/* The measured ways' agreeing step (src/algo/shm_way.c) with members as
 * threads, each a channel onto control pages in this one process. It
 * links shm_way.c, shm_ll.c and core/way.c, with the few calls of the
 * shared-memory transport they make replaced below and in shm_alone.c.
 *
 * A call's time is the slowest member's: a staged call whose member
 * finishes its own copies early has not finished the call. So every
 * member keeps, for each call, the slowest member's time, and all books
 * stay alike. Here a "call" is a sleep between the agreeing step and the
 * learning: staged, both members sleep 2 ms; single copy, member 0 none
 * and member 1 40 ms (far apart: on a loaded machine a sleeper may wait
 * some milliseconds for a CPU). By its own clock member 0 would find single
 * copy faster and, with any single copy taking single copy, pull both into the
 * slower way; by the slowest time both take staging. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo/shm_algo.h"
#include "core/way.h"

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define MEMBERS 2
#define SIG 0x3a7e11ull
#define CALLS 16
/* From this call on the trials are over (GANG__WAY_TRIALS + 1 of each
 * way, kept one call late) and the choice must be staging. */
#define CHOSEN_FROM (2 * (GANG__WAY_TRIALS + 1) + 2)

static gang__shm_ctl *g_ctl[MEMBERS];

/* ---- The step-line wait (the rest of src/transport/shm.c that this
 * needs: shm_alone.c) ---- */

/* The step-line wait: the peer is a thread, so poll. */
gang_status gang__shm_wait_slow(gang__shm_chan *c, int member, uint64_t seq) {
  _Atomic uint64_t *s = &c->ctl[member]->line[GANG_SHM_LINE(seq)].seq;
  while (atomic_load_explicit(s, memory_order_acquire) < seq)
    gang__shm_relax();
  return GANG_OK;
}

/* ---- The members ---- */

typedef struct member {
  pthread_t th;
  gang__shm_chan c;
  int way[CALLS];
  gang_status st;
} member;

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = us * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void *member_main(void *arg) {
  member *m = arg;
  for (int i = 0; i < CALLS; i++) {
    int way;
    m->st = gang__shm_way_agree(&m->c, GANG__SHM_WAY_ALL_GATHER_IN, 1 << 20,
                                false, &way);
    if (m->st != GANG_OK)
      return NULL;
    m->way[i] = way;
    sleep_us(way == GANG__SHM_WAY_STAGED ? 2000 : m->c.rank == 1 ? 40000 : 0);
    gang__shm_way_learn(&m->c, GANG__SHM_WAY_ALL_GATHER_IN, way, 1 << 20);
  }
  return NULL;
}

static void test_slowest_time_decides(void **state) {
  (void)state;
  static member ms[MEMBERS];
  for (int r = 0; r < MEMBERS; r++) {
    g_ctl[r] = aligned_alloc(64, sizeof(gang__shm_ctl));
    assert_non_null(g_ctl[r]);
    memset(g_ctl[r], 0, sizeof(gang__shm_ctl));
  }
  for (int r = 0; r < MEMBERS; r++) {
    memset(&ms[r], 0, sizeof ms[r]);
    ms[r].c =
        (gang__shm_chan){.rank = r, .size = MEMBERS, .sig = SIG, .ctl = g_ctl};
    assert_int_equal(pthread_create(&ms[r].th, NULL, member_main, &ms[r]), 0);
  }
  for (int r = 0; r < MEMBERS; r++)
    pthread_join(ms[r].th, NULL);
  for (int r = 0; r < MEMBERS; r++)
    assert_int_equal(ms[r].st, GANG_OK);
  bool tried_single = false;
  for (int i = 0; i < CALLS; i++) {
    assert_int_equal(ms[0].way[i], ms[1].way[i]);
    tried_single |= ms[0].way[i] == GANG__SHM_WAY_SINGLE_COPY;
    if (i >= CHOSEN_FROM && ms[0].way[i] != GANG__SHM_WAY_STAGED) {
      const gang__way_book *b = &ms[0].c.way[GANG__SHM_WAY_ALL_GATHER_IN];
      int k = gang__way_class(16 << 10, 1 << 20);
      fail_msg("call %d took single copy, whose slowest member took 40 ms "
               "against staging's 2 ms; kept medians %.0f and %.0f ns/MiB "
               "of %d and %d calls",
               i, gang__way_typical(b, k, 0), gang__way_typical(b, k, 1),
               b->n[k][0], b->n[k][1]);
    }
  }
  assert_true(tried_single);
  /* Every member kept the same times. */
  assert_memory_equal(&ms[0].c.way[GANG__SHM_WAY_ALL_GATHER_IN],
                      &ms[1].c.way[GANG__SHM_WAY_ALL_GATHER_IN],
                      sizeof(gang__way_book));
  for (int r = 0; r < MEMBERS; r++)
    free(g_ctl[r]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slowest_time_decides),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
