/* The server's key-value table and request execution. See kv.h.
 *
 * Keys live in a chained hash table keyed by SipHash-2-4 with a random
 * per-server key, so a client cannot choose keys that all collide. */
#include "kv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "auth.h"
#include "core/bytes.h"

/* Bytes charged per entry beyond key and value: the struct plus malloc's
 * own overhead for two blocks, roughly. */
#define ENTRY_OVERHEAD (sizeof(kv_entry) + 32)

typedef struct kv_entry kv_entry;

struct gang__kv_waiter {
  LIST_ENTRY(gang__kv_waiter) link; /* in the entry's list */
  kv_entry *entry;
  gang__kv_park *park;
};

struct kv_entry {
  kv_entry *chain;
  uint64_t hash;
  uint8_t *val;
  uint32_t vlen;
  bool present;
  LIST_HEAD(, gang__kv_waiter) waiters; /* empty when calloc'd */
  uint32_t klen;
  uint8_t key[];
};

struct gang__kv {
  kv_entry **buckets;
  size_t nbuckets;
  size_t nentries; /* present and absent */
  int64_t npresent;
  uint64_t k0, k1; /* SipHash key */
  size_t used, max_total;
  gang__store_caps caps;
  gang__kv_wake_fn wake;
  void *wake_ctx;
};

/* ---- SipHash-2-4 -------------------------------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
  do {                                                                         \
    v0 += v1;                                                                  \
    v1 = ROTL(v1, 13);                                                         \
    v1 ^= v0;                                                                  \
    v0 = ROTL(v0, 32);                                                         \
    v2 += v3;                                                                  \
    v3 = ROTL(v3, 16);                                                         \
    v3 ^= v2;                                                                  \
    v0 += v3;                                                                  \
    v3 = ROTL(v3, 21);                                                         \
    v3 ^= v0;                                                                  \
    v2 += v1;                                                                  \
    v1 = ROTL(v1, 17);                                                         \
    v1 ^= v2;                                                                  \
    v2 = ROTL(v2, 32);                                                         \
  } while (0)

static uint64_t siphash(uint64_t k0, uint64_t k1, const uint8_t *in, size_t n) {
  uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
  uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
  size_t full = n & ~(size_t)7;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = gang__get_u64(in + i);
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  uint64_t b = (uint64_t)n << 56;
  for (size_t i = 0; i < (n & 7); i++)
    b |= (uint64_t)in[full + i] << (8 * i);
  v3 ^= b;
  SIPROUND;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- Table -------------------------------------------------------------- */

gang__kv *gang__kv_create(const gang__store_caps *caps, size_t max_total,
                          gang__kv_wake_fn wake, void *ctx) {
  gang__kv *kv = calloc(1, sizeof *kv);
  if (kv == NULL)
    return NULL;
  kv->nbuckets = 256;
  kv->buckets = calloc(kv->nbuckets, sizeof *kv->buckets);
  uint8_t seed[16];
  if (kv->buckets == NULL || gang__auth_random(seed, sizeof seed) != GANG_OK) {
    free(kv->buckets);
    free(kv);
    return NULL;
  }
  kv->k0 = gang__get_u64(seed);
  kv->k1 = gang__get_u64(seed + 8);
  kv->caps = *caps;
  kv->max_total = max_total;
  kv->wake = wake;
  kv->wake_ctx = ctx;
  return kv;
}

static void entry_free(gang__kv *kv, kv_entry *e) {
  kv->used -= ENTRY_OVERHEAD + e->klen + (e->present ? e->vlen : 0);
  free(e->val);
  free(e);
}

void gang__kv_destroy(gang__kv *kv) {
  if (kv == NULL)
    return;
  for (size_t i = 0; i < kv->nbuckets; i++) {
    kv_entry *e = kv->buckets[i];
    while (e) {
      kv_entry *next = e->chain;
      entry_free(kv, e);
      e = next;
    }
  }
  free(kv->buckets);
  free(kv);
}

size_t gang__kv_used(const gang__kv *kv) { return kv->used; }
size_t gang__kv_max(const gang__kv *kv) { return kv->max_total; }

bool gang__kv_charge(gang__kv *kv, int64_t delta, bool force) {
  if (delta < 0) {
    kv->used -= (size_t)(-delta);
    return true;
  }
  if (!force &&
      (size_t)delta >
          kv->max_total - (kv->used < kv->max_total ? kv->used : kv->max_total))
    return false;
  kv->used += (size_t)delta;
  return true;
}

/* Whether `n` more bytes fit under the cap. */
static bool fits(const gang__kv *kv, size_t n) {
  return kv->used <= kv->max_total && n <= kv->max_total - kv->used;
}

static kv_entry *find(gang__kv *kv, const gang__store_bytes *k, uint64_t *h,
                      kv_entry ***slot) {
  *h = siphash(kv->k0, kv->k1, k->p, k->len);
  kv_entry **pp = &kv->buckets[*h & (kv->nbuckets - 1)];
  for (; *pp; pp = &(*pp)->chain) {
    kv_entry *e = *pp;
    if (e->hash == *h && e->klen == k->len && memcmp(e->key, k->p, k->len) == 0)
      break;
  }
  if (slot)
    *slot = pp;
  return *pp;
}

static kv_entry *lookup(gang__kv *kv, const gang__store_bytes *k) {
  uint64_t h;
  kv_entry *e = find(kv, k, &h, NULL);
  return (e && e->present) ? e : NULL;
}

static void grow(gang__kv *kv) {
  if (kv->nentries <= kv->nbuckets || kv->nbuckets > (SIZE_MAX >> 4))
    return;
  size_t nb = kv->nbuckets * 2;
  kv_entry **b = calloc(nb, sizeof *b);
  if (b == NULL)
    return; /* longer chains, still correct */
  for (size_t i = 0; i < kv->nbuckets; i++) {
    kv_entry *e = kv->buckets[i];
    while (e) {
      kv_entry *next = e->chain;
      e->chain = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = next;
    }
  }
  free(kv->buckets);
  kv->buckets = b;
  kv->nbuckets = nb;
}

/* Finds or creates (absent) the entry for k. NULL when over the memory cap
 * or out of memory. */
static kv_entry *get_or_make(gang__kv *kv, const gang__store_bytes *k) {
  uint64_t h;
  kv_entry **slot;
  kv_entry *e = find(kv, k, &h, &slot);
  if (e)
    return e;
  if (!fits(kv, ENTRY_OVERHEAD + k->len))
    return NULL;
  e = calloc(1, sizeof *e + k->len);
  if (e == NULL)
    return NULL;
  e->hash = h;
  e->klen = k->len;
  memcpy(e->key, k->p, k->len);
  *slot = e;
  kv->nentries++;
  kv->used += ENTRY_OVERHEAD + k->len;
  grow(kv);
  return e;
}

/* Unlinks and frees an absent entry nobody waits on. */
static void maybe_drop(gang__kv *kv, kv_entry *e) {
  if (e->present || !LIST_EMPTY(&e->waiters))
    return;
  kv_entry **pp = &kv->buckets[e->hash & (kv->nbuckets - 1)];
  while (*pp != e)
    pp = &(*pp)->chain;
  *pp = e->chain;
  kv->nentries--;
  entry_free(kv, e);
}

void gang__kv_unpark(gang__kv *kv, gang__kv_park *park) {
  if (park->nodes == NULL)
    return;
  for (uint32_t i = 0; i < park->n; i++) {
    gang__kv_waiter *w = &park->nodes[i];
    kv_entry *e = w->entry;
    LIST_REMOVE(w, link);
    maybe_drop(kv, e);
  }
  kv->used -= (size_t)park->n * sizeof *park->nodes;
  free(park->nodes);
  park->nodes = NULL;
  park->n = 0;
}

/* A key became present: unpark everyone waiting on it and wake them. */
static void wake_entry(gang__kv *kv, kv_entry *e) {
  while (!LIST_EMPTY(&e->waiters)) {
    gang__kv_park *p = LIST_FIRST(&e->waiters)->park;
    gang__kv_unpark(kv, p);
    if (kv->wake)
      kv->wake(p->owner, kv->wake_ctx);
  }
}

/* Replaces e's value with an already-allocated buffer (ownership taken),
 * without waking waiters: multi_set commits every key before waking anyone,
 * because unparking may free absent entries it still points to. */
static void put_value(gang__kv *kv, kv_entry *e, uint8_t *val, uint32_t vlen) {
  if (e->present) {
    kv->used -= e->vlen;
  } else {
    kv->npresent++;
    e->present = true;
  }
  free(e->val);
  e->val = val;
  e->vlen = vlen;
  kv->used += vlen;
}

static void set_value(gang__kv *kv, kv_entry *e, uint8_t *val, uint32_t vlen) {
  put_value(kv, e, val, vlen);
  wake_entry(kv, e);
}

static uint8_t *dup_bytes(const gang__store_bytes *v) {
  uint8_t *p = malloc(v->len ? v->len : 1);
  if (p && v->len)
    memcpy(p, v->p, v->len);
  return p;
}

static int key_show(const gang__store_bytes *k) {
  return k->len > 200 ? 200 : (int)k->len;
}

static gang__kv_result reply_nomem(gang__kv *kv, gang__store_buf *out,
                                   const char *op, const gang__store_bytes *k,
                                   size_t want) {
  gang_status s = gang__store_rep_error(
      out, GANG_STORE_RC_NO_MEMORY,
      "store %s '%.*s': the server's memory cap of %zu bytes is reached "
      "(%zu in use, %zu more needed)",
      op, key_show(k), (const char *)k->p, kv->max_total, kv->used, want);
  return s == GANG_OK ? GANG_KV_DONE : GANG_KV_FAILED;
}

static gang__kv_result done(gang_status s) {
  return s == GANG_OK ? GANG_KV_DONE : GANG_KV_FAILED;
}

/* Cost of storing vlen bytes at k, given its current entry (may be NULL). */
static size_t store_cost(const kv_entry *e, const gang__store_bytes *k,
                         size_t vlen) {
  size_t old = (e && e->present) ? e->vlen : 0;
  size_t base = e ? 0 : ENTRY_OVERHEAD + k->len;
  return vlen > old ? base + vlen - old : base;
}

static gang__kv_result do_set(gang__kv *kv, const gang__store_req *r,
                              gang__store_buf *out) {
  const gang__store_bytes *k = &r->keys[0], *v = &r->vals[0];
  uint64_t h;
  kv_entry *e = find(kv, k, &h, NULL);
  size_t cost = store_cost(e, k, v->len);
  if (!fits(kv, cost))
    return reply_nomem(kv, out, "set", k, cost);
  uint8_t *val = dup_bytes(v);
  e = val ? get_or_make(kv, k) : NULL;
  if (e == NULL) {
    free(val);
    return reply_nomem(kv, out, "set", k, cost);
  }
  set_value(kv, e, val, v->len);
  return done(gang__store_rep_ok(out));
}

static gang__kv_result do_append(gang__kv *kv, const gang__store_req *r,
                                 gang__store_buf *out) {
  const gang__store_bytes *k = &r->keys[0], *v = &r->vals[0];
  uint64_t h;
  kv_entry *e = find(kv, k, &h, NULL);
  size_t old = (e && e->present) ? e->vlen : 0;
  if ((uint64_t)old + v->len > kv->caps.max_value)
    return done(gang__store_rep_error(
        out, GANG_STORE_RC_TOO_LARGE,
        "store append '%.*s': value would grow to %" PRIu64
        " bytes, over the cap of %u",
        key_show(k), (const char *)k->p, (uint64_t)old + v->len,
        kv->caps.max_value));
  size_t cost = store_cost(e, k, old + v->len);
  if (!fits(kv, cost))
    return reply_nomem(kv, out, "append", k, cost);
  uint8_t *val = malloc(old + v->len ? old + v->len : 1);
  e = val ? get_or_make(kv, k) : NULL;
  if (e == NULL) {
    free(val);
    return reply_nomem(kv, out, "append", k, cost);
  }
  if (old)
    memcpy(val, e->val, old);
  if (v->len)
    memcpy(val + old, v->p, v->len);
  set_value(kv, e, val, (uint32_t)(old + v->len));
  return done(gang__store_rep_ok(out));
}

/* Strict decimal int64: optional '-', 1..19 digits, nothing else. */
static bool parse_i64(const uint8_t *p, uint32_t n, int64_t *out) {
  char buf[24];
  if (n == 0 || n >= sizeof buf)
    return false;
  memcpy(buf, p, n);
  buf[n] = '\0';
  const char *s = buf[0] == '-' ? buf + 1 : buf;
  if (*s == '\0')
    return false;
  for (const char *q = s; *q; q++)
    if (*q < '0' || *q > '9')
      return false;
  errno = 0;
  char *end;
  long long v = strtoll(buf, &end, 10);
  if (errno == ERANGE || *end != '\0')
    return false;
  *out = v;
  return true;
}

static gang__kv_result do_add(gang__kv *kv, const gang__store_req *r,
                              gang__store_buf *out) {
  const gang__store_bytes *k = &r->keys[0];
  kv_entry *e = lookup(kv, k);
  int64_t cur = 0, nv;
  if (e && !parse_i64(e->val, e->vlen, &cur))
    return done(gang__store_rep_error(
        out, GANG_STORE_RC_BAD_VALUE,
        "store add '%.*s': the value (%u bytes) is not a decimal integer",
        key_show(k), (const char *)k->p, e->vlen));
  if (__builtin_add_overflow(cur, r->num, &nv))
    return done(gang__store_rep_error(
        out, GANG_STORE_RC_BAD_VALUE,
        "store add '%.*s': %" PRId64 " + %" PRId64 " overflows int64",
        key_show(k), (const char *)k->p, cur, r->num));
  char txt[24];
  int tl = snprintf(txt, sizeof txt, "%" PRId64, nv);
  gang__store_bytes v = {(const uint8_t *)txt, (uint32_t)tl};
  uint64_t h;
  e = find(kv, k, &h, NULL);
  size_t cost = store_cost(e, k, v.len);
  if (!fits(kv, cost))
    return reply_nomem(kv, out, "add", k, cost);
  uint8_t *val = dup_bytes(&v);
  e = val ? get_or_make(kv, k) : NULL;
  if (e == NULL) {
    free(val);
    return reply_nomem(kv, out, "add", k, cost);
  }
  set_value(kv, e, val, v.len);
  return done(gang__store_rep_num(out, nv));
}

/* torch's compareSet: a missing key with an empty `expected` is created
 * with `desired`; a missing key with a non-empty `expected` is left missing
 * and the reply is `expected`; a present key equal to `expected` takes
 * `desired`; the reply is the value now stored. */
static gang__kv_result do_compare_set(gang__kv *kv, const gang__store_req *r,
                                      gang__store_buf *out) {
  const gang__store_bytes *k = &r->keys[0], *exp = &r->vals[0],
                          *des = &r->vals[1];
  kv_entry *e = lookup(kv, k);
  bool swap = e ? (e->vlen == exp->len &&
                   (exp->len == 0 || memcmp(e->val, exp->p, exp->len) == 0))
                : exp->len == 0;
  if (!swap) {
    gang__store_bytes cur = e ? (gang__store_bytes){e->val, e->vlen} : *exp;
    return done(gang__store_rep_vals(out, &cur, 1));
  }
  uint64_t h;
  kv_entry *any = find(kv, k, &h, NULL);
  size_t cost = store_cost(any, k, des->len) + des->len;
  if (!fits(kv, cost))
    return reply_nomem(kv, out, "compare_set", k, cost);
  uint8_t *val = dup_bytes(des);
  e = val ? get_or_make(kv, k) : NULL;
  if (e == NULL) {
    free(val);
    return reply_nomem(kv, out, "compare_set", k, cost);
  }
  set_value(kv, e, val, des->len);
  gang__store_bytes now = {e->val, e->vlen};
  return done(gang__store_rep_vals(out, &now, 1));
}

static gang__kv_result do_delete(gang__kv *kv, const gang__store_req *r,
                                 gang__store_buf *out) {
  kv_entry *e = lookup(kv, &r->keys[0]);
  if (e) {
    kv->used -= e->vlen;
    free(e->val);
    e->val = NULL;
    e->vlen = 0;
    e->present = false;
    kv->npresent--;
    maybe_drop(kv, e);
  }
  uint8_t b = e != NULL;
  gang_status s = gang__store_buf_reserve(out, GANG_STORE_FRAME_HDR + 1);
  if (s != GANG_OK)
    return GANG_KV_FAILED;
  gang__put_u32(out->p + out->len, 2);
  out->p[out->len + 4] = GANG_STORE_RC_OK;
  out->p[out->len + 5] = b;
  out->len += 6;
  return GANG_KV_DONE;
}

static gang__kv_result do_multi_set(gang__kv *kv, const gang__store_req *r,
                                    gang__store_buf *out) {
  /* Atomic: check the (over-estimated, duplicates counted twice) cost and
   * allocate every value first; only then change the table. */
  size_t cost = 0;
  uint8_t **vals = calloc(r->nkeys ? r->nkeys : 1, sizeof *vals);
  if (vals == NULL)
    return reply_nomem(kv, out, "multi_set", &r->keys[0], 0);
  for (uint32_t i = 0; i < r->nkeys; i++) {
    uint64_t h;
    kv_entry *e = find(kv, &r->keys[i], &h, NULL);
    cost += store_cost(e, &r->keys[i], r->vals[i].len);
  }
  bool ok = fits(kv, cost);
  for (uint32_t i = 0; ok && i < r->nkeys; i++)
    ok = (vals[i] = dup_bytes(&r->vals[i])) != NULL;
  /* Make the entries (absent) up front as well, so the commit cannot fail
   * half way. An entry made here and not used stays absent and is dropped
   * below. */
  kv_entry **ents = ok ? calloc(r->nkeys ? r->nkeys : 1, sizeof *ents) : NULL;
  ok = ok && ents != NULL;
  for (uint32_t i = 0; ok && i < r->nkeys; i++)
    ok = (ents[i] = get_or_make(kv, &r->keys[i])) != NULL;
  if (!ok) {
    /* Look entries up again rather than through ents[]: a key given twice
     * would otherwise be dropped twice. */
    for (uint32_t i = 0; i < r->nkeys; i++) {
      free(vals[i]);
      uint64_t h;
      kv_entry *e = find(kv, &r->keys[i], &h, NULL);
      if (e)
        maybe_drop(kv, e);
    }
    free(vals);
    free(ents);
    return reply_nomem(kv, out, "multi_set", &r->keys[0], cost);
  }
  for (uint32_t i = 0; i < r->nkeys; i++)
    put_value(kv, ents[i], vals[i], r->vals[i].len);
  for (uint32_t i = 0; i < r->nkeys; i++)
    wake_entry(kv, ents[i]);
  free(vals);
  free(ents);
  return done(gang__store_rep_ok(out));
}

/* get / wait / multi_get / check: collect missing keys; park or reply. */
static gang__kv_result do_waiting(gang__kv *kv, const gang__store_req *r,
                                  bool expired, gang__kv_park *park,
                                  gang__store_buf *out) {
  uint32_t nmiss = 0;
  for (uint32_t i = 0; i < r->nkeys; i++)
    if (lookup(kv, &r->keys[i]) == NULL)
      nmiss++;
  if (r->op == GANG_STORE_OP_CHECK) {
    if (gang__store_rep_num(out, 0) != GANG_OK)
      return GANG_KV_FAILED;
    /* CHECK replies with one boolean byte: rewrite the 8-byte number. */
    out->len -= 8 + GANG_STORE_FRAME_HDR;
    gang__put_u32(out->p + out->len, 2);
    out->p[out->len + 4] = GANG_STORE_RC_OK;
    out->p[out->len + 5] = nmiss == 0;
    out->len += 6;
    return GANG_KV_DONE;
  }
  if (nmiss > 0 && expired) {
    uint32_t *idx = malloc(sizeof *idx * nmiss);
    if (idx == NULL)
      return GANG_KV_FAILED;
    uint32_t j = 0;
    for (uint32_t i = 0; i < r->nkeys; i++)
      if (lookup(kv, &r->keys[i]) == NULL)
        idx[j++] = i;
    gang_status s = gang__store_rep_timeout(out, idx, nmiss);
    free(idx);
    return done(s);
  }
  if (nmiss > 0) {
    size_t nb = sizeof(gang__kv_waiter) * nmiss;
    if (!fits(kv, nb))
      return reply_nomem(kv, out, gang__store_op_name(r->op), &r->keys[0], nb);
    park->nodes = calloc(nmiss, sizeof *park->nodes);
    if (park->nodes == NULL)
      return reply_nomem(kv, out, gang__store_op_name(r->op), &r->keys[0], nb);
    kv->used += nb;
    park->n = 0;
    for (uint32_t i = 0; i < r->nkeys; i++) {
      if (lookup(kv, &r->keys[i]) != NULL)
        continue;
      kv_entry *e = get_or_make(kv, &r->keys[i]);
      if (e == NULL) {
        gang__kv_unpark(kv, park);
        return reply_nomem(kv, out, gang__store_op_name(r->op), &r->keys[i],
                           ENTRY_OVERHEAD + r->keys[i].len);
      }
      if (!LIST_EMPTY(&e->waiters) && LIST_FIRST(&e->waiters)->park == park)
        continue; /* the same key twice in one request */
      gang__kv_waiter *w = &park->nodes[park->n++];
      w->entry = e;
      w->park = park;
      LIST_INSERT_HEAD(&e->waiters, w, link);
    }
    return GANG_KV_PARKED;
  }
  if (r->op == GANG_STORE_OP_WAIT)
    return done(gang__store_rep_ok(out));
  gang__store_bytes one, *vs = &one;
  if (r->nkeys > 1 && (vs = calloc(r->nkeys, sizeof *vs)) == NULL)
    return GANG_KV_FAILED;
  for (uint32_t i = 0; i < r->nkeys; i++) {
    kv_entry *e = lookup(kv, &r->keys[i]);
    vs[i].p = e->val;
    vs[i].len = e->vlen;
  }
  size_t size = gang__store_rep_vals_size(vs, r->nkeys);
  gang__kv_result res;
  if (size == SIZE_MAX || size - 4 > kv->caps.max_frame)
    res = done(gang__store_rep_error(
        out, GANG_STORE_RC_TOO_LARGE,
        "store %s: a reply of %zu bytes would exceed the frame cap of %u",
        gang__store_op_name(r->op), size, kv->caps.max_frame));
  else if (!fits(kv, size))
    res = reply_nomem(kv, out, gang__store_op_name(r->op), &r->keys[0], size);
  else
    res = done(gang__store_rep_vals(out, vs, r->nkeys));
  if (vs != &one)
    free(vs);
  return res;
}

gang__kv_result gang__kv_exec(gang__kv *kv, const gang__store_req *r,
                              bool expired, gang__kv_park *park,
                              gang__store_buf *out) {
  switch (r->op) {
  case GANG_STORE_OP_PING:
    return done(gang__store_rep_num(out, r->num));
  case GANG_STORE_OP_SET:
    return do_set(kv, r, out);
  case GANG_STORE_OP_APPEND:
    return do_append(kv, r, out);
  case GANG_STORE_OP_ADD:
  case GANG_STORE_OP_ADD_QUIET: /* the server drops the reply */
    return do_add(kv, r, out);
  case GANG_STORE_OP_COMPARE_SET:
    return do_compare_set(kv, r, out);
  case GANG_STORE_OP_DELETE:
    return do_delete(kv, r, out);
  case GANG_STORE_OP_NUM_KEYS:
    return done(gang__store_rep_num(out, kv->npresent));
  case GANG_STORE_OP_MULTI_SET:
    return do_multi_set(kv, r, out);
  case GANG_STORE_OP_GET:
  case GANG_STORE_OP_CHECK:
  case GANG_STORE_OP_WAIT:
  case GANG_STORE_OP_MULTI_GET:
    return do_waiting(kv, r, expired, park, out);
  default:
    return done(gang__store_rep_error(out, GANG_STORE_RC_PROTOCOL,
                                      "store: unknown opcode %u", r->op));
  }
}
