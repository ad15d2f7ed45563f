/* The manager (gang/ft.h; torchft's Manager and ManagerServer), one per
 * rank. Group rank 0 speaks to the lighthouse for its replica group and
 * heartbeats; the group's ranks share its quorum over a sub-gang of the
 * group's gang and vote there on committing. Every rank keeps a replica
 * gang (a reconfigurable gang) with rank r of every other group, rebuilt
 * whenever the quorum changes, and watches the lighthouse's failure
 * notices, aborting the replica gang's pending collectives when a member
 * of its quorum dies, so survivors do not sit out the collective timeout.
 *
 * Threads: the caller's; a quorum worker (start_quorum runs there, so the
 * caller computes meanwhile); on group rank 0 a heartbeat thread; on every
 * rank a notice watcher. Each thread that speaks to the lighthouse has a
 * connection of its own. The quorum's results and the step's error are
 * under m->mu. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/options.h"
#include "core/settings.h"
#include "core/reduce.h"
#include "ft_impl.h"
#include "lighthouse.h"
#include "manager_impl.h"

/* ---- Threads: heartbeat and notices ------------------------------------- */

/* Sleeps up to `ms` or until the manager stops; true when it stops. */
static bool nap(gang_manager *m, int64_t ms) {
  pthread_mutex_lock(&m->mu);
  if (!m->stopping)
    gang__cond_wait_slice(&m->cv, &m->mu, gang__deadline_in_ms(ms),
                          ms * 1000000);
  bool stop = m->stopping;
  pthread_mutex_unlock(&m->mu);
  return stop;
}

/* Connects (again) to the lighthouse; NULL while it cannot be reached. */
static gang__lh_client *reconnect(gang_manager *m, gang__lh_client *c) {
  if (c != NULL)
    return c;
  gang__lh_client *n = NULL;
  if (gang__lh_connect(m->lighthouse, m->timeout_ms, &n) != GANG_OK)
    return NULL;
  return n;
}

static bool is_fatal(gang_manager *m) {
  pthread_mutex_lock(&m->mu);
  bool f = m->fatal != GANG_OK;
  pthread_mutex_unlock(&m->mu);
  return f;
}

/* Beats until the manager stops or its group's gang fails; then leaves,
 * so the lighthouse counts the group dead at its next tick instead of
 * after the heartbeat timeout (a stopped group and one destroyed both
 * stop beating; only one of them can say so). */
static void *heartbeat_main(void *arg) {
  gang_manager *m = arg;
  gang__lh_client *c = NULL;
  int64_t backoff = m->heartbeat_ms;
  while (!nap(m, c == NULL ? backoff : m->heartbeat_ms) && !is_fatal(m)) {
    c = reconnect(m, c);
    if (c == NULL) {
      backoff = backoff * 3 / 2 > 2000 ? 2000 : backoff * 3 / 2;
      continue;
    }
    backoff = m->heartbeat_ms;
    if (gang__lh_heartbeat(c, m->replica_id) != GANG_OK) {
      gang__lh_close(c); /* the lighthouse went away: reconnect next time */
      c = NULL;
    }
  }
  c = reconnect(m, c);
  if (c != NULL && gang__lh_leave(c, m->replica_id) != GANG_OK)
    GANG_INFO(FT, "replica %s: could not tell the lighthouse it left: %s",
              m->replica_id, gang_last_error());
  gang__lh_close(c);
  return NULL;
}

/* Whether notice `index` (of the lighthouse of incarnation `lh`) of
 * `id`'s death concerns this step: it is a member of the quorum in use, or
 * of the one being configured or healed in, and the notice came after
 * that quorum was computed (an older one concerns an earlier quorum: the
 * replica it names came back, say from a stop, or a manager that just
 * started reads the notices from the first). Not while the lighthouse is
 * being asked: it sends notices before it computes, so the coming quorum
 * leaves the dead replica out, and a step of it must not fail for a notice
 * that arrived late. A quorum computed just before the death, with the
 * replica in, is m->q from the moment it is configured: the notice then
 * stops the configure or the heal. */
static bool takes_notice(gang_manager *m, const char *id, int64_t index,
                         uint64_t lh) {
  pthread_mutex_lock(&m->mu);
  bool yes = false;
  bool after = m->q.incarnation != lh || index >= m->q.notices;
  if (m->phase != MGR_ASKING && !m->quorum_requested && !m->voting && after)
    for (int i = 0; i < m->q.n && !yes; i++)
      yes = strcmp(m->q.members[i].replica_id, id) == 0 &&
            strcmp(id, m->replica_id) != 0;
  pthread_mutex_unlock(&m->mu);
  return yes;
}

/* The notice watcher's client, shown to gang_manager_destroy (which
 * interrupts its wait) or taken back before it is closed. */
static void notice_client(gang_manager *m, gang__lh_client *c) {
  pthread_mutex_lock(&m->mu);
  m->lh_notice = c;
  if (c != NULL && m->stopping) /* too late for destroy to see it */
    gang__lh_interrupt(c, "the manager is being destroyed");
  pthread_mutex_unlock(&m->mu);
}

static gang__lh_client *notice_close(gang_manager *m, gang__lh_client *c) {
  notice_client(m, NULL);
  gang__lh_close(c);
  return NULL;
}

static void *notice_main(void *arg) {
  gang_manager *m = arg;
  gang__lh_client *c = NULL;
  int64_t cursor = 0;
  uint64_t incarnation = 0;
  while (!nap(m, c == NULL ? 200 : 0)) {
    if (c == NULL && (c = reconnect(m, c)) != NULL)
      notice_client(m, c);
    if (c == NULL)
      continue;
    if (gang__lh_incarnation(c) != incarnation) { /* a new lighthouse */
      incarnation = gang__lh_incarnation(c);
      cursor = 0;
    }
    char id[GANG_LH_ID_MAX];
    bool kill = false;
    gang_status st = gang__lh_next_notice(c, &cursor, id, sizeof id,
                                          GANG__LH_NOTICE_WAIT_MS, &kill);
    if (st == GANG_TIMEOUT)
      continue;
    if (st != GANG_OK) {
      c = notice_close(m, c);
      continue;
    }
    if (kill && strcmp(id, m->replica_id) == 0) {
      /* A drill: die as a crash would, every process of the group. */
      GANG_WARN(FT,
                "replica %s: killed from the lighthouse's status page "
                "(notice %" PRId64 ")",
                m->replica_id, cursor - 1);
      raise(SIGKILL);
    }
    if (kill)
      continue; /* another group's: it will be seen to go as any failure */
    bool taken = takes_notice(m, id, cursor - 1, incarnation);
    GANG_INFO(FT, "replica %s: failure notice %" PRId64 " (%s): %s",
              m->replica_id, cursor - 1, id, taken ? "taken" : "passed over");
    if (!taken)
      continue;
    char why[256];
    snprintf(why, sizeof why,
             "the lighthouse declared replica %s dead (its heartbeat "
             "stopped)",
             id);
    gang__mgr_record(m, GANG_PEER_LOST, why);
    /* Pending collectives of the replica gang end now, with ABORTED, and
     * so does a configure or a heal in progress. */
    gang_abort(m->replica);
  }
  notice_close(m, c);
  return NULL;
}

/* ---- Creation ------------------------------------------------------------ */

static gang_status start_thread(gang_manager *m, pthread_t *t,
                                void *(*fn)(void *), bool *started) {
  if (pthread_create(t, NULL, fn, m) != 0)
    return gang__error(GANG_SYSTEM, "gang_manager: cannot start a thread");
  *started = true;
  return GANG_OK;
}

gang_status gang_manager_create(const gang_manager_options *opts,
                                gang_manager **out) {
  const char *fn = "gang_manager_create";
  GANG_ARG_CHECK(opts != NULL && out != NULL, fn, "opts or out is NULL");
  const char *lh = GANG__OPTS_GET(gang_manager_options, opts, lighthouse, NULL);
  if (lh == NULL || *lh == '\0')
    lh = gang__setting_str(GANG_SETTING_LIGHTHOUSE);
  GANG_ARG_CHECK(lh != NULL && *lh, fn,
                 "no lighthouse: opts->lighthouse and GANG_LIGHTHOUSE are "
                 "empty (host:port of gang-lighthouse)");
  gang_manager *m = calloc(1, sizeof *m);
  if (m == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  snprintf(m->lighthouse, sizeof m->lighthouse, "%s", lh);
  const char *name = GANG__OPTS_GET(gang_manager_options, opts, name, NULL);
  if (name == NULL || *name == '\0')
    name = gang__setting_str(GANG_SETTING_RUN_ID);
  if (name == NULL || *name == '\0')
    name = "replica";
  m->group = GANG__OPTS_GET(gang_manager_options, opts, group, NULL);
  m->min_replica_size =
      GANG__OPTS_GET(gang_manager_options, opts, min_replica_size, 1);
  m->timeout_ms = GANG__OPTS_GET(gang_manager_options, opts, timeout_ms, 60000);
  m->quorum_timeout_ms =
      GANG__OPTS_GET(gang_manager_options, opts, quorum_timeout_ms, 60000);
  m->heartbeat_ms =
      GANG__OPTS_GET(gang_manager_options, opts, heartbeat_ms, 100);
  m->max_retries = GANG__OPTS_GET(gang_manager_options, opts, max_retries, -1);
  m->init_sync = GANG__OPTS_GET(gang_manager_options, opts, init_sync, true);
  gang_options ro = GANG_OPTIONS_INIT;
  if (GANG__OPTS_HAS(gang_manager_options, opts, replica_opts) &&
      opts->replica_opts.size != 0)
    ro = opts->replica_opts;
  if (ro.timeout_ms == 0)
    ro.timeout_ms = m->timeout_ms;
  m->replica_rank = -1;
  m->participant_rank = -1;
  m->group_rank = m->group != NULL ? gang_rank(m->group) : 0;
  m->group_size = m->group != NULL ? gang_size(m->group) : 1;
  gang_status st;
  /* The replica id: the group's name and a suffix new for every process,
   * chosen by group rank 0 and shared, so a restarted group is a new
   * member. */
  uint8_t rnd[8] = {0};
  if (m->group_rank == 0 && RAND_bytes(rnd, sizeof rnd) != 1) {
    st = gang__error(GANG_SYSTEM, "%s: no random bytes for the replica id", fn);
    goto fail;
  }
  if (m->group != NULL && m->group_size > 1) {
    int *all = malloc(sizeof *all * (size_t)m->group_size);
    if (all == NULL) {
      st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
      goto fail;
    }
    for (int i = 0; i < m->group_size; i++)
      all[i] = i;
    st = gang_create_subgang(m->group, all, m->group_size, &m->vote);
    free(all);
    if (st != GANG_OK)
      goto fail;
    GANG_CHECK_GOTO(gang_broadcast(m->vote, rnd, sizeof rnd, GANG_UINT8, 0), st,
                    fail);
  }
  snprintf(m->replica_id, sizeof m->replica_id,
           "%.100s:%02x%02x%02x%02x%02x%02x%02x%02x", name, rnd[0], rnd[1],
           rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  GANG_CHECK_GOTO(gang_ft_create(&ro, &m->replica), st, fail);
  GANG_CHECK_GOTO(gang__mgr_managed_create(m, &m->managed), st, fail);
  if (m->group_rank == 0) {
    GANG_CHECK_GOTO(
        gang__lh_connect(m->lighthouse, m->quorum_timeout_ms, &m->lh_quorum),
        st, fail);
    GANG_CHECK_GOTO(gang__lh_heartbeat(m->lh_quorum, m->replica_id), st, fail);
    GANG_CHECK_GOTO(
        start_thread(m, &m->beat_thread, heartbeat_main, &m->beat_started), st,
        fail);
  }
  GANG_CHECK_GOTO(
      start_thread(m, &m->notice_thread, notice_main, &m->notice_started), st,
      fail);
  GANG_CHECK_GOTO(gang__mgr_worker_start(m), st, fail);
  *out = m;
  return GANG_OK;
fail:
  gang_manager_destroy(m);
  return st;
}

void gang_manager_destroy(gang_manager *m) {
  if (m == NULL)
    return;
  gang__mgr_worker_stop(m);
  pthread_mutex_lock(&m->mu);
  m->stopping = true;
  pthread_cond_broadcast(&m->cv);
  gang__lh_interrupt(m->lh_notice, "the manager is being destroyed");
  pthread_mutex_unlock(&m->mu);
  if (m->beat_started)
    pthread_join(m->beat_thread, NULL);
  if (m->notice_started)
    pthread_join(m->notice_thread, NULL);
  gang_destroy(m->managed);
  gang_destroy(m->replica);
  gang_destroy(m->vote);
  gang__lh_close(m->lh_quorum);
  gang__lh_quorum_fini(&m->q);
  for (int i = 0; i < m->nstates; i++)
    free(m->states[i].staged);
  free(m->states);
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* ---- State -----------------------------------------------------------------
 */

gang_status gang_manager_register_state(gang_manager *m, const char *name,
                                        void *buf, size_t len) {
  const char *fn = "gang_manager_register_state";
  GANG_ARG_CHECK(m != NULL && name != NULL, fn, "manager or name is NULL");
  GANG_ARG_CHECK(buf != NULL || len == 0, fn, "buf is NULL with len %zu", len);
  for (int i = 0; i < m->nstates; i++)
    GANG_ARG_CHECK(strcmp(m->states[i].name, name) != 0, fn,
                   "'%s' is registered already", name);
  GANG_ARG_CHECK(strlen(name) < sizeof m->states[0].name, fn,
                 "name '%s' is too long", name);
  /* The quorum worker reads the list without the lock while it heals. */
  pthread_mutex_lock(&m->mu);
  bool started =
      m->quorum_rounds > 0 || m->quorum_requested || m->quorum_running;
  pthread_mutex_unlock(&m->mu);
  if (started)
    return gang__error(GANG_INVALID_USAGE,
                       "%s: '%s' registered after the first start_quorum: "
                       "register every buffer before the first step",
                       fn, name);
  mgr_state *s = realloc(m->states, sizeof *s * (size_t)(m->nstates + 1));
  if (s == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  m->states = s;
  snprintf(s[m->nstates].name, sizeof s[m->nstates].name, "%s", name);
  s[m->nstates].buf = buf;
  s[m->nstates].len = len;
  s[m->nstates].staged = NULL;
  m->nstates++;
  return GANG_OK;
}

gang_status gang_manager_set_step(gang_manager *m, int64_t step) {
  const char *fn = "gang_manager_set_step";
  GANG_ARG_CHECK(m != NULL, fn, "manager is NULL");
  GANG_ARG_CHECK(step >= 0, fn, "step %lld is negative", (long long)step);
  pthread_mutex_lock(&m->mu);
  bool started =
      m->quorum_rounds > 0 || m->quorum_requested || m->quorum_running;
  if (!started) {
    m->step = step;
    /* Committed under no quorum this lighthouse knows of. */
    m->commit_qid = 0;
    m->commit_inc = 0;
  }
  pthread_mutex_unlock(&m->mu);
  if (started)
    return gang__error(GANG_INVALID_USAGE,
                       "%s: the step is set before the first start_quorum "
                       "(a job restored from a checkpoint), not during a job",
                       fn);
  return GANG_OK;
}

/* ---- Readers ----------------------------------------------------------------
 */

/* A field under the lock; `none` for a NULL manager. */
#define READ(field, type, none)                                                \
  if (m == NULL)                                                               \
    return none;                                                               \
  type v;                                                                      \
  pthread_mutex_lock(&((gang_manager *)m)->mu);                                \
  v = m->field;                                                                \
  pthread_mutex_unlock(&((gang_manager *)m)->mu);                              \
  return v

int64_t gang_manager_step(const gang_manager *m) { READ(step, int64_t, -1); }
int64_t gang_manager_quorum_id(const gang_manager *m) {
  READ(q.quorum_id, int64_t, -1);
}
int gang_manager_participants(const gang_manager *m) {
  READ(participants, int, 0);
}
int gang_manager_replica_rank(const gang_manager *m) {
  READ(replica_rank, int, -1);
}
const char *gang_manager_replica_id(const gang_manager *m) {
  return m != NULL ? m->replica_id : "";
}
void gang_manager_last_timings(const gang_manager *m,
                               gang_manager_timings *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  if (m == NULL)
    return;
  pthread_mutex_lock(&((gang_manager *)m)->mu);
  *out = m->timings;
  pthread_mutex_unlock(&((gang_manager *)m)->mu);
}

gang_t *gang_manager_gang(gang_manager *m) {
  return m != NULL ? m->managed : NULL;
}
