/* The subprocess gang's messages (baby.h describes the protocol): fixed
 * layouts, little-endian, one packet each, checked field by field on the
 * way in. Both halves link this file, so they cannot disagree on a layout;
 * the version in every header catches a gang-baby program from another
 * build. */
#include <string.h>

#include "baby.h"
#include "core/bytes.h"
#include "core/error.h"

#define HDR 8 /* u32 magic, u16 version, u16 kind */
/* Fixed parts after the header. */
#define HELLO_FIXED 32
#define POST_LEN 88
#define REPLY_FIXED 14

static void put_header(uint8_t *buf, int kind) {
  gang__put_u32(buf, BABY_MAGIC);
  gang__put_u16(buf + 4, BABY_VERSION);
  gang__put_u16(buf + 6, (uint16_t)kind);
}

/* Copies at most `cap` bytes of s after buf; returns the length written. */
static uint16_t put_str(uint8_t *buf, const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  memcpy(buf, s, n);
  return (uint16_t)n;
}

size_t gang__baby_put_hello(uint8_t *buf, const baby_hello *h) {
  put_header(buf, BABY_HELLO);
  uint8_t *p = buf + HDR;
  gang__put_u32(p, (uint32_t)h->rank);
  gang__put_u32(p + 4, (uint32_t)h->size);
  gang__put_u64(p + 8, (uint64_t)h->timeout_ms);
  gang__put_u32(p + 16, (uint32_t)h->device_type);
  gang__put_u32(p + 20, (uint32_t)h->device_index);
  gang__put_u32(p + 24, (uint32_t)sizeof(size_t));
  uint16_t na = put_str(p + HELLO_FIXED, h->store_addr, BABY_ADDR_MAX);
  uint16_t nh = put_str(p + HELLO_FIXED + na, h->host, BABY_HOST_MAX);
  gang__put_u16(p + 28, na);
  gang__put_u16(p + 30, nh);
  return HDR + HELLO_FIXED + na + nh;
}

size_t gang__baby_put_post(uint8_t *buf, const baby_post *x) {
  put_header(buf, BABY_POST);
  uint8_t *p = buf + HDR;
  gang__put_u64(p, x->seq);
  gang__put_u32(p + 8, x->kind);
  gang__put_u32(p + 12, x->dtype);
  gang__put_u32(p + 16, x->op);
  gang__put_u32(p + 20, (uint32_t)x->root);
  gang__put_u32(p + 24, (uint32_t)x->peer);
  gang__put_u32(p + 28, (uint32_t)x->tag);
  gang__put_u64(p + 32, x->count);
  gang__put_u64(p + 40, x->in_off);
  gang__put_u64(p + 48, x->in_len);
  gang__put_u64(p + 56, x->out_off);
  gang__put_u64(p + 64, x->out_len);
  gang__put_u64(p + 72, x->counts_off);
  gang__put_u64(p + 80, x->map_len);
  return HDR + POST_LEN;
}

size_t gang__baby_put_reply(uint8_t *buf, int kind, const baby_reply *r) {
  put_header(buf, kind);
  uint8_t *p = buf + HDR;
  gang__put_u64(p, r->seq);
  gang__put_u32(p + 8, r->status);
  uint16_t n = put_str(p + REPLY_FIXED, r->detail, BABY_DETAIL_MAX);
  gang__put_u16(p + 12, n);
  return HDR + REPLY_FIXED + n;
}

gang_status gang__baby_kind(const uint8_t *buf, size_t n, int *kind) {
  if (n < HDR)
    return gang__error(GANG_PROTOCOL, "gang-baby: a message of %zu bytes", n);
  uint32_t magic = gang__get_u32(buf);
  uint16_t version = gang__get_u16(buf + 4);
  if (magic != BABY_MAGIC)
    return gang__error(GANG_PROTOCOL, "gang-baby: bad magic 0x%08x", magic);
  if (version != BABY_VERSION)
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: protocol version %u, this build speaks %u "
                       "(the library and the gang-baby program come from "
                       "different builds)",
                       version, BABY_VERSION);
  *kind = gang__get_u16(buf + 6);
  return GANG_OK;
}

static gang_status expect(const uint8_t *buf, size_t n, int want, size_t min) {
  int kind = 0;
  GANG_CHECK(gang__baby_kind(buf, n, &kind));
  if (kind != want)
    return gang__error(GANG_PROTOCOL, "gang-baby: message kind %d, expected %d",
                       kind, want);
  if (n < HDR + min)
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: message kind %d of %zu bytes, at least %zu "
                       "expected",
                       kind, n, HDR + min);
  return GANG_OK;
}

gang_status gang__baby_get_hello(const uint8_t *buf, size_t n, baby_hello *h) {
  GANG_CHECK(expect(buf, n, BABY_HELLO, HELLO_FIXED));
  const uint8_t *p = buf + HDR;
  h->rank = (int32_t)gang__get_u32(p);
  h->size = (int32_t)gang__get_u32(p + 4);
  h->timeout_ms = (int64_t)gang__get_u64(p + 8);
  h->device_type = (int32_t)gang__get_u32(p + 16);
  h->device_index = (int32_t)gang__get_u32(p + 20);
  uint32_t word = gang__get_u32(p + 24);
  size_t na = gang__get_u16(p + 28), nh = gang__get_u16(p + 30);
  if (word != sizeof(size_t))
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: the parent's size_t has %u bytes, ours %zu",
                       word, sizeof(size_t));
  if (na == 0 || na > BABY_ADDR_MAX || nh > BABY_HOST_MAX ||
      n != HDR + HELLO_FIXED + na + nh)
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: hello of %zu bytes with an address of %zu "
                       "and a host of %zu",
                       n, na, nh);
  if (h->size < 1 || h->rank < 0 || h->rank >= h->size)
    return gang__error(GANG_PROTOCOL, "gang-baby: hello with rank %d of %d",
                       h->rank, h->size);
  memcpy(h->store_addr, p + HELLO_FIXED, na);
  h->store_addr[na] = '\0';
  memcpy(h->host, p + HELLO_FIXED + na, nh);
  h->host[nh] = '\0';
  return GANG_OK;
}

gang_status gang__baby_get_post(const uint8_t *buf, size_t n, baby_post *x) {
  GANG_CHECK(expect(buf, n, BABY_POST, POST_LEN));
  const uint8_t *p = buf + HDR;
  x->seq = gang__get_u64(p);
  x->kind = gang__get_u32(p + 8);
  x->dtype = gang__get_u32(p + 12);
  x->op = gang__get_u32(p + 16);
  x->root = (int32_t)gang__get_u32(p + 20);
  x->peer = (int32_t)gang__get_u32(p + 24);
  x->tag = (int32_t)gang__get_u32(p + 28);
  x->count = gang__get_u64(p + 32);
  x->in_off = gang__get_u64(p + 40);
  x->in_len = gang__get_u64(p + 48);
  x->out_off = gang__get_u64(p + 56);
  x->out_len = gang__get_u64(p + 64);
  x->counts_off = gang__get_u64(p + 72);
  x->map_len = gang__get_u64(p + 80);
  if (x->kind >= GANG_COLL_KIND_COUNT)
    return gang__error(GANG_PROTOCOL, "gang-baby: collective kind %u", x->kind);
  return GANG_OK;
}

gang_status gang__baby_get_reply(const uint8_t *buf, size_t n, int kind,
                                 baby_reply *r) {
  GANG_CHECK(expect(buf, n, kind, REPLY_FIXED));
  const uint8_t *p = buf + HDR;
  r->seq = gang__get_u64(p);
  r->status = gang__get_u32(p + 8);
  size_t len = gang__get_u16(p + 12);
  if (len > BABY_DETAIL_MAX || n != HDR + REPLY_FIXED + len)
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: reply of %zu bytes with %zu of detail", n,
                       len);
  memcpy(r->detail, p + REPLY_FIXED, len);
  r->detail[len] = '\0';
  return GANG_OK;
}

/* a * b, or an error when it overflows. */
static gang_status mul(size_t a, size_t b, size_t *out) {
  if (__builtin_mul_overflow(a, b, out))
    return gang__error(GANG_PROTOCOL, "gang-baby: %zu x %zu bytes overflows", a,
                       b);
  return GANG_OK;
}

gang_status gang__baby_need(const baby_post *p, int size, size_t tin,
                            size_t tout, size_t *in, size_t *out) {
  size_t es = gang_dtype_size((gang_dtype)p->dtype);
  if (es == 0)
    return gang__error(GANG_PROTOCOL, "gang-baby: dtype %u", p->dtype);
  size_t n = (size_t)size, bytes = 0;
  GANG_CHECK(mul((size_t)p->count, es, &bytes));
  *in = 0;
  *out = 0;
  switch ((gang__coll_kind)p->kind) {
  case GANG_COLL_BARRIER:
    return GANG_OK;
  case GANG_COLL_ALL_REDUCE:
  case GANG_COLL_BROADCAST:
  case GANG_COLL_RECV:
    *out = bytes;
    return GANG_OK;
  case GANG_COLL_SEND:
    *in = bytes;
    return GANG_OK;
  case GANG_COLL_ALL_GATHER:
  case GANG_COLL_ALL_GATHER_LIST: /* gathered in place, into one region */
    return mul(bytes, n, out);
  case GANG_COLL_REDUCE_SCATTER:
    *out = bytes;
    return mul(bytes, n, in);
  case GANG_COLL_ALL_TO_ALL:
    GANG_CHECK(mul(bytes, n, in));
    *out = *in;
    return GANG_OK;
  case GANG_COLL_ALL_TO_ALL_V:
    GANG_CHECK(mul(tin, es, in));
    return mul(tout, es, out);
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return gang__error(GANG_PROTOCOL, "gang-baby: collective kind %u", p->kind);
}
