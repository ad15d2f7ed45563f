/* The lighthouse's pure part: whether the replicas that joined a round
 * make a quorum (torchft's quorum_compute), whether a quorum takes a new
 * id, and the text records that carry joins and quorums through the
 * store. No I/O and no clock: the caller passes `now`, so every rule is a
 * unit test (tests/ft/test_lh_quorum.c).
 *
 * Records are parsed as hostile input, because any store client may write
 * them: every line, key, value and count is bounded before it is used,
 * and anything malformed is GANG_PROTOCOL naming the line. Unknown keys
 * that are well formed are skipped, so a newer writer can add fields. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "lh_impl.h"

#define LINE_MAX_BYTES 512 /* a member line with the longest id fits */
#define KEY_MAX_BYTES 32
#define MEMBER_LINE_MIN 48 /* the shortest member line a count may promise */
#define WORLD_SIZE_MAX (1 << 24)

bool gang__lh_id_valid(const char *text, size_t len) {
  if (text == NULL || len == 0 || len >= GANG_LH_ID_MAX)
    return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c <= 0x20 || c >= 0x7f)
      return false;
  }
  return true;
}

int64_t gang__lh_now_ms(void) { return gang__now_ns() / 1000000; }

int64_t gang__lh_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gang__lh_quorum_fini(gang__lh_quorum *q) {
  if (q == NULL)
    return;
  free(q->members);
  memset(q, 0, sizeof *q);
}

/* ---- Encoding ------------------------------------------------------------ */

/* The id of a member, bounded even if its array is not NUL-terminated. */
static int id_len(const gang__lh_member *m) {
  return (int)strnlen(m->replica_id, GANG_LH_ID_MAX - 1);
}

size_t gang__lh_member_encode(const gang__lh_member *m, char *buf, size_t cap) {
  int n = snprintf(
      buf, cap,
      "replica_id=%.*s\nstep=%" PRId64 "\nworld_size=%d\n"
      "shrink_only=%d\ncommit_failures=%" PRId64 "\ncommit_quorum=%" PRId64
      "\ncommit_incarnation=%016" PRIx64 "\n",
      id_len(m), m->replica_id, m->step, m->world_size, m->shrink_only ? 1 : 0,
      m->commit_failures, m->commit_quorum, m->commit_inc);
  return n < 0 ? 0 : (size_t)n;
}

char *gang__lh_quorum_encode(const gang__lh_quorum *q, size_t *len) {
  size_t cap = 200 + (size_t)(q->n > 0 ? q->n : 0) * (GANG_LH_ID_MAX + 256);
  char *buf = malloc(cap);
  if (buf == NULL)
    return NULL;
  size_t off = (size_t)snprintf(
      buf, cap,
      "quorum_id=%" PRId64 "\nincarnation=%016" PRIx64 "\nround=%" PRId64
      "\nnotices=%" PRId64 "\nmembers=%d\n",
      q->quorum_id, q->incarnation, q->round, q->notices, q->n);
  for (int i = 0; i < q->n && off < cap; i++) {
    const gang__lh_member *m = &q->members[i];
    off += (size_t)snprintf(buf + off, cap - off,
                            "member=%.*s step=%" PRId64 " world_size=%d "
                            "shrink_only=%d commit_failures=%" PRId64
                            " commit_quorum=%" PRId64
                            " commit_incarnation=%016" PRIx64 "\n",
                            id_len(m), m->replica_id, m->step, m->world_size,
                            m->shrink_only ? 1 : 0, m->commit_failures,
                            m->commit_quorum, m->commit_inc);
  }
  if (off >= cap) { /* cannot happen with the bounds above */
    free(buf);
    return NULL;
  }
  *len = off;
  return buf;
}

/* ---- Decoding ------------------------------------------------------------ */

typedef struct reader {
  const char *p, *end;
  int line;
  const char *what; /* "member" or "quorum" */
} reader;

typedef struct span {
  const char *p;
  size_t n;
} span;

static bool span_is(span s, const char *lit) {
  return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

static gang_status bad(const reader *r, const char *fmt, const char *a,
                       size_t alen) {
  char msg[160];
  snprintf(msg, sizeof msg, fmt, (int)(alen > 64 ? 64 : alen), a);
  return gang__error(GANG_PROTOCOL, "lighthouse %s record, line %d: %s",
                     r->what, r->line, msg);
}

/* The next "key=value" line. *got is false at the end of the text. */
static gang_status next_line(reader *r, span *key, span *val, bool *got) {
  *got = false;
  if (r->p >= r->end)
    return GANG_OK;
  r->line++;
  const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
  const char *stop = nl ? nl : r->end;
  size_t n = (size_t)(stop - r->p);
  if (n > LINE_MAX_BYTES)
    return bad(r, "longer than 512 bytes ('%.*s...')", r->p, n);
  const char *eq = memchr(r->p, '=', n);
  if (eq == NULL)
    return bad(r, "'%.*s' is not key=value", r->p, n);
  key->p = r->p;
  key->n = (size_t)(eq - r->p);
  if (key->n == 0 || key->n > KEY_MAX_BYTES)
    return bad(r, "bad key in '%.*s'", r->p, n);
  for (size_t i = 0; i < key->n; i++)
    if (!((key->p[i] >= 'a' && key->p[i] <= 'z') || key->p[i] == '_'))
      return bad(r, "bad key in '%.*s'", r->p, n);
  val->p = eq + 1;
  val->n = (size_t)(stop - val->p);
  for (size_t i = 0; i < val->n; i++) {
    unsigned char c = (unsigned char)val->p[i];
    if (c < 0x20 || c >= 0x7f)
      return bad(r, "a control or non-ASCII byte in the value of '%.*s'",
                 key->p, key->n);
  }
  r->p = nl ? nl + 1 : r->end;
  *got = true;
  return GANG_OK;
}

/* A decimal integer in lo..hi, digits only. */
static gang_status parse_num(const reader *r, span key, span v, int64_t lo,
                             int64_t hi, int64_t *out) {
  if (v.n == 0 || v.n > 19)
    return bad(r, "%.*s is not a number in range", key.p, key.n);
  int64_t x = 0;
  for (size_t i = 0; i < v.n; i++) {
    if (v.p[i] < '0' || v.p[i] > '9')
      return bad(r, "%.*s is not a decimal number", key.p, key.n);
    int d = v.p[i] - '0';
    if (x > (INT64_MAX - d) / 10)
      return bad(r, "%.*s overflows", key.p, key.n);
    x = x * 10 + d;
  }
  if (x < lo || x > hi)
    return bad(r, "%.*s is out of range", key.p, key.n);
  *out = x;
  return GANG_OK;
}

static gang_status parse_id(const reader *r, span v, char *out) {
  if (!gang__lh_id_valid(v.p, v.n))
    return bad(r,
               "'%.*s' is not a replica id (1..127 printable bytes, no "
               "spaces)",
               v.p, v.n);
  memcpy(out, v.p, v.n);
  out[v.n] = '\0';
  return GANG_OK;
}

/* Member fields, by bit. */
enum {
  F_ID = 1,
  F_STEP = 2,
  F_WORLD = 4,
  F_SHRINK = 8,
  F_FAIL = 16,
  F_COMMIT = 32,    /* optional */
  F_COMMIT_INC = 64 /* optional */
};
#define F_ALL (F_ID | F_STEP | F_WORLD | F_SHRINK | F_FAIL)

static gang_status parse_hex64(const reader *r, span k, span v, uint64_t *out);

/* One member field; *bit is the field's bit, or 0 for an unknown key. */
static gang_status member_field(const reader *r, span k, span v,
                                gang__lh_member *m, unsigned *bit) {
  int64_t x;
  *bit = 0;
  if (span_is(k, "replica_id")) {
    *bit = F_ID;
    return parse_id(r, v, m->replica_id);
  }
  if (span_is(k, "step")) {
    *bit = F_STEP;
    GANG_CHECK(parse_num(r, k, v, 0, INT64_MAX, &m->step));
  } else if (span_is(k, "world_size")) {
    *bit = F_WORLD;
    GANG_CHECK(parse_num(r, k, v, 1, WORLD_SIZE_MAX, &x));
    m->world_size = (int)x;
  } else if (span_is(k, "shrink_only")) {
    *bit = F_SHRINK;
    GANG_CHECK(parse_num(r, k, v, 0, 1, &x));
    m->shrink_only = x == 1;
  } else if (span_is(k, "commit_failures")) {
    *bit = F_FAIL;
    GANG_CHECK(parse_num(r, k, v, 0, INT64_MAX, &m->commit_failures));
  } else if (span_is(k, "commit_quorum")) {
    *bit = F_COMMIT;
    GANG_CHECK(parse_num(r, k, v, 0, INT64_MAX, &m->commit_quorum));
  } else if (span_is(k, "commit_incarnation")) {
    *bit = F_COMMIT_INC;
    GANG_CHECK(parse_hex64(r, k, v, &m->commit_inc));
  }
  return GANG_OK;
}

static gang_status seen(const reader *r, span k, unsigned *have, unsigned bit) {
  if (*have & bit)
    return bad(r, "%.*s appears twice", k.p, k.n);
  *have |= bit;
  return GANG_OK;
}

static gang_status missing(const reader *r, unsigned have, unsigned all) {
  static const char *names[] = {"replica_id", "step", "world_size",
                                "shrink_only", "commit_failures"};
  for (int i = 0; i < 5; i++)
    if ((all & (1u << i)) && !(have & (1u << i)))
      return gang__error(GANG_PROTOCOL, "lighthouse %s record: no %s", r->what,
                         names[i]);
  return GANG_OK;
}

gang_status gang__lh_member_decode(const char *buf, size_t len,
                                   gang__lh_member *out) {
  reader r = {buf, buf + len, 0, "member"};
  if (buf == NULL || len > 4096)
    return gang__error(GANG_PROTOCOL,
                       "lighthouse member record of %zu bytes (at most 4096)",
                       len);
  gang__lh_member m;
  memset(&m, 0, sizeof m);
  unsigned have = 0, bit;
  span k, v;
  bool got;
  for (;;) {
    GANG_CHECK(next_line(&r, &k, &v, &got));
    if (!got)
      break;
    GANG_CHECK(member_field(&r, k, v, &m, &bit));
    if (bit)
      GANG_CHECK(seen(&r, k, &have, bit));
  }
  GANG_CHECK(missing(&r, have, F_ALL));
  *out = m;
  return GANG_OK;
}

/* "member=<id> step=N world_size=N shrink_only=B commit_failures=N
 * [commit_quorum=N] [commit_incarnation=H]". */
static gang_status member_line(reader *r, span v, gang__lh_member *m) {
  memset(m, 0, sizeof *m);
  if (v.n > 0 && v.p[v.n - 1] == ' ')
    return bad(r, "member line '%.*s' ends in a space", v.p, v.n);
  const char *p = v.p, *end = v.p + v.n;
  const char *sp = memchr(p, ' ', v.n);
  span id = {p, (size_t)((sp ? sp : end) - p)};
  GANG_CHECK(parse_id(r, id, m->replica_id));
  unsigned have = F_ID, bit;
  p = sp ? sp + 1 : end;
  while (p < end) {
    const char *q = memchr(p, ' ', (size_t)(end - p));
    const char *tok_end = q ? q : end;
    const char *eq = memchr(p, '=', (size_t)(tok_end - p));
    if (eq == NULL || eq == p)
      return bad(r, "member field '%.*s' is not key=value", p,
                 (size_t)(tok_end - p));
    span k = {p, (size_t)(eq - p)}, fv = {eq + 1, (size_t)(tok_end - eq - 1)};
    if (span_is(k, "replica_id"))
      return bad(r, "%.*s inside a member line", k.p, k.n);
    GANG_CHECK(member_field(r, k, fv, m, &bit));
    if (bit)
      GANG_CHECK(seen(r, k, &have, bit));
    p = q ? q + 1 : end;
  }
  return missing(r, have, F_ALL);
}

static gang_status parse_hex64(const reader *r, span k, span v, uint64_t *out) {
  if (v.n == 0 || v.n > 16)
    return bad(r, "%.*s is not 1..16 hex digits", k.p, k.n);
  uint64_t x = 0;
  for (size_t i = 0; i < v.n; i++) {
    char c = v.p[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      return bad(r, "%.*s is not hexadecimal", k.p, k.n);
    x = x << 4 | (uint64_t)d;
  }
  *out = x;
  return GANG_OK;
}

enum { Q_ID = 1, Q_INC = 2, Q_ROUND = 4, Q_N = 8, Q_NOTICES = 16 };

static gang_status quorum_field(reader *r, span k, span v, gang__lh_quorum *q,
                                unsigned *have, int *got_members) {
  int64_t x;
  if (span_is(k, "quorum_id")) {
    GANG_CHECK(seen(r, k, have, Q_ID));
    return parse_num(r, k, v, 0, INT64_MAX, &q->quorum_id);
  }
  if (span_is(k, "incarnation")) {
    GANG_CHECK(seen(r, k, have, Q_INC));
    return parse_hex64(r, k, v, &q->incarnation);
  }
  if (span_is(k, "round")) {
    GANG_CHECK(seen(r, k, have, Q_ROUND));
    return parse_num(r, k, v, 0, INT64_MAX, &q->round);
  }
  if (span_is(k, "notices")) { /* optional: 0 without it */
    GANG_CHECK(seen(r, k, have, Q_NOTICES));
    return parse_num(r, k, v, 0, INT64_MAX, &q->notices);
  }
  if (span_is(k, "members")) {
    GANG_CHECK(seen(r, k, have, Q_N));
    GANG_CHECK(parse_num(r, k, v, 1, GANG__LH_MAX_MEMBERS, &x));
    /* The count sizes an allocation: it must fit in what is left. */
    if ((size_t)x > (size_t)(r->end - r->p) / MEMBER_LINE_MIN)
      return bad(r, "%.*s promises more member lines than the record holds",
                 k.p, k.n);
    q->members = calloc((size_t)x, sizeof *q->members);
    if (q->members == NULL)
      return gang__error(GANG_NO_MEMORY, "lighthouse quorum record: no memory");
    q->n = (int)x;
    return GANG_OK;
  }
  if (span_is(k, "member")) {
    if (!(*have & Q_N))
      return bad(r, "%.*s before members=", k.p, k.n);
    if (*got_members >= q->n)
      return bad(r, "more %.*s lines than members=", k.p, k.n);
    gang__lh_member *m = &q->members[*got_members];
    GANG_CHECK(member_line(r, v, m));
    if (*got_members > 0 &&
        strcmp(q->members[*got_members - 1].replica_id, m->replica_id) >= 0)
      return bad(r, "member '%.*s' is out of order or repeated", m->replica_id,
                 strlen(m->replica_id));
    (*got_members)++;
  }
  return GANG_OK;
}

gang_status gang__lh_quorum_decode(const char *buf, size_t len,
                                   gang__lh_quorum *out) {
  reader r = {buf, buf + len, 0, "quorum"};
  size_t cap = 256 + (size_t)GANG__LH_MAX_MEMBERS * LINE_MAX_BYTES;
  if (buf == NULL || len > cap)
    return gang__error(GANG_PROTOCOL,
                       "lighthouse quorum record of %zu bytes (at most %zu)",
                       len, cap);
  gang__lh_quorum q;
  memset(&q, 0, sizeof q);
  unsigned have = 0;
  int got_members = 0;
  span k, v;
  bool got;
  gang_status st;
  for (;;) {
    GANG_CHECK_GOTO(next_line(&r, &k, &v, &got), st, fail);
    if (!got)
      break;
    GANG_CHECK_GOTO(quorum_field(&r, k, v, &q, &have, &got_members), st, fail);
  }
  if ((have & (Q_ID | Q_INC | Q_ROUND | Q_N)) != (Q_ID | Q_INC | Q_ROUND | Q_N))
    st = gang__error(GANG_PROTOCOL,
                     "lighthouse quorum record: quorum_id, incarnation, round "
                     "or members is missing");
  else if (got_members != q.n)
    st = gang__error(GANG_PROTOCOL,
                     "lighthouse quorum record: members=%d but %d member "
                     "lines",
                     q.n, got_members);
  else {
    *out = q;
    return GANG_OK;
  }
fail:
  gang__lh_quorum_fini(&q);
  return st;
}

/* ---- The computation ----------------------------------------------------- */

static int cmp_member(const void *a, const void *b) {
  return strcmp(((const gang__lh_member *)a)->replica_id,
                ((const gang__lh_member *)b)->replica_id);
}

static bool has_id(const gang__lh_member *sorted, int n, const char *id) {
  gang__lh_member key;
  snprintf(key.replica_id, sizeof key.replica_id, "%s", id);
  return n > 0 &&
         bsearch(&key, sorted, (size_t)n, sizeof *sorted, cmp_member) != NULL;
}

bool gang__lh_compute(const gang__lh_config *cfg, const gang__lh_replica *reps,
                      int nreps, const gang__lh_quorum *prev, int64_t now_ms,
                      gang__lh_member **members, int *n, char *why,
                      size_t why_cap) {
  *members = NULL;
  *n = 0;
  if (prev != NULL && prev->n <= 0)
    prev = NULL;
  gang__lh_member *c = malloc((size_t)(nreps > 0 ? nreps : 1) * sizeof *c);
  if (c == NULL) {
    snprintf(why, why_cap, "out of memory");
    return false;
  }
  /* 1. Healthy: a heartbeat younger than the timeout (a replica never
   * heard from has last_beat_ms INT64_MIN). Participants: healthy and
   * joined. */
  int healthy = 0, parts = 0;
  bool shrink = false;
  int64_t first_join = INT64_MAX;
  for (int i = 0; i < nreps; i++) {
    if (reps[i].last_beat_ms <= now_ms - cfg->heartbeat_timeout_ms)
      continue;
    healthy++;
    if (!reps[i].joined)
      continue;
    c[parts++] = reps[i].member;
    shrink |= reps[i].member.shrink_only;
    if (reps[i].joined_ms < first_join)
      first_join = reps[i].joined_ms;
  }
  qsort(c, (size_t)parts, sizeof *c, cmp_member);
  int ncand = parts;
  char meta[96];
  snprintf(meta, sizeof meta,
           "[%d joined and healthy][%d heartbeating][shrink_only=%d]", parts,
           healthy, shrink ? 1 : 0);
  if (prev != NULL) {
    /* 3 (decided before 2 filters): a fast quorum is one where every
     * previous member is a healthy participant again. */
    bool fast = true;
    for (int i = 0; i < prev->n && fast; i++)
      fast = has_id(c, parts, prev->members[i].replica_id);
    /* 2. shrink_only: nobody new. */
    if (shrink) {
      ncand = 0;
      for (int i = 0; i < parts; i++)
        if (has_id(prev->members, prev->n, c[i].replica_id))
          c[ncand++] = c[i];
    }
    if (fast && ncand > 0) {
      snprintf(why, why_cap,
               "fast quorum: every member of quorum %" PRId64 " is back %s",
               prev->quorum_id, meta);
      goto done;
    }
  }
  /* 4. min_replicas, counting healthy participants (torchft counts them
   * before the shrink_only filter). */
  if (parts < cfg->min_replicas) {
    snprintf(why, why_cap, "waiting: %d of min_replicas %d joined %s", parts,
             cfg->min_replicas, meta);
    goto wait;
  }
  /* 5. Split brain: strictly more than half of the heartbeating replicas
   * must have joined, or two halves could each form a quorum. */
  if (parts <= healthy / 2) {
    snprintf(why, why_cap,
             "waiting: %d joined, need more than half of the %d heartbeating "
             "%s",
             parts, healthy, meta);
    goto wait;
  }
  /* 6. Stragglers: heartbeating but not joined, waited for until the join
   * timeout, counted from the earliest join. */
  if (parts < healthy && now_ms - first_join < cfg->join_timeout_ms) {
    snprintf(why, why_cap,
             "waiting up to %" PRId64 " ms for %d heartbeating replicas that "
             "have not joined %s",
             cfg->join_timeout_ms - (now_ms - first_join), healthy - parts,
             meta);
    goto wait;
  }
  if (ncand == 0) {
    snprintf(why, why_cap, "waiting: no candidate left after shrink_only %s",
             meta);
    goto wait;
  }
  snprintf(why, why_cap, "quorum of %d %s", ncand, meta);
done:
  *members = c;
  *n = ncand;
  return true;
wait:
  free(c);
  return false;
}

bool gang__lh_new_id(const gang__lh_quorum *prev,
                     const gang__lh_member *members, int n) {
  if (prev == NULL || prev->n != n)
    return true;
  for (int i = 0; i < n; i++)
    if (strcmp(prev->members[i].replica_id, members[i].replica_id) != 0)
      return true;
  for (int i = 0; i < n; i++)
    if (members[i].commit_failures > 0)
      return true;
  return false;
}

/* ---- Who is up to date ----------------------------------------------------
 */

/* Whether commit (inc, qid) a is later than b: incarnations are ordered
 * by their lighthouse's start, quorum ids within one incarnation. */
static bool later(uint64_t ainc, int64_t aq, uint64_t binc, int64_t bq) {
  return ainc != binc ? ainc > binc : aq > bq;
}

int gang__lh_up_to_date(const gang__lh_quorum *q, int64_t *max_step, bool *up) {
  int64_t top = 0;
  for (int i = 0; i < q->n; i++)
    if (q->members[i].step > top)
      top = q->members[i].step;
  uint64_t inc = 0;
  int64_t qid = 0;
  for (int i = 0; i < q->n; i++) {
    const gang__lh_member *m = &q->members[i];
    if (m->step == top && later(m->commit_inc, m->commit_quorum, inc, qid)) {
      inc = m->commit_inc;
      qid = m->commit_quorum;
    }
  }
  int n = 0;
  for (int i = 0; i < q->n; i++) {
    const gang__lh_member *m = &q->members[i];
    up[i] = m->step == top && m->commit_inc == inc && m->commit_quorum == qid;
    n += up[i];
  }
  *max_step = top;
  return n;
}
