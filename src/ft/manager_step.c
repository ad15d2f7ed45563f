/* The manager's step (manager_impl.h): the quorum worker, the replica
 * gang's reconfiguration, healing, all_reduce and the commit vote.
 *
 * A quorum, as torchft computes it per rank (compute_quorum_results): the
 * members sorted by replica id; this group's replica rank is its index;
 * max_step the highest step; the up-to-date members those at max_step (at
 * step 0 with init_sync, only the primary, max[group_rank % n], so every
 * replica starts from one state); the others are recovery targets, target
 * i healing from up-to-date member (i + group_rank) % n_up, rank r of it
 * to rank r (so sharded states line up). Healing sends the step and every
 * registered buffer over the replica gang, sources to targets, before the
 * step's all_reduce (torchft's sync quorum). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/reduce.h"
#include "ft_impl.h"
#include "manager_impl.h"

#define TAG_STEP 1000
#define TAG_STATE 1001 /* + index of the registered buffer */

/* ---- Talking to the lighthouse (group rank 0) ---------------------------- */

/* One quorum, reconnecting while the lighthouse is away (restarted, say),
 * until the quorum timeout. */
static gang_status ask_lighthouse(gang_manager *m, gang__lh_member *me,
                                  gang__lh_quorum *q) {
  int64_t deadline = gang__deadline_in_ms(m->quorum_timeout_ms);
  gang_status st = GANG_TIMEOUT;
  char last[512] = "the lighthouse did not answer";
  while (!gang__deadline_passed(deadline)) {
    int64_t left = (deadline - gang__now_ns()) / 1000000 + 1;
    if (m->lh_quorum == NULL &&
        gang__lh_connect(m->lighthouse, left, &m->lh_quorum) != GANG_OK) {
      snprintf(last, sizeof last, "%s", gang_last_error());
      struct timespec ts = {0, 100 * 1000 * 1000}; /* retry pacing */
      nanosleep(&ts, NULL);
      continue;
    }
    pthread_mutex_lock(&m->mu);
    me->commit_quorum =
        m->commit_inc == gang__lh_incarnation(m->lh_quorum) ? m->commit_qid : 0;
    pthread_mutex_unlock(&m->mu);
    st = gang__lh_join(m->lh_quorum, me, left, q);
    if (st == GANG_OK)
      return GANG_OK;
    snprintf(last, sizeof last, "%s", gang_last_error());
    if (st == GANG_TIMEOUT)
      break;
    gang__lh_close(m->lh_quorum); /* lost: reconnect */
    m->lh_quorum = NULL;
  }
  return gang__error(GANG_TIMEOUT,
                     "replica %s: no quorum from the lighthouse at %s within "
                     "%" PRId64 " ms: %s",
                     m->replica_id, m->lighthouse, m->quorum_timeout_ms, last);
}

/* ---- Sharing the quorum with the group ----------------------------------- */

/* Group rank 0 asks; every rank of the group gets the same answer (or the
 * same error). */
static gang_status shared_quorum(gang_manager *m, bool shrink_only,
                                 gang__lh_quorum *q) {
  int32_t status = GANG_OK;
  char *rec = NULL;
  size_t len = 0;
  if (m->group_rank == 0) {
    gang__lh_member me = {0};
    snprintf(me.replica_id, sizeof me.replica_id, "%s", m->replica_id);
    pthread_mutex_lock(&m->mu);
    me.step = m->step;
    me.commit_failures = m->commit_failures;
    pthread_mutex_unlock(&m->mu);
    me.world_size = m->group_size;
    me.shrink_only = shrink_only;
    status = ask_lighthouse(m, &me, q);
    if (status == GANG_OK) {
      rec = gang__lh_quorum_encode(q, &len);
      if (rec == NULL)
        status = gang__error(GANG_NO_MEMORY, "replica quorum: out of memory");
    }
    if (status != GANG_OK) {
      free(rec);
      rec = strdup(gang_last_error());
      len = rec != NULL ? strlen(rec) + 1 : 0;
    }
  }
  if (m->vote == NULL) { /* a group of one: nobody to share it with */
    free(rec);
    return (gang_status)status;
  }
  /* Rank 0 may take the whole quorum timeout: the others wait that long
   * and a little more, then give up without failing the group's gang. */
  gang_work *w = NULL;
  gang_status st = gang_broadcast_post(m->vote, &status, 1, GANG_INT32, 0, &w);
  if (st == GANG_OK) {
    st = gang_work_wait(w, m->quorum_timeout_ms + m->timeout_ms);
    gang_work_free(w);
  }
  void *data = rec;
  if (st == GANG_OK)
    st = gang_broadcast_bytes(m->vote, &data, &len, 0);
  if (m->group_rank != 0 && st == GANG_OK) {
    if (status != GANG_OK)
      st = gang__error((gang_status)status, "%.*s", (int)len, (char *)data);
    else
      st = gang__lh_quorum_decode(data, len, q);
    free(data);
  } else {
    free(rec);
    if (st == GANG_OK && status != GANG_OK)
      st = (gang_status)status;
  }
  return st;
}

/* ---- This replica's place -------------------------------------------------
 */

typedef struct place {
  int rank, n; /* among the replicas */
  int64_t max_step;
  int64_t commit_quorum; /* of the up-to-date replicas */
  int ntargets;          /* replicas that receive the state */
  int src;               /* replica rank to heal from, -1: none */
  int dst[1024];         /* replica ranks to send to (n <= 1024) */
  int ndst;
} place;

static gang_status find_place(const gang_manager *m, const gang__lh_quorum *q,
                              place *p) {
  memset(p, 0, sizeof *p);
  p->rank = -1;
  p->src = -1;
  p->n = q->n;
  int up[1024], nup = 0;
  p->max_step = 0;
  for (int i = 0; i < q->n; i++) {
    if (strcmp(q->members[i].replica_id, m->replica_id) == 0)
      p->rank = i;
    if (q->members[i].step > p->max_step)
      p->max_step = q->members[i].step;
  }
  if (p->rank < 0)
    return gang__error(GANG_INTERNAL,
                       "quorum %" PRId64 " does not include replica %s",
                       q->quorum_id, m->replica_id);
  if (q->n > 1024)
    return gang__error(GANG_NOT_SUPPORTED,
                       "quorum of %d replicas: at most "
                       "1024",
                       q->n);
  /* Up to date: at max_step, committed in the newest quorum of those. */
  for (int i = 0; i < q->n; i++)
    if (q->members[i].step == p->max_step &&
        q->members[i].commit_quorum > p->commit_quorum)
      p->commit_quorum = q->members[i].commit_quorum;
  for (int i = 0; i < q->n; i++)
    if (q->members[i].step == p->max_step &&
        q->members[i].commit_quorum == p->commit_quorum)
      up[nup++] = i;
  if (m->init_sync && p->max_step == 0) {
    up[0] = up[m->group_rank % nup]; /* the primary alone */
    nup = 1;
  }
  /* Targets in member order; target k heals from up[(k + group_rank) %
   * nup]. */
  int k = 0;
  for (int i = 0; i < q->n; i++) {
    bool fresh = false;
    for (int j = 0; j < nup; j++)
      fresh |= up[j] == i;
    if (fresh)
      continue;
    int src = up[(k + m->group_rank) % nup];
    if (i == p->rank)
      p->src = src;
    if (src == p->rank)
      p->dst[p->ndst++] = i;
    k++;
  }
  p->ntargets = k;
  return GANG_OK;
}

/* ---- Healing ---------------------------------------------------------------
 */

static gang_status wait_all(gang_work **w, int n, int64_t timeout_ms) {
  gang_status st = GANG_OK;
  for (int i = 0; i < n; i++) {
    gang_status s = gang_work_wait(w[i], timeout_ms);
    if (st == GANG_OK)
      st = s;
    gang_work_free(w[i]);
  }
  return st;
}

static gang_status heal(gang_manager *m, const place *p, int64_t *step) {
  gang_t *r = m->replica;
  int n = m->nstates + 1;
  if (p->src >= 0) { /* receive the step, then every buffer */
    gang_work **w = calloc((size_t)n, sizeof *w);
    if (w == NULL)
      return gang__error(GANG_NO_MEMORY, "healing: out of memory");
    int posted = 0;
    gang_status st =
        gang_recv_post(r, step, sizeof *step, p->src, TAG_STEP, &w[posted]);
    if (st == GANG_OK)
      posted++;
    for (int i = 0; st == GANG_OK && i < m->nstates; i++) {
      st = gang_recv_post(r, m->states[i].buf, m->states[i].len, p->src,
                          TAG_STATE + i, &w[posted]);
      if (st == GANG_OK)
        posted++;
    }
    gang_status ws = wait_all(w, posted, m->timeout_ms);
    free(w);
    return st != GANG_OK ? st : ws;
  }
  if (p->ndst == 0)
    return GANG_OK;
  gang_work **w = calloc((size_t)(n * p->ndst), sizeof *w);
  if (w == NULL)
    return gang__error(GANG_NO_MEMORY, "healing: out of memory");
  int posted = 0;
  gang_status st = GANG_OK;
  for (int d = 0; st == GANG_OK && d < p->ndst; d++) {
    st = gang_send_post(r, step, sizeof *step, p->dst[d], TAG_STEP, &w[posted]);
    if (st == GANG_OK)
      posted++;
    for (int i = 0; st == GANG_OK && i < m->nstates; i++) {
      st = gang_send_post(r, m->states[i].buf, m->states[i].len, p->dst[d],
                          TAG_STATE + i, &w[posted]);
      if (st == GANG_OK)
        posted++;
    }
  }
  gang_status ws = wait_all(w, posted, m->timeout_ms);
  free(w);
  return st != GANG_OK ? st : ws;
}

/* ---- One quorum ------------------------------------------------------------
 */

/* Publishes the phases timed so far (the step's error time stays). */
static void set_timings(gang_manager *m, const gang_manager_timings *t) {
  pthread_mutex_lock(&m->mu);
  int64_t error_ns = m->timings.error_ns;
  m->timings = *t;
  m->timings.error_ns = error_ns;
  pthread_mutex_unlock(&m->mu);
}

static gang_status run_quorum(gang_manager *m, bool allow_heal,
                              bool shrink_only) {
  gang__lh_quorum q = {0};
  gang_manager_timings t = {0};
  int64_t t0 = gang__now_ns();
  gang_status qs = shared_quorum(m, shrink_only, &q);
  t.quorum_ms = (double)(gang__now_ns() - t0) / 1e6;
  set_timings(m, &t);
  GANG_CHECK(qs);
  place p;
  gang_status st = find_place(m, &q, &p);
  if (st != GANG_OK) {
    gang__lh_quorum_fini(&q);
    return st;
  }
  pthread_mutex_lock(&m->mu);
  bool changed = q.quorum_id != m->q.quorum_id ||
                 q.incarnation != m->q.incarnation ||
                 !gang_ft_configured(m->replica);
  int64_t step = m->step;
  gang__lh_quorum_fini(&m->q);
  m->q = q; /* the worker's now; readers copy under mu */
  m->replica_rank = p.rank;
  /* Healing first (sync quorum): every member takes part. Without it only
   * the members at max_step do; the others send zeros. Every replica of a
   * job passes the same allow_heal, so all divide alike. */
  m->participants = allow_heal ? p.n : p.n - p.ntargets;
  m->participating = p.src < 0 || allow_heal;
  pthread_mutex_unlock(&m->mu);
  gang__mgr_managed_resize(m);
  if (changed) {
    char addr[512];
    snprintf(addr, sizeof addr, "%s/rdzv/%016" PRIx64 "/q%" PRId64 "/g%d",
             m->lighthouse, q.incarnation, q.quorum_id, m->group_rank);
    t0 = gang__now_ns();
    st = gang_ft_configure(m->replica, addr, p.rank, p.n, m->timeout_ms);
    t.configure_ms = (double)(gang__now_ns() - t0) / 1e6;
    set_timings(m, &t);
    GANG_CHECK(st);
    GANG_INFO(FT,
              "replica %s: quorum %" PRId64 " of %d replicas, replica rank %d, "
              "replica gang ready in %.1f ms",
              m->replica_id, q.quorum_id, p.n, p.rank, t.configure_ms);
  }
  if (p.src >= 0 && !allow_heal)
    return GANG_OK; /* behind and not healing: this step sends zeros */
  if (p.src >= 0 || p.ndst > 0) {
    t0 = gang__now_ns();
    int64_t heal_step = p.src >= 0 ? 0 : step;
    st = heal(m, &p, &heal_step);
    t.heal_ms = (double)(gang__now_ns() - t0) / 1e6;
    int64_t bytes = 0;
    for (int i = 0; i < m->nstates; i++)
      bytes += (int64_t)m->states[i].len;
    t.heal_bytes = p.src >= 0 ? bytes : -bytes * p.ndst;
    set_timings(m, &t);
    GANG_CHECK(st);
    GANG_INFO(FT, "replica %s: %s %" PRId64 " bytes of state in %.1f ms",
              m->replica_id, p.src >= 0 ? "healed" : "sent",
              p.src >= 0 ? bytes : bytes * p.ndst, t.heal_ms);
    if (p.src >= 0) {
      pthread_mutex_lock(&m->mu);
      m->step = heal_step;
      m->commit_qid = p.commit_quorum; /* the source's state now */
      m->commit_inc = q.incarnation;
      pthread_mutex_unlock(&m->mu);
    }
  }
  return GANG_OK;
}

/* ---- The worker
 * -------------------------------------------------------------- */

static void *worker_main(void *arg) {
  gang_manager *m = arg;
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (!m->quorum_requested && !m->stopping)
      pthread_cond_wait(&m->cv, &m->mu);
    if (m->stopping)
      break;
    m->quorum_requested = false;
    m->quorum_running = true;
    bool heal_ok = m->allow_heal, shrink = m->shrink_only;
    pthread_mutex_unlock(&m->mu);
    gang_status st = run_quorum(m, heal_ok, shrink);
    char why[1024];
    snprintf(why, sizeof why, "%s", gang_last_error());
    if (st != GANG_OK && st != GANG_TIMEOUT)
      gang__mgr_record(m, st, why);
    pthread_mutex_lock(&m->mu);
    m->quorum_status = st == GANG_TIMEOUT ? st : GANG_OK;
    if (st == GANG_TIMEOUT)
      snprintf(m->error_text, sizeof m->error_text, "%s", why);
    m->quorum_running = false;
    m->quorum_rounds++;
    pthread_cond_broadcast(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

gang_status gang__mgr_worker_start(gang_manager *m) {
  if (pthread_create(&m->worker, NULL, worker_main, m) != 0)
    return gang__error(GANG_SYSTEM, "gang_manager: cannot start its worker");
  m->worker_started = true;
  return GANG_OK;
}

void gang__mgr_worker_stop(gang_manager *m) {
  if (!m->worker_started)
    return;
  pthread_mutex_lock(&m->mu);
  m->stopping = true;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  /* A quorum in flight ends at its deadline at the latest; aborting the
   * replica gang keeps healing from holding it up. (The vote gang is the
   * group's world: aborting it would fail the application's gangs.) */
  gang_abort(m->replica);
  pthread_join(m->worker, NULL);
  m->worker_started = false;
}

/* ---- The step --------------------------------------------------------------
 */

/* Waits until no quorum is pending or running. Called with mu held. */
static void idle_locked(gang_manager *m) {
  while (m->quorum_requested || m->quorum_running)
    pthread_cond_wait(&m->cv, &m->mu);
}

gang_status gang_manager_start_quorum(gang_manager *m, bool allow_heal,
                                      bool shrink_only) {
  GANG_ARG_CHECK(m != NULL, "gang_manager_start_quorum", "manager is NULL");
  pthread_mutex_lock(&m->mu);
  idle_locked(m);
  m->error = GANG_OK; /* a new step */
  m->error_text[0] = '\0';
  m->timings.error_ns = 0;
  m->quorum_status = GANG_OK;
  m->allow_heal = allow_heal;
  m->shrink_only = shrink_only;
  m->quorum_requested = true;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return GANG_OK;
}

gang_status gang_manager_wait_quorum(gang_manager *m) {
  GANG_ARG_CHECK(m != NULL, "gang_manager_wait_quorum", "manager is NULL");
  pthread_mutex_lock(&m->mu);
  idle_locked(m);
  gang_status st = m->quorum_status;
  char why[1024];
  snprintf(why, sizeof why, "%s", m->error_text);
  pthread_mutex_unlock(&m->mu);
  if (st != GANG_OK)
    return gang__error(st, "%s", why);
  return GANG_OK;
}

gang_status gang_manager_all_reduce(gang_manager *m, void *buf, size_t count,
                                    gang_dtype dtype, gang_reduce_op op) {
  GANG_ARG_CHECK(m != NULL, "gang_manager_all_reduce", "manager is NULL");
  (void)gang_manager_wait_quorum(m);
  pthread_mutex_lock(&m->mu);
  gang_status error = m->error;
  bool in = m->participating;
  int participants = m->participants;
  pthread_mutex_unlock(&m->mu);
  if (participants == 0)
    return GANG_OK; /* this step will not commit: move nothing */
  if (error != GANG_OK) {
    /* Nor will it with an error: the other replicas, waiting for this
     * one's contribution, learn it now rather than at their deadline. */
    gang_abort(m->replica);
    return GANG_OK;
  }
  if (!in)
    memset(buf, 0, count * gang_dtype_size(dtype));
  gang_work *w = NULL;
  gang_reduce_op wire = op == GANG_MEAN ? GANG_SUM : op;
  gang_status st =
      gang_all_reduce_post(m->replica, buf, count, dtype, wire, &w);
  if (st == GANG_OK) {
    st = gang_work_wait(w, m->timeout_ms);
    gang_work_free(w);
  }
  if (st != GANG_OK) {
    gang__mgr_record(m, st, gang_last_error());
    return GANG_OK;
  }
  if (op == GANG_MEAN)
    return gang__reduce_mean_finish(buf, count, dtype, participants);
  return GANG_OK;
}

gang_status gang_manager_should_commit(gang_manager *m, bool *commit) {
  const char *fn = "gang_manager_should_commit";
  GANG_ARG_CHECK(m != NULL && commit != NULL, fn, "manager or commit is NULL");
  (void)gang_manager_wait_quorum(m);
  pthread_mutex_lock(&m->mu);
  int32_t vote = m->error == GANG_OK && m->quorum_status == GANG_OK &&
                 m->participating && m->participants >= m->min_replica_size;
  pthread_mutex_unlock(&m->mu);
  if (m->vote != NULL) {
    gang_work *w = NULL;
    gang_status st =
        gang_all_reduce_post(m->vote, &vote, 1, GANG_INT32, GANG_MIN, &w);
    if (st == GANG_OK) {
      st = gang_work_wait(w, m->timeout_ms);
      gang_work_free(w);
    }
    if (st != GANG_OK) {
      gang__mgr_record(m, st, gang_last_error());
      vote = 0;
    }
  }
  *commit = vote != 0;
  pthread_mutex_lock(&m->mu);
  if (*commit) {
    m->step++;
    m->commit_failures = 0;
    m->commit_qid = m->q.quorum_id;
    m->commit_inc = m->q.incarnation;
  } else {
    m->commit_failures++;
  }
  int64_t failures = m->commit_failures, step = m->step;
  pthread_mutex_unlock(&m->mu);
  if (!*commit && m->max_retries >= 0 && failures > m->max_retries)
    return gang__error(GANG_ABORTED,
                       "%s: replica %s failed to commit %" PRId64
                       " steps in a row (max_retries %d) at step %" PRId64,
                       fn, m->replica_id, failures, m->max_retries, step);
  return GANG_OK;
}
