/* reduce_scatter over shared memory. Member q's output is block q of every
 * member's input, reduced in rank order.
 *
 *   staged: per step, each member stages a part (shm_part) of every block
 *     of its input, one part per destination; each member then reduces its
 *     own part from every member's staging into out. Each member copies
 *     its whole input once and reads (p-1)/p of it from the others. A
 *     member whose input is from gang_mem_alloc stages nothing: the
 *     others reduce its parts from the segment, and one more step ends
 *     the call.
 *   single copy (larger blocks, when allowed; select.c says where): each member
 *     pulls its block from the others' inputs a cache-sized piece at a
 *     time and reduces; nothing is staged. */
#include <string.h>

#include "core/reduce.h"
#include "shm_algo.h"

#define SHM_RS_PIECE (64 * 1024)

/* Single copy: this member's block pulled from every member's input a
 * piece at a time, reduced into out. */
static gang_status rs_single_copy(gang__shm_chan *c, unsigned char *dst,
                                  const unsigned char *src, size_t count,
                                  gang_dtype dt, gang_reduce_op op) {
  size_t es = gang_dtype_size(dt);
  int p = c->size, me = c->rank;
  unsigned char *from[GANG_SHM_MAX_LOCAL];
  size_t piece = SHM_RS_PIECE / es ? SHM_RS_PIECE / es : 1;
  void *scratch;
  GANG_CHECK(gang__shm_scratch(c, (size_t)p * piece * es, &scratch));
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  gang__shm_pub_in(c, src);
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  for (size_t done = 0; done < count; done += piece) {
    size_t n = count - done < piece ? count - done : piece;
    size_t at = ((size_t)me * count + done) * es;
    for (int j = 0; j < p; j++) {
      if (j == me && me < 2) {
        from[j] = (unsigned char *)src + at;
        continue;
      }
      from[j] = (unsigned char *)scratch + (size_t)j * piece * es;
      if (j == me) { /* out may alias it: the reduce must not eat it */
        memcpy(from[j], src + at, n * es);
        continue;
      }
      GANG_CHECK(
          gang__shm_read_remote(c, j, from[j], c->ctl[j]->pub.in + at, n * es));
    }
    shm_reduce_members(dst + done * es, from, p, n, dt, op);
  }
  uint64_t t2 = ++c->step;
  gang__shm_publish(c, t2);
  return gang__shm_wait_all(c, t2);
}

/* Staged: parts of every block through the staging buffers. A member
 * whose input lies in a gang_mem_alloc segment goes direct: it stages
 * nothing and the others reduce its parts from their mapping of the
 * segment (shm.h, "Direct steps"). */
static gang_status rs_staged(gang__shm_chan *c, unsigned char *dst,
                             const unsigned char *src, size_t count,
                             gang_dtype dt, gang_reduce_op op) {
  size_t es = gang_dtype_size(dt);
  int p = c->size, me = c->rank;
  size_t bytes = count * es;
  unsigned char *from[GANG_SHM_MAX_LOCAL];
  void *tokens[GANG_SHM_MAX_LOCAL];
  size_t part = shm_part(c, es);
  gang__mem_ref seg;
  bool direct = gang__shm_direct_mine(src, (size_t)p * bytes, &seg);
  bool any_direct = direct;
  void *spare = NULL; /* process_vm_readv's pieces, where mapping fails */
  for (size_t done = 0; done < bytes; done += part) {
    size_t n = bytes - done < part ? bytes - done : part;
    uint64_t t = ++c->step;
    GANG_CHECK(gang__shm_begin(c, t));
    gang__shm_set_direct(c, t, src, direct ? &seg : NULL);
    unsigned char *stage = gang__shm_buf(c, me, t);
    if (!direct)
      for (int q = 0; q < p; q++)
        memcpy(stage + (size_t)q * part, src + (size_t)q * bytes + done, n);
    gang__shm_publish(c, t);
    GANG_CHECK(gang__shm_wait_all(c, t));
    gang_status st = GANG_OK;
    for (int j = 0; j < p; j++) {
      tokens[j] = NULL;
      gang__shm_direct d;
      size_t at = (size_t)me * bytes + done;
      if (st != GANG_OK ||
          !(j == me ? direct : gang__shm_get_direct(c, j, t, &d))) {
        from[j] = gang__shm_buf(c, j, t) + (size_t)me * part;
        continue;
      }
      any_direct = true;
      if (j == me) {
        /* out may be this part of the input: the reduce may write over
         * it only as its first or second operand (shm_reduce_members). */
        from[j] = (unsigned char *)src + at;
        if (me >= 2 && dst + done < src + at + n && src + at < dst + done + n) {
          memcpy(stage + (size_t)me * part, src + at, n);
          from[j] = stage + (size_t)me * part;
        }
        continue;
      }
      if (spare == NULL)
        st = gang__shm_scratch(c, (size_t)p * part, &spare);
      const void *f = NULL;
      if (st == GANG_OK)
        st = gang__shm_peek_direct(c, j, &d, at, n,
                                   (unsigned char *)spare + (size_t)j * part,
                                   &f, &tokens[j]);
      from[j] = (unsigned char *)f;
    }
    if (st == GANG_OK)
      shm_reduce_members(dst + done, from, p, n / es, dt, op);
    for (int j = 0; j < p; j++)
      gang__mem_peer_put(tokens[j]);
    GANG_CHECK(st);
  }
  if (!any_direct)
    return GANG_OK;
  uint64_t t = ++c->step; /* every read done: owners may go */
  gang__shm_publish(c, t);
  return gang__shm_wait_all(c, t);
}

/* ---- The handlers (run.c) ---------------------------------------------- */

/* Nothing to exchange: no bytes, or one member (whose block is copied). */
static bool trivial(const gang__shm_chan *c, const algo_call *k) {
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  if (bytes != 0 && c->size == 1 && k->out != k->in)
    memmove(k->out, k->in, bytes);
  return bytes == 0 || c->size == 1;
}

gang_status gang__shm_reduce_scatter_single_copy(gang__shm_chan *c,
                                                 const algo_call *k) {
  return trivial(c, k)
             ? GANG_OK
             : rs_single_copy(c, k->out, k->in, k->count, k->dtype, k->op);
}

gang_status gang__shm_reduce_scatter_staged(gang__shm_chan *c,
                                            const algo_call *k) {
  return trivial(c, k) ? GANG_OK
                       : rs_staged(c, k->out, k->in, k->count, k->dtype, k->op);
}

gang_status gang__shm_reduce_scatter_measured(gang__shm_chan *c,
                                              const algo_call *k) {
  if (trivial(c, k))
    return GANG_OK;
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  int way;
  gang__mem_ref seg;
  bool direct = gang__shm_direct_mine(k->in, (size_t)c->size * bytes, &seg);
  GANG_CHECK(gang__shm_way_agree(c, GANG__SHM_WAY_REDUCE_SCATTER, bytes, direct,
                                 &way));
  GANG_CHECK(way == GANG__SHM_WAY_SINGLE_COPY
                 ? rs_single_copy(c, k->out, k->in, k->count, k->dtype, k->op)
                 : rs_staged(c, k->out, k->in, k->count, k->dtype, k->op));
  gang__shm_way_learn(c, GANG__SHM_WAY_REDUCE_SCATTER, way, bytes);
  return GANG_OK;
}
