/* The record of two timed ways (core/way.h): which way the trials take,
 * which times are kept, the choice by the median, and the retries of the
 * slower way, call by call. */
#include <string.h>

#include "harness/harness.h"

#include "core/way.h"

#define MIB ((size_t)1 << 20)

/* One call of class k by `way` of a MiB in `us` microseconds (kept as
 * ns per MiB). */
static void call(gang__way_book *b, int k, int way, double us) {
  gang__way_learn(b, k, way, (int64_t)(us * 1000), MIB);
}

static void test_classes(void **state) {
  (void)state;
  size_t first = 64 << 10;
  assert_int_equal(gang__way_class(first, 0), 0);
  assert_int_equal(gang__way_class(first, first), 0);
  assert_int_equal(gang__way_class(first, 2 * first - 1), 0);
  assert_int_equal(gang__way_class(first, 2 * first), 1);
  assert_int_equal(gang__way_class(first, 4 * first), 2);
  assert_int_equal(gang__way_class(first, SIZE_MAX), GANG__WAY_CLASSES - 1);
}

/* Trials: way 0 until it has GANG__WAY_TRIALS times (its first call is not
 * kept), then way 1 as long; then the members must agree. */
static void test_trials_then_a_choice(void **state) {
  (void)state;
  gang__way_book b;
  memset(&b, 0, sizeof b);
  int k = 3;
  for (int i = 0; i < GANG__WAY_TRIALS + 1; i++) {
    assert_int_equal(gang__way_due(&b, k), 0);
    assert_int_equal(gang__way_proposal(&b, k, false), 0);
    call(&b, k, 0, i == 0 ? 1e6 : 100); /* the cold first call */
  }
  assert_int_equal(b.n[k][0], GANG__WAY_TRIALS);
  for (int i = 0; i < GANG__WAY_TRIALS + 1; i++) {
    assert_int_equal(gang__way_due(&b, k), 1);
    call(&b, k, 1, 60);
  }
  assert_int_equal(b.n[k][1], GANG__WAY_TRIALS);
  /* The cold call of way 0 was not kept: its median is 100. */
  assert_true(gang__way_typical(&b, k, 0) == 100e3);
  assert_true(gang__way_typical(&b, k, 1) == 60e3);
  assert_int_equal(gang__way_proposal(&b, k, false), 1);
  assert_int_equal(gang__way_due(&b, k), -1); /* a choice is due */
  /* Other classes know nothing yet. */
  assert_int_equal(gang__way_due(&b, k + 1), 0);
  assert_true(gang__way_typical(&b, k + 1, 0) == 0);
}

/* After a choice: the agreed way until the last two calls of every
 * GANG__WAY_RETRY of the class, which take the other; the next round
 * needs a new agreement. One slow call does not move the median. */
static void test_agreed_retries_and_median(void **state) {
  (void)state;
  gang__way_book b;
  memset(&b, 0, sizeof b);
  int k = 0;
  for (int i = 0; i < GANG__WAY_TRIALS + 1; i++)
    call(&b, k, 0, 100);
  for (int i = 0; i < GANG__WAY_TRIALS + 1; i++)
    call(&b, k, 1, 60);
  assert_int_equal(gang__way_due(&b, k), -1);
  gang__way_set_agreed(&b, k, 1);
  int other = 0, due = 0;
  for (uint32_t c = b.class_calls[k]; c < 2 * GANG__WAY_RETRY; c++) {
    int w = gang__way_due(&b, k);
    uint32_t phase = c % GANG__WAY_RETRY;
    if (phase == 0) {
      assert_int_equal(w, -1);
      due++;
      gang__way_set_agreed(&b, k, 1);
      w = 1;
    } else if (phase >= GANG__WAY_RETRY - 2) {
      assert_int_equal(w, 0);
      other++;
    } else {
      assert_int_equal(w, 1);
    }
    call(&b, k, w, w == 1 ? (c == 20 ? 5000 : 60) : 100);
  }
  assert_int_equal(due, 1);   /* at 128: the first round was agreed above */
  assert_int_equal(other, 4); /* two per round */
  assert_true(gang__way_typical(&b, k, 1) == 60e3);
  /* Samples roll: only the last GANG__WAY_SAMPLES are kept. */
  assert_int_equal(b.n[k][1], GANG__WAY_SAMPLES);
  for (int i = 0; i < GANG__WAY_SAMPLES; i++)
    call(&b, k, 1, 200);
  assert_true(gang__way_typical(&b, k, 1) == 200e3);
  assert_int_equal(gang__way_proposal(&b, k, false), 0);
}

/* A call of no bytes counts for the kind's retries but keeps no time. */
static void test_empty_calls(void **state) {
  (void)state;
  gang__way_book b;
  memset(&b, 0, sizeof b);
  gang__way_learn(&b, 0, 0, 1000, 0);
  gang__way_learn(&b, 0, 0, 1000, 0);
  assert_int_equal(b.calls, 2);
  assert_int_equal(b.class_calls[0], 0);
  assert_int_equal(b.n[0][0], 0);
}

/* A record set to more trials (the TCP close calls keep five of each
 * way) asks for them before a choice; forgetting a class starts its
 * trials again and leaves the others. */
static void test_more_trials_and_forget(void **state) {
  (void)state;
  gang__way_book b;
  memset(&b, 0, sizeof b);
  b.trials = GANG__WAY_SAMPLES;
  int k = 2;
  for (int way = 0; way < 2; way++)
    for (int i = 0; i < GANG__WAY_SAMPLES + 1; i++) {
      assert_int_equal(gang__way_due(&b, k), way);
      call(&b, k, way, way ? 50 : 70);
    }
  assert_int_equal(b.n[k][0], GANG__WAY_SAMPLES);
  assert_int_equal(gang__way_due(&b, k), -1);
  gang__way_set_agreed(&b, k, 1);
  assert_int_equal(gang__way_due(&b, k), 1);
  call(&b, k + 1, 0, 10);
  gang__way_forget(&b, k);
  assert_int_equal(gang__way_due(&b, k), 0);
  assert_true(gang__way_typical(&b, k, 1) == 0);
  assert_int_equal(b.agreed[k], 0);
  assert_int_equal(b.class_calls[k + 1], 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_classes),
      GT_TEST(test_trials_then_a_choice),
      GT_TEST(test_agreed_retries_and_median),
      GT_TEST(test_empty_calls),
      GT_TEST(test_more_trials_and_forget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
