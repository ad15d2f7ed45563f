/* Recursive-doubling all_reduce: lg(p) rounds in which each rank exchanges
 * its whole buffer with the partner whose rank differs in one bit, then
 * reduces. With p not a power of two, the p - p2 extra ranks first fold
 * their data into a partner below p2 and get the result back at the end
 * (2 more rounds for them). Latency-optimal: lg(p) alpha + lg(p) n beta.
 * Used for small messages, and between two ranks at every size (it moves
 * the same bytes as the ring, in one exchange: docs/algorithms.md).
 *
 * Rounds and folds move the buffer in pieces of at most RD_PIECE bytes,
 * each received into scratch and reduced before the next, so the scratch
 * stays RD_PIECE however large the buffer. Partners reduce the same two
 * operands in the same order (lower rank first), so all ranks end with
 * bit-identical results, NaN payloads included. */
#include "algo.h"

#include <string.h>

#include "core/error.h"
#include "core/reduce.h"

#define TAG_FOLD 0u
#define TAG_ROUND 1u
#define TAG_UNFOLD 1000u
/* Bytes exchanged and reduced at a time (a multiple of every element
 * size). Measured no slower than whole-buffer exchanges from 1 MiB pieces
 * up (docs/algorithms.md). */
#define RD_PIECE ((size_t)4 << 20)

/* One exchange with `partner` of the buffer, piece by piece: sends each
 * piece of buf (unless !send) while receiving the partner's into tmp
 * (unless !recv), then reduces it into buf, the lower rank's data first. */
static gang_status exchange(algo_ctx *a, int partner, bool send, bool recv,
                            void *buf, void *tmp, size_t count, gang_dtype dt,
                            gang_reduce_op op, uint32_t tag) {
  size_t es = gang_dtype_size(dt), per = RD_PIECE / es;
  char *b = buf;
  for (size_t done = 0; done < count || done == 0; done += per) {
    size_t n = count - done < per ? count - done : per;
    char *piece = b + done * es;
    GANG_CHECK(gang__algo_sendrecv(a, send ? partner : -1, piece, n * es,
                                   recv ? partner : -1, tmp, n * es, tag));
    if (recv) {
      if (a->rank < partner)
        gang__reduce3(piece, piece, tmp, n, dt, op);
      else
        gang__reduce3(piece, tmp, piece, n, dt, op);
    }
    if (n == 0)
      break;
  }
  return GANG_OK;
}

gang_status gang__algo_allreduce_rd(algo_ctx *a, const algo_call *k) {
  void *buf = k->out;
  size_t count = k->count;
  gang_dtype dt = k->dtype;
  gang_reduce_op op = k->op;
  int p = a->size, r = a->rank;
  if (p == 1)
    return GANG_OK;
  size_t bytes = count * gang_dtype_size(dt);
  int p2 = 1;
  while (p2 * 2 <= p)
    p2 *= 2;
  int extra = p - p2;
  void *tmp;
  GANG_CHECK(gang__algo_scratch(a,
                                bytes == 0         ? 1
                                : bytes < RD_PIECE ? bytes
                                                   : RD_PIECE,
                                &tmp));
  if (r >= p2) {
    GANG_CHECK(
        exchange(a, r - p2, true, false, buf, tmp, count, dt, op, TAG_FOLD));
    /* The result comes back whole, straight into buf. */
    return gang__algo_sendrecv(a, -1, NULL, 0, r - p2, buf, bytes, TAG_UNFOLD);
  }
  if (r < extra)
    GANG_CHECK(
        exchange(a, r + p2, false, true, buf, tmp, count, dt, op, TAG_FOLD));
  uint32_t round = 0;
  for (int mask = 1; mask < p2; mask <<= 1, round++)
    GANG_CHECK(exchange(a, r ^ mask, true, true, buf, tmp, count, dt, op,
                        TAG_ROUND + round));
  if (r < extra)
    GANG_CHECK(
        gang__algo_sendrecv(a, r + p2, buf, bytes, -1, NULL, 0, TAG_UNFOLD));
  return GANG_OK;
}
