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
#include <errno.h>
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
#include "store/server.h"

#define IDS_COMPACT (64 << 10) /* lh/ids is rewritten beyond this */

/* get without waiting: GANG_TIMEOUT when the key is missing. */
static gang_status get_now(gang_lighthouse *L, const char *key, void **v,
                           size_t *n) {
  gang_store_set_timeout(L->st, 0);
  gang_status s = gang_store_get(L->st, key, v, n);
  gang_store_set_timeout(L->st, GANG__LH_CALL_MS);
  return s;
}

static uint32_t id_hash(const char *id) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *id != '\0'; id++)
    h = (h ^ (uint8_t)*id) * 16777619u;
  return h;
}

/* Rebuilds the id -> index table after replicas came or went. */
static void index_build(gang_lighthouse *L) {
  for (int k = 0; k < GANG__LH_INDEX_SLOTS; k++)
    L->index[k] = -1;
  for (int i = 0; i < L->nreps; i++) {
    uint32_t h = id_hash(L->reps[i].member.replica_id);
    while (L->index[h & (GANG__LH_INDEX_SLOTS - 1)] >= 0)
      h++;
    L->index[h & (GANG__LH_INDEX_SLOTS - 1)] = i;
  }
  L->index_stale = false;
}

static int find(gang_lighthouse *L, const char *id) {
  if (L->index_stale)
    index_build(L);
  for (uint32_t h = id_hash(id);; h++) {
    int i = L->index[h & (GANG__LH_INDEX_SLOTS - 1)];
    if (i < 0 || strcmp(L->reps[i].member.replica_id, id) == 0)
      return i;
  }
}

static bool healthy(const gang_lighthouse *L, int i, int64_t now) {
  return L->reps[i].last_beat_ms > now - L->cfg.heartbeat_timeout_ms;
}

static int cmp_member_id(const void *key, const void *m) {
  return strcmp(key, ((const gang__lh_member *)m)->replica_id);
}

/* Members of a quorum are sorted by id (gang__lh_compute, and decoding
 * checks it). */
static bool in_prev(const gang_lighthouse *L, const char *id) {
  return L->prev.n > 0 &&
         bsearch(id, L->prev.members, (size_t)L->prev.n,
                 sizeof *L->prev.members, cmp_member_id) != NULL;
}

/* ---- Replicas: ids, heartbeats, pruning ---------------------------------- */

static void add_replica(gang_lighthouse *L, const char *id, size_t len,
                        int64_t now) {
  char buf[GANG_LH_ID_MAX];
  memcpy(buf, id, len);
  buf[len] = '\0';
  if (find(L, buf) >= 0)
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
  L->ext[i] = (gang__lh_extra){.beats = -1, .seen_ms = now};
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

/* Reads keys[0..n) (GANG__LH_KEY_CAP bytes apart in one buffer) without
 * waiting, PEEK_CHUNK to a request: vals[i] is NULL for a missing key. On
 * failure nothing is left allocated. */
#define PEEK_CHUNK 512
static gang_status peek_keys(gang_lighthouse *L, const char *keys, int n,
                             void **vals, size_t *lens) {
  const char *ptrs[PEEK_CHUNK];
  for (int i = 0; i < n; i += PEEK_CHUNK) {
    int k = n - i < PEEK_CHUNK ? n - i : PEEK_CHUNK;
    for (int j = 0; j < k; j++)
      ptrs[j] = keys + (size_t)(i + j) * GANG__LH_KEY_CAP;
    gang_status s =
        gang__store_peek(L->st, ptrs, (size_t)k, vals + i, lens + i);
    if (s != GANG_OK) {
      for (int j = 0; j < i; j++)
        gang_store_free(vals[j]);
      return s;
    }
  }
  return GANG_OK;
}

/* Room for n keys and their values. */
typedef struct peek_buf {
  char *keys;
  void **vals;
  size_t *lens;
} peek_buf;

static gang_status peek_buf_init(peek_buf *p, int n) {
  size_t k = n > 0 ? (size_t)n : 1;
  p->keys = malloc(k * GANG__LH_KEY_CAP);
  p->vals = calloc(k, sizeof *p->vals);
  p->lens = calloc(k, sizeof *p->lens);
  if (p->keys == NULL || p->vals == NULL || p->lens == NULL) {
    free(p->keys);
    free(p->vals);
    free(p->lens);
    return gang__error(GANG_NO_MEMORY, "lighthouse: %d keys to read", n);
  }
  return GANG_OK;
}

static void peek_buf_fini(peek_buf *p, int n) {
  for (int i = 0; i < n; i++)
    gang_store_free(p->vals[i]);
  free(p->keys);
  free(p->vals);
  free(p->lens);
}

static char *key_at(peek_buf *p, int k) {
  return p->keys + (size_t)k * GANG__LH_KEY_CAP;
}

/* What replica i's counter reading `beats` says. */
static void note_beats(gang_lighthouse *L, int i, int64_t beats, int64_t now) {
  gang__lh_extra *e = &L->ext[i];
  if (beats < 0) /* it left (gang__lh_leave): dead now */
    L->reps[i].last_beat_ms = INT64_MIN;
  else if (beats != e->beats && !(e->beats == -1 && beats == 0))
    L->reps[i].last_beat_ms = now;
  e->beats = beats;
  if (e->suspect_ms == 0)
    return;
  if (beats != e->suspect_beats || L->reps[i].last_beat_ms == INT64_MIN) {
    e->suspect_ms = 0; /* it beats: alive after all (or gone already) */
  } else if (now - e->suspect_ms >= GANG__LH_SUSPECT_MS) {
    GANG_INFO(FT,
              "lighthouse: replica '%s', reported lost by a peer, has not "
              "beaten for %" PRId64 " ms since: dead",
              L->reps[i].member.replica_id, now - e->suspect_ms);
    L->reps[i].last_beat_ms = INT64_MIN;
    e->suspect_ms = 0;
  }
}

/* Every counter in one read. A missing counter (deleted by hand) reads
 * 0, as an add of 0 would; one that is not a number changes nothing. */
static gang_status read_beats(gang_lighthouse *L, int64_t now) {
  int n = L->nreps;
  peek_buf p;
  GANG_CHECK(peek_buf_init(&p, n));
  for (int i = 0; i < n; i++)
    snprintf(key_at(&p, i), GANG__LH_KEY_CAP, GANG__LH_KEY_HB,
             L->reps[i].member.replica_id);
  gang_status s = peek_keys(L, p.keys, n, p.vals, p.lens);
  if (s != GANG_OK) {
    peek_buf_fini(&p, 0);
    return s;
  }
  for (int i = 0; i < n; i++) {
    int64_t beats = 0;
    if (p.vals[i] != NULL) {
      char *end;
      errno = 0;
      beats = strtoll(p.vals[i], &end, 10);
      if (errno != 0 || end == (char *)p.vals[i] || *end != '\0') {
        GANG_WARN(FT, "lighthouse: %s is not a counter: replica '%s' skipped",
                  key_at(&p, i), L->reps[i].member.replica_id);
        continue;
      }
    }
    note_beats(L, i, beats, now);
  }
  peek_buf_fini(&p, n);
  return GANG_OK;
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
  const char *p = v;
  for (size_t off = 0; off < n;) {
    const char *nl = memchr(p + off, '\n', n - off);
    size_t len = nl != NULL ? (size_t)(nl - (p + off)) : n - off;
    char id[GANG_LH_ID_MAX];
    if (gang__lh_id_valid(p + off, len)) {
      memcpy(id, p + off, len);
      id[len] = '\0';
      int i = find(L, id);
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
        L->ext[i].suspect_ms = now;
        L->ext[i].suspect_beats = beats;
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
    GANG_INFO(FT,
              "lighthouse: replica '%s' silent for %" PRId64 " ms: "
              "forgotten",
              L->reps[i].member.replica_id, now - last);
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
    if (healthy(L, i, now))
      L->ext[i].noticed = false;
  for (int m = 0; m < L->prev.n; m++) {
    const char *id = L->prev.members[m].replica_id;
    int i = find(L, id);
    if (i < 0 || healthy(L, i, now) || L->ext[i].noticed)
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

/* Replica i's join record (under `key`, of round `round`) as read. */
static gang_status take_join(gang_lighthouse *L, int i, const char *key,
                             int64_t round, const void *v, size_t n,
                             int64_t now) {
  gang__lh_replica *r = &L->reps[i];
  gang__lh_member m;
  gang_status s = gang__lh_member_decode(v, n, &m);
  if (s == GANG_OK && strcmp(m.replica_id, r->member.replica_id) != 0)
    s = gang__error(GANG_PROTOCOL, "it names replica '%s'", m.replica_id);
  if (s != GANG_OK) {
    GANG_WARN(FT, "lighthouse: %s ignored: %s", key, gang_last_error());
    L->ext[i].bad_join = true;
    return GANG_OK;
  }
  if (r->joined && L->ext[i].join_round != round) {
    /* It replaces a join carried from the round before: that key goes
     * now (publish deletes only this round's and the carried one's). */
    char old[GANG__LH_KEY_CAP];
    snprintf(old, sizeof old, GANG__LH_KEY_JOIN,
             (long long)L->ext[i].join_round, r->member.replica_id);
    GANG_CHECK(gang_store_delete(L->st, old, NULL));
  }
  r->member = m;
  if (!r->joined)
    r->joined_ms = now; /* the join timeout counts from the first */
  r->joined = true;
  L->ext[i].has_member = true;
  L->ext[i].join_round = round;
  return GANG_OK;
}

/* A join of the round before that came after its quorum was computed
 * (or that a shrink_only quorum left out) counts for this round: its
 * replica, which saw itself left out, joins this round too, but a fast
 * quorum of the others may form before that join is seen, round after
 * round, when they step faster than it can join again (a replica
 * rejoining after a stop was kept out for 30 s so). torchft's lighthouse
 * keeps such a requester in its participants the same way. Only
 * replicas that were not in the last quorum are looked for there.
 *
 * Every join that may be there is read in one go: key 2i is replica i's
 * of this round, 2i + 1 of the round before ("" when not looked for). */
static gang_status read_joins(gang_lighthouse *L, int64_t now) {
  int n = L->nreps;
  peek_buf p;
  GANG_CHECK(peek_buf_init(&p, 2 * n));
  int k = 0;
  for (int i = 0; i < n; i++) {
    gang__lh_replica *r = &L->reps[i];
    bool look = !L->ext[i].bad_join && healthy(L, i, now);
    bool before =
        look && !r->joined && L->round > 0 && !in_prev(L, r->member.replica_id);
    key_at(&p, k)[0] = key_at(&p, k + 1)[0] = '\0';
    if (look)
      snprintf(key_at(&p, k), GANG__LH_KEY_CAP, GANG__LH_KEY_JOIN,
               (long long)L->round, r->member.replica_id);
    if (before)
      snprintf(key_at(&p, k + 1), GANG__LH_KEY_CAP, GANG__LH_KEY_JOIN,
               (long long)L->round - 1, r->member.replica_id);
    k += 2;
  }
  /* Ask only for the keys looked for: compact them, then spread back. */
  int *from = malloc((size_t)(2 * n > 0 ? 2 * n : 1) * sizeof *from);
  if (from == NULL) {
    peek_buf_fini(&p, 0);
    return gang__error(GANG_NO_MEMORY, "lighthouse: %d joins to read", n);
  }
  int m = 0;
  for (int j = 0; j < k; j++)
    if (key_at(&p, j)[0] != '\0') {
      if (m != j)
        memcpy(key_at(&p, m), key_at(&p, j), GANG__LH_KEY_CAP);
      from[m++] = j;
    }
  gang_status s = peek_keys(L, p.keys, m, p.vals, p.lens);
  if (s != GANG_OK) {
    free(from);
    peek_buf_fini(&p, 0);
    return s;
  }
  for (int j = m - 1; j >= 0; j--) { /* from[j] >= j: back to front */
    if (from[j] == j)
      continue;
    memcpy(key_at(&p, from[j]), key_at(&p, j), GANG__LH_KEY_CAP);
    p.vals[from[j]] = p.vals[j];
    p.lens[from[j]] = p.lens[j];
    p.vals[j] = NULL;
    key_at(&p, j)[0] = '\0';
  }
  free(from);
  for (int i = 0; i < n && s == GANG_OK; i++) {
    int j = p.vals[2 * i] != NULL ? 2 * i : 2 * i + 1;
    if (p.vals[j] != NULL)
      s = take_join(L, i, key_at(&p, j), L->round - (j & 1), p.vals[j],
                    p.lens[j], now);
  }
  peek_buf_fini(&p, k);
  return s;
}

/* ---- Quorums --------------------------------------------------------------
 */

static bool in_quorum(const gang__lh_quorum *q, const char *id) {
  return q != NULL && q->n > 0 &&
         bsearch(id, q->members, (size_t)q->n, sizeof *q->members,
                 cmp_member_id) != NULL;
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
    bool was = o != NULL && o->healthy, is = healthy(L, i, now);
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
    o->in_quorum = in_prev(L, r->member.replica_id);
    o->healthy = healthy(L, i, now);
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
 * replica went silent: their beats queued up behind it. Every replica's
 * heartbeat then counts from now, rather than every member of the last
 * quorum being declared dead at once and every step in flight aborted. */
static void forgive_stall(gang_lighthouse *L, int64_t now) {
  /* From the end of the last tick: a tick slow of its own work (many
   * replicas) is not a stall. */
  int64_t gap = L->last_tick_ms > 0 ? now - L->last_tick_ms : 0;
  if (gap <= L->cfg.heartbeat_timeout_ms / 2 || gap <= 2 * L->tick_ms)
    return;
  GANG_INFO(FT,
            "lighthouse: %" PRId64 " ms since its last tick (it was stopped "
            "or starved): heartbeats count from now",
            gap);
  for (int i = 0; i < L->nreps; i++)
    if (L->reps[i].last_beat_ms != INT64_MIN)
      L->reps[i].last_beat_ms = now;
}

gang_status gang__lh_tick(gang_lighthouse *L) {
  int64_t now = gang__lh_now_ms();
  forgive_stall(L, now);
  GANG_CHECK(read_ids(L, now));
  now = gang__lh_now_ms();
  GANG_CHECK(read_suspects(L, now));
  GANG_CHECK(read_beats(L, now));
  GANG_CHECK(prune(L, now));
  GANG_CHECK(send_notices(L, now));
  GANG_CHECK(send_kills(L));
  GANG_CHECK(read_joins(L, now));
  gang_status s = decide(L, now);
  L->last_tick_ms = gang__lh_now_ms();
  return s;
}

int gang__lh_fast_keys(gang_lighthouse *L, int64_t now, char **keys) {
  *keys = NULL;
  int k = 0, joined = 0;
  for (int m = 0; m < L->prev.n; m++) {
    int i = find(L, L->prev.members[m].replica_id);
    if (i < 0 || !healthy(L, i, now) || L->ext[i].bad_join)
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
    if (!L->reps[find(L, id)].joined)
      snprintf(*keys + (size_t)k++ * GANG__LH_KEY_CAP, GANG__LH_KEY_CAP,
               GANG__LH_KEY_JOIN, (long long)L->round, id);
  }
  return k;
}
