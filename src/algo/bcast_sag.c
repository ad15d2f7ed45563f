/* Scatter-allgather broadcast (van de Geijn's): the root's buffer is cut
 * into p blocks; a binomial scatter leaves each rank its own block (the
 * root sends each subtree its blocks, halving at each of ceil(lg p)
 * rounds), then a ring all_gather of the blocks gives everyone the whole.
 * Cost (ceil(lg p) + p - 1) alpha + 2 (p-1)/p n beta: twice the bytes of
 * one copy on each link instead of the binomial tree's ceil(lg p) n beta
 * on the critical path, so it wins from a few times alpha/beta bytes at
 * four ranks and more (docs/algorithms.md). Blocks are whole elements
 * (gang__algo_block); ranks are taken relative to the root, so each
 * subtree's blocks are one contiguous range of the buffer. */
#include "algo.h"

#include "core/error.h"

/* Bytes of blocks [lo, hi) of `count` elements in p blocks. */
static void blocks(size_t count, size_t es, int p, int lo, int hi, size_t *off,
                   size_t *len) {
  gang__algo_span(count, p, lo, hi, off, len);
  *off *= es;
  *len *= es;
}

gang_status gang__algo_bcast_sag(algo_ctx *a, const algo_call *k) {
  char *buf = k->out;
  size_t es = gang_dtype_size(k->dtype);
  int p = a->size, root = k->root;
  if (p == 1 || k->count == 0)
    return GANG_OK;
  int vr = (a->rank - root + p) % p;
#define ABS(v) (((v) + root) % p)
  /* Scatter: receive this subtree's blocks [vr, vr + mask) from the
   * parent, then hand each child its own subtree's. */
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      size_t off, len;
      blocks(k->count, es, p, vr, vr + mask < p ? vr + mask : p, &off, &len);
      if (len)
        GANG_CHECK(gang__algo_sendrecv(a, -1, NULL, 0, ABS(vr - mask),
                                       buf + off, len, 0));
      break;
    }
    mask <<= 1;
  }
  gang__xfer x[64];
  int n = 0;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    int child = vr + mask;
    if (child >= p)
      continue;
    size_t off, len;
    blocks(k->count, es, p, child, child + mask < p ? child + mask : p, &off,
           &len);
    if (len)
      x[n++] = (gang__xfer){.peer = a->world[ABS(child)],
                            .send = true,
                            .tag = 0,
                            .ctx = a->ctx,
                            .seq = a->seq,
                            .buf = buf + off,
                            .len = len};
  }
  if (n > 0)
    GANG_CHECK(gang__fabric_run(a->f, x, n, a->deadline, a->what));
  /* All_gather round the ring of relative ranks: at step s a rank passes
   * on block vr - s and takes block vr - s - 1 from its predecessor. */
  int next = ABS((vr + 1) % p), prev = ABS((vr + p - 1) % p);
  for (int s = 0; s < p - 1; s++) {
    int sb = (vr - s + p) % p, rb = (vr - s - 1 + 2 * p) % p;
    size_t so, sl, ro, rl;
    blocks(k->count, es, p, sb, sb + 1, &so, &sl);
    blocks(k->count, es, p, rb, rb + 1, &ro, &rl);
    if (sl || rl)
      GANG_CHECK(gang__algo_sendrecv(a, sl ? next : -1, buf + so, sl,
                                     rl ? prev : -1, buf + ro, rl,
                                     1u + (uint32_t)s));
  }
#undef ABS
  return GANG_OK;
}
