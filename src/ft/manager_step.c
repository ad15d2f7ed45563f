/* The manager's step (manager_impl.h): the quorum worker, the replica
 * gang's reconfiguration, healing, all_reduce and the commit vote.
 *
 * A quorum, as torchft computes it per rank (compute_quorum_results): the
 * members sorted by replica id; this group's replica rank is its index;
 * max_step the highest step; the up-to-date members those at max_step (at
 * step 0 with init_sync, only the primary, max[group_rank % n], so every
 * replica starts from one state); the others are recovery targets, target
 * i healing from up-to-date member (i + group_rank) % n_up, rank r of it
 * to rank r (so sharded states line up).
 *
 * Healing is torchft's async quorum: the quorum (and the heal) run while
 * the caller computes its step, so a replica that heals cannot have
 * computed from the right state: it sends zeros and is not counted in the
 * participants, and what it receives lands in buffers of the manager's
 * own, moved into the caller's at should_commit, before the optimizer
 * step (a source only reads the caller's buffers, which the caller only
 * reads until should_commit). Every outcome a group's ranks could see
 * differently -- a configure or a heal that failed on one of them -- is
 * agreed over the group's vote gang before the step goes on, so the ranks
 * of a group never split; a vote gang that fails breaks the group for
 * good (gang__mgr_fatal). */
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
    me->commit_quorum = m->commit_qid; /* ordered across lighthouses too */
    me->commit_inc = m->commit_inc;
    pthread_mutex_unlock(&m->mu);
    st = gang__lh_join(m->lh_quorum, me, left, q);
    if (st == GANG_OK)
      return GANG_OK;
    snprintf(last, sizeof last, "%s", gang_last_error());
    /* Whatever failed -- the lighthouse gone, or stopped past a call's
     * deadline, which leaves the connection broken -- a new connection
     * tries again, after a pause, until the quorum timeout. */
    gang__lh_close(m->lh_quorum);
    m->lh_quorum = NULL;
    if (gang__deadline_passed(deadline))
      break;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return gang__error(GANG_TIMEOUT,
                     "replica %s: no quorum from the lighthouse at %s within "
                     "%" PRId64 " ms: %s",
                     m->replica_id, m->lighthouse, m->quorum_timeout_ms, last);
}

/* ---- Telling the lighthouse of a dead peer ---------------------------------
 */

/* The replica gang saw a member of this quorum die (its connection ended
 * without a goodbye: it crashed). The lighthouse would wait for its
 * heartbeat to expire before a quorum without it; told, it counts it dead
 * as soon as its counter has not moved for a few beats (lighthouse.h,
 * gang__lh_suspect). Once per replica; on a connection of its own, with a
 * short deadline: any thread. */
static void report_lost(gang_manager *m) {
  int lost[8];
  int n = gang__ft_lost_ranks(m->replica, lost, 8);
  char ids[8][GANG_LH_ID_MAX];
  int k = 0;
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < n; i++)
    if (lost[i] >= 0 && lost[i] < m->q.n && lost[i] != m->replica_rank &&
        strcmp(m->q.members[lost[i]].replica_id, m->reported) != 0)
      snprintf(ids[k++], GANG_LH_ID_MAX, "%s",
               m->q.members[lost[i]].replica_id);
  if (k > 0)
    snprintf(m->reported, sizeof m->reported, "%s", ids[0]);
  pthread_mutex_unlock(&m->mu);
  if (k == 0)
    return;
  gang__lh_client *c = NULL;
  gang_status st = gang__lh_connect(m->lighthouse, 500, &c);
  for (int i = 0; i < k && st == GANG_OK; i++) {
    st = gang__lh_suspect(c, ids[i]);
    if (st == GANG_OK)
      GANG_INFO(FT, "replica %s: told the lighthouse that replica %s died",
                m->replica_id, ids[i]);
  }
  gang__lh_close(c);
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
  if (st != GANG_OK) {
    if (m->group_rank == 0)
      free(rec);
    return gang__mgr_fatal(m, "sharing the quorum over the group");
  }
  if (m->group_rank != 0) {
    if (status != GANG_OK)
      st = gang__error((gang_status)status, "%.*s", (int)len, (char *)data);
    else
      st = gang__lh_quorum_decode(data, len, q);
    free(data);
  } else {
    free(rec);
    if (status != GANG_OK)
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
  uint64_t commit_inc;   /* ... and the lighthouse incarnation of that */
  int ntargets;          /* replicas that receive the state */
  int src;               /* replica rank to heal from, -1: none */
  int dst[1024];         /* replica ranks to send to (n <= 1024) */
  int ndst;
  bool up[1024];     /* up to date: the others are targets */
  int nup;           /* how many are */
  bool at_max[1024]; /* at max_step */
  int nmax;          /* how many are */
} place;

static gang_status find_place(const gang_manager *m, const gang__lh_quorum *q,
                              place *p) {
  memset(p, 0, sizeof *p);
  p->rank = -1;
  p->src = -1;
  p->n = q->n;
  for (int i = 0; i < q->n; i++)
    if (strcmp(q->members[i].replica_id, m->replica_id) == 0)
      p->rank = i;
  if (p->rank < 0)
    return gang__error(GANG_INTERNAL,
                       "quorum %" PRId64 " does not include replica %s",
                       q->quorum_id, m->replica_id);
  if (q->n > 1024)
    return gang__error(GANG_NOT_SUPPORTED,
                       "quorum of %d replicas: at most "
                       "1024",
                       q->n);
  /* Up to date: at max_step, committed in the latest quorum of those
   * (gang__lh_up_to_date). */
  int up[1024], nup = 0;
  gang__lh_up_to_date(q, &p->max_step, p->up);
  for (int i = 0; i < q->n; i++)
    if (p->up[i]) {
      up[nup++] = i;
      p->commit_quorum = q->members[i].commit_quorum;
      p->commit_inc = q->members[i].commit_inc;
    }
  if (m->init_sync && p->max_step == 0) {
    up[0] = up[m->group_rank % nup]; /* the primary alone */
    nup = 1;
    memset(p->up, 0, sizeof p->up);
    p->up[up[0]] = true;
  }
  p->nup = nup;
  for (int i = 0; i < q->n; i++) {
    p->at_max[i] = q->members[i].step == p->max_step;
    p->nmax += p->at_max[i];
  }
  /* Targets in member order; target k heals from up[(k + group_rank) %
   * nup]. */
  int k = 0;
  for (int i = 0; i < q->n; i++) {
    if (p->up[i])
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

/* Receives the step and every state from p->src into the states' staged
 * buffers (allocated on the first heal, freed once moved), or sends this
 * replica's to p->dst; sources read the caller's buffers. */
static gang_status heal(gang_manager *m, const place *p, int64_t *step) {
  gang_t *r = m->replica;
  int n = m->nstates + 1;
  if (p->src >= 0) { /* receive the step, then every buffer */
    for (int i = 0; i < m->nstates; i++) {
      if (m->states[i].staged == NULL && m->states[i].len > 0 &&
          (m->states[i].staged = malloc(m->states[i].len)) == NULL)
        return gang__error(GANG_NO_MEMORY,
                           "healing: no memory to receive '%s' (%zu bytes)",
                           m->states[i].name, m->states[i].len);
    }
    gang_work **w = calloc((size_t)n, sizeof *w);
    if (w == NULL)
      return gang__error(GANG_NO_MEMORY, "healing: out of memory");
    int posted = 0;
    gang_status st =
        gang_recv_post(r, step, sizeof *step, p->src, TAG_STEP, &w[posted]);
    if (st == GANG_OK)
      posted++;
    for (int i = 0; st == GANG_OK && i < m->nstates; i++) {
      st = gang_recv_post(r, m->states[i].staged, m->states[i].len, p->src,
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

static void set_phase(gang_manager *m, mgr_phase ph) {
  pthread_mutex_lock(&m->mu);
  m->phase = ph;
  pthread_mutex_unlock(&m->mu);
}

/* Every rank of the group learns whether any of them failed `local` (its
 * configure or heal), so that none goes on as if the quorum had worked
 * while another records an error. A vote gang that cannot say is fatal.
 * Returns the group's outcome: GANG_OK only when every rank's was. */
static gang_status agree(gang_manager *m, gang_status local, const char *what,
                         const char *local_why) {
  if (m->vote == NULL)
    return local;
  int32_t failed[2] = {local != GANG_OK ? 1 : 0,
                       local != GANG_OK ? m->group_rank : -1};
  gang_work *w = NULL;
  gang_status st =
      gang_all_reduce_post(m->vote, failed, 2, GANG_INT32, GANG_MAX, &w);
  if (st == GANG_OK) {
    /* The slowest rank may spend a configure and a heal, each bounded by
     * the timeout (and the claim of its store prefix). */
    st = gang_work_wait(w, 4 * m->timeout_ms + 1000);
    gang_work_free(w);
  }
  if (st != GANG_OK)
    return gang__mgr_fatal(m, "agreeing on the quorum's outcome");
  if (failed[0] == 0)
    return GANG_OK;
  if (local != GANG_OK)
    return gang__error(local, "%s", local_why);
  return gang__error(GANG_ABORTED,
                     "replica %s: group rank %d failed its %s, so this step "
                     "does not commit on any rank of the group",
                     m->replica_id, failed[1], what);
}

static gang_status run_quorum(gang_manager *m, bool allow_heal,
                              bool shrink_only) {
  pthread_mutex_lock(&m->mu);
  gang_status fatal = m->fatal;
  pthread_mutex_unlock(&m->mu);
  if (fatal != GANG_OK) /* a broken group joins no quorum */
    return gang__mgr_fatal(m, "an earlier step");
  /* A member that died since the last step, while the replica gang was
   * idle, closed its connections: a look at them now finds it, and the
   * lighthouse hears of it before this quorum waits for its join. */
  if (gang__ft_poke(m->replica) == GANG_PEER_LOST)
    report_lost(m);
  gang__lh_quorum q = {0};
  gang_manager_timings t = {0};
  set_phase(m, MGR_ASKING);
  int64_t t0 = gang__now_ns();
  gang_status qs = shared_quorum(m, shrink_only, &q);
  t.quorum_ms = (double)(gang__now_ns() - t0) / 1e6;
  set_timings(m, &t);
  GANG_CHECK(qs); /* the same on every rank of the group */
  place p;
  gang_status st = find_place(m, &q, &p);
  if (st != GANG_OK) {
    gang__lh_quorum_fini(&q);
    return st; /* the same on every rank too: q is */
  }
  /* Who takes part in this step's all_reduce (the rest send zeros):
   * healing, the up-to-date replicas, a healing one having computed from
   * a state it did not have yet; without healing, torchft's rule: the
   * replicas at max_step. Every replica of a job passes the same
   * allow_heal, so all count alike. */
  bool healing = allow_heal && p.src >= 0;
  int prank = -1, nparts = 0;
  for (int i = 0; i < p.n; i++) {
    bool in = allow_heal ? p.up[i] : p.at_max[i];
    if (in && i == p.rank)
      prank = nparts;
    nparts += in;
  }
  pthread_mutex_lock(&m->mu);
  bool changed = q.quorum_id != m->q.quorum_id ||
                 q.incarnation != m->q.incarnation ||
                 !gang_ft_configured(m->replica);
  int64_t step = m->step;
  gang__lh_quorum_fini(&m->q);
  m->q = q; /* the worker's now; readers copy under mu */
  m->replica_rank = p.rank;
  m->participants = nparts;
  m->participating = prank >= 0;
  m->participant_rank = prank;
  m->healing = healing;
  m->phase = MGR_CONFIGURING; /* notices about m->q count from here */
  pthread_mutex_unlock(&m->mu);
  /* The managed gang's rank is this group's among the participants: code
   * that shards the step's data by rank and size covers it exactly. A
   * replica that does not take part reads 0: what it computes is replaced
   * by zeros. */
  gang__set_shape(m->managed, prank >= 0 ? prank : 0, nparts);
  const char *what = "configure of the replica gang";
  if (changed) {
    char addr[512];
    snprintf(addr, sizeof addr, "%s/rdzv/%016" PRIx64 "/q%" PRId64 "/g%d",
             m->lighthouse, q.incarnation, q.quorum_id, m->group_rank);
    t0 = gang__now_ns();
    st = gang_ft_configure(m->replica, addr, p.rank, p.n, m->timeout_ms);
    t.configure_ms = (double)(gang__now_ns() - t0) / 1e6;
    set_timings(m, &t);
    if (st == GANG_OK)
      GANG_INFO(FT,
                "replica %s: quorum %" PRId64 " of %d replicas, replica rank "
                "%d, replica gang ready in %.1f ms",
                m->replica_id, q.quorum_id, p.n, p.rank, t.configure_ms);
  }
  int64_t heal_step = 0;
  bool sends = allow_heal && p.ndst > 0;
  if (st == GANG_OK && (healing || sends)) {
    what = "heal";
    set_phase(m, MGR_HEALING);
    t0 = gang__now_ns();
    heal_step = healing ? 0 : step;
    st = heal(m, &p, &heal_step);
    t.heal_ms = (double)(gang__now_ns() - t0) / 1e6;
    int64_t bytes = 0;
    for (int i = 0; i < m->nstates; i++)
      bytes += (int64_t)m->states[i].len;
    t.heal_bytes = healing ? bytes : -bytes * p.ndst;
    set_timings(m, &t);
    if (st == GANG_OK)
      GANG_INFO(FT, "replica %s: %s %" PRId64 " bytes of state in %.1f ms",
                m->replica_id, healing ? "received" : "sent",
                healing ? bytes : bytes * p.ndst, t.heal_ms);
  }
  char why[1024];
  snprintf(why, sizeof why, "%s", gang_last_error());
  if (st == GANG_PEER_LOST)
    report_lost(m);
  set_phase(m, MGR_AGREEING);
  st = agree(m, st, what, why);
  pthread_mutex_lock(&m->mu);
  if (st == GANG_OK && healing) {
    /* Received and agreed: should_commit moves it in. */
    m->heal_pending = true;
    m->heal_step = heal_step;
    m->heal_qid = p.commit_quorum; /* the source's state and commit */
    m->heal_inc = p.commit_inc;
  }
  m->phase = MGR_IDLE;
  pthread_mutex_unlock(&m->mu);
  /* Recorded, not returned: wait_quorum returns only what every rank of
   * the group sees alike (the lighthouse's answer, shared above). */
  gang__mgr_record_replica(m, st, gang_last_error());
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

/* The fatal error, if the group's gang failed. Called with mu held. */
static gang_status fatal_locked(gang_manager *m) {
  if (m->fatal == GANG_OK)
    return GANG_OK;
  return gang__error(m->fatal, "%s", m->fatal_text);
}

gang_status gang_manager_start_quorum(gang_manager *m, bool allow_heal,
                                      bool shrink_only) {
  GANG_ARG_CHECK(m != NULL, "gang_manager_start_quorum", "manager is NULL");
  pthread_mutex_lock(&m->mu);
  idle_locked(m);
  gang_status fatal = fatal_locked(m);
  if (fatal != GANG_OK) {
    pthread_mutex_unlock(&m->mu);
    return fatal;
  }
  m->error = GANG_OK; /* a new step */
  m->error_text[0] = '\0';
  m->timings.error_ns = 0;
  m->quorum_status = GANG_OK;
  m->voting = false;
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
  gang_status st = fatal_locked(m);
  if (st != GANG_OK) {
    pthread_mutex_unlock(&m->mu);
    return st;
  }
  st = m->quorum_status;
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
  gang_status ws = gang_manager_wait_quorum(m);
  pthread_mutex_lock(&m->mu);
  gang_status fatal = fatal_locked(m);
  gang_status error = m->error;
  bool in = m->participating;
  int participants = m->participants;
  pthread_mutex_unlock(&m->mu);
  if (fatal != GANG_OK)
    return fatal;
  if (ws != GANG_OK || participants == 0)
    return GANG_OK; /* this step will not commit: move nothing */
  if (error != GANG_OK) {
    /* Nor will it with an error: the other replicas, waiting for this
     * one's contribution, learn it now rather than at their deadline. */
    gang_abort(m->replica);
    return GANG_OK;
  }
  /* A replica that is behind, or heals this step, computed from a state
   * that is not the job's: it sends zeros, and is not counted. */
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
    gang__mgr_record_replica(m, st, gang_last_error());
    if (st == GANG_PEER_LOST)
      report_lost(m);
    return GANG_OK;
  }
  if (op == GANG_MEAN)
    return gang__reduce_mean_finish(buf, count, dtype, participants);
  return GANG_OK;
}

/* The healed state moves into the caller's buffers: in should_commit, on
 * the caller's thread, with the worker idle (nothing else touches the
 * staged buffers then), outside the lock (a large state takes a while,
 * and the notice watcher reads the quorum meanwhile). */
static void apply_heal(gang_manager *m) {
  pthread_mutex_lock(&m->mu);
  bool pending = m->heal_pending;
  pthread_mutex_unlock(&m->mu);
  if (!pending)
    return;
  for (int i = 0; i < m->nstates; i++) {
    if (m->states[i].len > 0)
      memcpy(m->states[i].buf, m->states[i].staged, m->states[i].len);
    free(m->states[i].staged);
    m->states[i].staged = NULL;
  }
  pthread_mutex_lock(&m->mu);
  m->step = m->heal_step;
  m->commit_qid = m->heal_qid;
  m->commit_inc = m->heal_inc;
  m->heal_pending = false;
  int64_t step = m->step;
  pthread_mutex_unlock(&m->mu);
  GANG_INFO(FT, "replica %s: healed state in place at step %" PRId64,
            m->replica_id, step);
}

gang_status gang_manager_should_commit(gang_manager *m, bool *commit) {
  const char *fn = "gang_manager_should_commit";
  GANG_ARG_CHECK(m != NULL && commit != NULL, fn, "manager or commit is NULL");
  *commit = false;
  pthread_mutex_lock(&m->mu);
  idle_locked(m);
  gang_status fatal = fatal_locked(m);
  if (fatal != GANG_OK) {
    pthread_mutex_unlock(&m->mu);
    return fatal;
  }
  /* The step's replica traffic is over: a member's death no longer
   * spoils it (takes_notice). */
  m->voting = true;
  pthread_mutex_unlock(&m->mu);
  apply_heal(m);
  /* torchft's vote: no error and enough participants. A replica that did
   * not take part (it was behind) commits too: it sent zeros, and its
   * step moves on with the others'. */
  pthread_mutex_lock(&m->mu);
  int32_t vote = m->error == GANG_OK && m->quorum_status == GANG_OK &&
                 m->participants >= m->min_replica_size;
  pthread_mutex_unlock(&m->mu);
  if (m->vote != NULL) {
    gang_work *w = NULL;
    gang_status st =
        gang_all_reduce_post(m->vote, &vote, 1, GANG_INT32, GANG_MIN, &w);
    if (st == GANG_OK) {
      /* Another rank of the group may still sit in this step's replica
       * all_reduce up to its own deadline (the timeout, and the timeout's
       * diagnosis) before it votes: the vote waits past that, or a slow
       * rank of a healthy group would break the group. */
      st = gang_work_wait(w, 2 * m->timeout_ms + 1000);
      gang_work_free(w);
    }
    if (st != GANG_OK)
      return gang__mgr_fatal(m, "the group's commit vote");
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
