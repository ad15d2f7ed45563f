/* Contests over TCP: the link model's choice on trial against its
 * cheapest rival (select.h's gang__algo_rival). The choice runs until its
 * times are in; where its slowest member's median took more than
 * GANG__ALGO_HOLDS times its price, or where the model prices the two
 * within GANG__ALGO_CLOSE of each other (a close call, timed at once),
 * the members time both and take the faster (core/way.h keeps the times
 * and says when to try which; a way that lost by more than
 * GANG__ALGO_CLOSE is not retried).
 *
 * The model prices a byte alike in every message, but a network need not
 * move it so: across 8 hosts of the cluster in a box at 500 us one way
 * (one process forwarding every host's frames) the ring's 256 KiB steps
 * moved each host's bytes about twice as fast as the 1 MiB steps of
 * Bruck's all_gather and of recursive halving, so at 2 MiB the ring took
 * 7.0-7.7 ms where the model's choices took 9.7-12.5 (docs/algorithms.md,
 * "Contests"); on the box without a delay, where the two CPUs are the
 * link, a two-level all_gather took 3.4x its price. A few calls of each
 * settle it.
 *
 * Way 0 is the pair's lower algorithm id, way 1 the other, so that the
 * class's record holds for whichever the model puts first; a class whose
 * pair changes (a size the model prices differently within the class)
 * starts again. Every member makes the same calls with the same facts,
 * so the books agree on when a choice is due; then each member's two
 * medians go to every member (a dissemination all_gather: ceil(lg p)
 * rounds of 8 bytes per member) and all take the way whose slowest
 * member's median is lower, the same everywhere. Each member's time runs
 * from its entry, waiting for the others included, so a member that
 * entered late times a short call: the slowest member's median is the
 * call's time, where the sum over the members let two ways with the same
 * sum but 8 and 12 ms calls (reduce_scatter across 8 hosts) look alike.
 * Each way is tried GANG__WAY_SAMPLES times before the first choice
 * (calls of tens of ms scatter by half between members and calls; with
 * three, the 8-host all_gather and reduce_scatter of 2 MiB chose the
 * slower way in 2 of 6 runs, with five in 1 of 6). */
#include <stdatomic.h>
#include <stdlib.h>

#include "algo.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

_Atomic uint64_t gang__tcp_timed_taken[2];

/* Tags of the agreeing rounds: above any algorithm's step tags (and
 * apart from the two paths' agreement, GANG__ALGO_PATHS_TAGS, which may
 * come first in the same call). */
#define TAG_AGREE 0x61670000u

gang_status gang__algo_timed_agree(algo_ctx *a, const gang__way_book *b, int c,
                                   uint32_t tags, double slow[2], int *way) {
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
    s = gang__algo_sendrecv(a, (r - d + p) % p, st, sizeof *st * 2 * (size_t)n,
                            (r + d) % p, st + 2 * have,
                            sizeof *st * 2 * (size_t)n, tags + (uint32_t)step);
    have += n;
  }
  slow[0] = slow[1] = 0;
  for (int i = 0; i < p && s == GANG_OK; i++) {
    slow[0] = st[2 * i] > slow[0] ? st[2 * i] : slow[0];
    slow[1] = st[2 * i + 1] > slow[1] ? st[2 * i + 1] : slow[1];
  }
  free(st);
  GANG_CHECK(s);
  *way = slow[1] < slow[0] ? 1 : 0;
  return GANG_OK;
}

gang_status gang__algo_contest_way(algo_ctx *a, algo_contest *t, int *way) {
  gang__way_book *b = t->book;
  int k = t->k;
  b->trials = GANG__WAY_SAMPLES;
  t->agreed = 0;
  if (*t->state == 0 && t->close)
    *t->state = 2;
  if (*t->state == 0 && b->n[k][t->chosen] >= GANG__WAY_SAMPLES) {
    /* The model's choice has its times: did it hold? */
    int ignored;
    GANG_CHECK(gang__algo_timed_agree(a, b, k, t->tags, t->slow, &ignored));
    double priced = t->price_ns / ((double)t->bytes / 1048576.0);
    *t->state =
        t->price_ns > 0 && t->slow[t->chosen] > GANG__ALGO_HOLDS * priced ? 2
                                                                          : 1;
    t->agreed = 1;
  }
  if (*t->state != 2) {
    *way = t->chosen;
    return GANG_OK;
  }
  *way = gang__way_due(b, k);
  if (*way < 0) {
    GANG_CHECK(gang__algo_timed_agree(a, b, k, t->tags + 64, t->slow, way));
    if (b->agreed[k] != *way + 1) /* a line per change, not per call */
      t->agreed = 2;
    gang__way_set_agreed(b, k, *way);
    /* A way more than GANG__ALGO_CLOSE times slower is not retried: two
     * calls in 128 of it would cost more than the choice can gain. */
    b->settled[k] = t->slow[1 - *way] > GANG__ALGO_CLOSE * t->slow[*way];
  }
  return GANG_OK;
}

void gang__algo_contest_done(algo_contest *t, int way, int64_t wall) {
  gang__way_learn(t->book, t->k, way, wall, t->bytes);
}

gang_status gang__algo_run_tcp_timed(algo_ctx *a, const algo_choice *choice,
                                     algo_coll coll, const algo_facts *f,
                                     algo_id first, const algo_call *k,
                                     algo_id *ran) {
  *ran = first;
  bool close;
  algo_id rival = a->timed != NULL && a->size > 2
                      ? gang__algo_rival(choice, coll, f, first, &close)
                      : ALGO_AUTO;
  if (rival == ALGO_AUTO || rival == first)
    return gang__algo_run_tcp(a, coll, first, k);
  size_t bytes = gang__algo_moved(coll, f);
  int c = gang__way_class(GANG__ALGO_TIMED_FROM, bytes);
  algo_id pair[2] = {first < rival ? first : rival,
                     first < rival ? rival : first};
  uint8_t *kept = a->timed->pair[coll][c];
  algo_contest t = {.book = &a->timed->book[coll],
                    .state = &a->timed->state[coll][c],
                    .k = c,
                    .chosen = pair[1] == first,
                    .close = close,
                    .price_ns = gang__algo_cost(coll, first, f),
                    .bytes = bytes,
                    .tags = TAG_AGREE};
  if (kept[0] != pair[0] + 1 || kept[1] != pair[1] + 1) {
    gang__way_forget(t.book, c);
    *t.state = 0;
    kept[0] = (uint8_t)(pair[0] + 1);
    kept[1] = (uint8_t)(pair[1] + 1);
  }
  int64_t t0 = gang__now_ns();
  int way;
  GANG_CHECK(gang__algo_contest_way(a, &t, &way));
  if (t.agreed == 1 || t.agreed == 2)
    GANG_INFO(COLL,
              "%s: %s of %d members from %zu KiB: %s (the slowest member's "
              "median, us per MiB: %s %.0f, %s %.0f; the model's %s, priced "
              "%.0f)",
              a->what, gang__algo_coll_name(coll), a->size,
              (GANG__ALGO_TIMED_FROM << c) >> 10,
              t.agreed == 1 ? (*t.state == 2 ? "timed against its rival"
                                             : "the model's choice holds")
                            : gang__algo_name(pair[way]),
              gang__algo_name(pair[0]), t.slow[0] / 1e3,
              gang__algo_name(pair[1]), t.slow[1] / 1e3, gang__algo_name(first),
              t.price_ns / ((double)bytes / 1048576.0) / 1e3);
  *ran = pair[way];
  GANG_CHECK(gang__algo_run_tcp(a, coll, pair[way], k));
  atomic_fetch_add_explicit(&gang__tcp_timed_taken[way], 1,
                            memory_order_relaxed);
  gang__algo_contest_done(&t, way, gang__now_ns() - t0);
  return GANG_OK;
}
