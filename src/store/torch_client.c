/* A store client that speaks torch's TCPStore protocol: the backend behind
 * gang_store_connect("torch://host:port[/prefix]") (gang__store_torch_ops).
 *
 * Why: under torchrun, the elastic agent already listens on MASTER_PORT
 * with a torch TCPStore and tells workers so (TORCHELASTIC_USE_AGENT_STORE);
 * a gang program there cannot host its own store on that port, and torch's
 * ranks do not speak gang's protocol. Speaking torch's protocol as a client
 * lets gang rendezvous through the store that is already there, as torch's
 * own process groups do.
 *
 * The protocol (torch 1.x's TCPStore; little-endian, as the hosts it runs
 * on): a request is one byte of query type, then its arguments; a string
 * or a byte value is a uint64 length and the bytes; an integer is 8 bytes.
 * Keys go on the wire as "/" + key, as torch's clients send them.
 *   SET 0 key value              (no reply)
 *   COMPARE_SET 1 key exp desired -> value
 *   GET 2 key                    -> value (the key must exist: wait first)
 *   ADD 3 key int64              -> int64
 *   CHECK 4 n key...             -> uint8 (0 ready, 1 not ready)
 *   WAIT 5 n key...              -> uint8 0 once all keys exist
 *   GETNUMKEYS 6                 -> int64
 *   DELETE_KEY 8 key             -> int64 (keys deleted)
 * There is no handshake, no authentication and no server-side deadline: a
 * WAIT that times out here leaves a reply in flight, so the connection is
 * then broken for good (as gang's own client does for a silent server).
 * append, multi_get and multi_set, which torch 1.x lacks, are built from
 * the operations above (multi_set is then not atomic). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/options.h"
#include "core/sock.h"
#include "store_impl.h"

enum {
  Q_SET = 0,
  Q_COMPARE_SET = 1,
  Q_GET = 2,
  Q_ADD = 3,
  Q_CHECK = 4,
  Q_WAIT = 5,
  Q_GETNUMKEYS = 6,
  Q_DELETE_KEY = 8,
};

/* Values larger than this from the server are refused (a corrupt length
 * must not become an allocation). */
#define MAX_VALUE_BYTES ((uint64_t)1 << 32)

typedef struct torch_client {
  int fd;
  char peer[GANG_SOCK_PEER_CAP];
  uint8_t *buf; /* request being built */
  size_t len, cap;
  gang_status broken;
  char broken_msg[512];
} torch_client;

static torch_client *impl_of(gang_store *st) { return st->impl; }

/* ---- request building ---------------------------------------------------- */

static int put(torch_client *c, const void *p, size_t n) {
  if (c->len + n > c->cap) {
    size_t cap = c->cap ? c->cap : 256;
    while (cap < c->len + n)
      cap *= 2;
    uint8_t *b = realloc(c->buf, cap);
    if (b == NULL)
      return -1;
    c->buf = b;
    c->cap = cap;
  }
  if (n)
    memcpy(c->buf + c->len, p, n);
  c->len += n;
  return 0;
}

static int put_u64(torch_client *c, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  return put(c, b, 8);
}

static int put_bytes(torch_client *c, const void *p, size_t n) {
  return put_u64(c, n) < 0 ? -1 : put(c, p, n);
}

/* torch's clients send every key as "/" + key (TCPStore's keyPrefix_);
 * doing the same makes a key set here the key torch's get() asks for. */
static int put_key(torch_client *c, const char *key) {
  size_t n = strlen(key);
  return put_u64(c, n + 1) < 0 || put(c, "/", 1) < 0 ? -1 : put(c, key, n);
}

static gang_status begin(torch_client *c, uint8_t q) {
  if (c->broken != GANG_OK)
    return gang__error(c->broken, "torch store %s: %s", c->peer, c->broken_msg);
  c->len = 0;
  return put(c, &q, 1) < 0
             ? gang__error(GANG_NO_MEMORY, "torch store: out of memory")
             : GANG_OK;
}

/* Marks the connection broken after a failure mid-exchange and returns st. */
static gang_status broke(torch_client *c, gang_status st) {
  if (c->broken == GANG_OK) {
    c->broken = st;
    snprintf(c->broken_msg, sizeof c->broken_msg, "%s", gang_last_error());
  }
  return st;
}

static gang_status send_req(torch_client *c, int64_t deadline) {
  gang_status st =
      gang__sock_write_full(c->fd, c->buf, c->len, deadline, -1, c->peer);
  return st == GANG_OK ? GANG_OK : broke(c, st);
}

static gang_status recv_u64(torch_client *c, uint64_t *v, int64_t deadline) {
  uint8_t b[8];
  gang_status st = gang__sock_read_full(c->fd, b, 8, deadline, -1, c->peer);
  if (st != GANG_OK)
    return broke(c, st);
  uint64_t x = 0;
  for (int i = 0; i < 8; i++)
    x |= (uint64_t)b[i] << (8 * i);
  *v = x;
  return GANG_OK;
}

static gang_status recv_u8(torch_client *c, uint8_t *v, int64_t deadline) {
  gang_status st = gang__sock_read_full(c->fd, v, 1, deadline, -1, c->peer);
  return st == GANG_OK ? GANG_OK : broke(c, st);
}

/* A value: malloc'd with a NUL after it (as gang_store_get promises). */
static gang_status recv_value(torch_client *c, void **value, size_t *len,
                              int64_t deadline) {
  uint64_t n;
  GANG_CHECK(recv_u64(c, &n, deadline));
  if (n > MAX_VALUE_BYTES)
    return broke(c, gang__error(GANG_PROTOCOL,
                                "torch store %s: value of %" PRIu64
                                " bytes is over the cap",
                                c->peer, n));
  char *v = malloc((size_t)n + 1);
  if (v == NULL)
    return broke(c, gang__error(GANG_NO_MEMORY, "torch store: out of memory"));
  gang_status st =
      gang__sock_read_full(c->fd, v, (size_t)n, deadline, -1, c->peer);
  if (st != GANG_OK) {
    free(v);
    return broke(c, st);
  }
  v[n] = '\0';
  *value = v;
  *len = (size_t)n;
  return GANG_OK;
}

/* Requests are answered promptly except WAIT: a reply to anything else
 * that takes longer than a minute means the server is gone, and one that
 * comes after the call's deadline is too late. */
static int64_t io_deadline(int64_t deadline) {
  int64_t gone = gang__deadline_in_ms(60000);
  return deadline < gone ? deadline : gone;
}

/* ---- connection ---------------------------------------------------------- */

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static gang_status torch_open(const gang__store_target *at,
                              const gang_store_options *opts,
                              int64_t timeout_ms, void **impl) {
  int64_t connect_ms =
      GANG__OPTS_GET(gang_store_options, opts, connect_timeout_ms, 0);
  if (connect_ms == 0)
    connect_ms = timeout_ms;
  torch_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return gang__error(GANG_NO_MEMORY, "torch store connect: no memory");
  c->fd = -1;
  gang__sock_peer_name(at->host, at->port, c->peer, sizeof c->peer);
  int64_t start = gang__now_ns();
  int64_t deadline = gang__deadline_in_ms(connect_ms);
  int64_t backoff_ms = 10;
  int attempts = 0;
  gang_status st;
  /* The server may not be listening yet (rank 0 of torch's env://
   * rendezvous starts it): retry refused connections, with backoff, until
   * the deadline. */
  for (;;) {
    attempts++;
    st = gang__sock_connect(at->host, at->port, deadline, &c->fd, NULL);
    if (st == GANG_OK)
      break;
    if (st == GANG_INVALID_ARGUMENT)
      goto fail;
    if (gang__deadline_passed(deadline) || st == GANG_TIMEOUT) {
      char last[GANG_SOCK_PEER_CAP + 256];
      snprintf(last, sizeof last, "%s", gang_last_error());
      st = gang__error(GANG_TIMEOUT,
                       "cannot reach torch store at %s after %d attempts "
                       "over %" PRId64 " ms: %s",
                       c->peer, attempts, (gang__now_ns() - start) / 1000000,
                       last);
      goto fail;
    }
    int left = gang__deadline_poll_ms(deadline);
    sleep_ms(left >= 0 && left < backoff_ms ? left : backoff_ms);
    if (backoff_ms < 500)
      backoff_ms *= 2;
  }
  GANG_INFO(STORE, "torch store client connected to %s after %d attempt(s)",
            c->peer, attempts);
  *impl = c;
  return GANG_OK;
fail:
  if (c->fd >= 0)
    close(c->fd);
  free(c);
  return st;
}

static void torch_close(gang_store *st) {
  torch_client *c = impl_of(st);
  if (c == NULL)
    return;
  if (c->fd >= 0)
    close(c->fd);
  free(c->buf);
  free(c);
}

#define OOM() gang__error(GANG_NO_MEMORY, "torch store: out of memory")

/* ---- operations ---------------------------------------------------------- */

static gang_status torch_set(gang_store *st, const char *key, const void *value,
                             size_t len, int64_t deadline) {
  torch_client *c = impl_of(st);
  GANG_CHECK(begin(c, Q_SET));
  if (put_key(c, key) < 0 || put_bytes(c, value, len) < 0)
    return OOM();
  return send_req(c, io_deadline(deadline));
}

static gang_status keys_req(torch_client *c, uint8_t q, const char *const *keys,
                            size_t n) {
  GANG_CHECK(begin(c, q));
  if (put_u64(c, n) < 0)
    return OOM();
  for (size_t i = 0; i < n; i++)
    if (put_key(c, keys[i]) < 0)
      return OOM();
  return GANG_OK;
}

static gang_status torch_wait(gang_store *st, const char *const *keys, size_t n,
                              int64_t deadline) {
  torch_client *c = impl_of(st);
  GANG_CHECK(keys_req(c, Q_WAIT, keys, n));
  GANG_CHECK(send_req(c, io_deadline(GANG_DEADLINE_NONE)));
  uint8_t r;
  gang_status s = recv_u8(c, &r, deadline);
  if (s == GANG_TIMEOUT)
    return gang__error(GANG_TIMEOUT,
                       "torch store %s: wait for %zu key(s) (first '%s') "
                       "passed its deadline; the connection is closed",
                       c->peer, n, n ? keys[0] : "");
  GANG_CHECK(s);
  if (r != 0)
    return broke(c,
                 gang__error(GANG_PROTOCOL, "torch store %s: wait answered %u",
                             c->peer, r));
  return GANG_OK;
}

/* Once its key exists: the wait for it had the call's deadline. */
static gang_status get_now(torch_client *c, const char *key, void **value,
                           size_t *len) {
  GANG_CHECK(begin(c, Q_GET));
  if (put_key(c, key) < 0)
    return OOM();
  GANG_CHECK(send_req(c, io_deadline(GANG_DEADLINE_NONE)));
  return recv_value(c, value, len, io_deadline(GANG_DEADLINE_NONE));
}

static gang_status torch_get(gang_store *st, const char *key, int64_t deadline,
                             void **value, size_t *len) {
  /* torch's server answers GET only for a key that exists. */
  GANG_CHECK(torch_wait(st, &key, 1, deadline));
  return get_now(impl_of(st), key, value, len);
}

static gang_status torch_check(gang_store *st, const char *const *keys,
                               size_t n, int64_t deadline, bool *all_exist) {
  torch_client *c = impl_of(st);
  GANG_CHECK(keys_req(c, Q_CHECK, keys, n));
  GANG_CHECK(send_req(c, io_deadline(deadline)));
  uint8_t r;
  GANG_CHECK(recv_u8(c, &r, io_deadline(deadline)));
  *all_exist = r == 0;
  return GANG_OK;
}

static gang_status torch_add(gang_store *st, const char *key, int64_t delta,
                             int64_t deadline, int64_t *new_value) {
  torch_client *c = impl_of(st);
  GANG_CHECK(begin(c, Q_ADD));
  if (put_key(c, key) < 0 || put_u64(c, (uint64_t)delta) < 0)
    return OOM();
  GANG_CHECK(send_req(c, io_deadline(deadline)));
  uint64_t v;
  GANG_CHECK(recv_u64(c, &v, io_deadline(deadline)));
  *new_value = (int64_t)v;
  return GANG_OK;
}

static gang_status torch_compare_set(gang_store *st, const char *key,
                                     const void *expected, size_t elen,
                                     const void *desired, size_t dlen,
                                     int64_t deadline, void **current,
                                     size_t *clen) {
  torch_client *c = impl_of(st);
  GANG_CHECK(begin(c, Q_COMPARE_SET));
  if (put_key(c, key) < 0 || put_bytes(c, expected, elen) < 0 ||
      put_bytes(c, desired, dlen) < 0)
    return OOM();
  GANG_CHECK(send_req(c, io_deadline(deadline)));
  void *v;
  size_t n;
  GANG_CHECK(recv_value(c, &v, &n, io_deadline(deadline)));
  if (current != NULL) {
    *current = v;
    *clen = n;
  } else {
    free(v);
  }
  return GANG_OK;
}

static gang_status torch_del(gang_store *st, const char *key, int64_t deadline,
                             bool *deleted) {
  torch_client *c = impl_of(st);
  GANG_CHECK(begin(c, Q_DELETE_KEY));
  if (put_key(c, key) < 0)
    return OOM();
  GANG_CHECK(send_req(c, io_deadline(deadline)));
  uint64_t v;
  GANG_CHECK(recv_u64(c, &v, io_deadline(deadline)));
  *deleted = v > 0;
  return GANG_OK;
}

static gang_status torch_num_keys(gang_store *st, int64_t deadline,
                                  int64_t *n) {
  torch_client *c = impl_of(st);
  GANG_CHECK(begin(c, Q_GETNUMKEYS));
  GANG_CHECK(send_req(c, io_deadline(deadline)));
  uint64_t v;
  GANG_CHECK(recv_u64(c, &v, io_deadline(deadline)));
  *n = (int64_t)v;
  return GANG_OK;
}

/* Appends by compare-and-set until no other writer came between the read
 * and the write. */
static gang_status torch_append(gang_store *st, const char *key,
                                const void *value, size_t len,
                                int64_t deadline) {
  torch_client *c = impl_of(st);
  for (;;) {
    bool exists;
    GANG_CHECK(torch_check(st, &key, 1, deadline, &exists));
    void *cur = NULL;
    size_t clen = 0;
    if (exists)
      GANG_CHECK(get_now(c, key, &cur, &clen));
    char *next = malloc(clen + len + 1);
    if (next == NULL) {
      free(cur);
      return OOM();
    }
    if (clen)
      memcpy(next, cur, clen);
    if (len)
      memcpy(next + clen, value, len);
    void *now = NULL;
    size_t nlen = 0;
    gang_status s = torch_compare_set(st, key, cur ? cur : "", clen, next,
                                      clen + len, deadline, &now, &nlen);
    bool done =
        s == GANG_OK && nlen == clen + len && memcmp(now, next, nlen) == 0;
    free(cur);
    free(next);
    free(now);
    GANG_CHECK(s);
    if (done)
      return GANG_OK;
  }
}

static gang_status torch_multi_get(gang_store *st, const char *const *keys,
                                   size_t n, int64_t deadline, void **values,
                                   size_t *lens) {
  GANG_CHECK(torch_wait(st, keys, n, deadline));
  for (size_t i = 0; i < n; i++) {
    gang_status s = get_now(impl_of(st), keys[i], &values[i], &lens[i]);
    if (s != GANG_OK) {
      for (size_t j = 0; j < i; j++)
        free(values[j]);
      return s;
    }
  }
  return GANG_OK;
}

static gang_status torch_multi_set(gang_store *st, const char *const *keys,
                                   const void *const *values,
                                   const size_t *lens, size_t n,
                                   int64_t deadline) {
  for (size_t i = 0; i < n; i++)
    GANG_CHECK(torch_set(st, keys[i], values[i], lens[i], deadline));
  return GANG_OK;
}

const gang__store_ops gang__store_torch_ops = {
    .kind = "torch",
    .open = torch_open,
    .set = torch_set,
    .get = torch_get,
    .check = torch_check,
    .wait = torch_wait,
    .add = torch_add,
    .compare_set = torch_compare_set,
    .del = torch_del,
    .num_keys = torch_num_keys,
    .append = torch_append,
    .multi_get = torch_multi_get,
    .multi_set = torch_multi_set,
    .close = torch_close,
};
