/* Dissemination barrier: ceil(lg p) rounds; in round k each rank signals
 * rank + 2^k and waits for rank - 2^k (zero-byte messages). After the last
 * round every rank has transitively heard from every other. */
#include "algo.h"

#include "core/error.h"

gang_status gang__algo_barrier_dissemination(algo_ctx *a, const algo_call *k) {
  (void)k;
  int p = a->size, r = a->rank;
  uint32_t round = 0;
  for (int k = 1; k < p; k <<= 1, round++)
    GANG_CHECK(gang__algo_sendrecv(a, (r + k) % p, NULL, 0, (r - k + p) % p,
                                   NULL, 0, round));
  return GANG_OK;
}
