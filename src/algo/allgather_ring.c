/* Ring all_gather of equal blocks: p-1 steps, each sending the block
 * received in the previous step to the next rank. Cost (p-1) alpha +
 * (p-1)/p n beta for n bytes gathered: bandwidth-optimal. This rank's block
 * goes to its slot of `out` first (`in` may be that slot). */
#include "algo.h"

#include <string.h>

#include "core/error.h"

gang_status gang__algo_allgather_ring(algo_ctx *a, const algo_call *k) {
  int p = a->size, r = a->rank;
  int next = (r + 1) % p, prev = (r - 1 + p) % p;
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  char *o = k->out;
  if (o + (size_t)r * bytes != k->in && bytes)
    memmove(o + (size_t)r * bytes, k->in, bytes);
  for (int s = 0; s < p - 1; s++) {
    int sb = ((r - s) % p + p) % p;
    int rb = ((r - s - 1) % p + p) % p;
    GANG_CHECK(gang__algo_sendrecv(a, next, o + (size_t)sb * bytes, bytes, prev,
                                   o + (size_t)rb * bytes, bytes, (uint32_t)s));
  }
  return GANG_OK;
}
