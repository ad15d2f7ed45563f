/* Barrier over shared memory: one step. Each member publishes it and waits
 * until all have.
 *
 * With a CPU per member the step is a flagged step carrying one byte
 * (shm_ll.c): each member writes a flagged line, then its step line, and
 * polls the others' flagged lines. On two ranks that measured 0.38-0.39 us
 * against 0.46 for the step lines alone in the far placement and the same
 * in the near one (A/B alternated, docs/performance.md). Oversubscribed
 * members, which mostly yield and sleep, wait on the step lines alone: the
 * flagged step was slower there (8 ranks on 2 CPUs 44-62 us against
 * 38-56, 16 ranks 91-215 against 80-135; measured when oversubscribed
 * waits still spun 64 pauses before yielding). */
#include "shm_algo.h"

gang_status gang__shm_barrier_flagged(gang__shm_chan *c, const algo_call *k) {
  (void)k;
  static const unsigned char none = 0;
  uint64_t t;
  return gang__shm_ll_step(c, &none, 1, &t);
}

gang_status gang__shm_barrier_lines(gang__shm_chan *c, const algo_call *k) {
  (void)k;
  uint64_t t = ++c->step;
  /* Publishing writes the step's line. */
  GANG_CHECK(gang__shm_begin_line(c, t));
  gang__shm_publish(c, t);
  return gang__shm_wait_all(c, t);
}
