/* What the flagged steps (src/algo/shm_ll.c) need of src/transport/shm.c
 * beyond the step-line wait, for tests that link them without the
 * transport: no wake-ups to ring, no member ever seen sharing a CPU, and
 * a mismatch reported as such. Each test brings its own
 * gang__shm_wait_slow. */
#include "algo/shm_algo.h"

void gang__shm_ring(gang__shm_wake *w) { (void)w; }

int gang__shm_note_cpu(gang__shm_chan *c) {
  (void)c;
  return -1;
}

gang_status gang__shm_mismatch(gang__shm_chan *c, int member, uint64_t seq) {
  (void)c, (void)member, (void)seq;
  return GANG_MISMATCH;
}
