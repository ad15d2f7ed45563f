/* all_to_all: every block goes straight to its destination. All 2(p-1)
 * transfers are handed to the engine at once, which interleaves them as the
 * sockets allow: one alpha of latency, (p-1)/p n beta of traffic each way.
 * Blocks are equal (all_to_all) or given per peer (all_to_all_v). */
#include "algo.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Offset and length in bytes of block `i`: equal blocks of `bytes`, or
 * counts[i] elements of es bytes after the blocks before it. */
static void block_of(const size_t *counts, size_t es, size_t bytes, int i,
                     size_t *off, size_t *len) {
  if (counts == NULL) {
    *off = (size_t)i * bytes;
    *len = bytes;
    return;
  }
  size_t o = 0;
  for (int k = 0; k < i; k++)
    o += counts[k];
  *off = o * es;
  *len = counts[i] * es;
}

static gang_status alltoall(algo_ctx *a, void *out, const size_t *rcounts,
                            const void *in, const size_t *scounts, size_t es,
                            size_t bytes) {
  int p = a->size, r = a->rank;
  size_t soff, slen, roff, rlen;
  block_of(scounts, es, bytes, r, &soff, &slen);
  block_of(rcounts, es, bytes, r, &roff, &rlen);
  if (slen != rlen)
    return gang__error(GANG_MISMATCH,
                       "%s: this rank sends itself %zu bytes but expects %zu",
                       a->what, slen, rlen);
  if (slen)
    memcpy((char *)out + roff, (const char *)in + soff, slen);
  if (p == 1)
    return GANG_OK;
  gang__xfer stackx[32];
  gang__xfer *x = stackx;
  if (2 * (p - 1) > 32) {
    x = malloc(sizeof *x * 2 * (size_t)(p - 1));
    if (x == NULL)
      return gang__error(GANG_NO_MEMORY, "%s: out of memory", a->what);
  }
  int n = 0;
  for (int s = 1; s < p; s++) {
    int to = (r + s) % p, from = (r - s + p) % p;
    block_of(scounts, es, bytes, to, &soff, &slen);
    block_of(rcounts, es, bytes, from, &roff, &rlen);
    x[n++] = (gang__xfer){.peer = a->world[to],
                          .send = true,
                          .ctx = a->ctx,
                          .seq = a->seq,
                          .buf = (char *)in + soff,
                          .len = slen};
    x[n++] = (gang__xfer){.peer = a->world[from],
                          .send = false,
                          .ctx = a->ctx,
                          .seq = a->seq,
                          .buf = (char *)out + roff,
                          .len = rlen,
                          .owns_buf = true};
  }
  gang_status st = gang__fabric_run(a->f, x, n, a->deadline, a->what);
  if (x != stackx)
    free(x);
  return st;
}

gang_status gang__algo_alltoall_pairwise(algo_ctx *a, const algo_call *k) {
  return alltoall(a, k->out, NULL, k->in, NULL, 1,
                  k->count * gang_dtype_size(k->dtype));
}

gang_status gang__algo_alltoallv_pairwise(algo_ctx *a, const algo_call *k) {
  return alltoall(a, k->out, k->out_counts, k->in, k->in_counts,
                  gang_dtype_size(k->dtype), 0);
}
