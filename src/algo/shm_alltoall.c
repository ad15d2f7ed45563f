/* all_to_all over shared memory. Where the table prefers each algorithm
 * is select.c's rules (gang-info prints them), not repeated here.
 *
 *   staged (equal blocks): per step, each member stages a part (shm_part)
 *     of every block of its input, one per destination; then copies its
 *     part from every member's staging to out. A member whose input is
 *     from gang_mem_alloc stages nothing: the others copy its parts from
 *     the segment, and one more step ends the call.
 *   single copy (larger blocks, when allowed, larger still when
 *     oversubscribed, and always for variable blocks): each member publishes
 * its input's address (and for all_to_all_v the offset of each destination's
 * block); everyone pulls its blocks straight into out, then waits for all
 * pulls.
 *   staged or single copy (members that outnumber the CPUs, blocks below
 *     single copy's own entry there): whichever they measured faster for
 *     blocks of that size (shm_way.c), agreeing only when a choice is
 *     due. */
#include <string.h>

#include "shm_algo.h"

/* Pulls block `me` of every member's published input into out; each
 * member's published offsets must give the length this member expects. */
static gang_status pull_all(gang__shm_chan *c, unsigned char *out,
                            const size_t *out_off, const size_t *out_len) {
  int p = c->size, me = c->rank;
  for (int k = 1; k < p; k++) {
    int j = (me + k) % p;
    const uint64_t *offs = c->ctl[j]->offs;
    if (offs[me + 1] - offs[me] != out_len[j])
      return gang__error(GANG_MISMATCH,
                         "%s #%llu (gang rank %d/%d, shared memory): gang rank "
                         "%d sends %llu bytes to this rank, which expects %zu",
                         c->op, (unsigned long long)c->opseq, me, p, j,
                         (unsigned long long)(offs[me + 1] - offs[me]),
                         out_len[j]);
    if (out_len[j] == 0)
      continue;
    GANG_CHECK(gang__shm_read_remote(c, j, out + out_off[j],
                                     c->ctl[j]->pub.in + offs[me], out_len[j]));
  }
  uint64_t t2 = ++c->step;
  gang__shm_publish(c, t2);
  return gang__shm_wait_all(c, t2);
}

static gang_status alltoallv(gang__shm_chan *c, void *out,
                             const size_t *out_counts, const void *in,
                             const size_t *in_counts, size_t es) {
  int p = c->size, me = c->rank;
  size_t off_in[GANG_SHM_MAX_LOCAL + 1], off_out[GANG_SHM_MAX_LOCAL],
      len_out[GANG_SHM_MAX_LOCAL] = {0};
  size_t a = 0, b = 0;
  for (int q = 0; q < p; q++) {
    off_in[q] = a;
    a += in_counts[q] * es;
    off_out[q] = b;
    len_out[q] = out_counts[q] * es;
    b += len_out[q];
  }
  off_in[p] = a;
  if (in_counts[me] != out_counts[me])
    return gang__error(GANG_MISMATCH,
                       "%s #%llu (gang rank %d/%d): this rank sends itself "
                       "%zu elements but expects %zu from itself",
                       c->op, (unsigned long long)c->opseq, me, p,
                       in_counts[me], out_counts[me]);
  if (len_out[me])
    memmove((unsigned char *)out + off_out[me],
            (const unsigned char *)in + off_in[me], len_out[me]);
  if (p == 1)
    return GANG_OK;
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  gang__shm_pub_in(c, in);
  for (int q = 0; q <= p; q++)
    c->ctl[me]->offs[q] = off_in[q];
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  return pull_all(c, out, off_out, len_out);
}

static gang_status alltoall_single_copy(gang__shm_chan *c, unsigned char *o,
                                        const unsigned char *src,
                                        size_t bytes) {
  int p = c->size, me = c->rank;
  size_t off[GANG_SHM_MAX_LOCAL], len[GANG_SHM_MAX_LOCAL];
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  gang__shm_pub_in(c, src);
  for (int q = 0; q < p; q++) {
    c->ctl[me]->offs[q] = (size_t)q * bytes;
    off[q] = (size_t)q * bytes;
    len[q] = bytes;
  }
  c->ctl[me]->offs[p] = (size_t)p * bytes;
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  return pull_all(c, o, off, len);
}

/* Staged in parts; a member whose input lies in a gang_mem_alloc segment
 * goes direct: it stages nothing and the others copy its parts from their
 * mapping of the segment (shm.h, "Direct steps"). */
static gang_status alltoall_staged(gang__shm_chan *c, unsigned char *o,
                                   const unsigned char *src, size_t bytes) {
  int p = c->size, me = c->rank;
  size_t part = shm_part(c, 1);
  gang__mem_ref seg;
  bool direct = gang__shm_direct_mine(src, (size_t)p * bytes, &seg);
  bool any_direct = direct;
  for (size_t done = 0; done < bytes; done += part) {
    size_t n = bytes - done < part ? bytes - done : part;
    uint64_t t = ++c->step;
    GANG_CHECK(gang__shm_begin(c, t));
    gang__shm_set_direct(c, t, src, direct ? &seg : NULL);
    unsigned char *stage = gang__shm_buf(c, me, t);
    for (int q = 0; q < p && !direct; q++)
      if (q != me)
        memcpy(stage + (size_t)q * part, src + (size_t)q * bytes + done, n);
    gang__shm_publish(c, t);
    GANG_CHECK(gang__shm_wait_all(c, t));
    for (int k = 1; k < p; k++) {
      int j = (me + k) % p;
      unsigned char *to = o + (size_t)j * bytes + done;
      gang__shm_direct d;
      if (gang__shm_get_direct(c, j, t, &d)) {
        any_direct = true;
        const void *from;
        void *token;
        GANG_CHECK(gang__shm_peek_direct(c, j, &d, (size_t)me * bytes + done, n,
                                         to, &from, &token));
        if (from != to)
          memcpy(to, from, n);
        gang__mem_peer_put(token);
        continue;
      }
      memcpy(to, gang__shm_buf(c, j, t) + (size_t)me * part, n);
    }
  }
  if (!any_direct)
    return GANG_OK;
  uint64_t t = ++c->step; /* every read done: owners may go */
  gang__shm_publish(c, t);
  return gang__shm_wait_all(c, t);
}

/* ---- The handlers (run.c) ---------------------------------------------- */

/* Copies this member's own block; true when that was all there was to do
 * (no bytes, or one member). */
static bool own_block(gang__shm_chan *c, const algo_call *k, size_t *bytes) {
  *bytes = k->count * gang_dtype_size(k->dtype);
  if (*bytes == 0)
    return true;
  size_t at = (size_t)c->rank * *bytes;
  memcpy((unsigned char *)k->out + at, (const unsigned char *)k->in + at,
         *bytes);
  return c->size == 1;
}

gang_status gang__shm_alltoall_single_copy(gang__shm_chan *c,
                                           const algo_call *k) {
  size_t bytes;
  return own_block(c, k, &bytes)
             ? GANG_OK
             : alltoall_single_copy(c, k->out, k->in, bytes);
}

gang_status gang__shm_alltoall_staged(gang__shm_chan *c, const algo_call *k) {
  size_t bytes;
  return own_block(c, k, &bytes) ? GANG_OK
                                 : alltoall_staged(c, k->out, k->in, bytes);
}

gang_status gang__shm_alltoall_measured(gang__shm_chan *c, const algo_call *k) {
  size_t bytes;
  if (own_block(c, k, &bytes))
    return GANG_OK;
  int way;
  GANG_CHECK(gang__shm_way_sparse(c, GANG__SHM_WAY_ALL_TO_ALL, bytes, &way));
  GANG_CHECK(way == GANG__SHM_WAY_SINGLE_COPY
                 ? alltoall_single_copy(c, k->out, k->in, bytes)
                 : alltoall_staged(c, k->out, k->in, bytes));
  gang__shm_way_learn(c, GANG__SHM_WAY_ALL_TO_ALL, way, bytes);
  return GANG_OK;
}

gang_status gang__shm_alltoallv_single_copy(gang__shm_chan *c,
                                            const algo_call *k) {
  return alltoallv(c, k->out, k->out_counts, k->in, k->in_counts,
                   gang_dtype_size(k->dtype));
}
