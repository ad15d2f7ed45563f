/* Ring all_reduce: a ring reduce_scatter followed by a ring all_gather.
 * Each of the 2(p-1) steps sends one block (count/p elements) to the next
 * rank while receiving one from the previous, so every link carries traffic
 * in both directions at once and each rank moves 2(p-1)/p of the buffer
 * each way: bandwidth-optimal, latency 2(p-1) alpha. */
#include "algo.h"

#include "core/error.h"
#include "core/reduce.h"

gang_status algo_reduce_scatter_ring_inplace(algo_ctx *a, void *buf,
                                             size_t count, gang_dtype dt,
                                             gang_reduce_op op, uint32_t tag0) {
  int p = a->size, r = a->rank;
  if (p == 1)
    return GANG_OK;
  size_t es = gang_dtype_size(dt);
  size_t maxblk = count / (size_t)p + 1;
  void *tmp;
  GANG_CHECK(algo_scratch(a, maxblk * es, &tmp));
  int next = (r + 1) % p, prev = (r - 1 + p) % p;
  /* Step s: send block (r - s - 1) mod p, receive block (r - s - 2) mod p
   * and reduce it in; after p-1 steps block r is complete. */
  for (int s = 0; s < p - 1; s++) {
    int sb = ((r - s - 1) % p + p) % p;
    int rb = ((r - s - 2) % p + p) % p;
    size_t soff, slen, roff, rlen;
    algo_block(count, p, sb, &soff, &slen);
    algo_block(count, p, rb, &roff, &rlen);
    GANG_CHECK(algo_sendrecv(a, next, (char *)buf + soff * es, slen * es, prev,
                             tmp, rlen * es, tag0 + (uint32_t)s));
    gang__reduce((char *)buf + roff * es, tmp, rlen, dt, op);
  }
  return GANG_OK;
}

gang_status algo_allgather_ring_inplace(algo_ctx *a, void *buf, size_t count,
                                        gang_dtype dt, uint32_t tag0) {
  int p = a->size, r = a->rank;
  size_t es = gang_dtype_size(dt);
  int next = (r + 1) % p, prev = (r - 1 + p) % p;
  /* Step s: send block (r - s) mod p, receive block (r - s - 1) mod p. */
  for (int s = 0; s < p - 1; s++) {
    int sb = ((r - s) % p + p) % p;
    int rb = ((r - s - 1) % p + p) % p;
    size_t soff, slen, roff, rlen;
    algo_block(count, p, sb, &soff, &slen);
    algo_block(count, p, rb, &roff, &rlen);
    GANG_CHECK(algo_sendrecv(a, next, (char *)buf + soff * es, slen * es, prev,
                             (char *)buf + roff * es, rlen * es,
                             tag0 + (uint32_t)s));
  }
  return GANG_OK;
}

gang_status algo_allreduce_ring(algo_ctx *a, void *buf, size_t count,
                                gang_dtype dt, gang_reduce_op op) {
  /* The reduce_scatter leaves block r complete on rank r; the all_gather
   * then circulates the complete blocks. Block r's owner after RS is r, and
   * the all_gather's first send from rank r is block r. */
  GANG_CHECK(algo_reduce_scatter_ring_inplace(a, buf, count, dt, op, 0));
  return algo_allgather_ring_inplace(a, buf, count, dt, (uint32_t)a->size);
}
