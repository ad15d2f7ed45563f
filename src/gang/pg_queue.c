/* Posting, running and waiting for the collectives of a process-group
 * gang. Collectives of one gang run one at a time in posting order: a
 * blocking call runs its collective on the calling thread (no hand-off, so
 * no wake-up latency); _post calls queue it for the gang's worker thread,
 * started on first use, so it progresses while the caller computes. A wait
 * on queued work may also run it itself. Send and receive are not queued
 * (pg_p2p.c). */
#include <inttypes.h>
#include <stdio.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/reduce.h"
#include "pg_internal.h"

/* Executes one collective and completes its work, telling the peers of a
 * failure. Called without p->mu. */
static void run_one(gang_t *g, gang_work *w) {
  gang__pg *p = g->impl;
  const gang__coll *c = &w->coll;
  /* A collective that starts on a failed world fails without running:
   * who reached it says nothing, and a diagnosis of each one queued
   * behind a timeout would add its budget to the error path every time.
   * One that ran and timed out, here or on a peer that told us, asks. */
  bool ran = gang__fabric_status(p->w->fabric, NULL, 0) == GANG_OK;
  gang_status st = gang__pg_execute(g, w);
  if (p->flight != NULL)
    gang__flight_end(p->flight, w->flight, st,
                     atomic_load_explicit(&p->last_algo, memory_order_relaxed));
  /* Every path reduces MEAN as a SUM; the division happens once, here. */
  if (st == GANG_OK && c->op == GANG_MEAN &&
      (c->kind == GANG_COLL_ALL_REDUCE || c->kind == GANG_COLL_REDUCE_SCATTER))
    gang__reduce_mean_finish(c->out, c->count, c->dtype, g->size);
  if (st == GANG_TIMEOUT && ran)
    gang__pg_diagnose_timeout(g, w);
  else if (st == GANG_TIMEOUT)
    gang__pg_diag_mark_present(g);
  /* A failure found before any byte moved (a bad split, no memory) must
   * still reach the peers, or they wait for this rank until their
   * deadline. */
  if (st != GANG_OK && gang__fabric_status(p->w->fabric, NULL, 0) == GANG_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", gang_last_error());
    gang__fabric_fail(p->w->fabric, st, why);
  }
  if (st != GANG_OK && p->flight != NULL)
    gang__pg_flight_failed(g, gang_last_error());
  gang__work_complete(w, st);
}

/* Claims the right to execute a collective. */
static bool claim_running(gang__pg *p) {
  bool idle = false;
  return atomic_compare_exchange_strong(&p->running, &idle, true);
}

/* Runs queued collectives in order until `until` is done (or, with NULL,
 * while the queue has work). Called with p->mu held; returns with it held.
 * False if it ran nothing (another thread is executing one: it broadcasts
 * p->cv when done). */
static bool drain(gang_t *g, gang_work *until) {
  gang__pg *p = g->impl;
  bool ran = false;
  /* The claim comes before the dequeue: a blocking call that finds the
   * queue empty then finds running set until the dequeued work is done,
   * so it cannot overtake it. */
  while (!TAILQ_EMPTY(&p->queue) && !p->stop &&
         (until == NULL || !atomic_load(&until->done)) && claim_running(p)) {
    gang_work *w = TAILQ_FIRST(&p->queue);
    TAILQ_REMOVE(&p->queue, w, link);
    atomic_fetch_sub(&p->queued, 1);
    pthread_mutex_unlock(&p->mu);
    if (p->flight != NULL)
      gang__flight_start(p->flight, w->flight);
    run_one(g, w);
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->running, false);
    pthread_cond_broadcast(&p->cv);
    ran = true;
  }
  return ran;
}

static void *worker_main(void *arg) {
  gang_t *g = arg;
  gang__pg *p = g->impl;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    if (!TAILQ_EMPTY(&p->queue) && !atomic_load(&p->running) && drain(g, NULL))
      continue;
    pthread_cond_wait(&p->cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* The next collective's sequence number. */
static uint64_t next_seq(gang__pg *p) {
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed) + 1;
  atomic_store_explicit(&p->seq, s, memory_order_relaxed);
  return s;
}

gang_status gang__pg_post(gang_t *g, const gang__coll *c, gang_work *w) {
  gang__pg *p = g->impl;
  if (c->kind == GANG_COLL_SEND || c->kind == GANG_COLL_RECV)
    return gang__pg_post_p2p(g, c, w);
  w->impl = NULL;
  if (!w->heap && atomic_load(&p->queued) == 0 && claim_running(p)) {
    /* A blocking call with nothing queued or running runs here and now,
     * without the lock: its wait then finds it done (no deadline to
     * compute), which is most of a small collective's cost. */
    w->seq = next_seq(p);
    if (p->flight != NULL)
      w->flight = gang__flight_post(p->flight, c, w->seq, GANG__FLIGHT_RUNNING);
    run_one(g, w);
    /* Sequentially consistent with the queuing side (queued, then
     * running): either a work queued meanwhile is seen here and its
     * waiters are woken, or they see running clear and run it. */
    atomic_store(&p->running, false);
    if (atomic_load(&p->queued) > 0) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->cv);
      pthread_mutex_unlock(&p->mu);
    }
    return GANG_OK;
  }
  pthread_mutex_lock(&p->mu);
  if (w->heap && !p->has_thread) {
    /* Start the worker before queuing: a work that fails to post must not
     * stay in the queue. */
    if (pthread_create(&p->thread, NULL, worker_main, g) != 0) {
      pthread_mutex_unlock(&p->mu);
      return gang__error(GANG_SYSTEM, "gang: cannot start its worker thread");
    }
    p->has_thread = true;
  }
  atomic_fetch_add(&p->queued, 1);
  w->seq = next_seq(p);
  if (p->flight != NULL)
    w->flight = gang__flight_post(p->flight, c, w->seq, GANG__FLIGHT_POSTED);
  TAILQ_INSERT_TAIL(&p->queue, w, link);
  if (w->heap)
    pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return GANG_OK;
}

gang_status gang__pg_wait(gang_work *w, int64_t deadline) {
  gang_t *g = w->g;
  gang__pg *p = g->impl;
  if (w->impl != NULL)
    return gang__pg_wait_p2p(w, deadline);
  pthread_mutex_lock(&p->mu);
  while (!atomic_load(&w->done)) {
    /* Running it here saves the worker's wake-up, but the collective then
     * runs with the gang's deadline: not for a shorter wait. */
    if (!atomic_load_explicit(&w->short_wait, memory_order_relaxed) &&
        !atomic_load(&p->running) && !TAILQ_EMPTY(&p->queue) && drain(g, w))
      continue;
    if (gang__deadline_passed(deadline)) {
      /* Make the running collective give up, then wait for it to say so:
       * until then it may still write into its buffers. */
      pthread_mutex_unlock(&p->mu);
      char why[160];
      snprintf(why, sizeof why,
               "%s #%" PRIu64 " on gang rank %d: the caller's deadline passed",
               gang__coll_name(w->coll.kind), w->seq, g->rank);
      gang__fabric_fail(p->w->fabric, GANG_TIMEOUT, why);
      pthread_mutex_lock(&p->mu);
      deadline = GANG_DEADLINE_NONE;
      continue;
    }
    gang__cond_wait_slice(&p->cv, &p->mu, deadline, 50000000);
  }
  pthread_mutex_unlock(&p->mu);
  return w->status;
}

void gang__pg_test(gang_work *w) {
  if (w->impl != NULL)
    gang__pg_test_p2p(w);
  /* Queued collectives progress on the worker thread. */
}

void gang__pg_queue_stop(gang_t *g) {
  gang__pg *p = g->impl;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  bool joined = p->has_thread;
  pthread_mutex_unlock(&p->mu);
  if (joined)
    pthread_join(p->thread, NULL);
  /* Collectives nobody waited for fail: their buffers are the caller's. */
  gang_work *w;
  while ((w = TAILQ_FIRST(&p->queue)) != NULL) {
    TAILQ_REMOVE(&p->queue, w, link);
    gang__error(GANG_ABORTED, "gang destroyed before its %s ran",
                gang__coll_name(w->coll.kind));
    gang__work_complete(w, GANG_ABORTED);
  }
}
