/* What the lighthouse's thread does each tick (lighthouse.c runs it):
 * read the registered ids, every heartbeat counter and the joins of the
 * current round; forget replicas long silent; send failure notices; and
 * when gang__lh_compute finds a quorum, write it, advance the round and
 * collect the keys of old rounds.
 *
 * Costs per tick, n replicas known: one get of lh/ids, and one request
 * for every counter and one (two when some are missing) for every join
 * that may be there, 512 keys to a request (gang__store_peek); per
 * quorum, two sets and a delete per join. Replicas are found by id in a
 * hash table and quorum members by binary search (members are sorted),
 * so that a tick stays linear in n. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"
#include "gang/store.h"
#include "lh_impl.h"

#define IDS_COMPACT (64 << 10) /* lh/ids is rewritten beyond this */

/* get without waiting: GANG_TIMEOUT when the key is missing. */
static gang_status get_now(gang_lighthouse *L, const char *key, void **v,
                           size_t *n) {
  gang_store_set_timeout(L->st, 0);
  gang_status s = gang_store_get(L->st, key, v, n);
  gang_store_set_timeout(L->st, GANG__LH_CALL_MS);
  return s;
}

/* ---- Replicas: ids, heartbeats, pruning ---------------------------------- */

static void add_replica(gang_lighthouse *L, const char *id, size_t len,
                        int64_t now) {
  char buf[GANG_LH_ID_MAX];
  memcpy(buf, id, len);
  buf[len] = '\0';
  if (gang__lh_find(L, buf) >= 0)
    return;
  if (L->nreps == GANG__LH_MAX_REPLICAS) {
    GANG_WARN(FT, "lighthouse: %d replicas known already: ignoring '%s'",
              GANG__LH_MAX_REPLICAS, buf);
    return;
  }
  int i = L->nreps++;
  L->index_stale = true;
  memset(&L->reps[i], 0, sizeof L->reps[i]);
  memcpy(L->reps[i].member.replica_id, buf, len + 1);
  L->reps[i].last_beat_ms = INT64_MIN;
  L->ext[i] = (gang__lh_extra){
      .beats = -1, .seen_ms = now, .in_prev = gang__lh_in_prev(L, buf)};
  gang__lh_beats_add(L->beats, buf);
  GANG_INFO(FT, "lighthouse: replica '%s' registered", buf);
}

/* Rewrites lh/ids to the ids known now, unless a replica appended in
 * between (compare_set fails; the next tick tries again), and unless that
 * would not halve it (then every tick would rewrite it). */
static gang_status compact_ids(gang_lighthouse *L, const void *old,
                               size_t oldn) {
  char *buf = malloc((size_t)L->nreps * GANG_LH_ID_MAX + 1);
  if (buf == NULL)
    return GANG_OK; /* the log stays as it is */
  size_t n = 0;
  for (int i = 0; i < L->nreps; i++)
    n += (size_t)sprintf(buf + n, "%s\n", L->reps[i].member.replica_id);
  if (2 * n > oldn) {
    free(buf);
    return GANG_OK;
  }
  void *cur = NULL;
  size_t curn = 0;
  gang_status s = gang_store_compare_set(L->st, GANG__LH_KEY_IDS, old, oldn,
                                         buf, n, &cur, &curn);
  if (s == GANG_OK && curn == n && memcmp(cur, buf, n) == 0)
    L->ids_off = n;
  gang_store_free(cur);
  free(buf);
  return s;
}

static gang_status read_ids(gang_lighthouse *L, int64_t now) {
  void *v = NULL;
  size_t n = 0;
  gang_status s = get_now(L, GANG__LH_KEY_IDS, &v, &n);
  if (s == GANG_TIMEOUT) { /* deleted by someone: start over */
    L->ids_off = 0;
    return gang_store_set(L->st, GANG__LH_KEY_IDS, "", 0);
  }
  GANG_CHECK(s);
  const char *p = v;
  if (n < L->ids_off) /* rewritten by someone else: read it all again */
    L->ids_off = 0;
  size_t off = L->ids_off;
  for (;;) {
    const char *nl = memchr(p + off, '\n', n - off);
    if (nl == NULL)
      break;
    size_t len = (size_t)(nl - (p + off));
    if (gang__lh_id_valid(p + off, len))
      add_replica(L, p + off, len, now);
    else if (len > 0)
      GANG_WARN(FT, "lighthouse: lh/ids holds a line that is not a replica "
                    "id: skipped");
    off += len + 1;
  }
  L->ids_off = off;
  if (n > IDS_COMPACT)
    s = compact_ids(L, v, n);
  gang_store_free(v);
  return s;
}

/* Takes the reports of lost replicas (lh/suspects: from peers whose
 * sockets to it broke, and from the store server when a connection that
 * beat for it closed) that name replicas not already counted dead: each is
 * watched, and dead if its counter does not move for GANG__LH_SUSPECT_MS
 * (read_beats). The log is emptied with a compare-and-set, so a report
 * appended meanwhile stays for the next tick. */
static gang_status read_suspects(gang_lighthouse *L, int64_t now) {
  void *v = NULL;
  size_t n = 0;
  gang_status s = get_now(L, GANG__LH_KEY_SUSPECTS, &v, &n);
  if (s == GANG_TIMEOUT) /* no report yet */
    return GANG_OK;
  GANG_CHECK(s);
  if (n == 0) {
    gang_store_free(v);
    return GANG_OK;
  }
  /* A replica's last datagrams were sent before its connections closed:
   * they count before its count is taken. */
  gang__lh_beats_drain(L->beats);
  const char *p = v;
  for (size_t off = 0; off < n;) {
    const char *nl = memchr(p + off, '\n', n - off);
    size_t len = nl != NULL ? (size_t)(nl - (p + off)) : n - off;
    char id[GANG_LH_ID_MAX];
    if (gang__lh_id_valid(p + off, len)) {
      memcpy(id, p + off, len);
      id[len] = '\0';
      int i = gang__lh_find(L, id);
      /* Any replica not already counted dead: a member of the last
       * quorum, one that joined the next (killed right after its
       * restart), or one whose first beat since a stop is still to be
       * read -- the report of its death can come first, and its beat then
       * makes it look alive for a whole heartbeat timeout. */
      if (i >= 0 && L->reps[i].last_beat_ms != INT64_MIN &&
          L->ext[i].suspect_ms == 0) {
        /* Its counter as it is now, not at the last tick: a beat sent just
         * before it died (a group killed right after it started beats in
         * a burst) is no sign of life. */
        char key[GANG__LH_KEY_CAP];
        snprintf(key, sizeof key, GANG__LH_KEY_HB, id);
        int64_t beats;
        s = gang_store_add(L->st, key, 0, &beats);
        if (s != GANG_OK) {
          gang_store_free(v);
          return s;
        }
        /* ... datagrams' beats with the store's, as read_beats counts. */
        int64_t udp = 0;
        gang__lh_beats_read(L->beats, L->reps[i].member.replica_id,
                            sizeof L->reps[i].member.replica_id, 1, &udp);
        L->ext[i].suspect_ms = now;
        L->ext[i].suspect_beats = beats + udp;
        GANG_INFO(FT, "lighthouse: replica '%s' reported lost by a peer", id);
      }
    }
    off += len + 1;
  }
  void *cur = NULL;
  size_t curn = 0;
  s = gang_store_compare_set(L->st, GANG__LH_KEY_SUSPECTS, v, n, "", 0, &cur,
                             &curn);
  gang_store_free(cur);
  gang_store_free(v);
  return s;
}

/* Forgets replicas silent for ten heartbeat timeouts (at least a minute):
 * a job that restarts its processes makes a new id each time, and the
 * lighthouse reads every known counter every tick. Deleting the counter
 * makes a replica that was only asleep register again at its next beat. */
static gang_status prune(gang_lighthouse *L, int64_t now) {
  int64_t idle = 10 * L->cfg.heartbeat_timeout_ms;
  if (idle < 60000)
    idle = 60000;
  char key[GANG__LH_KEY_CAP];
  for (int i = L->nreps - 1; i >= 0; i--) {
    int64_t last = L->reps[i].last_beat_ms;
    if (last < L->ext[i].seen_ms)
      last = L->ext[i].seen_ms;
    if (now - last <= idle)
      continue;
    snprintf(key, sizeof key, GANG__LH_KEY_HB, L->reps[i].member.replica_id);
    GANG_CHECK(gang_store_delete(L->st, key, NULL));
    snprintf(key, sizeof key, GANG__LH_KEY_UDP, L->reps[i].member.replica_id);
    GANG_CHECK(gang_store_delete(L->st, key, NULL));
    GANG_INFO(FT,
              "lighthouse: replica '%s' silent for %" PRId64 " ms: "
              "forgotten",
              L->reps[i].member.replica_id, now - last);
    gang__lh_beats_remove(L->beats, L->reps[i].member.replica_id);
    L->nreps--;
    L->reps[i] = L->reps[L->nreps];
    L->ext[i] = L->ext[L->nreps];
    L->index_stale = true;
  }
  return GANG_OK;
}

/* A member of the last quorum whose heartbeat expired: the survivors'
 * managers wait on these notices to abort the replica gang's pending
 * collectives instead of sitting out the collective timeout. A replica
 * seen healthy may die again: whether it is a member of the last quorum
 * or not (one back from a stop, say, that the next quorum takes in and
 * that dies before the tick after it) -- so every healthy replica may have
 * a notice again, not only the members. */
static gang_status send_notices(gang_lighthouse *L, int64_t now) {
  char key[GANG__LH_KEY_CAP];
  for (int i = 0; i < L->nreps; i++)
    if (gang__lh_healthy(L, i, now))
      L->ext[i].noticed = false;
  for (int i = 0; i < L->nreps; i++) {
    const char *id = L->reps[i].member.replica_id;
    if (!L->ext[i].in_prev || gang__lh_healthy(L, i, now) || L->ext[i].noticed)
      continue;
    snprintf(key, sizeof key, GANG__LH_KEY_NOTICE, (long long)L->notices);
    GANG_CHECK(gang_store_set(L->st, key, id, strlen(id)));
    if (L->ext[i].beats < 0)
      GANG_INFO(FT,
                "lighthouse: replica '%s' of quorum %" PRId64 " left: "
                "notice %" PRId64,
                id, L->prev.quorum_id, L->notices);
    else if (L->reps[i].last_beat_ms == INT64_MIN)
      GANG_WARN(FT,
                "lighthouse: replica '%s' of quorum %" PRId64 " was reported "
                "lost by a peer and did not beat since: failure notice "
                "%" PRId64,
                id, L->prev.quorum_id, L->notices);
    else
      GANG_WARN(FT,
                "lighthouse: replica '%s' of quorum %" PRId64 " has not "
                "heartbeaten for %" PRId64 " ms: failure notice %" PRId64,
                id, L->prev.quorum_id, now - L->reps[i].last_beat_ms,
                L->notices);
    pthread_mutex_lock(&L->status.mu);
    gang__lh_status_add_event(
        &L->status, gang__lh_wall_ms(), "notice",
        "failure notice %" PRId64 ": %s of quorum %" PRId64 " %s", L->notices,
        id, L->prev.quorum_id,
        L->ext[i].beats < 0                    ? "left"
        : L->reps[i].last_beat_ms == INT64_MIN ? "reported lost by a peer"
                                               : "stopped heartbeating");
    pthread_mutex_unlock(&L->status.mu);
    L->notices++;
    L->ext[i].noticed = true;
  }
  return GANG_OK;
}

/* Kills asked for by the status page (a drill): a notice "!kill <id>",
 * on which every process of that replica group kills itself (manager.c);
 * the others pass it over and see the group go as any failure. */
static gang_status send_kills(gang_lighthouse *L) {
  gang__lh_status *s = &L->status;
  char ids[8][GANG_LH_ID_MAX];
  pthread_mutex_lock(&s->mu);
  int n = s->nkills;
  memcpy(ids, s->kills, sizeof ids);
  s->nkills = 0;
  pthread_mutex_unlock(&s->mu);
  for (int k = 0; k < n; k++) {
    char key[GANG__LH_KEY_CAP], val[GANG_LH_ID_MAX + 8];
    snprintf(key, sizeof key, GANG__LH_KEY_NOTICE, (long long)L->notices);
    int len = snprintf(val, sizeof val, GANG__LH_KILL "%s", ids[k]);
    GANG_CHECK(gang_store_set(L->st, key, val, (size_t)len));
    GANG_WARN(FT,
              "lighthouse: replica '%s' killed from the status page: "
              "notice %" PRId64,
              ids[k], L->notices);
    pthread_mutex_lock(&s->mu);
    gang__lh_status_add_event(s, gang__lh_wall_ms(), "kill",
                              "%s killed from this page (notice %" PRId64 ")",
                              ids[k], L->notices);
    pthread_mutex_unlock(&s->mu);
    L->notices++;
  }
  return GANG_OK;
}

/* ---- Quorums --------------------------------------------------------------
 */

static bool in_quorum(const gang__lh_quorum *q, const char *id) {
  return q != NULL && q->n > 0 &&
         bsearch(id, q->members, (size_t)q->n, sizeof *q->members,
                 gang__lh_cmp_member_id) != NULL;
}

/* Appends ", id" for each member of `a` not in `b`, as far as cap lets. */
static size_t members_not_in(const gang__lh_quorum *a, const gang__lh_quorum *b,
                             char sign, char *buf, size_t off, size_t cap) {
  for (int i = 0; i < a->n && off + 8 < cap; i++)
    if (!in_quorum(b, a->members[i].replica_id))
      off += (size_t)snprintf(buf + off, cap - off, " %c%s", sign,
                              a->members[i].replica_id);
  return off < cap ? off : cap - 1;
}

/* A quorum of a new id: the status page's list of quorum changes and its
 * events (who came in, who went out, who heals to the quorum's step). A
 * round that keeps the quorum (one per step) changes nothing there. */
static void history_push(gang_lighthouse *L, const gang__lh_quorum *q,
                         const gang__lh_quorum *prev) {
  gang__lh_status *s = &L->status;
  if (prev != NULL && prev->quorum_id == q->quorum_id)
    return;
  char(*ids)[GANG_LH_ID_MAX] = malloc((size_t)q->n * sizeof *ids);
  if (ids == NULL)
    return;
  int64_t top = 0;
  for (int i = 0; i < q->n; i++) {
    memcpy(ids[i], q->members[i].replica_id, GANG_LH_ID_MAX);
    if (q->members[i].step > top)
      top = q->members[i].step;
  }
  int64_t wall = gang__lh_wall_ms();
  char diff[200] = "";
  size_t o = 0;
  if (prev != NULL) {
    o = members_not_in(q, prev, '+', diff, o, sizeof diff);
    o = members_not_in(prev, q, '-', diff, o, sizeof diff);
  }
  pthread_mutex_lock(&s->mu);
  if (s->nhist == GANG__LH_HISTORY)
    free(s->hist[--s->nhist].ids);
  memmove(&s->hist[1], &s->hist[0], (size_t)s->nhist * sizeof s->hist[0]);
  s->hist[0] =
      (gang__lh_status_quorum){q->quorum_id, q->round, wall, q->n, ids};
  s->nhist++;
  gang__lh_status_add_event(
      s, wall, "quorum",
      "quorum %" PRId64 ": %d member%s at step %" PRId64 "%s%s", q->quorum_id,
      q->n, q->n == 1 ? "" : "s", top, o ? ":" : "", diff);
  for (int i = 0; i < q->n; i++)
    if (q->members[i].step < top)
      gang__lh_status_add_event(
          s, wall, "heal", "%s heals from a peer: step %" PRId64 " to %" PRId64,
          q->members[i].replica_id, q->members[i].step, top);
  pthread_mutex_unlock(&s->mu);
}

/* Writes the quorum, advances the round, collects the old keys. Takes
 * ownership of `members`. */
static gang_status publish(gang_lighthouse *L, gang__lh_member *members,
                           int n) {
  const gang__lh_quorum *prev = L->prev.n > 0 ? &L->prev : NULL;
  gang__lh_quorum q = {L->quorum_id, L->incarnation, L->round, n,
                       members,      L->notices};
  if (gang__lh_new_id(prev, members, n))
    q.quorum_id++;
  /* The round advances before its quorum is written: a replica that has
   * its quorum and joins again reads the new round, never this one, whose
   * quorum would come straight back to it, stale. A set, not an add, so
   * that a failure between the two writes is simply done again. */
  char num[24], key[GANG__LH_KEY_CAP];
  snprintf(num, sizeof num, "%" PRId64, L->round + 1);
  gang_status s = gang_store_set(L->st, GANG__LH_KEY_ROUND, num, strlen(num));
  size_t len = 0;
  char *rec = s == GANG_OK ? gang__lh_quorum_encode(&q, &len) : NULL;
  snprintf(key, sizeof key, GANG__LH_KEY_QUORUM, (long long)L->round);
  if (s == GANG_OK)
    s = rec ? gang_store_set(L->st, key, rec, len)
            : gang__error(GANG_NO_MEMORY, "lighthouse: no memory");
  free(rec);
  if (s != GANG_OK) {
    free(members);
    return s;
  }
  GANG_INFO(
      FT, "lighthouse: quorum %" PRId64 " in round %" PRId64 ", %d members: %s",
      q.quorum_id, L->round, n, L->why);
  /* Clients read only the quorum: joins go now, quorums GANG__LH_GC_ROUNDS
   * rounds later (a client still waiting for one then joins the current
   * round). */
  for (int i = 0; i < L->nreps && s == GANG_OK; i++)
    if (L->reps[i].joined || L->ext[i].bad_join) {
      /* A join carried from the round before: that key too (the replica
       * may also have joined this round meanwhile). */
      snprintf(key, sizeof key, GANG__LH_KEY_JOIN, (long long)L->round,
               L->reps[i].member.replica_id);
      s = gang_store_delete(L->st, key, NULL);
      if (s == GANG_OK && L->reps[i].joined &&
          L->ext[i].join_round != L->round) {
        snprintf(key, sizeof key, GANG__LH_KEY_JOIN,
                 (long long)L->ext[i].join_round, L->reps[i].member.replica_id);
        s = gang_store_delete(L->st, key, NULL);
      }
    }
  if (s == GANG_OK && L->round >= GANG__LH_GC_ROUNDS) {
    snprintf(key, sizeof key, GANG__LH_KEY_QUORUM,
             (long long)(L->round - GANG__LH_GC_ROUNDS));
    s = gang_store_delete(L->st, key, NULL);
  }
  history_push(L, &q, prev);
  gang__lh_quorum_fini(&L->prev);
  L->prev = q;
  L->quorum_id = q.quorum_id;
  L->round++;
  for (int i = 0; i < L->nreps; i++) {
    L->reps[i].joined = false;
    L->ext[i].bad_join = false;
    L->ext[i].in_prev = gang__lh_in_prev(L, L->reps[i].member.replica_id);
  }
  return s;
}

static gang_status decide(gang_lighthouse *L, int64_t now) {
  gang__lh_member *members = NULL;
  int n = 0;
  if (!gang__lh_compute(&L->cfg, L->reps, L->nreps,
                        L->prev.n > 0 ? &L->prev : NULL, now, &members, &n,
                        L->why, sizeof L->why))
    return GANG_OK;
  return publish(L, members, n);
}

/* The page's view of replica `id` (reps[i] now) before this publish, or
 * NULL. The page lists the replicas in reps' order, which changes only
 * when one is forgotten. */
static const gang__lh_status_rep *shown(const gang__lh_status *s, int at,
                                        const char *id) {
  if (at < s->nreps && strcmp(s->reps[at].id, id) == 0)
    return &s->reps[at];
  for (int i = 0; i < s->nreps; i++)
    if (strcmp(s->reps[i].id, id) == 0)
      return &s->reps[i];
  return NULL;
}

/* Events for what changed since the last publish: a replica seen for the
 * first time, lost (heartbeat expired) or back. */
static void replica_events(gang_lighthouse *L, int64_t now, int64_t wall) {
  gang__lh_status *s = &L->status;
  int64_t to = L->cfg.heartbeat_timeout_ms;
  for (int i = 0; i < L->nreps; i++) {
    const gang__lh_replica *r = &L->reps[i];
    const gang__lh_status_rep *o = shown(s, i, r->member.replica_id);
    bool was = o != NULL && o->healthy, is = gang__lh_healthy(L, i, now);
    if (o == NULL && r->last_beat_ms != INT64_MIN)
      gang__lh_status_add_event(s, wall, "new", "%s is heartbeating",
                                r->member.replica_id);
    else if (o != NULL && was && !is)
      gang__lh_status_add_event(
          s, wall, "lost", "%s lost: no heartbeat for %" PRId64 " ms",
          r->member.replica_id,
          r->last_beat_ms == INT64_MIN ? to : now - r->last_beat_ms);
    else if (o != NULL && !was && is && o->last_beat_ms != INT64_MIN)
      gang__lh_status_add_event(s, wall, "back", "%s is heartbeating again",
                                r->member.replica_id);
  }
}

/* A chart point when the quorum's step or size changed, or a second after
 * the last one. */
static void sample(gang_lighthouse *L, int64_t wall) {
  gang__lh_status *s = &L->status;
  if (L->prev.n == 0)
    return;
  int64_t step = 0;
  for (int i = 0; i < L->prev.n; i++)
    if (L->prev.members[i].step > step)
      step = L->prev.members[i].step;
  if (s->nsamples > 0) {
    const gang__lh_status_sample *last =
        &s->samples[(s->nsamples - 1) % GANG__LH_SAMPLES];
    if (last->step == step && last->members == L->prev.n &&
        wall - last->wall_ms < 1000)
      return;
  }
  s->samples[s->nsamples++ % GANG__LH_SAMPLES] =
      (gang__lh_status_sample){wall, step, L->prev.n};
}

void gang__lh_publish_status(gang_lighthouse *L) {
  gang__lh_status *s = &L->status;
  int64_t now = gang__lh_now_ms(), wall = gang__lh_wall_ms();
  pthread_mutex_lock(&s->mu);
  replica_events(L, now, wall);
  sample(L, wall);
  if (s->cap < L->nreps) {
    void *p = realloc(s->reps, (size_t)L->nreps * sizeof *s->reps);
    if (p == NULL) {
      pthread_mutex_unlock(&s->mu);
      return;
    }
    s->reps = p;
    s->cap = L->nreps;
  }
  for (int i = 0; i < L->nreps; i++) {
    const gang__lh_replica *r = &L->reps[i];
    gang__lh_status_rep *o = &s->reps[i];
    memcpy(o->id, r->member.replica_id, GANG_LH_ID_MAX);
    o->has_member = L->ext[i].has_member;
    o->step = r->member.step;
    o->world_size = r->member.world_size;
    o->last_beat_ms = r->last_beat_ms;
    o->joined = r->joined;
    o->in_quorum = L->ext[i].in_prev;
    o->healthy = gang__lh_healthy(L, i, now);
  }
  s->nreps = L->nreps;
  s->quorum_id = L->quorum_id;
  s->round = L->round;
  snprintf(s->waiting, sizeof s->waiting, "%s", L->why);
  pthread_mutex_unlock(&s->mu);
}

/* ---- The tick ------------------------------------------------------------ */

/* After a stall of the lighthouse itself (its process stopped, or starved
 * of CPU) longer than half a heartbeat timeout, it cannot tell which
 * replica went silent during it: their beats queued up behind it. The
 * stall's time, less the tick it would have waited anyway, then does not
 * count against any replica -- rather than every member of the last
 * quorum being declared dead at once and every step in flight aborted.
 * Only the stall: forgiving all silence up to now let a replica that had
 * died stay healthy for as long as the stalls came closer together than
 * the heartbeat timeout (test_lh_tool: stalls of 1.4 s every 1.7 s kept a
 * dead member of the quorum, and the next quorum with it, waiting). */
static void forgive_stall(gang_lighthouse *L, int64_t now) {
  /* From the end of the last tick: a tick slow of its own work (many
   * replicas) is not a stall. */
  int64_t gap = L->last_tick_ms > 0 ? now - L->last_tick_ms : 0;
  if (gap <= L->cfg.heartbeat_timeout_ms / 2 || gap <= 2 * L->tick_ms)
    return;
  int64_t stall = gap - L->tick_ms;
  GANG_INFO(FT,
            "lighthouse: %" PRId64 " ms since its last tick (it was stopped "
            "or starved): %" PRId64 " ms of silence forgiven",
            gap, stall);
  for (int i = 0; i < L->nreps; i++) {
    int64_t *last = &L->reps[i].last_beat_ms;
    if (*last != INT64_MIN)
      *last = *last + stall < now ? *last + stall : now;
  }
}

gang_status gang__lh_tick(gang_lighthouse *L) {
  int64_t now = gang__lh_now_ms();
  forgive_stall(L, now);
  GANG_CHECK(read_ids(L, now));
  now = gang__lh_now_ms();
  GANG_CHECK(read_suspects(L, now));
  /* Beyond GANG__LH_FAST_MAX replicas, counters are read every 1/20 of
   * the heartbeat timeout rather than every tick: a death is seen that
   * much later at most, and the tick does not grow with every replica's
   * beats ten times a second. */
  int64_t every = L->cfg.heartbeat_timeout_ms / 20;
  if (L->nreps <= GANG__LH_FAST_MAX || every <= L->tick_ms ||
      now - L->beats_read_ms >= every || L->beats_read_ms == 0) {
    GANG_CHECK(gang__lh_read_beats(L, now));
    L->beats_read_ms = now;
  }
  GANG_CHECK(prune(L, now));
  GANG_CHECK(send_notices(L, now));
  GANG_CHECK(send_kills(L));
  GANG_CHECK(gang__lh_read_joins(L, now));
  gang_status s = decide(L, now);
  L->last_tick_ms = gang__lh_now_ms();
  return s;
}

int gang__lh_fast_keys(gang_lighthouse *L, int64_t now, char **keys) {
  *keys = NULL;
  if (L->prev.n > GANG__LH_FAST_MAX)
    return 0;
  int k = 0, joined = 0;
  for (int m = 0; m < L->prev.n; m++) {
    int i = gang__lh_find(L, L->prev.members[m].replica_id);
    if (i < 0 || !gang__lh_healthy(L, i, now) || L->ext[i].bad_join)
      return 0;
    joined += L->reps[i].joined;
  }
  if (joined == L->prev.n)
    return 0;
  *keys = malloc((size_t)L->prev.n * GANG__LH_KEY_CAP);
  if (*keys == NULL)
    return 0;
  for (int m = 0; m < L->prev.n; m++) {
    const char *id = L->prev.members[m].replica_id;
    if (!L->reps[gang__lh_find(L, id)].joined)
      snprintf(*keys + (size_t)k++ * GANG__LH_KEY_CAP, GANG__LH_KEY_CAP,
               GANG__LH_KEY_JOIN, (long long)L->round, id);
  }
  return k;
}
