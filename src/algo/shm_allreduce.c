/* all_reduce over shared memory. The algorithms, which the table in
 * select.c chooses from by size (gang-info prints where; the limits below
 * are the algorithms' own):
 *
 *   flagged lines (up to SHM_LL_ALLREDUCE_MAX, 9 lines: 504 bytes): each
 *     member writes its data into flagged lines (shm_ll.c) and polls every
 *     member's lines at once, so it waits for one cache-line transfer;
 *     every member reduces every member's data in rank order. Measured
 *     faster than the data in the step line even at 8 bytes (0.53-0.79 ->
 *     0.42-0.45 us, far placement, A/B alternated). From 10 lines the
 *     small slot is faster in both placements (512 B: 0.58-0.62 against
 *     0.79-0.80 us far, 0.22-0.23 against 0.27-0.28 near; 896 B: 0.77-0.79
 *     against 0.81-0.85 far).
 *   small (≤ 1 KiB): the data rides in the member's small slot of the
 *     step, read once its step line is published.
 *   all-read (small buffers): each member stages its buffer, then
 *     reduces every member's staged copy into its buffer. One step, which
 *     is most of the cost of a small call.
 *   reduce-scatter + all-gather (larger): per chunk, each member stages
 *     the blocks the others reduce (not its own: it reads that from its
 *     buffer), reduces its 1/p block of the chunk, and stages the result
 *     for the others to copy. Two steps per chunk; each member copies
 *     (p-1)/p of the chunk in, reads 2(p-1)/p of it from the others and
 *     reduces 1/p. Measured faster than all-read from 32 KiB up even for
 *     two members (14-16 GB/s against 9-10 at 256 KiB-4 MiB).
 *   single copy (three or more members, large buffers, when allowed): each
 *     member pulls its block straight from the others' buffers, reduces,
 *     then pulls the others' reduced blocks. Three steps, no staging.
 *     Two members take it for the largest when they measured it faster than
 *     staged chunks (shm_way.c), from the table's staged_or_single_copy
 *     entry.
 *
 * Results are bit-identical on every member: every element is reduced in
 * rank order (m0 op m1 op m2 ...) by one member, or by all in the same
 * order. */
#include <string.h>

#include "algo.h"
#include "core/reduce.h"
#include "shm_algo.h"

/* The most a flagged all_reduce carries (select.c's limit for it). */
#define SHM_LL_ALLREDUCE_MAX (9 * SHM_LL_DATA)
_Static_assert(SHM_LL_ALLREDUCE_MAX <= SHM_LL_MAX, "fits a flagged step");
_Static_assert(SHM_LL_ALLREDUCE_MAX == 504, "select.c's flagged limit");
/* Bytes per member pulled at once by single copy (cache-sized). */
#define SHM_CMA_PIECE (64 * 1024)

/* Flagged lines: every member reduces every member's data in rank
 * order, its own from buf. The first reduce writes straight into buf when
 * this member is 0 or 1 (its data is then read by that reduce and by no
 * later one); the others accumulate in tmp0 and copy once. */
static gang_status ll_allreduce(gang__shm_chan *c, unsigned char *buf,
                                size_t count, gang_dtype dt,
                                gang_reduce_op op) {
  size_t bytes = count * gang_dtype_size(dt);
  uint64_t t;
  GANG_CHECK(gang__shm_ll_step(c, buf, bytes, &t));
  unsigned char tmp0[SHM_LL_ALLREDUCE_MAX], tmp1[SHM_LL_ALLREDUCE_MAX];
  const unsigned char *s0 = buf, *s1 = buf;
  if (c->rank != 0) {
    gang__shm_ll_gather(tmp0, c, 0, t, bytes);
    s0 = tmp0;
  }
  if (c->rank != 1) {
    gang__shm_ll_gather(tmp1, c, 1, t, bytes);
    s1 = tmp1;
  }
  unsigned char *dst = c->rank <= 1 ? buf : tmp0;
  gang__reduce3(dst, s0, s1, count, dt, op);
  for (int j = 2; j < c->size; j++) {
    const unsigned char *src = buf;
    if (j != c->rank) {
      gang__shm_ll_gather(tmp1, c, j, t, bytes);
      src = tmp1;
    }
    gang__reduce(dst, src, count, dt, op);
  }
  if (dst != buf)
    memcpy(buf, dst, bytes);
  return GANG_OK;
}

/* The small slot: every member's data, its own included, is read from the
 * slots, so the result goes straight into buf. */
static gang_status small_allreduce(gang__shm_chan *c, void *buf, size_t count,
                                   gang_dtype dt, gang_reduce_op op) {
  size_t bytes = count * gang_dtype_size(dt);
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin_line(c, t));
  memcpy(gang__shm_slot(c, c->rank, t, bytes), buf, bytes);
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  gang__reduce3(buf, gang__shm_slot(c, 0, t, bytes),
                gang__shm_slot(c, 1, t, bytes), count, dt, op);
  for (int j = 2; j < c->size; j++)
    gang__reduce(buf, gang__shm_slot(c, j, t, bytes), count, dt, op);
  return GANG_OK;
}

static gang_status allread(gang__shm_chan *c, unsigned char *buf, size_t count,
                           gang_dtype dt, gang_reduce_op op) {
  size_t es = gang_dtype_size(dt);
  size_t per = c->chunk / es;
  unsigned char *src[GANG_SHM_MAX_LOCAL];
  for (size_t done = 0; done < count; done += per) {
    size_t n = count - done < per ? count - done : per;
    uint64_t t = ++c->step;
    GANG_CHECK(gang__shm_begin(c, t));
    memcpy(gang__shm_buf(c, c->rank, t), buf + done * es, n * es);
    gang__shm_publish(c, t);
    GANG_CHECK(gang__shm_wait_all(c, t));
    for (int j = 0; j < c->size; j++)
      src[j] = gang__shm_buf(c, j, t);
    shm_reduce_members(buf + done * es, src, c->size, n, dt, op);
  }
  return GANG_OK;
}

/* Member j's block [off, off + len) of the chunk at `done`, as step t
 * offers it: from j's buffer when j went direct (shm.h, "Direct steps"),
 * else from its staging buffer. *token as gang__shm_peek_direct's. */
static gang_status rsag_from(gang__shm_chan *c, int j, uint64_t t, size_t done,
                             size_t off, size_t len, size_t es, void *spare,
                             const unsigned char **out, void **token,
                             bool *direct) {
  gang__shm_direct d;
  *token = NULL;
  if (!gang__shm_get_direct(c, j, t, &d)) {
    *out = gang__shm_buf(c, j, t) + off * es;
    return GANG_OK;
  }
  *direct = true;
  const void *p;
  GANG_CHECK(gang__shm_peek_direct(c, j, &d, (done + off) * es, len * es, spare,
                                   &p, token));
  *out = p;
  return GANG_OK;
}

static gang_status rsag(gang__shm_chan *c, unsigned char *buf, size_t count,
                        gang_dtype dt, gang_reduce_op op) {
  size_t es = gang_dtype_size(dt);
  size_t per = c->chunk / es;
  int p = c->size, me = c->rank;
  unsigned char *src[GANG_SHM_MAX_LOCAL];
  void *tokens[GANG_SHM_MAX_LOCAL];
  /* A buffer from gang_mem_alloc is read where it is: nothing staged. */
  gang__mem_ref seg;
  bool direct = gang__shm_direct_mine(buf, count * es, &seg);
  bool any_direct = direct;
  /* process_vm_readv's pieces of direct peers it cannot map */
  unsigned char *spare = NULL;
  for (size_t done = 0; done < count; done += per) {
    size_t n = count - done < per ? count - done : per;
    unsigned char *chunk = buf + done * es;
    uint64_t t = ++c->step;
    GANG_CHECK(gang__shm_begin(c, t));
    gang__shm_set_direct(c, t, buf, direct ? &seg : NULL);
    /* Stage the blocks the others reduce; my own block is read from my
     * buffer, unless I am past the first two members (the reduction
     * writes my block before it reads my operand, so that stays staged). */
    unsigned char *mine = gang__shm_buf(c, me, t);
    size_t off, len;
    for (int j = 0; j < p; j++) {
      if ((j == me && me < 2) || (j != me && direct))
        continue;
      gang__algo_block(n, p, j, &off, &len);
      memcpy(mine + off * es, chunk + off * es, len * es);
    }
    gang__shm_publish(c, t);
    GANG_CHECK(gang__shm_wait_all(c, t));
    gang__algo_block(n, p, me, &off, &len);
    gang_status st = GANG_OK;
    for (int j = 0; j < p; j++) {
      tokens[j] = NULL;
      if (j == me) {
        src[j] = (me < 2 ? chunk : mine) + off * es;
        continue;
      }
      const unsigned char *f = NULL;
      void *sp = spare;
      if (st == GANG_OK && spare == NULL)
        st = gang__shm_scratch(c, (size_t)p * (per / (size_t)p + 1) * es, &sp);
      spare = sp;
      if (st == GANG_OK)
        st =
            rsag_from(c, j, t, done, off, len, es, spare + (size_t)j * len * es,
                      &f, &tokens[j], &any_direct);
      src[j] = (unsigned char *)f;
    }
    if (st == GANG_OK)
      shm_reduce_members(chunk + off * es, src, p, len, dt, op);
    for (int j = 0; j < p; j++)
      gang__mem_peer_put(tokens[j]);
    GANG_CHECK(st);
    /* Step t+1: stage the reduced block (everyone published t, so the
     * other parity is free), or offer it where it is. */
    uint64_t t2 = ++c->step;
    gang__shm_set_direct(c, t2, buf, direct ? &seg : NULL);
    if (!direct)
      memcpy(gang__shm_buf(c, me, t2) + off * es, chunk + off * es, len * es);
    gang__shm_publish(c, t2);
    GANG_CHECK(gang__shm_wait_all(c, t2));
    for (int j = 0; j < p; j++) {
      if (j == me)
        continue;
      gang__algo_block(n, p, j, &off, &len);
      const unsigned char *f;
      void *token;
      GANG_CHECK(rsag_from(c, j, t2, done, off, len, es, chunk + off * es, &f,
                           &token, &any_direct));
      if (f != chunk + off * es)
        memcpy(chunk + off * es, f, len * es);
      gang__mem_peer_put(token);
    }
  }
  if (!any_direct)
    return GANG_OK;
  uint64_t t = ++c->step; /* every read done: owners may go */
  gang__shm_publish(c, t);
  return gang__shm_wait_all(c, t);
}

static gang_status single_copy(gang__shm_chan *c, unsigned char *buf,
                               size_t count, gang_dtype dt, gang_reduce_op op) {
  size_t es = gang_dtype_size(dt);
  int p = c->size, me = c->rank;
  size_t piece = SHM_CMA_PIECE / es;
  if (piece == 0)
    piece = 1;
  void *scratch;
  GANG_CHECK(gang__shm_scratch(c, (size_t)p * piece * es, &scratch));
  unsigned char *src[GANG_SHM_MAX_LOCAL];
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  gang__shm_pub_in(c, buf);
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  /* Reduce my block, a cache-sized piece at a time. Writing my block of
   * my own buffer is safe: the others read only their own blocks of it. */
  size_t off, len;
  gang__algo_block(count, p, me, &off, &len);
  for (size_t done = 0; done < len; done += piece) {
    size_t n = len - done < piece ? len - done : piece;
    size_t at = (off + done) * es;
    for (int j = 0; j < p; j++) {
      if (j == me && me < 2) {
        src[j] = buf + at; /* read by the first reduce, before it writes */
        continue;
      }
      src[j] = (unsigned char *)scratch + (size_t)j * piece * es;
      if (j == me) {
        memcpy(src[j], buf + at, n * es);
        continue;
      }
      GANG_CHECK(
          gang__shm_read_remote(c, j, src[j], c->ctl[j]->pub.in + at, n * es));
    }
    shm_reduce_members(buf + at, src, p, n, dt, op);
  }
  /* Everyone's block is reduced: pull theirs. */
  uint64_t t2 = ++c->step;
  gang__shm_publish(c, t2);
  GANG_CHECK(gang__shm_wait_all(c, t2));
  for (int j = 0; j < p; j++) {
    if (j == me)
      continue;
    gang__algo_block(count, p, j, &off, &len);
    if (len)
      GANG_CHECK(gang__shm_read_remote(c, j, buf + off * es,
                                       c->ctl[j]->pub.in + off * es, len * es));
  }
  /* Nobody returns (and lets its caller touch the buffer) while a peer
   * may still be reading it. */
  uint64_t t3 = ++c->step;
  gang__shm_publish(c, t3);
  GANG_CHECK(gang__shm_wait_all(c, t3));
  return GANG_OK;
}

/* ---- The handlers (run.c) ---------------------------------------------- */

/* Nothing to reduce: one member, or no elements. */
static bool trivial(const gang__shm_chan *c, const algo_call *k) {
  return c->size == 1 || k->count == 0;
}

gang_status gang__shm_allreduce_flagged(gang__shm_chan *c, const algo_call *k) {
  return trivial(c, k) ? GANG_OK
                       : ll_allreduce(c, k->out, k->count, k->dtype, k->op);
}

gang_status gang__shm_allreduce_small(gang__shm_chan *c, const algo_call *k) {
  return trivial(c, k) ? GANG_OK
                       : small_allreduce(c, k->out, k->count, k->dtype, k->op);
}

gang_status gang__shm_allreduce_allread(gang__shm_chan *c, const algo_call *k) {
  return trivial(c, k) ? GANG_OK
                       : allread(c, k->out, k->count, k->dtype, k->op);
}

gang_status gang__shm_allreduce_staged(gang__shm_chan *c, const algo_call *k) {
  return trivial(c, k) ? GANG_OK : rsag(c, k->out, k->count, k->dtype, k->op);
}

gang_status gang__shm_allreduce_single_copy(gang__shm_chan *c,
                                            const algo_call *k) {
  return trivial(c, k) ? GANG_OK
                       : single_copy(c, k->out, k->count, k->dtype, k->op);
}

gang_status gang__shm_allreduce_measured(gang__shm_chan *c,
                                         const algo_call *k) {
  if (trivial(c, k))
    return GANG_OK;
  int way;
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  gang__mem_ref seg;
  GANG_CHECK(gang__shm_way_agree(c, GANG__SHM_WAY_ALL_REDUCE, bytes,
                                 gang__shm_direct_mine(k->out, bytes, &seg),
                                 &way));
  GANG_CHECK(way == GANG__SHM_WAY_SINGLE_COPY
                 ? single_copy(c, k->out, k->count, k->dtype, k->op)
                 : rsag(c, k->out, k->count, k->dtype, k->op));
  gang__shm_way_learn(c, GANG__SHM_WAY_ALL_REDUCE, way, bytes);
  return GANG_OK;
}
