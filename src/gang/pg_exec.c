/* Executing one collective of a process-group gang: over the gang's
 * shared-memory channel when every member is on this host, hierarchically
 * when it spans hosts that each have shared memory (pg_hier.c), else over
 * the fabric's TCP connections; in each case with the algorithm the table
 * in src/algo/select.c names, run by that algorithm's handler
 * (src/algo/run.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/shm_algo.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "pg_internal.h"

/* ---- The table's inputs -------------------------------------------------- */

/* The collective as the table knows it (ALGO_COLL_COUNT for send/recv). */
static algo_coll table_coll(gang__coll_kind kind) {
  switch (kind) {
  case GANG_COLL_BARRIER:
    return ALGO_BARRIER;
  case GANG_COLL_ALL_REDUCE:
    return ALGO_ALL_REDUCE;
  case GANG_COLL_BROADCAST:
    return ALGO_BROADCAST;
  case GANG_COLL_ALL_GATHER:
  case GANG_COLL_ALL_GATHER_LIST:
    return ALGO_ALL_GATHER;
  case GANG_COLL_REDUCE_SCATTER:
    return ALGO_REDUCE_SCATTER;
  case GANG_COLL_ALL_TO_ALL:
    return ALGO_ALL_TO_ALL;
  case GANG_COLL_ALL_TO_ALL_V:
    return ALGO_ALL_TO_ALL_V;
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return ALGO_COLL_COUNT;
}

/* ---- Running on a path --------------------------------------------------- */

/* One path of one call: the shared-memory channel, or the fabric. */
typedef struct path {
  gang__shm_chan *ch; /* NULL: TCP */
  algo_ctx *tcp;
  /* TCP: the facts the table chose by (a contest may run the other
   * algorithm: tcp_timed.c), and the call, whose gang notes the one that
   * ran */
  const algo_facts *f;
  gang_t *g;
  const gang_work *w;
} path;

static void chose(gang_t *g, algo_coll coll, const gang__coll *c, algo_id a,
                  const char *path);

static gang_status run(const path *on, algo_coll coll, algo_id a,
                       const algo_call *k) {
  if (on->ch != NULL)
    return gang__algo_run_shm(on->ch, coll, a, k);
  if (on->f == NULL)
    return gang__algo_run_tcp(on->tcp, coll, a, k);
  gang__pg *p = on->g->impl;
  algo_id ran;
  gang_status st =
      gang__algo_run_tcp_timed(on->tcp, &p->w->choice, coll, on->f, a, k, &ran);
  if (ran != a)
    chose(on->g, coll, &on->w->coll, ran, "TCP, timed");
  return st;
}

/* Runs w's collective with algorithm `a` of the path's table: every kind
 * through the handler of its table collective; all_gather into a list of
 * buffers through one contiguous stage, then out to the list. */
static gang_status run_call(gang_t *g, gang_work *w, const path *on,
                            algo_id a) {
  const gang__coll *c = &w->coll;
  algo_call k = gang__pg_algo_call(c);
  if (c->kind != GANG_COLL_ALL_GATHER_LIST)
    return run(on, table_coll(c->kind), a, &k);
  size_t bytes = c->count * gang_dtype_size(c->dtype);
  size_t total = bytes * (size_t)g->size;
  void *stage;
  GANG_CHECK(on->ch != NULL ? gang__shm_scratch(on->ch, total + 1, &stage)
                            : gang__algo_stage(on->tcp, total + 1, &stage));
  k.out = stage;
  GANG_CHECK(run(on, ALGO_ALL_GATHER, a, &k));
  for (int i = 0; i < g->size && bytes; i++)
    if (c->outs[i] != (char *)stage + (size_t)i * bytes)
      memcpy(c->outs[i], (char *)stage + (size_t)i * bytes, bytes);
  return GANG_OK;
}

/* ---- Choosing the path ------------------------------------------------------
 */

/* Notes what runs: for gang_last_algorithm, and in the log the
 * first time this gang runs the algorithm for the collective -- a line per
 * choice, not per call, as NCCL's INFO lines say its choices. */
static void chose(gang_t *g, algo_coll coll, const gang__coll *c, algo_id a,
                  const char *path) {
  gang__pg *p = g->impl;
  atomic_store_explicit(&p->last_algo, a, memory_order_relaxed);
  _Static_assert(ALGO_COUNT <= 32, "a bit per algorithm");
  if (p->logged_algos[coll] & (1u << a))
    return;
  p->logged_algos[coll] |= 1u << a;
  GANG_INFO(COLL, "%s on a gang of %d: %s (%s), first at %zu bytes",
            gang__coll_name(c->kind), g->size, gang__algo_name(a), path,
            c->count * gang_dtype_size(c->dtype));
}

/* Over flat TCP on ctx t: the table's algorithm for f, or the faster of
 * a close call's two (tcp_timed.c). */
static gang_status run_flat(gang_t *g, gang_work *w, algo_coll coll,
                            const algo_facts *f, algo_ctx *t) {
  gang__pg *p = g->impl;
  algo_id a = gang__algo_select(&p->w->choice, coll, ALGO_PATH_TCP, f);
  chose(g, coll, &w->coll, a, "TCP");
  return run_call(g, w, &(path){.tcp = t, .f = f, .g = g, .w = w}, a);
}

_Atomic uint64_t gang__paths_timed_taken[2];

/* The two paths of a gang over several hosts with shared memory, where
 * they can contest (gang__algo_two_level): the two-level form is way 0,
 * flat TCP way 1, the model's choice runs until its times are in and the
 * two are timed against each other where it took more than twice its
 * price or the model prices them within 2x (tcp_timed.c's contest, a
 * record per collective, agreed over flat TCP). Across 4 hosts x 2 ranks
 * at 500 us one way the flat ring took 2 MiB all_gather and
 * reduce_scatter in 4.9 and 5.9 ms where the two-level forms, priced
 * cheaper, took 6.5 and 8.3 (docs/algorithms.md, "Contests"). */
static gang_status paths_timed(gang_t *g, gang_work *w, algo_coll coll,
                               algo_id form, algo_id two, bool close,
                               const algo_facts *f, algo_ctx *t) {
  gang__pg *p = g->impl;
  size_t bytes = gang__algo_moved(coll, f);
  int k = gang__way_class(GANG__ALGO_TIMED_FROM, bytes);
  uint8_t *kept = p->timed_paths.pair[coll][k];
  algo_contest c = {.book = &p->timed_paths.book[coll],
                    .state = &p->timed_paths.state[coll][k],
                    .k = k,
                    .chosen = two != ALGO_AUTO ? 0 : 1,
                    .close = close,
                    .price_ns =
                        two != ALGO_AUTO
                            ? gang__algo_cost(coll, form, f)
                            : gang__algo_cost_path(coll, ALGO_PATH_TCP, f),
                    .bytes = bytes,
                    .tags = GANG__ALGO_PATHS_TAGS};
  if (kept[0] != form + 1 || kept[1] != c.chosen + 1) {
    gang__way_forget(c.book, k); /* the rails' form or the leaders', or
                                    the model's choice, changed */
    *c.state = 0;
    kept[0] = (uint8_t)(form + 1);
    kept[1] = (uint8_t)(c.chosen + 1);
  }
  int64_t t0 = gang__now_ns();
  int way;
  GANG_CHECK(gang__algo_contest_way(t, &c, &way));
  if (c.agreed != 0)
    GANG_INFO(COLL,
              "%s: %s from %zu KiB: %s (the slowest member's median, us per "
              "MiB: %s %.0f, flat TCP %.0f; the model's %s, priced %.0f)",
              t->what, gang__algo_coll_name(coll),
              (GANG__ALGO_TIMED_FROM << k) >> 10,
              c.agreed == 1 ? (*c.state == 2 ? "timed against the other path"
                                             : "the model's choice holds")
              : way         ? "flat TCP"
                            : gang__algo_name(form),
              gang__algo_name(form), c.slow[0] / 1e3, c.slow[1] / 1e3,
              c.chosen ? "flat TCP" : gang__algo_name(form),
              c.price_ns / ((double)bytes / 1048576.0) / 1e3);
  gang_status st = GANG_OK;
  if (way == 1)
    st = run_flat(g, w, coll, f, t);
  else {
    chose(g, coll, &w->coll, form, "several hosts");
    if (!gang__pg_execute_hier(g, w, form, &st))
      st = gang__error(GANG_INTERNAL, "%s: no two-level form", t->what);
  }
  GANG_CHECK(st);
  atomic_fetch_add_explicit(&gang__paths_timed_taken[way], 1,
                            memory_order_relaxed);
  gang__algo_contest_done(&c, way, gang__now_ns() - t0);
  return GANG_OK;
}

gang_status gang__pg_execute(gang_t *g, gang_work *w) {
  gang__pg *p = g->impl;
  const gang__coll *c = &w->coll;
  algo_coll coll = table_coll(c->kind);
  if (coll == ALGO_COLL_COUNT)
    return gang__error(GANG_INTERNAL, "%s: not a queued collective",
                       gang__coll_name(c->kind));
  if (p->chan != NULL) {
    algo_facts f =
        shm_facts(p->chan, c->count * gang_dtype_size(c->dtype), c->count);
    algo_id a = gang__algo_select(&p->w->choice, coll, ALGO_PATH_SHM, &f);
    if (a != ALGO_AUTO) {
      chose(g, coll, c, a, "shared memory");
      gang__pg_chan_start(p->chan, g, w);
      return run_call(g, w, &(path){.ch = p->chan}, a);
    }
  }
  algo_facts f = gang__pg_tcp_facts(p->w, c, g->size, p->spread);
  if (p->hier != NULL) { /* both paths priced for this gang's hosts */
    f.hosts = p->hier->nhosts;
    f.per_host = p->hier->per_host;
    f.rails = p->hier->rail != NULL;
  }
  bool close = false,
       has = p->hier != NULL && gang__pg_hier_has(p->hier, c->kind);
  algo_id two = has ? gang__algo_select(&p->w->choice, coll, ALGO_PATH_HIER, &f)
                    : ALGO_AUTO;
  algo_id form =
      has ? gang__algo_two_level(&p->w->choice, coll, &f, &close) : ALGO_AUTO;
  char what[64];
  gang__pg_name_call(what, sizeof what, c->kind, w->seq, g->rank, g->size, "");
  algo_ctx t = gang__pg_tcp_ctx(p, w, g->rank, g->size, p->map, p->ctx,
                                gang__deadline_in_ms(g->timeout_ms), what);
  t.way = &p->way_flat;
  t.timed = &p->timed_flat;
  if (form != ALGO_AUTO && (two == ALGO_AUTO || two == form))
    return paths_timed(g, w, coll, form, two, close, &f, &t);
  if (two != ALGO_AUTO) {
    gang_status st;
    chose(g, coll, c, two, "several hosts");
    if (gang__pg_execute_hier(g, w, two, &st))
      return st;
  }
  return run_flat(g, w, coll, &f, &t);
}
