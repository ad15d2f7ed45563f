/* Encoding and decoding of store handshake messages, requests and replies.
 * See proto.h and docs/store-protocol.md for the byte layout. The decoders
 * are the attack surface of the server: they never trust a count or length
 * until it has been compared with both the caps and the bytes present. */
#include "proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/config.h"
#include "core/cpus.h"
#include "core/error.h"

uint32_t gang__store_frame_cap(uint32_t max_key, uint32_t max_value) {
  uint64_t cap = 2 * (uint64_t)max_value + 4 * (uint64_t)max_key + (1u << 20);
  return cap > 0xffffffffu ? 0xffffffffu : (uint32_t)cap;
}

const char *gang__store_op_name(uint8_t op) {
  static const char *const names[] = {
      "unknown", "ping",      "set",         "get",      "check",
      "wait",    "add",       "compare_set", "delete",   "num_keys",
      "append",  "multi_get", "multi_set",   "add_quiet"};
  return op <= GANG_STORE_OP_MAX_ ? names[op] : "unknown";
}

/* ---- Handshake ---------------------------------------------------------- */

void gang__store_client_hello_encode(
    const gang__store_client_hello *h,
    uint8_t out[GANG_STORE_CLIENT_HELLO_BYTES]) {
  memset(out, 0, GANG_STORE_CLIENT_HELLO_BYTES);
  gang__put_u32(out, h->magic);
  gang__put_u16(out + 4, h->version);
  gang__put_u16(out + 6, h->kind);
  gang__put_u32(out + 8, h->flags);
  /* out[12..16) reserved, zero */
  memcpy(out + 16, h->nonce, GANG_STORE_NONCE_BYTES);
}

void gang__store_client_hello_decode(
    const uint8_t in[GANG_STORE_CLIENT_HELLO_BYTES],
    gang__store_client_hello *h) {
  h->magic = gang__get_u32(in);
  h->version = gang__get_u16(in + 4);
  h->kind = gang__get_u16(in + 6);
  h->flags = gang__get_u32(in + 8);
  memcpy(h->nonce, in + 16, GANG_STORE_NONCE_BYTES);
}

void gang__store_server_hello_encode(
    const gang__store_server_hello *h,
    uint8_t out[GANG_STORE_SERVER_HELLO_BYTES]) {
  gang__put_u32(out, h->magic);
  gang__put_u16(out + 4, h->version);
  gang__put_u16(out + 6, h->kind);
  gang__put_u32(out + 8, h->flags);
  gang__put_u32(out + 12, h->status);
  gang__put_u32(out + 16, h->caps.max_key);
  gang__put_u32(out + 20, h->caps.max_value);
  gang__put_u32(out + 24, h->caps.max_keys);
  gang__put_u32(out + 28, h->caps.max_frame);
  memcpy(out + 32, h->nonce, GANG_STORE_NONCE_BYTES);
  memcpy(out + 64, h->proof, GANG_STORE_MAC_BYTES);
}

void gang__store_server_hello_decode(
    const uint8_t in[GANG_STORE_SERVER_HELLO_BYTES],
    gang__store_server_hello *h) {
  h->magic = gang__get_u32(in);
  h->version = gang__get_u16(in + 4);
  h->kind = gang__get_u16(in + 6);
  h->flags = gang__get_u32(in + 8);
  h->status = gang__get_u32(in + 12);
  h->caps.max_key = gang__get_u32(in + 16);
  h->caps.max_value = gang__get_u32(in + 20);
  h->caps.max_keys = gang__get_u32(in + 24);
  h->caps.max_frame = gang__get_u32(in + 28);
  memcpy(h->nonce, in + 32, GANG_STORE_NONCE_BYTES);
  memcpy(h->proof, in + 64, GANG_STORE_MAC_BYTES);
}

/* ---- Buffers ------------------------------------------------------------ */

gang_status gang__store_buf_reserve(gang__store_buf *b, size_t more) {
  if (more <= b->cap - b->len)
    return GANG_OK;
  if (more > SIZE_MAX / 2 - b->len)
    return gang__error(GANG_NO_MEMORY, "store: buffer of %zu bytes too large",
                       more);
  size_t want = b->len + more, cap = b->cap ? b->cap : 256;
  while (cap < want)
    cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (p == NULL)
    return gang__error(GANG_NO_MEMORY, "store: cannot allocate %zu bytes", cap);
  b->p = p;
  b->cap = cap;
  return GANG_OK;
}

void gang__store_buf_free(gang__store_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

static void put32(gang__store_buf *b, uint32_t v) {
  gang__put_u32(b->p + b->len, v);
  b->len += 4;
}
static void put64(gang__store_buf *b, int64_t v) {
  gang__put_u64(b->p + b->len, (uint64_t)v);
  b->len += 8;
}
static void put_bytes(gang__store_buf *b, const gang__store_bytes *s) {
  put32(b, s->len);
  if (s->len)
    memcpy(b->p + b->len, s->p, s->len);
  b->len += s->len;
}

/* ---- Requests ----------------------------------------------------------- */

static bool op_has_timeout(uint8_t op) {
  return op == GANG_STORE_OP_GET || op == GANG_STORE_OP_WAIT ||
         op == GANG_STORE_OP_MULTI_GET;
}
static bool op_is_multi(uint8_t op) {
  return op == GANG_STORE_OP_CHECK || op == GANG_STORE_OP_WAIT ||
         op == GANG_STORE_OP_MULTI_GET || op == GANG_STORE_OP_MULTI_SET;
}
/* Values per key (MULTI_SET, SET, APPEND) or fixed count (COMPARE_SET). */
static uint32_t op_nvals(uint8_t op, uint32_t nkeys) {
  switch (op) {
  case GANG_STORE_OP_SET:
  case GANG_STORE_OP_APPEND:
    return 1;
  case GANG_STORE_OP_COMPARE_SET:
    return 2;
  case GANG_STORE_OP_MULTI_SET:
    return nkeys;
  default:
    return 0;
  }
}
static uint32_t op_nkeys_fixed(uint8_t op) {
  return (op == GANG_STORE_OP_PING || op == GANG_STORE_OP_NUM_KEYS) ? 0 : 1;
}

size_t gang__store_req_size(const gang__store_req *r) {
  uint64_t n = GANG_STORE_FRAME_HDR;
  if (op_has_timeout(r->op))
    n += 8;
  if (r->op == GANG_STORE_OP_PING || r->op == GANG_STORE_OP_ADD ||
      r->op == GANG_STORE_OP_ADD_QUIET)
    n += 8;
  uint32_t nkeys = op_is_multi(r->op) ? r->nkeys : op_nkeys_fixed(r->op);
  if (op_is_multi(r->op))
    n += 4;
  for (uint32_t i = 0; i < nkeys; i++)
    n += 4 + (uint64_t)r->keys[i].len;
  uint32_t nv = op_nvals(r->op, nkeys);
  for (uint32_t i = 0; i < nv; i++)
    n += 4 + (uint64_t)r->vals[i].len;
  if (n - 4 > 0xffffffffu)
    return 0;
  return (size_t)n;
}

gang_status gang__store_req_encode(const gang__store_req *r,
                                   const gang__store_caps *caps,
                                   gang__store_buf *b) {
  const char *name = gang__store_op_name(r->op);
  if (r->op < 1 || r->op > GANG_STORE_OP_MAX_)
    return gang__error(GANG_INVALID_ARGUMENT, "store: unknown opcode %u",
                       r->op);
  uint32_t nkeys = op_is_multi(r->op) ? r->nkeys : op_nkeys_fixed(r->op);
  if (nkeys > caps->max_keys)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store %s: %u keys exceed the server's cap of %u per "
                       "request",
                       name, nkeys, caps->max_keys);
  for (uint32_t i = 0; i < nkeys; i++)
    if (r->keys[i].len == 0 || r->keys[i].len > caps->max_key)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "store %s: key of %u bytes (cap %u bytes)", name,
                         r->keys[i].len, caps->max_key);
  uint32_t nv = op_nvals(r->op, nkeys);
  for (uint32_t i = 0; i < nv; i++)
    if (r->vals[i].len > caps->max_value)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "store %s: value of %u bytes for key '%.*s' exceeds "
                         "the server's cap of %u bytes",
                         name, r->vals[i].len,
                         (int)(r->keys[i < nkeys ? i : 0].len > 200
                                   ? 200
                                   : r->keys[i < nkeys ? i : 0].len),
                         (const char *)r->keys[i < nkeys ? i : 0].p,
                         caps->max_value);
  size_t size = gang__store_req_size(r);
  if (size == 0 || size - 4 > caps->max_frame)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store %s: request of %zu bytes exceeds the server's "
                       "frame cap of %u bytes",
                       name, size, caps->max_frame);
  GANG_CHECK(gang__store_buf_reserve(b, size));
  put32(b, (uint32_t)(size - 4));
  b->p[b->len++] = r->op;
  if (op_has_timeout(r->op))
    put64(b, r->timeout_ms);
  if (r->op == GANG_STORE_OP_PING) {
    put64(b, r->num);
    return GANG_OK;
  }
  if (op_is_multi(r->op))
    put32(b, nkeys);
  for (uint32_t i = 0; i < nkeys; i++) {
    put_bytes(b, &r->keys[i]);
    if (r->op == GANG_STORE_OP_MULTI_SET)
      put_bytes(b, &r->vals[i]);
  }
  if (r->op != GANG_STORE_OP_MULTI_SET)
    for (uint32_t i = 0; i < nv; i++)
      put_bytes(b, &r->vals[i]);
  if (r->op == GANG_STORE_OP_ADD || r->op == GANG_STORE_OP_ADD_QUIET)
    put64(b, r->num);
  return GANG_OK;
}

bool gang__store_frame_header(const uint8_t *p, size_t avail, uint32_t *len,
                              uint8_t *code) {
  if (avail < GANG_STORE_FRAME_HDR)
    return false;
  *len = gang__get_u32(p);
  *code = p[4];
  return true;
}

/* A bounds-checked reader over a body. */
typedef struct rd {
  const uint8_t *p;
  size_t left;
} rd;

static bool rd_u32(rd *r, uint32_t *v) {
  if (r->left < 4)
    return false;
  *v = gang__get_u32(r->p);
  r->p += 4;
  r->left -= 4;
  return true;
}
static bool rd_i64(rd *r, int64_t *v) {
  if (r->left < 8)
    return false;
  *v = (int64_t)gang__get_u64(r->p);
  r->p += 8;
  r->left -= 8;
  return true;
}
/* A length-prefixed string: the length is checked against `cap` and the
 * bytes present; `what` and `i` name it in the error. */
static gang_status rd_bytes(rd *r, uint32_t cap, bool nonempty, const char *op,
                            const char *what, uint32_t i,
                            gang__store_bytes *out) {
  uint32_t len;
  if (!rd_u32(r, &len))
    return gang__error(GANG_PROTOCOL, "store %s: truncated %s #%u length", op,
                       what, i);
  if (len > cap)
    return gang__error(GANG_PROTOCOL,
                       "store %s: %s #%u of %u bytes exceeds the cap of %u", op,
                       what, i, len, cap);
  if (nonempty && len == 0)
    return gang__error(GANG_PROTOCOL, "store %s: empty %s #%u", op, what, i);
  if (len > r->left)
    return gang__error(GANG_PROTOCOL,
                       "store %s: %s #%u claims %u bytes, %zu remain", op, what,
                       i, len, r->left);
  out->p = r->p;
  out->len = len;
  r->p += len;
  r->left -= len;
  return GANG_OK;
}

void gang__store_req_fini(gang__store_req *r) {
  if (r->keys != &r->key1_)
    free(r->keys);
  if (r->vals != r->val2_)
    free(r->vals);
  r->keys = NULL;
  r->vals = NULL;
  r->nkeys = 0;
}

gang_status gang__store_req_decode(uint8_t op, const uint8_t *body, size_t n,
                                   const gang__store_caps *caps,
                                   gang__store_req *r) {
  memset(r, 0, sizeof *r);
  r->keys = &r->key1_;
  r->vals = r->val2_;
  r->op = op;
  r->timeout_ms = -1;
  const char *name = gang__store_op_name(op);
  if (op < 1 || op > GANG_STORE_OP_MAX_)
    return gang__error(GANG_PROTOCOL, "store: unknown opcode %u", op);
  rd rr = {body, n};
  gang_status st = GANG_OK;
  if (op_has_timeout(op) && !rd_i64(&rr, &r->timeout_ms))
    return gang__error(GANG_PROTOCOL, "store %s: truncated timeout", name);
  if (op == GANG_STORE_OP_PING) {
    if (!rd_i64(&rr, &r->num))
      return gang__error(GANG_PROTOCOL, "store ping: truncated token");
  } else if (op_is_multi(op)) {
    uint32_t k;
    if (!rd_u32(&rr, &k))
      return gang__error(GANG_PROTOCOL, "store %s: truncated key count", name);
    /* Each key takes at least 5 bytes (length + 1 byte), each multi_set
     * pair 9: a count that cannot fit in the body is refused before the
     * arrays are allocated. */
    size_t min_each = op == GANG_STORE_OP_MULTI_SET ? 9 : 5;
    if (k > caps->max_keys || k > rr.left / min_each)
      return gang__error(GANG_PROTOCOL,
                         "store %s: key count %u exceeds the cap of %u or the "
                         "%zu bytes present",
                         name, k, caps->max_keys, rr.left);
    if (k > 1) {
      r->keys = calloc(k, sizeof *r->keys);
      if (r->keys == NULL)
        return gang__error(GANG_NO_MEMORY, "store %s: %u keys", name, k);
      if (op == GANG_STORE_OP_MULTI_SET) {
        r->vals = calloc(k, sizeof *r->vals);
        if (r->vals == NULL) {
          gang__store_req_fini(r);
          return gang__error(GANG_NO_MEMORY, "store %s: %u keys", name, k);
        }
      }
    }
    r->nkeys = k;
    for (uint32_t i = 0; i < k && st == GANG_OK; i++) {
      st = rd_bytes(&rr, caps->max_key, true, name, "key", i, &r->keys[i]);
      if (st == GANG_OK && op == GANG_STORE_OP_MULTI_SET)
        st = rd_bytes(&rr, caps->max_value, false, name, "value", i,
                      &r->vals[i]);
    }
  } else if (op != GANG_STORE_OP_NUM_KEYS) {
    r->nkeys = 1;
    st = rd_bytes(&rr, caps->max_key, true, name, "key", 0, &r->keys[0]);
    uint32_t nv = op_nvals(op, 1);
    for (uint32_t i = 0; i < nv && st == GANG_OK; i++)
      st = rd_bytes(&rr, caps->max_value, false, name, "value", i, &r->vals[i]);
    if (st == GANG_OK &&
        (op == GANG_STORE_OP_ADD || op == GANG_STORE_OP_ADD_QUIET) &&
        !rd_i64(&rr, &r->num))
      st = gang__error(GANG_PROTOCOL, "store add: truncated delta");
  }
  if (st == GANG_OK && rr.left != 0)
    st = gang__error(GANG_PROTOCOL, "store %s: %zu trailing bytes", name,
                     rr.left);
  if (st != GANG_OK)
    gang__store_req_fini(r);
  return st;
}

/* ---- Replies ------------------------------------------------------------ */

static gang_status rep_begin(gang__store_buf *b, uint8_t rc, size_t body) {
  if (body > 0xfffffffeu)
    return gang__error(GANG_NO_MEMORY, "store: reply of %zu bytes", body);
  GANG_CHECK(gang__store_buf_reserve(b, GANG_STORE_FRAME_HDR + body));
  put32(b, (uint32_t)(body + 1));
  b->p[b->len++] = rc;
  return GANG_OK;
}

gang_status gang__store_rep_ok(gang__store_buf *b) {
  return rep_begin(b, GANG_STORE_RC_OK, 0);
}

gang_status gang__store_rep_num(gang__store_buf *b, int64_t num) {
  GANG_CHECK(rep_begin(b, GANG_STORE_RC_OK, 8));
  put64(b, num);
  return GANG_OK;
}

size_t gang__store_rep_vals_size(const gang__store_bytes *v, uint32_t n) {
  size_t s = GANG_STORE_FRAME_HDR + 4;
  for (uint32_t i = 0; i < n; i++) {
    if (v[i].len > SIZE_MAX - s - 4)
      return SIZE_MAX;
    s += 4 + (size_t)v[i].len;
  }
  return s;
}

gang_status gang__store_rep_vals(gang__store_buf *b, const gang__store_bytes *v,
                                 uint32_t n) {
  size_t s = gang__store_rep_vals_size(v, n);
  if (s == SIZE_MAX)
    return gang__error(GANG_NO_MEMORY, "store: reply too large");
  GANG_CHECK(rep_begin(b, GANG_STORE_RC_OK, s - GANG_STORE_FRAME_HDR));
  put32(b, n);
  for (uint32_t i = 0; i < n; i++)
    put_bytes(b, &v[i]);
  return GANG_OK;
}

gang_status gang__store_rep_timeout(gang__store_buf *b, const uint32_t *missing,
                                    uint32_t n) {
  GANG_CHECK(rep_begin(b, GANG_STORE_RC_TIMEOUT, 4 + 4 * (size_t)n));
  put32(b, n);
  for (uint32_t i = 0; i < n; i++)
    put32(b, missing[i]);
  return GANG_OK;
}

gang_status gang__store_rep_error(gang__store_buf *b, uint8_t rc,
                                  const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0)
    n = 0;
  if ((size_t)n >= sizeof msg)
    n = sizeof msg - 1;
  GANG_CHECK(rep_begin(b, rc, (size_t)n));
  memcpy(b->p + b->len, msg, (size_t)n);
  b->len += (size_t)n;
  return GANG_OK;
}

void gang__store_rep_fini(gang__store_rep *r) {
  if (r->vals != &r->val1_)
    free(r->vals);
  r->vals = NULL;
  r->nvals = 0;
}

gang_status gang__store_rep_decode(uint8_t op, uint32_t nkeys, uint8_t rc,
                                   const uint8_t *body, size_t n,
                                   const gang__store_caps *caps,
                                   gang__store_rep *r) {
  memset(r, 0, sizeof *r);
  r->vals = &r->val1_;
  r->rc = rc;
  const char *name = gang__store_op_name(op);
  rd rr = {body, n};
  gang_status st = GANG_OK;
  if (rc > GANG_STORE_RC_MAX_)
    return gang__error(GANG_PROTOCOL, "store %s: unknown reply status %u", name,
                       rc);
  if (rc == GANG_STORE_RC_TIMEOUT) {
    uint32_t k;
    if (!op_has_timeout(op))
      return gang__error(GANG_PROTOCOL, "store %s: unexpected timeout reply",
                         name);
    if (!rd_u32(&rr, &k) || k > nkeys || rr.left != 4 * (size_t)k)
      return gang__error(GANG_PROTOCOL, "store %s: malformed timeout reply",
                         name);
    for (uint32_t i = 0; i < k; i++)
      if (gang__get_u32(rr.p + 4 * (size_t)i) >= nkeys)
        return gang__error(GANG_PROTOCOL,
                           "store %s: timeout reply names key #%u of %u", name,
                           gang__get_u32(rr.p + 4 * (size_t)i), nkeys);
    r->nmissing = k;
    r->missing = rr.p;
    return GANG_OK;
  }
  if (rc != GANG_STORE_RC_OK) {
    if (n > 1024)
      return gang__error(GANG_PROTOCOL, "store %s: error text of %zu bytes",
                         name, n);
    r->msg.p = body;
    r->msg.len = (uint32_t)n;
    return GANG_OK;
  }
  switch (op) {
  case GANG_STORE_OP_PING:
  case GANG_STORE_OP_ADD:
  case GANG_STORE_OP_NUM_KEYS:
    if (!rd_i64(&rr, &r->num))
      st = gang__error(GANG_PROTOCOL, "store %s: truncated number", name);
    break;
  case GANG_STORE_OP_CHECK:
  case GANG_STORE_OP_DELETE:
    if (rr.left < 1 || rr.p[0] > 1)
      st = gang__error(GANG_PROTOCOL, "store %s: bad boolean", name);
    else {
      r->num = rr.p[0];
      rr.left--;
    }
    break;
  case GANG_STORE_OP_GET:
  case GANG_STORE_OP_COMPARE_SET:
  case GANG_STORE_OP_MULTI_GET: {
    uint32_t k, want = op == GANG_STORE_OP_MULTI_GET ? nkeys : 1;
    if (!rd_u32(&rr, &k) || k != want || k > rr.left / 4) {
      st = gang__error(GANG_PROTOCOL, "store %s: expected %u values", name,
                       want);
      break;
    }
    if (k > 1) {
      r->vals = calloc(k, sizeof *r->vals);
      if (r->vals == NULL)
        return gang__error(GANG_NO_MEMORY, "store %s: %u values", name, k);
    }
    r->nvals = k;
    for (uint32_t i = 0; i < k && st == GANG_OK; i++)
      st = rd_bytes(&rr, caps->max_value, false, name, "value", i, &r->vals[i]);
    break;
  }
  default:
    break;
  }
  if (st == GANG_OK && rr.left != 0)
    st = gang__error(GANG_PROTOCOL, "store %s: %zu trailing reply bytes", name,
                     rr.left);
  if (st != GANG_OK)
    gang__store_rep_fini(r);
  return st;
}

gang_status gang__store_spin_ns(int64_t *ns) {
  int64_t us = 0;
  *ns = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_STORE_SPIN_US, &us));
  if (us < 0 || us > 1000000)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "GANG_STORE_SPIN_US=%lld: must be 0..1000000 "
                       "(microseconds)",
                       (long long)us);
  if (gang__cpus_available() < 2)
    return GANG_OK;
  *ns = us * 1000;
  return GANG_OK;
}
