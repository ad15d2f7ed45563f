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
  /* TCP: the close call's other algorithm (gang__algo_rival), and the
   * call, whose gang notes the one that ran */
  algo_id rival;
  gang_t *g;
  const gang_work *w;
} path;

static void chose(gang_t *g, algo_coll coll, const gang__coll *c, algo_id a,
                  const char *path);

static gang_status run(const path *on, algo_coll coll, algo_id a,
                       const algo_call *k) {
  if (on->ch != NULL)
    return gang__algo_run_shm(on->ch, coll, a, k);
  algo_id ran;
  gang_status st =
      gang__algo_run_tcp_timed(on->tcp, coll, a, on->rival, k, &ran);
  if (ran != a && on->g != NULL)
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
      return run_call(g, w, &(path){.ch = p->chan, .rival = ALGO_AUTO}, a);
    }
  }
  algo_facts f = gang__pg_tcp_facts(p->w, c, g->size);
  if (p->hier != NULL) { /* both paths priced for this gang's hosts */
    f.hosts = p->hier->nhosts;
    f.per_host = p->hier->per_host;
    f.rails = p->hier->rail != NULL;
  }
  algo_id two = p->hier != NULL && gang__pg_hier_has(p->hier, c->kind)
                    ? gang__algo_select(&p->w->choice, coll, ALGO_PATH_HIER, &f)
                    : ALGO_AUTO;
  if (two != ALGO_AUTO) {
    gang_status st;
    chose(g, coll, c, two, "several hosts");
    if (gang__pg_execute_hier(g, w, two, &st))
      return st;
  }
  algo_id a = gang__algo_select(&p->w->choice, coll, ALGO_PATH_TCP, &f);
  chose(g, coll, c, a, "TCP");
  char what[64];
  gang__pg_name_call(what, sizeof what, c->kind, w->seq, g->rank, g->size, "");
  algo_ctx t = gang__pg_tcp_ctx(p, w, g->rank, g->size, p->map, p->ctx,
                                gang__deadline_in_ms(g->timeout_ms), what);
  t.way = &p->way_flat;
  t.timed = &p->timed_flat;
  return run_call(g, w,
                  &(path){.tcp = &t,
                          .rival = gang__algo_rival(&p->w->choice, coll, &f, a),
                          .g = g,
                          .w = w},
                  a);
}
