/* Close calls over TCP: two algorithms the link model prices within
 * GANG__ALGO_CLOSE of each other (select.h), timed by the members, who
 * take the faster (core/way.h keeps the times and says when to try
 * which).
 *
 * The model prices a byte alike in every message, but a network need not
 * move it so: across 8 hosts of the cluster in a box at 500 us one way
 * (one process forwarding every host's frames) the ring's 256 KiB steps
 * moved each host's bytes about twice as fast as the 1 MiB steps of
 * Bruck's all_gather and of recursive halving, so at 2 MiB the ring took
 * 7.0-7.7 ms where the model's choices took 9.7-12.5 (docs/algorithms.md,
 * "Close calls"). Where the model's margin is that thin, a few calls of
 * each settle it.
 *
 * Way 0 is the pair's lower algorithm id, way 1 the other, so that the
 * class's record holds for whichever the model puts first; a class whose
 * pair changes (a size the model prices differently within the class)
 * starts again. Every member makes the same calls with the same facts,
 * so the books agree on when a choice is due; then each member's two
 * medians go to every member (a dissemination all_gather: ceil(lg p)
 * rounds of 8 bytes per member) and all sum them in rank order, the same
 * sums everywhere. Each member's time runs from its entry, waiting for
 * the others included. */
#include <stdatomic.h>
#include <stdlib.h>

#include "algo.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

_Atomic uint64_t gang__tcp_timed_taken[2];

/* Tags of the agreeing rounds: above any algorithm's step tags. */
#define TAG_AGREE 0x61670000u

/* The way all members take in class c of coll's record. */
static gang_status agree(algo_ctx *a, algo_coll coll, int c,
                         const algo_id pair[2], int *way) {
  const gang__way_book *b = &a->timed->book[coll];
  int p = a->size, r = a->rank;
  float *st = malloc(sizeof *st * 2 * (size_t)p);
  if (st == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", a->what);
  st[0] = (float)gang__way_typical(b, c, 0);
  st[1] = (float)gang__way_typical(b, c, 1);
  /* st[2 i ..] holds member (r + i) % p's medians once i < have. */
  gang_status s = GANG_OK;
  int have = 1;
  for (int d = 1, step = 0; d < p && s == GANG_OK; d *= 2, step++) {
    int n = d < p - d ? d : p - d;
    s = gang__algo_sendrecv(
        a, (r - d + p) % p, st, sizeof *st * 2 * (size_t)n, (r + d) % p,
        st + 2 * have, sizeof *st * 2 * (size_t)n, TAG_AGREE + (uint32_t)step);
    have += n;
  }
  double sum[2] = {0, 0};
  for (int q = 0; q < p && s == GANG_OK; q++) {
    int i = (q - r + p) % p;
    sum[0] += st[2 * i];
    sum[1] += st[2 * i + 1];
  }
  free(st);
  GANG_CHECK(s);
  *way = sum[1] < sum[0] ? 1 : 0;
  if (a->timed->book[coll].agreed[c] != *way + 1) /* a line per change */
    GANG_INFO(COLL,
              "%s: %s of %d members from %zu KiB: %s (us per MiB summed "
              "over the members: %s %.0f, %s %.0f)",
              a->what, gang__algo_coll_name(coll), p,
              (GANG__ALGO_TIMED_FROM << c) >> 10, gang__algo_name(pair[*way]),
              gang__algo_name(pair[0]), sum[0] / 1e3, gang__algo_name(pair[1]),
              sum[1] / 1e3);
  return GANG_OK;
}

gang_status gang__algo_run_tcp_timed(algo_ctx *a, algo_coll coll, algo_id first,
                                     algo_id rival, const algo_call *k,
                                     algo_id *ran) {
  *ran = first;
  if (rival == ALGO_AUTO || rival == first || a->timed == NULL || a->size < 2)
    return gang__algo_run_tcp(a, coll, first, k);
  size_t bytes = k->count * gang_dtype_size(k->dtype);
  gang__way_book *b = &a->timed->book[coll];
  int c = gang__way_class(GANG__ALGO_TIMED_FROM, bytes);
  algo_id pair[2] = {first < rival ? first : rival,
                     first < rival ? rival : first};
  uint8_t *kept = a->timed->pair[coll][c];
  if (kept[0] != pair[0] + 1 || kept[1] != pair[1] + 1) {
    gang__way_forget(b, c);
    kept[0] = (uint8_t)(pair[0] + 1);
    kept[1] = (uint8_t)(pair[1] + 1);
  }
  int64_t t0 = gang__now_ns();
  int way = gang__way_due(b, c);
  if (way < 0) {
    GANG_CHECK(agree(a, coll, c, pair, &way));
    gang__way_set_agreed(b, c, way);
  }
  *ran = pair[way];
  GANG_CHECK(gang__algo_run_tcp(a, coll, pair[way], k));
  atomic_fetch_add_explicit(&gang__tcp_timed_taken[way], 1,
                            memory_order_relaxed);
  gang__way_learn(b, c, way, gang__now_ns() - t0, bytes);
  return GANG_OK;
}
