/* Binomial-tree broadcast: the root's data reaches all p ranks in
 * ceil(lg p) rounds; each rank receives once from its parent and then sends
 * to its children in one step. Cost ceil(lg p)(alpha + n beta): right for
 * small and medium messages; large ones want a pipelined or
 * scatter-allgather broadcast. */
#include "algo.h"

#include "core/error.h"

gang_status gang__algo_bcast_binomial(algo_ctx *a, const algo_call *k) {
  void *buf = k->out;
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  int root = k->root;
  int p = a->size;
  if (p == 1)
    return GANG_OK;
  int vr = (a->rank - root + p) % p; /* rank relative to the root */
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      int parent = (vr - mask + root) % p;
      GANG_CHECK(gang__algo_sendrecv(a, -1, NULL, 0, parent, buf, bytes, 0));
      break;
    }
    mask <<= 1;
  }
  gang__xfer x[64];
  int n = 0;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < p)
      x[n++] = (gang__xfer){.peer = a->world[(vr + mask + root) % p],
                            .send = true,
                            .tag = 0,
                            .ctx = a->ctx,
                            .seq = a->seq,
                            .buf = buf,
                            .len = bytes};
  }
  if (n == 0)
    return GANG_OK;
  return gang__fabric_run(a->f, x, n, a->deadline, a->what);
}
