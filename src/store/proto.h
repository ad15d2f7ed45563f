/* The store wire protocol (docs/store-protocol.md) as pure functions: no
 * I/O, no globals, so the client, the server and the fuzzer share one
 * implementation and every length is checked in one place.
 *
 * A connection opens with a fixed-size client hello and server hello (plus
 * the auth proofs when the server has a secret), then carries frames:
 *   [u32 len][u8 code][len-1 bytes of body]       (little-endian)
 * where `code` is the opcode in a request and the status in a reply, and
 * 1 <= len <= max_frame. Requests and replies alternate strictly: one reply
 * per request, in order, but for ADD_QUIET, which has none.
 *
 * Decoded requests and replies point INTO the frame body (no copies); the
 * pointer arrays they use are malloc'd by the decoder and released with
 * gang__store_req_fini / gang__store_rep_fini. All functions are
 * thread-safe. */
#ifndef GANG_STORE_PROTO_H
#define GANG_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"

#define GANG_STORE_MAGIC 0x53474E47u /* "GNGS" on the wire */
#define GANG_STORE_VERSION 1
#define GANG_STORE_KIND_CLIENT 1
#define GANG_STORE_KIND_SERVER 2
#define GANG_STORE_NONCE_BYTES 32
#define GANG_STORE_MAC_BYTES 32

/* Hello flags. */
#define GANG_STORE_HELLO_AUTH 0x1u  /* sender has a secret */
#define GANG_STORE_HELLO_QUIET 0x2u /* server: it takes ADD_QUIET */

/* Sizes of the fixed handshake messages. */
#define GANG_STORE_CLIENT_HELLO_BYTES 48
#define GANG_STORE_SERVER_HELLO_BYTES 96
#define GANG_STORE_AUTH_BYTES 32
#define GANG_STORE_AUTH_RESULT_BYTES 4

/* Server hello status. */
enum {
  GANG_STORE_HELLO_OK = 0,
  GANG_STORE_HELLO_BAD_VERSION = 1,
  GANG_STORE_HELLO_BAD_KIND = 2
};

/* Frame header: u32 length + u8 code. */
#define GANG_STORE_FRAME_HDR 5

typedef enum gang__store_op {
  GANG_STORE_OP_PING = 1,
  GANG_STORE_OP_SET = 2,
  GANG_STORE_OP_GET = 3,
  GANG_STORE_OP_CHECK = 4,
  GANG_STORE_OP_WAIT = 5,
  GANG_STORE_OP_ADD = 6,
  GANG_STORE_OP_COMPARE_SET = 7,
  GANG_STORE_OP_DELETE = 8,
  GANG_STORE_OP_NUM_KEYS = 9,
  GANG_STORE_OP_APPEND = 10,
  GANG_STORE_OP_MULTI_GET = 11,
  GANG_STORE_OP_MULTI_SET = 12,
  /* ADD without a reply: the one request that has none (a heartbeat that
   * needs no answer). Only to servers whose hello has HELLO_QUIET. */
  GANG_STORE_OP_ADD_QUIET = 13,
  GANG_STORE_OP_MAX_ = 13
} gang__store_op;

/* Reply status codes. Every non-OK reply except TIMEOUT carries a message;
 * TIMEOUT carries the indices of the keys still missing. */
typedef enum gang__store_rc {
  GANG_STORE_RC_OK = 0,
  GANG_STORE_RC_TIMEOUT = 1,
  GANG_STORE_RC_NO_MEMORY = 2, /* server memory cap reached */
  GANG_STORE_RC_BAD_VALUE = 3, /* add on a non-integer value, overflow */
  GANG_STORE_RC_TOO_LARGE = 4, /* reply would exceed the frame cap */
  GANG_STORE_RC_PROTOCOL = 5,  /* malformed request: server then closes */
  GANG_STORE_RC_MAX_ = 5
} gang__store_rc;

/* Limits one side enforces on what it decodes. */
typedef struct gang__store_caps {
  uint32_t max_key;   /* bytes per key */
  uint32_t max_value; /* bytes per value */
  uint32_t max_keys;  /* keys per request */
  uint32_t max_frame; /* bytes per frame (len field) */
} gang__store_caps;

/* Defaults: 8 KiB keys, 64 MiB values, 128 Ki keys per request. */
#define GANG_STORE_DEFAULT_MAX_KEY (8u << 10)
#define GANG_STORE_DEFAULT_MAX_VALUE (64u << 20)
#define GANG_STORE_DEFAULT_MAX_KEYS (128u << 10)
/* Frame cap for a value cap: room for compare_set's two values + keys. */
uint32_t gang__store_frame_cap(uint32_t max_key, uint32_t max_value);

/* Handshake messages. */
typedef struct gang__store_client_hello {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t flags;
  uint8_t nonce[GANG_STORE_NONCE_BYTES];
} gang__store_client_hello;

typedef struct gang__store_server_hello {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t flags;
  uint32_t status;
  gang__store_caps caps;
  uint8_t nonce[GANG_STORE_NONCE_BYTES];
  uint8_t proof[GANG_STORE_MAC_BYTES];
} gang__store_server_hello;

void gang__store_client_hello_encode(
    const gang__store_client_hello *h,
    uint8_t out[GANG_STORE_CLIENT_HELLO_BYTES]);
void gang__store_client_hello_decode(
    const uint8_t in[GANG_STORE_CLIENT_HELLO_BYTES],
    gang__store_client_hello *h);
void gang__store_server_hello_encode(
    const gang__store_server_hello *h,
    uint8_t out[GANG_STORE_SERVER_HELLO_BYTES]);
void gang__store_server_hello_decode(
    const uint8_t in[GANG_STORE_SERVER_HELLO_BYTES],
    gang__store_server_hello *h);

/* A byte string inside a frame (or, when encoding, the caller's memory). */
typedef struct gang__store_bytes {
  const uint8_t *p;
  uint32_t len;
} gang__store_bytes;

/* A request. Which fields an op uses:
 *   PING        num (token echoed back)
 *   SET APPEND  keys[0], vals[0]
 *   GET         timeout_ms, keys[0]
 *   CHECK       keys[0..nkeys)
 *   WAIT MULTI_GET  timeout_ms, keys[0..nkeys)
 *   ADD ADD_QUIET  keys[0], num (delta)
 *   COMPARE_SET keys[0], vals[0] (expected), vals[1] (desired)
 *   DELETE      keys[0]
 *   NUM_KEYS    -
 *   MULTI_SET   keys[0..nkeys), vals[0..nkeys)
 * timeout_ms < 0 means no deadline. */
typedef struct gang__store_req {
  uint8_t op;
  int64_t timeout_ms;
  int64_t num;
  uint32_t nkeys;
  gang__store_bytes *keys;
  gang__store_bytes *vals;
  /* Storage for single-key requests so they need no allocation. */
  gang__store_bytes key1_, val2_[2];
} gang__store_req;

/* A reply to a request with op `op`:
 *   OK:      PING/ADD/NUM_KEYS num; CHECK/DELETE num (0/1);
 *            GET/COMPARE_SET vals[0]; MULTI_GET vals[0..nvals)
 *   TIMEOUT: missing[0..nmissing): indices into the request's keys
 *   other:   msg (text, not NUL-terminated) */
typedef struct gang__store_rep {
  uint8_t rc;
  int64_t num;
  uint32_t nvals;
  gang__store_bytes *vals;
  uint32_t nmissing;
  const uint8_t *missing; /* nmissing little-endian u32s, inside the frame */
  gang__store_bytes msg;
  gang__store_bytes val1_;
} gang__store_rep;

/* A growable output buffer. */
typedef struct gang__store_buf {
  uint8_t *p;
  size_t len, cap;
} gang__store_buf;

/* Makes room for `more` bytes. GANG_NO_MEMORY on failure. */
gang_status gang__store_buf_reserve(gang__store_buf *b, size_t more);
void gang__store_buf_free(gang__store_buf *b);

/* The encoded size of a request's frame (header included), or 0 when it
 * would not fit in a u32 length. */
size_t gang__store_req_size(const gang__store_req *r);

/* Appends the frame of `r` to `b`. Checks every length against `caps` and
 * returns GANG_INVALID_ARGUMENT naming the offending key/value (nothing is
 * appended then), or GANG_NO_MEMORY. */
gang_status gang__store_req_encode(const gang__store_req *r,
                                   const gang__store_caps *caps,
                                   gang__store_buf *b);

/* Reads a frame header: returns false if fewer than 5 bytes are available
 * (need more), true with *len (the length field) and *code otherwise. The
 * caller checks 1 <= *len <= max_frame before buffering the frame. */
bool gang__store_frame_header(const uint8_t *p, size_t avail, uint32_t *len,
                              uint8_t *code);

/* Decodes a request body (bytes after the opcode; `n` of them) for `op`.
 * Every count and length is checked against `caps` before any allocation.
 * On error returns GANG_PROTOCOL with the detail saying what was wrong and
 * leaves *r empty (fini is still safe). */
gang_status gang__store_req_decode(uint8_t op, const uint8_t *body, size_t n,
                                   const gang__store_caps *caps,
                                   gang__store_req *r);
void gang__store_req_fini(gang__store_req *r);

/* Reply encoding (server side), appending one frame to b. */
gang_status gang__store_rep_ok(gang__store_buf *b);
gang_status gang__store_rep_num(gang__store_buf *b, int64_t num);
/* OK with n values. */
gang_status gang__store_rep_vals(gang__store_buf *b, const gang__store_bytes *v,
                                 uint32_t n);
/* TIMEOUT with the indices of the missing keys. */
gang_status gang__store_rep_timeout(gang__store_buf *b, const uint32_t *missing,
                                    uint32_t n);
/* An error status with a message (truncated to 1 KiB). */
gang_status gang__store_rep_error(gang__store_buf *b, uint8_t rc,
                                  const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Size of an OK reply frame carrying these values (for cap checks before
 * building it); saturates at SIZE_MAX. */
size_t gang__store_rep_vals_size(const gang__store_bytes *v, uint32_t n);

/* Decodes a reply body for a request with op `op` and `nkeys` keys; checks
 * counts and lengths against caps (and that a TIMEOUT's indices are below
 * nkeys). GANG_PROTOCOL on malformed input. */
gang_status gang__store_rep_decode(uint8_t op, uint32_t nkeys, uint8_t rc,
                                   const uint8_t *body, size_t n,
                                   const gang__store_caps *caps,
                                   gang__store_rep *r);
void gang__store_rep_fini(gang__store_rep *r);

/* Names for logs and errors ("get", "multi_set", "unknown"). */
const char *gang__store_op_name(uint8_t op);

/* How long a client spins for its reply, and the server for its next
 * request, before sleeping (GANG_STORE_SPIN_US), in ns: 0 when the setting
 * is 0 or the process may run on one CPU only (a spin there only delays
 * the peer it waits for). */
gang_status gang__store_spin_ns(int64_t *ns);

/* Whether a wait spins first. A spin that ends empty makes the next
 * GANG__STORE_SPIN_SKIP waits sleep at once, and each further empty spin
 * in a row doubles that, up to GANG__STORE_SPIN_SKIP_MAX: on a machine
 * where answers come late (many clients on few CPUs) spinning costs one
 * spin in a thousand waits. A spin that pays starts over. */
#define GANG__STORE_SPIN_SKIP 32
#define GANG__STORE_SPIN_SKIP_MAX 1024
typedef struct gang__store_spin {
  int64_t ns;  /* the budget; 0: never */
  int skip;    /* waits left that do not spin */
  int backoff; /* skip after the next empty spin, 0: the first */
} gang__store_spin;

static inline bool gang__store_spin_now(gang__store_spin *s) {
  if (s->ns == 0)
    return false;
  if (s->skip > 0) {
    s->skip--;
    return false;
  }
  return true;
}

static inline void gang__store_spin_missed(gang__store_spin *s) {
  s->backoff = s->backoff == 0 ? GANG__STORE_SPIN_SKIP
               : s->backoff >= GANG__STORE_SPIN_SKIP_MAX / 2
                   ? GANG__STORE_SPIN_SKIP_MAX
                   : 2 * s->backoff;
  s->skip = s->backoff;
}

static inline void gang__store_spin_paid(gang__store_spin *s) {
  s->backoff = 0;
}

#endif
