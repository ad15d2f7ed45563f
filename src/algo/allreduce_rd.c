/* Recursive-doubling all_reduce for small messages: lg(p) rounds in which
 * each rank exchanges its whole buffer with the partner whose rank differs
 * in one bit, then reduces. With p not a power of two, the p - p2 extra
 * ranks first fold their data into a partner below p2 and get the result
 * back at the end (2 more rounds for them). Latency-optimal:
 * lg(p) alpha + lg(p) n beta. Partners reduce the same two operands in the
 * same order (lower rank first), so all ranks end with bit-identical
 * results, NaN payloads included. */
#include "algo.h"

#include <string.h>

#include "core/error.h"
#include "core/reduce.h"

#define TAG_FOLD 0u
#define TAG_ROUND 1u
#define TAG_UNFOLD 1000u

gang_status algo_allreduce_rd(algo_ctx *a, void *buf, size_t count,
                              gang_dtype dt, gang_reduce_op op) {
  int p = a->size, r = a->rank;
  if (p == 1)
    return GANG_OK;
  size_t bytes = count * gang_dtype_size(dt);
  int p2 = 1;
  while (p2 * 2 <= p)
    p2 *= 2;
  int extra = p - p2;
  void *tmp;
  GANG_CHECK(algo_scratch(a, bytes ? bytes : 1, &tmp));
  if (r >= p2) {
    GANG_CHECK(algo_sendrecv(a, r - p2, buf, bytes, -1, NULL, 0, TAG_FOLD));
    return algo_sendrecv(a, -1, NULL, 0, r - p2, buf, bytes, TAG_UNFOLD);
  }
  if (r < extra) {
    GANG_CHECK(algo_sendrecv(a, -1, NULL, 0, r + p2, tmp, bytes, TAG_FOLD));
    gang__reduce(buf, tmp, count, dt, op);
  }
  uint32_t round = 0;
  for (int mask = 1; mask < p2; mask <<= 1, round++) {
    int partner = r ^ mask;
    GANG_CHECK(algo_sendrecv(a, partner, buf, bytes, partner, tmp, bytes,
                             TAG_ROUND + round));
    /* The lower rank's data is always the first operand, so both partners
     * compute the same bits even where the operation is not bitwise
     * commutative (which NaN an add or a min returns). */
    if (r < partner)
      gang__reduce3(buf, buf, tmp, count, dt, op);
    else
      gang__reduce3(buf, tmp, buf, count, dt, op);
  }
  if (r < extra)
    GANG_CHECK(algo_sendrecv(a, r + p2, buf, bytes, -1, NULL, 0, TAG_UNFOLD));
  return GANG_OK;
}
