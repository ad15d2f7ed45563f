/* Barrier over shared memory: one step. Each member publishes it and waits
 * until all have: on two ranks one cache line crosses each way. */
#include "shm_algo.h"

gang_status shm_barrier(gang__shm_chan *c) {
  uint64_t t = ++c->step;
  /* Publishing writes the step's line. */
  GANG_CHECK(gang__shm_begin_line(c, t));
  gang__shm_publish(c, t);
  return gang__shm_wait_all(c, t);
}
