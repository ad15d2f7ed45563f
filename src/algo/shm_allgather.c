/* all_gather over shared memory. Where the table prefers each algorithm
 * is select.c's rules (gang-info prints them), not repeated here.
 *
 *   small (blocks up to 1 KiB): one step, each member's block in its step
 *     line or small slot.
 *   staged: per chunk of the member's block, each member stages its chunk,
 *     publishes, waits for all, and copies every other member's chunk to
 *     its place in out. One step per chunk; each member reads (p-1)
 *     chunks. A member whose out is from gang_mem_alloc stages nothing:
 *     the others read its chunks from the segment, and one more step
 *     ends the call.
 *   single copy (larger blocks, when allowed): each member
 *     publishes its input's address; everyone pulls every other block
 *     straight from the owner's input into out, then puts its own block
 *     in place, then waits until all pulls are done.
 *   staged or single copy (two members): whichever the members measured
 *     faster for calls of that size and placement (shm_way.c). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "shm_algo.h"

static gang_status allgather_single_copy(gang__shm_chan *c, unsigned char *o,
                                         const unsigned char *src,
                                         size_t bytes) {
  int p = c->size, me = c->rank;
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  gang__shm_pub_in(c, src);
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  for (int k = 1; k < p; k++) {
    int j = (me + k) % p; /* spread the readers over the sources */
    GANG_CHECK(gang__shm_read_remote(c, j, o + (size_t)j * bytes,
                                     c->ctl[j]->pub.in, bytes));
  }
  /* This member's own block last: the others read it from its input,
   * which stays put until they all report their reads done. */
  unsigned char *own = o + (size_t)me * bytes;
  if (own != src)
    memmove(own, src, bytes);
  uint64_t t2 = ++c->step;
  gang__shm_publish(c, t2);
  return gang__shm_wait_all(c, t2);
}

/* Staged in chunks, or (small) in one step through the small slots. A
 * member whose block lies in a gang_mem_alloc segment goes direct: it
 * stages nothing and the others copy its chunks from their mapping of
 * the segment (shm.h, "Direct steps"). */
static gang_status allgather_staged(gang__shm_chan *c, unsigned char *o,
                                    const unsigned char *src, size_t bytes,
                                    bool small, bool own_last) {
  int p = c->size, me = c->rank;
  size_t chunk = small ? bytes : c->chunk;
  gang__mem_ref seg;
  bool direct = !small && gang__shm_direct_mine(src, bytes, &seg);
  bool any_direct = direct;
  for (size_t done = 0; done < bytes; done += chunk) {
    size_t n = bytes - done < chunk ? bytes - done : chunk;
    uint64_t t = ++c->step;
    GANG_CHECK(small ? gang__shm_begin_line(c, t) : gang__shm_begin(c, t));
    if (!small)
      gang__shm_set_direct(c, t, src, direct ? &seg : NULL);
    if (!direct) {
      unsigned char *mine =
          small ? gang__shm_slot(c, me, t, bytes) : gang__shm_buf(c, me, t);
      memcpy(mine, src + done, n);
    }
    gang__shm_publish(c, t);
    GANG_CHECK(gang__shm_wait_all(c, t));
    for (int k = 1; k < p; k++) {
      int j = (me + k) % p;
      unsigned char *to = o + (size_t)j * bytes + done;
      gang__shm_direct d;
      if (!small && gang__shm_get_direct(c, j, t, &d)) {
        any_direct = true;
        const void *from;
        void *token;
        GANG_CHECK(gang__shm_peek_direct(c, j, &d, done, n, to, &from, &token));
        if (from != to)
          memcpy(to, from, n);
        gang__mem_peer_put(token);
        continue;
      }
      const unsigned char *theirs =
          small ? gang__shm_slot(c, j, t, bytes) : gang__shm_buf(c, j, t);
      memcpy(to, theirs, n);
    }
  }
  /* A direct input outside out: this member's own block goes to its slot
   * while the others still read the input. */
  if (own_last)
    memcpy(o + (size_t)me * bytes, src, bytes);
  if (!any_direct)
    return GANG_OK;
  uint64_t t = ++c->step; /* every read done: owners may go */
  gang__shm_publish(c, t);
  return gang__shm_wait_all(c, t);
}

/* ---- The handlers (run.c) ---------------------------------------------- */

/* Puts this member's block in its slot of out (in may alias it); true when
 * that was all there was to do. */
static bool own_block(gang__shm_chan *c, const algo_call *k, size_t *bytes) {
  unsigned char *o = k->out;
  *bytes = k->count * gang_dtype_size(k->dtype);
  if (*bytes == 0)
    return true;
  if (o + (size_t)c->rank * *bytes != k->in)
    memmove(o + (size_t)c->rank * *bytes, k->in, *bytes);
  return c->size == 1;
}

/* From the handlers on, this member's block is read from out. */
static const unsigned char *mine(gang__shm_chan *c, const algo_call *k,
                                 size_t bytes) {
  return (const unsigned char *)k->out + (size_t)c->rank * bytes;
}

/* Single copy reads the others' blocks from their inputs, so its own
 * block moves after the reads (allgather_single_copy) -- unless the input
 * lies inside out elsewhere than its own slot, where the pulls of the
 * others' blocks would overwrite it while they read it: then it moves
 * first and is served from its slot, as staging does. */
gang_status gang__shm_allgather_single_copy(gang__shm_chan *c,
                                            const algo_call *k) {
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  uintptr_t in = (uintptr_t)k->in, out = (uintptr_t)k->out;
  uintptr_t slot = out + (uintptr_t)c->rank * bytes;
  bool elsewhere_in_out =
      in != slot && in < out + (uintptr_t)c->size * bytes && in + bytes > out;
  if (c->size == 1 || elsewhere_in_out)
    return own_block(c, k, &bytes)
               ? GANG_OK
               : allgather_single_copy(c, k->out, mine(c, k, bytes), bytes);
  if (bytes == 0)
    return GANG_OK;
  return allgather_single_copy(c, k->out, k->in, bytes);
}

gang_status gang__shm_allgather_small(gang__shm_chan *c, const algo_call *k) {
  size_t bytes;
  return own_block(c, k, &bytes)
             ? GANG_OK
             : allgather_staged(c, k->out, mine(c, k, bytes), bytes, true,
                                false);
}

/* An input from gang_mem_alloc apart from out, which staging reads there
 * (gang__shm_allgather_staged). */
static bool direct_input(const gang__shm_chan *c, const algo_call *k,
                         size_t bytes) {
  uintptr_t in = (uintptr_t)k->in, out = (uintptr_t)k->out;
  gang__mem_ref seg;
  return (in + bytes <= out || in >= out + (uintptr_t)c->size * bytes) &&
         gang__shm_direct_mine(k->in, bytes, &seg);
}

gang_status gang__shm_allgather_staged(gang__shm_chan *c, const algo_call *k) {
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  /* The others read such an input where it is, and this member's own
   * block moves while they do (no copy of it first, on which they would
   * wait). */
  if (c->size > 1 && bytes > 0 && direct_input(c, k, bytes))
    return allgather_staged(c, k->out, k->in, bytes, false, true);
  return own_block(c, k, &bytes)
             ? GANG_OK
             : allgather_staged(c, k->out, mine(c, k, bytes), bytes, false,
                                false);
}

gang_status gang__shm_allgather_measured(gang__shm_chan *c,
                                         const algo_call *k) {
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  if (c->size == 1 || bytes == 0)
    return gang__shm_allgather_staged(c, k);
  gang__shm_way_kind kind =
      (uintptr_t)k->in == (uintptr_t)k->out + (uintptr_t)c->rank * bytes
          ? GANG__SHM_WAY_ALL_GATHER_IN
          : GANG__SHM_WAY_ALL_GATHER_OUT;
  /* Staging goes direct from such an input, else from this member's slot
   * of out when that lies in a segment. */
  gang__mem_ref seg;
  bool direct = direct_input(c, k, bytes) ||
                gang__shm_direct_mine(mine(c, k, bytes), bytes, &seg);
  int way;
  /* Beyond two members, on shared CPUs (select.c), an agreeing step each
   * call waits for every member to be scheduled: they agree only when a
   * choice is due, and staging goes direct member by member. */
  GANG_CHECK(c->size > 2 ? gang__shm_way_sparse(c, kind, bytes, &way)
                         : gang__shm_way_agree(c, kind, bytes, direct, &way));
  GANG_CHECK(way == GANG__SHM_WAY_SINGLE_COPY
                 ? gang__shm_allgather_single_copy(c, k)
                 : gang__shm_allgather_staged(c, k));
  gang__shm_way_learn(c, kind, way, bytes);
  return GANG_OK;
}
