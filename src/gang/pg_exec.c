/* Executing one collective of a process-group gang: over the gang's
 * shared-memory channel when every member is on this host, hierarchically
 * when it spans hosts that each have shared memory (pg_hier.c), else over
 * the fabric's TCP connections; in each case with the algorithm the table
 * in src/algo/select.c names. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/shm_algo.h"
#include "core/clock.h"
#include "core/error.h"
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

/* ---- Shared memory ----------------------------------------------------- */

/* Runs w's collective over the channel with algorithm `a`. */
static gang_status run_shm(gang_t *g, gang_work *w, gang__shm_chan *ch,
                           algo_id a) {
  const gang__coll *c = &w->coll;
  size_t es = gang_dtype_size(c->dtype);
  size_t bytes = c->count * es;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
    return gang__shm_barrier(ch, a);
  case GANG_COLL_ALL_REDUCE:
    return gang__shm_allreduce(ch, c->out, c->count, c->dtype, c->op, a);
  case GANG_COLL_BROADCAST:
    return gang__shm_bcast(ch, c->out, bytes, c->root, a);
  case GANG_COLL_ALL_GATHER:
    return gang__shm_allgather(ch, c->out, c->in, bytes, a);
  case GANG_COLL_ALL_GATHER_LIST: {
    void *stage;
    size_t total = bytes * (size_t)g->size;
    GANG_CHECK(gang__shm_scratch(ch, total + 1, &stage));
    GANG_CHECK(gang__shm_allgather(ch, stage, c->in, bytes, a));
    for (int i = 0; i < g->size && bytes; i++)
      memcpy(c->outs[i], (char *)stage + (size_t)i * bytes, bytes);
    return GANG_OK;
  }
  case GANG_COLL_REDUCE_SCATTER:
    return gang__shm_reduce_scatter(ch, c->out, c->in, c->count, c->dtype,
                                    c->op, a);
  case GANG_COLL_ALL_TO_ALL:
    return gang__shm_alltoall(ch, c->out, c->in, bytes, a);
  case GANG_COLL_ALL_TO_ALL_V:
    return gang__shm_alltoallv(ch, c->out, c->out_counts, c->in, c->in_counts,
                               es);
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return gang__error(GANG_INTERNAL, "%s: not a collective",
                     gang__coll_name(c->kind));
}

/* ---- TCP ------------------------------------------------------------------
 */

/* Runs w's collective flat over TCP. */
static gang_status run_tcp(gang_t *g, gang_work *w) {
  gang__pg *p = g->impl;
  const gang__coll *c = &w->coll;
  char what[64];
  gang__pg_name_call(what, sizeof what, c->kind, w->seq, g->rank, g->size, "");
  algo_ctx a = gang__pg_tcp_ctx(p, w, g->rank, g->size, p->map, p->ctx,
                                gang__deadline_in_ms(g->timeout_ms), what);
  size_t es = gang_dtype_size(c->dtype);
  size_t bytes = c->count * es;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
    return gang__algo_barrier_dissemination(&a);
  case GANG_COLL_ALL_REDUCE:
    return gang__pg_tcp_allreduce(p, &a, c);
  case GANG_COLL_BROADCAST:
    return gang__algo_bcast_binomial(&a, c->out, bytes, c->root);
  case GANG_COLL_ALL_GATHER: {
    char *slot = (char *)c->out + (size_t)g->rank * bytes;
    if (slot != c->in && bytes)
      memmove(slot, c->in, bytes);
    return gang__algo_allgather_ring(&a, c->out, bytes);
  }
  case GANG_COLL_ALL_GATHER_LIST: {
    /* Gather into one contiguous staging buffer, then scatter the slots. */
    algo_ctx s = a;
    s.scratch = &p->scratch[1];
    s.scratch_cap = &p->scratch_cap[1];
    void *stage;
    GANG_CHECK(gang__algo_scratch(&s, bytes * (size_t)g->size + 1, &stage));
    if (bytes)
      memcpy((char *)stage + (size_t)g->rank * bytes, c->in, bytes);
    GANG_CHECK(gang__algo_allgather_ring(&a, stage, bytes));
    for (int i = 0; i < g->size && bytes; i++)
      if (c->outs[i] != (char *)stage + (size_t)i * bytes)
        memcpy(c->outs[i], (char *)stage + (size_t)i * bytes, bytes);
    return GANG_OK;
  }
  case GANG_COLL_REDUCE_SCATTER: {
    algo_ctx s = a;
    s.scratch = &p->scratch[1];
    s.scratch_cap = &p->scratch_cap[1];
    void *stage;
    size_t total = c->count * (size_t)g->size;
    GANG_CHECK(gang__algo_scratch(&s, total * es + 1, &stage));
    if (bytes)
      memcpy(stage, c->in, total * es);
    GANG_CHECK(gang__algo_reduce_scatter_ring_inplace(&a, stage, total,
                                                      c->dtype, c->op, 0));
    if (bytes)
      memcpy(c->out, (char *)stage + (size_t)g->rank * bytes, bytes);
    return GANG_OK;
  }
  case GANG_COLL_ALL_TO_ALL:
    return gang__algo_alltoall_pairwise(&a, c->out, c->in, bytes);
  case GANG_COLL_ALL_TO_ALL_V:
    return gang__algo_alltoallv_pairwise(&a, c->out, c->out_counts, c->in,
                                         c->in_counts, es);
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return gang__error(GANG_INTERNAL, "%s: not a queued collective", what);
}

/* ---- Choosing the path ------------------------------------------------------
 */

/* Bytes as the table measures them (select.h): the buffer, or one
 * member's block. */
static size_t table_bytes(const gang__coll *c) {
  return c->count * gang_dtype_size(c->dtype);
}

gang_status gang__pg_execute(gang_t *g, gang_work *w) {
  gang__pg *p = g->impl;
  const gang__coll *c = &w->coll;
  algo_coll coll = table_coll(c->kind);
  if (p->chan != NULL) {
    algo_facts f = shm_facts(p->chan, table_bytes(c), c->count);
    algo_id a = gang__algo_select(&p->w->choice, coll, ALGO_PATH_SHM, &f);
    if (a != ALGO_AUTO) {
      atomic_store_explicit(&p->last_algo, a, memory_order_relaxed);
      gang__pg_chan_start(p->chan, g, w);
      return run_shm(g, w, p->chan, a);
    }
  }
  if (p->hier != NULL) {
    algo_facts f = gang__pg_tcp_facts(c, g->size);
    gang_status st;
    if (gang__algo_select(&p->w->choice, coll, ALGO_PATH_HIER, &f) ==
        ALGO_HIER) {
      atomic_store_explicit(&p->last_algo, ALGO_HIER, memory_order_relaxed);
      if (gang__pg_execute_hier(g, w, &st))
        return st;
    }
  }
  algo_facts f = gang__pg_tcp_facts(c, g->size);
  atomic_store_explicit(
      &p->last_algo, gang__algo_select(&p->w->choice, coll, ALGO_PATH_TCP, &f),
      memory_order_relaxed);
  return run_tcp(g, w);
}
