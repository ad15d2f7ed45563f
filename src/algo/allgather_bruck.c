/* Bruck's all_gather of equal blocks over TCP: ceil(lg p) steps. Blocks
 * gather in a stage in the order of the ranks after this one (the stage's
 * block i is rank r + i's); at step k (distance d = 2^k) each rank sends
 * the first min(d, p - d) blocks it holds to rank r - d and appends as
 * many from rank r + d, so after the last step it holds all p, and one
 * pass puts them in rank order in `out`. Cost ceil(lg p) alpha + (p-1) b
 * beta for blocks of b bytes, plus that copy: the latency of recursive
 * doubling for any p, where the ring pays p - 1 alphas (docs/
 * algorithms.md). `in` may be this rank's slot of `out`. */
#include "algo.h"

#include <string.h>

#include "core/error.h"

gang_status gang__algo_allgather_bruck(algo_ctx *a, const algo_call *k) {
  int p = a->size, r = a->rank;
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  char *o = k->out;
  if (p == 1 || bytes == 0) {
    if (bytes && o + (size_t)r * bytes != k->in)
      memmove(o + (size_t)r * bytes, k->in, bytes);
    return GANG_OK;
  }
  char *st;
  GANG_CHECK(gang__algo_scratch(a, (size_t)p * bytes, (void **)&st));
  memcpy(st, k->in, bytes);
  int have = 1;
  uint32_t step = 0;
  for (int d = 1; d < p; d *= 2, step++) {
    int n = d < p - d ? d : p - d;
    int to = (r - d + p) % p, from = (r + d) % p;
    GANG_CHECK(gang__algo_sendrecv(a, to, st, (size_t)n * bytes, from,
                                   st + (size_t)have * bytes, (size_t)n * bytes,
                                   step));
    have += n;
  }
  /* The stage's block i is rank (r + i) % p's: two runs into place. */
  size_t head = (size_t)(p - r) * bytes;
  memcpy(o + (size_t)r * bytes, st, head);
  memcpy(o, st + head, (size_t)r * bytes);
  return GANG_OK;
}
