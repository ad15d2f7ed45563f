/* Two members' all_reduce over TCP by recursive doubling or halving-
 * doubling, whichever the two measured faster (core/way.h: way 0 is
 * recursive doubling, 1 halving-doubling).
 *
 * Between two ranks both move n bytes each way. Recursive doubling does it
 * in one exchange and reduces all n bytes; halving-doubling in two, and
 * reduces half. Which is faster is the machine's: over loopback on the
 * AMD machine of docs/performance.md recursive doubling took 4 MiB in
 * 1.07-1.26 ms against the ring's 2.0-2.3; on the Intel one
 * halving-doubling took 4 MiB in 1.04-1.11 ms against 1.23-1.42, and 64
 * MiB in 17-19 against 21-27 ms (docs/algorithms.md). So from 64 KiB
 * (below, recursive doubling's one exchange wins on both) the members
 * time both ways.
 *
 * The calls take 20 us and more, and a word between the members costs a
 * round trip, so they agree only when a choice is due (gang__way_due):
 * each sends the other its two medians, and both take the way whose
 * medians sum lower (the lower rank's first: the same sum on both).
 * Each member's time runs from its entry, its wait for the other
 * included. Calls below 64 KiB (forced ones) and a path without a record
 * (algo_ctx.way NULL) run recursive doubling. */
#include <stdatomic.h>

#include "algo.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

_Atomic uint64_t gang__tcp_way_taken[2];

#define TAG_AGREE 5000u
/* The first size class. */
#define FIRST_CLASS ((size_t)64 << 10)

/* The way both take in class k: the sum of both members' medians. */
static gang_status agree(algo_ctx *a, int k, int *way) {
  float mine[2] = {(float)gang__way_typical(a->way, k, 0),
                   (float)gang__way_typical(a->way, k, 1)},
        theirs[2];
  int peer = 1 - a->rank;
  GANG_CHECK(gang__algo_sendrecv(a, peer, mine, sizeof mine, peer, theirs,
                                 sizeof theirs, TAG_AGREE));
  const float *lo = a->rank == 0 ? mine : theirs,
              *hi = a->rank == 0 ? theirs : mine;
  float rd = lo[0] + hi[0], hd = lo[1] + hi[1];
  *way = hd < rd ? 1 : 0;
  if (a->way->agreed[k] != *way + 1) /* a line per change, not per call */
    GANG_INFO(COLL,
              "%s: two members' all_reduce from %zu KiB: %s (us per MiB summed "
              "over both: recursive doubling %.0f, halving-doubling %.0f)",
              a->what, (FIRST_CLASS << k) >> 10,
              *way ? "halving_doubling" : "recursive_doubling", rd / 1e3,
              hd / 1e3);
  return GANG_OK;
}

gang_status gang__algo_allreduce_measured(algo_ctx *a, const algo_call *k) {
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  if (a->size != 2 || a->way == NULL || bytes < FIRST_CLASS)
    return gang__algo_allreduce_rd(a, k);
  int64_t t0 = gang__now_ns();
  int c = gang__way_class(FIRST_CLASS, bytes);
  int way = gang__way_due(a->way, c);
  if (way < 0) {
    GANG_CHECK(agree(a, c, &way));
    gang__way_set_agreed(a->way, c, way);
  }
  GANG_CHECK(way == 1 ? gang__algo_allreduce_hd(a, k)
                      : gang__algo_allreduce_rd(a, k));
  atomic_fetch_add_explicit(&gang__tcp_way_taken[way], 1, memory_order_relaxed);
  gang__way_learn(a->way, c, way, gang__now_ns() - t0, bytes);
  return GANG_OK;
}
