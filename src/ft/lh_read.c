/* What a lighthouse tick reads (lh_tick.c runs the tick): every
 * replica's heartbeat counter and every join that may be there, each in
 * one request however many replicas there are (gang__store_peek), and the
 * lookups the tick makes per replica: by id in a hash table, in the last
 * quorum by binary search (members are sorted). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "gang/store.h"
#include "lh_impl.h"
#include "store/server.h"

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

int gang__lh_find(gang_lighthouse *L, const char *id) {
  if (L->index_stale)
    index_build(L);
  for (uint32_t h = id_hash(id);; h++) {
    int i = L->index[h & (GANG__LH_INDEX_SLOTS - 1)];
    if (i < 0 || strcmp(L->reps[i].member.replica_id, id) == 0)
      return i;
  }
}

bool gang__lh_healthy(const gang_lighthouse *L, int i, int64_t now) {
  return L->reps[i].last_beat_ms > now - L->cfg.heartbeat_timeout_ms;
}

int gang__lh_cmp_member_id(const void *key, const void *m) {
  return strcmp(key, ((const gang__lh_member *)m)->replica_id);
}

/* Members of a quorum are sorted by id (gang__lh_compute, and decoding
 * checks it). */
bool gang__lh_in_prev(const gang_lighthouse *L, const char *id) {
  return L->prev.n > 0 &&
         bsearch(id, L->prev.members, (size_t)L->prev.n,
                 sizeof *L->prev.members, gang__lh_cmp_member_id) != NULL;
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
gang_status gang__lh_read_beats(gang_lighthouse *L, int64_t now) {
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
  /* Datagrams' beats count beside the store's (lh_beats.c). */
  int64_t *udp = calloc(n > 0 ? (size_t)n : 1, sizeof *udp);
  if (udp == NULL) {
    peek_buf_fini(&p, n);
    return gang__error(GANG_NO_MEMORY, "lighthouse: %d counters", n);
  }
  if (n > 0)
    gang__lh_beats_read(L->beats, L->reps[0].member.replica_id, sizeof *L->reps,
                        n, udp);
  for (int i = 0; i < n; i++) {
    int64_t beats = udp[i];
    if (p.vals[i] != NULL) {
      char *end;
      errno = 0;
      beats += strtoll(p.vals[i], &end, 10);
      if (errno != 0 || end == (char *)p.vals[i] || *end != '\0') {
        GANG_WARN(FT, "lighthouse: %s is not a counter: replica '%s' skipped",
                  key_at(&p, i), L->reps[i].member.replica_id);
        continue;
      }
    }
    note_beats(L, i, beats, now);
  }
  /* Tell each replica, once, that its datagrams arrive (lh_client.c). */
  for (int i = 0; i < n && s == GANG_OK; i++) {
    if (udp[i] == 0 || L->ext[i].udp_seen)
      continue;
    char key[GANG__LH_KEY_CAP];
    snprintf(key, sizeof key, GANG__LH_KEY_UDP, L->reps[i].member.replica_id);
    s = gang_store_set(L->st, key, "1", 1);
    L->ext[i].udp_seen = s == GANG_OK;
  }
  free(udp);
  peek_buf_fini(&p, n);
  return s;
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
gang_status gang__lh_read_joins(gang_lighthouse *L, int64_t now) {
  int n = L->nreps;
  peek_buf p;
  GANG_CHECK(peek_buf_init(&p, 2 * n));
  int k = 0;
  for (int i = 0; i < n; i++) {
    gang__lh_replica *r = &L->reps[i];
    bool look = !L->ext[i].bad_join && gang__lh_healthy(L, i, now);
    bool before = look && !r->joined && L->round > 0 && !L->ext[i].in_prev;
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
