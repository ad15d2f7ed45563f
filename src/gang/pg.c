/* The process-group gang: collectives over the world's fabric and, where
 * ranks share a host, its shared memory. Its parts are listed in
 * pg_internal.h; this file holds a gang's state and lifetime.
 *
 * Each gang has a context id (sub-gangs derive theirs from the parent's id
 * and a counter that every parent rank advances in the same order, so no
 * communication is needed to agree on it) and a sequence number per
 * collective. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mix.h"
#include "pg.h"
#include "pg_internal.h"
#include "store/server.h"

static const gang__ops pg_ops;

/* The last gang of a world frees it (store, fabric, arena). A world that
 * hosts the store and failed keeps the store until its peers are done with
 * it: every rank that began a diagnosis through it has ended it
 * (gang__pg_diag_linger), and then the store has been idle for 50 ms with
 * nothing parked, for late ones, each for at most two diagnosis budgets.
 * Peers diagnose a timeout through it (pg_diag.c), even when this rank saw
 * another failure (a peer that timed out and closed its connection before
 * it could say why), and a program that destroys its gang right after its
 * error would otherwise take the store away in the middle of theirs.
 * A healthy world's host that leaves before its peers retires the server
 * instead: it serves them until they have all closed their connections
 * (at most GANG_STORE_LINGER), on its own thread, and destroy returns. */
void gang__pg_world_release(pg_world *w) {
  if (w == NULL)
    return;
  pthread_mutex_lock(&w->mu);
  int left = --w->refs;
  pthread_mutex_unlock(&w->mu);
  if (left > 0)
    return;
  gang__pg_exit_remove(w);
  bool failed = w->server != NULL && w->fabric != NULL &&
                gang__fabric_status(w->fabric, NULL, 0) != GANG_OK;
  gang__shm_destroy(w->shm);
  free(w->hosts);
  gang__fabric_destroy(w->fabric);
  if (failed)
    gang__pg_diag_linger(w);
  gang_store_close(w->store);
  if (failed) {
    gang__store_server_wait_idle(w->server, 50, 2 * w->diag_budget_ms);
    gang_store_server_stop(w->server);
  } else {
    gang__store_server_retire(w->server, w->linger_ms);
  }
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static const char *kind_name(int kind) {
  return gang__coll_name((gang__coll_kind)kind);
}

gang_status gang__pg_new(pg_world *w, const int *map, int size, int rank,
                         uint64_t ctx, gang_device device, int64_t timeout_ms,
                         gang_t **out) {
  gang__pg *p = calloc(1, sizeof *p);
  int *m = calloc((size_t)size, sizeof *m);
  if (p == NULL || m == NULL) {
    free(p);
    free(m);
    return gang__error(GANG_NO_MEMORY, "gang: out of memory");
  }
  memcpy(m, map, sizeof *m * (size_t)size);
  for (int i = 1; w->hosts != NULL && i < size && !p->spread; i++)
    p->spread = w->hosts[map[i]] != w->hosts[map[0]];
  atomic_init(&p->last_algo, -1);
  gang_status fst =
      gang__flight_new(w->name, w, map[rank], ctx, rank, size, map, &p->flight);
  if (fst != GANG_OK) {
    free(p);
    free(m);
    return fst;
  }
  TAILQ_INIT(&p->queue);
  TAILQ_INIT(&p->p2p);
  bool local = w->shm != NULL && size > 1;
  for (int i = 0; local && i < size; i++)
    local = gang__shm_local_index(w->shm, map[i]) >= 0;
  if (local) {
    gang_status st =
        gang__shm_chan_attach(w->shm, ctx, map, size, rank, &p->chan);
    if (st != GANG_OK) {
      gang__flight_free(p->flight);
      free(p);
      free(m);
      return st;
    }
    p->chan->kind_name = kind_name;
  } else if (size > 1) {
    gang_status st = gang__pg_hier_new(w, map, size, rank, ctx, &p->hier);
    if (st != GANG_OK) {
      gang__flight_free(p->flight);
      free(p);
      free(m);
      return st;
    }
  }
  p->w = w;
  p->map = m;
  p->ctx = ctx;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  gang_status st = gang__new(&pg_ops, p, rank, size, device, timeout_ms, out);
  if (st != GANG_OK) {
    gang__shm_chan_detach(p->chan);
    gang__pg_hier_free(p->hier);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    gang__flight_free(p->flight);
    free(m);
    free(p);
    return st;
  }
  pthread_mutex_lock(&w->mu);
  w->refs++;
  pthread_mutex_unlock(&w->mu);
  return GANG_OK;
}

static gang_status pg_subgang(gang_t *g, const int *ranks, int n, int index,
                              gang_t **out) {
  gang__pg *p = g->impl;
  pthread_mutex_lock(&p->mu);
  uint64_t k = ++p->subgangs;
  pthread_mutex_unlock(&p->mu);
  if (index < 0) {
    *out = NULL;
    return GANG_OK;
  }
  int *map = malloc(sizeof *map * (size_t)n);
  if (map == NULL)
    return gang__error(GANG_NO_MEMORY, "gang: out of memory");
  for (int i = 0; i < n; i++)
    map[i] = p->map[ranks[i]];
  uint64_t ctx = gang__mix64(p->ctx ^ gang__mix64(k)) & ~PG_P2P_CTX_BIT;
  gang_status st =
      gang__pg_new(p->w, map, n, index, ctx, g->device, g->timeout_ms, out);
  free(map);
  if (st == GANG_OK)
    (*out)->check = g->check;
  return st;
}

/* The peers are told the reason the gang recorded (gang_abort's, or a
 * work freed unfinished). They learn of it through the world, where a
 * sub-gang's rank means nothing: it names the world rank too when they
 * differ. */
static void pg_abort(gang_t *g) {
  gang__pg *p = g->impl;
  char why[640];
  const char *reason = gang_get_last_error(g);
  int n;
  if (reason != NULL && reason[0] != '\0')
    n = snprintf(why, sizeof why, "%.500s", reason);
  else
    n = snprintf(why, sizeof why, "gang_abort on gang rank %d/%d", g->rank,
                 g->size);
  if (p->map[g->rank] != g->rank && n > 0 && (size_t)n < sizeof why)
    snprintf(why + n, sizeof why - (size_t)n, " (world rank %d)",
             p->map[g->rank]);
  gang__fabric_fail(p->w->fabric, GANG_ABORTED, why);
  gang__pg_flight_failed(g, why);
}

static void pg_destroy(gang_t *g) {
  gang__pg *p = g->impl;
  if (p == NULL)
    return;
  gang__pg_queue_stop(g);
  gang__pg_p2p_cancel_all(g);
  gang__shm_chan_detach(p->chan);
  gang__pg_hier_free(p->hier);
  gang__flight_free(p->flight);
  gang__pg_world_release(p->w);
  free(p->scratch[0]);
  free(p->scratch[1]);
  free(p->map);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static const gang__ops pg_ops = {
    .name = "pg",
    .simulated = false,
    .last_algo = gang__pg_last_algo,
    .post = gang__pg_post,
    .wait = gang__pg_wait,
    .test = gang__pg_test,
    .subgang = pg_subgang,
    .abort = pg_abort,
    .destroy = pg_destroy,
};

struct gang__fabric *gang__pg_fabric(gang_t *g) {
  if (g == NULL || g->ops != &pg_ops)
    return NULL;
  return ((gang__pg *)g->impl)->w->fabric;
}

int gang__pg_lost_ranks(gang_t *g, int *out, int cap) {
  if (g == NULL || g->ops != &pg_ops)
    return 0;
  gang__pg *p = g->impl;
  return p->w->fabric != NULL ? gang__fabric_lost_peers(p->w->fabric, out, cap)
                              : 0;
}

gang_status gang__pg_poke(gang_t *g) {
  if (g == NULL || g->ops != &pg_ops)
    return GANG_OK;
  gang__pg *p = g->impl;
  return p->w->fabric != NULL ? gang__fabric_poke(p->w->fabric) : GANG_OK;
}

const char *gang__pg_last_algo(const gang_t *g) {
  if (g == NULL || g->ops != &pg_ops)
    return NULL;
  const gang__pg *p = g->impl;
  int a = atomic_load_explicit(&p->last_algo, memory_order_relaxed);
  return a < 0 ? NULL : gang__algo_name((algo_id)a);
}
