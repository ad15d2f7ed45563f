/* all_gather over shared memory.
 *
 *   small (blocks up to 1 KiB): one step, each member's block in its step
 *     line or small slot.
 *   staged: per chunk of the member's block, each member stages its chunk,
 *     publishes, waits for all, and copies every other member's chunk to
 *     its place in out. One step per chunk; each member reads (p-1)
 *     chunks.
 *   single copy (from 32 KiB per block, when allowed): each member
 *     publishes its input's address; everyone pulls every other block
 *     straight into out, then waits until all pulls are done. */
#include <string.h>

#include "shm_algo.h"

static gang_status allgather_single_copy(gang__shm_chan *c, unsigned char *o,
                                         const unsigned char *src,
                                         size_t bytes) {
  int p = c->size, me = c->rank;
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  c->ctl[me]->pub.in = (uint64_t)(uintptr_t)src;
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  for (int k = 1; k < p; k++) {
    int j = (me + k) % p; /* spread the readers over the sources */
    GANG_CHECK(gang__shm_read_remote(c, j, o + (size_t)j * bytes,
                                     c->ctl[j]->pub.in, bytes));
  }
  uint64_t t2 = ++c->step;
  gang__shm_publish(c, t2);
  return gang__shm_wait_all(c, t2);
}

/* Staged in chunks, or (small) in one step through the small slots. */
static gang_status allgather_staged(gang__shm_chan *c, unsigned char *o,
                                    const unsigned char *src, size_t bytes,
                                    bool small) {
  int p = c->size, me = c->rank;
  size_t chunk = small ? bytes : c->chunk;
  for (size_t done = 0; done < bytes; done += chunk) {
    size_t n = bytes - done < chunk ? bytes - done : chunk;
    uint64_t t = ++c->step;
    GANG_CHECK(small ? gang__shm_begin_line(c, t) : gang__shm_begin(c, t));
    unsigned char *mine =
        small ? gang__shm_slot(c, me, t, bytes) : gang__shm_buf(c, me, t);
    memcpy(mine, src + done, n);
    gang__shm_publish(c, t);
    GANG_CHECK(gang__shm_wait_all(c, t));
    for (int k = 1; k < p; k++) {
      int j = (me + k) % p;
      const unsigned char *theirs =
          small ? gang__shm_slot(c, j, t, bytes) : gang__shm_buf(c, j, t);
      memcpy(o + (size_t)j * bytes + done, theirs, n);
    }
  }
  return GANG_OK;
}

gang_status gang__shm_allgather(gang__shm_chan *c, void *out, const void *in,
                                size_t bytes, algo_id algo) {
  int p = c->size, me = c->rank;
  unsigned char *o = out;
  const unsigned char *src = in;
  if (bytes == 0)
    return GANG_OK;
  if (o + (size_t)me * bytes != src)
    memmove(o + (size_t)me * bytes, src, bytes);
  if (p == 1)
    return GANG_OK;
  /* From here on read my own block from out: in may alias it. */
  src = o + (size_t)me * bytes;
  switch (algo) {
  case ALGO_SHM_SINGLE_COPY:
    return allgather_single_copy(c, o, src, bytes);
  case ALGO_SHM_SMALL:
    return allgather_staged(c, o, src, bytes, true);
  case ALGO_SHM_STAGED:
    return allgather_staged(c, o, src, bytes, false);
  default:
    return gang__error(GANG_INTERNAL,
                       "all_gather over shared memory: no algorithm '%s'",
                       gang__algo_name(algo));
  }
}
