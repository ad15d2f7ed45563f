/* Slotted steps (rule 1'' of src/transport/shm.h) on their own: where a
 * step's slot lies, and how far every member must have come before a root
 * may write it. Between processes a root that starts too early overwrites
 * a slot or a buffer only when a reader is slow at that very moment; here
 * the control pages live in this one process and the step-line wait
 * (shm_alone.c and below) never waits, so the smallest step every member
 * must have published is found exactly, for each history of steps. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "algo/shm_algo.h"

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define MEMBERS 3

static gang__shm_ctl *g_ctl[MEMBERS];
static int g_waits; /* calls of the step-line wait */

/* A member that has not published the step yet is not there: the wait
 * reports it rather than waiting. */
gang_status gang__shm_wait_slow(gang__shm_chan *c, int member, uint64_t seq) {
  (void)c, (void)member, (void)seq;
  g_waits++;
  return GANG_TIMEOUT;
}

/* Every member has published every step up to `upto`. */
static void published(uint64_t upto) {
  for (int m = 0; m < MEMBERS; m++) {
    memset(g_ctl[m], 0, sizeof *g_ctl[m]);
    for (uint64_t s = upto >= GANG_SHM_LINES ? upto - GANG_SHM_LINES + 1 : 1;
         s <= upto; s++)
      atomic_store(&g_ctl[m]->line[GANG_SHM_LINE(s)].seq, s);
  }
}

/* The smallest step every member must have published before member 0 may
 * begin slotted step t, after steps up to lean_last of which it knows
 * none wrote a whole buffer since bulk_last. */
static uint64_t need_of(uint64_t t, uint64_t lean_last, uint64_t bulk_last) {
  for (uint64_t upto = 0; upto < t; upto++) {
    published(upto);
    gang__shm_chan c = {.rank = 0,
                        .size = MEMBERS,
                        .step = t - 1,
                        .ctl = g_ctl,
                        .lean_last = lean_last,
                        .bulk_last = bulk_last};
    g_waits = 0;
    if (gang__shm_begin_slot(&c, t) == GANG_OK) {
      assert_int_equal(g_waits, 0);
      return upto;
    }
  }
  fail_msg("step %llu never begins", (unsigned long long)t);
  return 0;
}

static void test_slots_are_apart(void **state) {
  (void)state;
  enum { CHUNK = 64 * 1024 };
  static unsigned char stage[2 * CHUNK];
  unsigned char *stages[MEMBERS] = {stage, stage, stage};
  gang__shm_chan c = {.chunk = CHUNK, .stage = stages};
  size_t slot = CHUNK / GANG_SHM_SLOTS;
  /* Within a ring of GANG_SHM_LINES steps every step has a slot of its
   * own, in the buffer of its parity; step t + 16 takes t's again. */
  for (uint64_t t = 100; t < 100 + GANG_SHM_LINES; t++) {
    unsigned char *p = gang__shm_slot_of(&c, 0, t);
    assert_true(p >= stage + (t & 1) * CHUNK);
    assert_true(p + slot <= stage + ((t & 1) + 1) * CHUNK);
    assert_ptr_equal(p, gang__shm_slot_of(&c, 0, t + GANG_SHM_LINES));
    for (uint64_t u = t + 1; u < 100 + GANG_SHM_LINES; u++) {
      unsigned char *q = gang__shm_slot_of(&c, 0, u);
      assert_true(q + slot <= p || p + slot <= q);
    }
  }
}

static void test_how_far_members_must_be(void **state) {
  (void)state;
  for (int m = 0; m < MEMBERS; m++) {
    g_ctl[m] = aligned_alloc(64, sizeof(gang__shm_ctl));
    assert_non_null(g_ctl[m]);
  }
  /* A channel's first step: nothing before it. */
  assert_int_equal(need_of(1, 0, 0), 0);
  /* Steps 1-11 unknown (another collective's): any may have written a
   * whole buffer, 11 the other parity's, so 10 must have been read. */
  assert_int_equal(need_of(12, 0, 0), 11);
  /* A run of slotted or line-only steps since the whole-buffer step 20:
   * of t's parity it must have been read (everyone past 20), of the
   * other, the one before it (everyone at 20). */
  assert_int_equal(need_of(30, 29, 20), 21);
  assert_int_equal(need_of(31, 30, 20), 20);
  assert_int_equal(need_of(31, 30, 21), 22);
  /* Far into a run, the ring of lines and slots decides: t - 15. */
  assert_int_equal(need_of(40, 39, 20), 25);
  assert_int_equal(need_of(40, 39, 0), 25);
  /* Steps 26 and 27 unknown: as rule 1, everyone at 27. */
  assert_int_equal(need_of(28, 25, 0), 27);
  for (int m = 0; m < MEMBERS; m++)
    free(g_ctl[m]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slots_are_apart),
      cmocka_unit_test(test_how_far_members_must_be),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
