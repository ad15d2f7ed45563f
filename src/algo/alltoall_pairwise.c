/* all_to_all: every block goes straight to its destination. All 2(p-1)
 * transfers are handed to the engine at once, which interleaves them as the
 * sockets allow: one alpha of latency, (p-1)/p n beta of traffic each way. */
#include "algo.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

gang_status algo_alltoall_pairwise(algo_ctx *a, void *out, const void *in,
                                   size_t bytes) {
  int p = a->size, r = a->rank;
  memcpy((char *)out + (size_t)r * bytes, (const char *)in + (size_t)r * bytes,
         bytes);
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
    x[n++] = (gang__xfer){.peer = a->world[to],
                          .send = true,
                          .tag = 0,
                          .ctx = a->ctx,
                          .seq = a->seq,
                          .buf = (char *)in + (size_t)to * bytes,
                          .len = bytes};
    x[n++] = (gang__xfer){.peer = a->world[from],
                          .send = false,
                          .tag = 0,
                          .ctx = a->ctx,
                          .seq = a->seq,
                          .buf = (char *)out + (size_t)from * bytes,
                          .len = bytes};
  }
  gang_status st = gang__fabric_run(a->f, x, n, a->deadline, a->what);
  if (x != stackx)
    free(x);
  return st;
}
