/* Send and receive of a process-group gang. They are not queued behind
 * collectives: they register with the fabric at post time (so a posted
 * receive and a posted send to the same peer cannot deadlock each other)
 * and progress whenever any thread waits on the fabric. Their context id
 * is the gang's with the top bit set, so they never match a collective's
 * messages. */
#include "core/error.h"
#include "pg_internal.h"

typedef struct p2p_state {
  gang__xgroup grp;
  gang__xfer x;
  char what[48];
} p2p_state;

_Static_assert(sizeof(p2p_state) <= sizeof(((gang_work *)0)->inline_state),
               "p2p state must fit in the work");

gang_status gang__pg_post_p2p(gang_t *g, const gang__coll *c, gang_work *w) {
  gang__pg *p = g->impl;
  p2p_state *s = (p2p_state *)w->inline_state;
  bool send = c->kind == GANG_COLL_SEND;
  gang__pg_name_p2p(s->what, sizeof s->what, send, c->peer, c->tag);
  s->x = (gang__xfer){.peer = p->map[c->peer],
                      .send = send,
                      .tag = (uint32_t)c->tag,
                      .ctx = p->ctx | PG_P2P_CTX_BIT,
                      .seq = 0,
                      .buf = send ? (void *)c->in : c->out,
                      .len = c->count,
                      .owns_buf = !send};
  w->impl = s;
  if (p->flight != NULL)
    w->flight = gang__flight_post(p->flight, c, 0, GANG__FLIGHT_RUNNING);
  gang_status st = gang__fabric_start(p->w->fabric, &s->x, 1, &s->grp, s->what);
  if (st != GANG_OK) {
    if (p->flight != NULL)
      gang__flight_end(p->flight, w->flight, st, -1);
    return st;
  }
  pthread_mutex_lock(&p->mu);
  TAILQ_INSERT_TAIL(&p->p2p, w, link);
  pthread_mutex_unlock(&p->mu);
  return GANG_OK;
}

/* Takes w off the gang's list, once (a destroy may have done it first).
 * Called with p->mu held. */
static void forget(gang__pg *p, gang_work *w) {
  if (w->link.tqe_prev == NULL)
    return;
  TAILQ_REMOVE(&p->p2p, w, link);
  w->link.tqe_prev = NULL;
}

/* A point-to-point work is done: forget it. */
static void p2p_done(gang__pg *p, gang_work *w, gang_status st) {
  pthread_mutex_lock(&p->mu);
  forget(p, w);
  pthread_mutex_unlock(&p->mu);
  if (p->flight != NULL) {
    gang__flight_end(p->flight, w->flight, st, -1);
    if (st != GANG_OK)
      gang__pg_flight_failed(w->g, gang_last_error());
  }
  gang__work_complete(w, st);
}

gang_status gang__pg_wait_p2p(gang_work *w, int64_t deadline) {
  gang__pg *p = w->g->impl;
  p2p_state *s = w->impl;
  gang_status st =
      gang__fabric_wait(p->w->fabric, &s->grp, &s->x, 1, deadline, s->what);
  p2p_done(p, w, st);
  return st;
}

void gang__pg_test_p2p(gang_work *w) {
  gang__pg *p = w->g->impl;
  p2p_state *s = w->impl;
  bool done = false;
  gang_status st = gang__fabric_test(p->w->fabric, &s->grp, s->what, &done);
  if (st != GANG_OK || done)
    p2p_done(p, w, st);
}

/* Withdrawn from the fabric, which outlives this gang when siblings share
 * the world. */
void gang__pg_p2p_cancel_all(gang_t *g) {
  gang__pg *p = g->impl;
  gang_work *w;
  while ((w = TAILQ_FIRST(&p->p2p)) != NULL) {
    forget(p, w);
    p2p_state *s = w->impl;
    gang__error(GANG_ABORTED, "gang destroyed before its %s completed",
                s->what);
    gang__fabric_cancel(p->w->fabric, &s->x, 1, gang_last_error());
    gang__work_complete(w, GANG_ABORTED);
  }
}
