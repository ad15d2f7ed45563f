/* The TCP store client: the gang__store_ops backend behind
 * gang_store_connect("host:port") (gang__store_tcp_ops, at the end). One
 * connection per handle, strict request/reply (store.c serialises calls on
 * a handle).
 *
 * Deadlines: waiting operations carry their remaining time to the server,
 * which answers TIMEOUT at the deadline, so a timed-out get or wait leaves
 * the connection usable. The client itself waits that long plus a grace
 * period (network latency) before giving up on a silent server. The
 * server answers every other operation at once, so their deadline is the
 * client's too: a silent server costs them no more than the deadline.
 *
 * Broken connections: once the connection has failed (server closed it, a
 * reply was malformed, the server stayed silent past the grace period), the
 * handle is broken for good: every later call fails at once with the same
 * status and a detail naming the first failure. No silent reconnect: a
 * request may or may not have been applied, and only the caller can know
 * whether repeating it is safe. Open a new handle to continue. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "core/bytes.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/options.h"
#include "core/sock.h"
#include "proto.h"
#include "store_impl.h"

/* How long past a waiting request's deadline the client waits for the
 * server's TIMEOUT reply before declaring the connection dead. */
#define REPLY_GRACE_MS 1000

#include "tcp_client.h"

/* ---- Calls -------------------------------------------------------------- */

/* Any thread, without the handle's lock: the call in flight (if any) sees
 * its connection end and fails; break_conn then says why. */
static void tcp_interrupt(gang_store *st, const char *why) {
  tcp_client *c = impl_of(st);
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->fd_mu);
  if (!c->interrupted) {
    c->interrupted = true;
    snprintf(c->why, sizeof c->why, "%s", why);
  }
  if (c->fd >= 0)
    shutdown(c->fd, SHUT_RDWR);
  pthread_mutex_unlock(&c->fd_mu);
}

static bool tcp_broken(gang_store *st) {
  tcp_client *c = impl_of(st);
  return c != NULL && c->broken != GANG_OK;
}

/* Marks the connection broken with the current detail; returns st. */
static gang_status break_conn(tcp_client *c, gang_status st) {
  pthread_mutex_lock(&c->fd_mu);
  if (c->interrupted) /* that is why the connection ended */
    st = gang__error(GANG_ABORTED, "store client of %s interrupted: %s",
                     c->peer, c->why);
  c->broken = st;
  snprintf(c->broken_msg, sizeof c->broken_msg, "%s", gang_last_error());
  if (c->fd >= 0) {
    close(c->fd);
    c->fd = -1;
  }
  pthread_mutex_unlock(&c->fd_mu);
  GANG_INFO(STORE, "store client %s: connection broken: %s", c->peer,
            c->broken_msg);
  return st;
}

static int64_t remaining_ms(int64_t deadline) {
  if (deadline == GANG_DEADLINE_NONE)
    return -1;
  int64_t left = deadline - gang__now_ns();
  return left <= 0 ? 0 : (left + 999999) / 1000000;
}

/* Reads whatever has arrived, without blocking: GANG_OK with *got > 0,
 * GANG_IN_PROGRESS when nothing has. */
static gang_status recv_now(tcp_client *c, size_t room, size_t *got) {
  for (;;) {
    ssize_t r = recv(c->fd, c->in.p + c->in.len, room, MSG_DONTWAIT);
    if (r > 0) {
      *got = (size_t)r;
      return GANG_OK;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return GANG_IN_PROGRESS;
    return GANG_SYSTEM; /* the blocking read below says what it was */
  }
}

/* Receives one reply frame into c->in (header, then body), reading as
 * much as has arrived at each step: a short reply is one recv. The server
 * answers a request with one frame and sends nothing unasked, so bytes
 * beyond the frame are a protocol error. Before blocking, it spins up to
 * GANG_STORE_SPIN_US on non-blocking reads: a store on another core
 * answers in a few microseconds, and a blocked thread's wakeup costs more
 * than that (docs/store-benchmark.md); gang__store_spin_now says when it
 * does not. *len is the frame's length field (rc byte + body). */
static gang_status read_reply(tcp_client *c, const char *name, int64_t deadline,
                              uint32_t *len) {
  c->in.len = 0;
  size_t want = GANG_STORE_FRAME_HDR; /* until the header says more */
  GANG_CHECK(gang__store_buf_reserve(&c->in, 4096));
  bool spin = gang__store_spin_now(&c->spin);
  int64_t spin_end = spin ? gang__now_ns() + c->spin.ns : 0;
  bool have_len = false;
  while (c->in.len < want) {
    size_t room = c->in.cap - c->in.len;
    size_t got = 0;
    gang_status s = GANG_IN_PROGRESS;
    if (spin) {
      while ((s = recv_now(c, room, &got)) == GANG_IN_PROGRESS &&
             gang__now_ns() < spin_end)
        ;
      if (s == GANG_IN_PROGRESS)
        gang__store_spin_missed(&c->spin);
      else
        gang__store_spin_paid(&c->spin);
      spin = false;
    }
    if (s != GANG_OK) {
      /* Nothing yet: sleep until something comes, then read it. */
      if (c->in.len == 0)
        GANG_CHECK(gang__sock_wait_readable(c->fd, deadline, -1, c->peer));
      GANG_CHECK(gang__sock_read_some(c->fd, c->in.p + c->in.len, room,
                                      deadline, -1, c->peer, &got));
    }
    c->in.len += got;
    if (!have_len && c->in.len >= GANG_STORE_FRAME_HDR) {
      *len = gang__get_u32(c->in.p);
      if (*len < 1 || *len > c->caps.max_frame)
        return gang__error(GANG_PROTOCOL,
                           "store %s: reply frame of %u bytes from %s (cap %u)",
                           name, *len, c->peer, c->caps.max_frame);
      want = 4 + (size_t)*len;
      have_len = true;
    }
    if (c->in.len > want)
      return gang__error(GANG_PROTOCOL,
                         "store %s: %zu bytes from %s beyond its reply", name,
                         c->in.len - want, c->peer);
    /* Grow with the bytes that arrive, not with the announced length. */
    if (c->in.len < want && c->in.cap == c->in.len) {
      size_t chunk = want - c->in.len;
      if (chunk > (1u << 20))
        chunk = 1u << 20;
      GANG_CHECK(gang__store_buf_reserve(&c->in, chunk));
    }
  }
  return GANG_OK;
}

/* Sends req and receives its reply into *rep (pointing into c->in) by
 * `deadline`, or for a waiting request (get, wait, multi_get: the server
 * answers those at the deadline) by deadline + grace. */
static gang_status call(gang_store *st, gang__store_req *req, int64_t deadline,
                        gang__store_rep *rep) {
  tcp_client *c = impl_of(st);
  const char *name = gang__store_op_name(req->op);
  if (c->broken != GANG_OK)
    return gang__error(c->broken,
                       "store %s: the connection to %s failed earlier and "
                       "cannot be used (open a new handle): %s",
                       name, c->peer, c->broken_msg);
  c->out.len = 0;
  req->timeout_ms = remaining_ms(deadline);
  GANG_CHECK(gang__store_req_encode(req, &c->caps, &c->out));
  bool waits = req->op == GANG_STORE_OP_GET || req->op == GANG_STORE_OP_WAIT ||
               req->op == GANG_STORE_OP_MULTI_GET;
  int64_t io_deadline = deadline == GANG_DEADLINE_NONE || !waits
                            ? deadline
                            : deadline + REPLY_GRACE_MS * 1000000LL;
  gang_status s = gang__sock_write_full(c->fd, c->out.p, c->out.len,
                                        io_deadline, -1, c->peer);
  uint32_t len = 0;
  if (s == GANG_OK)
    s = read_reply(c, name, io_deadline, &len);
  if (s != GANG_OK) {
    if (s == GANG_PEER_LOST)
      gang__error(s, "store %s: store server %s closed the connection", name,
                  c->peer);
    else if (s == GANG_TIMEOUT && waits)
      gang__error(s,
                  "store %s: store server %s did not answer within the "
                  "deadline + %d ms",
                  name, c->peer, REPLY_GRACE_MS);
    else if (s == GANG_TIMEOUT)
      gang__error(s,
                  "store %s: store server %s did not answer within the "
                  "deadline of %" PRId64 " ms",
                  name, c->peer, req->timeout_ms);
    return break_conn(c, s);
  }
  uint8_t rc = c->in.p[4];
  size_t body = len - 1;
  s = gang__store_rep_decode(req->op, req->nkeys, rc,
                             c->in.p + GANG_STORE_FRAME_HDR, body, &c->caps,
                             rep);
  if (s != GANG_OK)
    return break_conn(c, gang__error_wrap(s, "reply from %s", c->peer));
  if (rc == GANG_STORE_RC_PROTOCOL) {
    gang__error(GANG_PROTOCOL,
                "store %s: store server %s refused the request: "
                "%.*s",
                name, c->peer, (int)rep->msg.len, (const char *)rep->msg.p);
    return break_conn(c, GANG_PROTOCOL);
  }
  return GANG_OK;
}

/* Turns a non-OK, non-TIMEOUT reply into an error. */
static gang_status rep_error(tcp_client *c, const gang__store_rep *rep) {
  gang_status st =
      rep->rc == GANG_STORE_RC_BAD_VALUE ? GANG_INVALID_USAGE : GANG_NO_MEMORY;
  return gang__error(st, "store server %s: %.*s", c->peer, (int)rep->msg.len,
                     (const char *)rep->msg.p);
}

/* TIMEOUT reply: names the missing keys (up to 8). */
static gang_status timeout_error(const gang__store_req *req,
                                 const gang__store_rep *rep, int64_t sent_ms) {
  char keys[700];
  size_t n = 0;
  keys[0] = '\0';
  for (uint32_t i = 0; i < rep->nmissing && i < 8; i++) {
    const gang__store_bytes *k =
        &req->keys[gang__get_u32(rep->missing + 4 * (size_t)i)];
    int kl = k->len > 100 ? 100 : (int)k->len;
    int w = snprintf(keys + n, sizeof keys - n, "%s'%.*s'", i ? ", " : "", kl,
                     (const char *)k->p);
    if (w < 0 || (size_t)w >= sizeof keys - n)
      break;
    n += (size_t)w;
  }
  if (rep->nmissing > 8 && n + 32 < sizeof keys)
    snprintf(keys + n, sizeof keys - n, " and %u more", rep->nmissing - 8);
  return gang__error(GANG_TIMEOUT,
                     "store %s: deadline of %" PRId64
                     " ms exceeded, still missing: %s",
                     gang__store_op_name(req->op), sent_ms, keys);
}

static gang_status check_len(const char *op, const char *what, size_t len,
                             uint32_t cap) {
  if (len > cap)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store %s: %s of %zu bytes exceeds the server's cap of "
                       "%u bytes",
                       op, what, len, cap);
  return GANG_OK;
}

static gang_status key_bytes(tcp_client *c, const char *op, const char *key,
                             gang__store_bytes *out) {
  size_t n = strlen(key);
  GANG_CHECK(check_len(op, "key", n, c->caps.max_key));
  out->p = (const uint8_t *)key;
  out->len = (uint32_t)n;
  return GANG_OK;
}

static gang_status val_bytes(tcp_client *c, const char *op, const void *v,
                             size_t n, gang__store_bytes *out) {
  GANG_CHECK(check_len(op, "value", n, c->caps.max_value));
  out->p = v;
  out->len = (uint32_t)n;
  return GANG_OK;
}

static void req_init(gang__store_req *r, uint8_t op) {
  memset(r, 0, sizeof *r);
  r->op = op;
  r->keys = &r->key1_;
  r->vals = r->val2_;
  r->nkeys = 1;
}

/* Copies bytes into a fresh NUL-terminated buffer. */
static void *copy_out(const gang__store_bytes *v) {
  uint8_t *p = malloc((size_t)v->len + 1);
  if (p == NULL)
    return NULL;
  if (v->len)
    memcpy(p, v->p, v->len);
  p[v->len] = '\0';
  return p;
}

static gang_status tcp_set_like(gang_store *st, uint8_t op, const char *key,
                                const void *value, size_t len,
                                int64_t deadline) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, op);
  GANG_CHECK(key_bytes(c, gang__store_op_name(op), key, &r.keys[0]));
  GANG_CHECK(val_bytes(c, gang__store_op_name(op), value, len, &r.vals[0]));
  gang__store_rep rep;
  GANG_CHECK(call(st, &r, deadline, &rep));
  gang_status s = rep.rc == GANG_STORE_RC_OK ? GANG_OK : rep_error(c, &rep);
  gang__store_rep_fini(&rep);
  return s;
}

static gang_status tcp_set(gang_store *st, const char *key, const void *value,
                           size_t len, int64_t deadline) {
  return tcp_set_like(st, GANG_STORE_OP_SET, key, value, len, deadline);
}

static gang_status tcp_append(gang_store *st, const char *key,
                              const void *value, size_t len, int64_t deadline) {
  return tcp_set_like(st, GANG_STORE_OP_APPEND, key, value, len, deadline);
}

/* The status of a reply to a waiting request (get, wait, multi_get). */
static gang_status waited_status(tcp_client *c, const gang__store_req *req,
                                 const gang__store_rep *rep) {
  if (rep->rc == GANG_STORE_RC_TIMEOUT)
    return timeout_error(req, rep, req->timeout_ms);
  if (rep->rc != GANG_STORE_RC_OK)
    return rep_error(c, rep);
  return GANG_OK;
}

static gang_status tcp_get(gang_store *st, const char *key, int64_t deadline,
                           void **value, size_t *len) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_GET);
  GANG_CHECK(key_bytes(c, "get", key, &r.keys[0]));
  gang__store_rep rep;
  GANG_CHECK(call(st, &r, deadline, &rep));
  gang_status s = waited_status(c, &r, &rep);
  if (s == GANG_OK && (*value = copy_out(&rep.vals[0])) == NULL)
    s = gang__error(GANG_NO_MEMORY, "store get '%s': %u bytes", key,
                    rep.vals[0].len);
  else if (s == GANG_OK)
    *len = rep.vals[0].len;
  gang__store_rep_fini(&rep);
  return s;
}

/* Builds a multi-key request's key array. */
static gang_status multi_keys(tcp_client *c, const char *op, gang__store_req *r,
                              const char *const *keys, size_t n) {
  if (n > c->caps.max_keys)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store %s: %zu keys exceed the server's cap of %u per "
                       "request",
                       op, n, c->caps.max_keys);
  r->nkeys = (uint32_t)n;
  if (n > 1 && (r->keys = calloc(n, sizeof *r->keys)) == NULL)
    return gang__error(GANG_NO_MEMORY, "store %s: %zu keys", op, n);
  for (size_t i = 0; i < n; i++) {
    gang_status s = key_bytes(c, op, keys[i], &r->keys[i]);
    if (s != GANG_OK) {
      if (r->keys != &r->key1_)
        free(r->keys);
      return s;
    }
  }
  return GANG_OK;
}

static void multi_free(gang__store_req *r) {
  if (r->keys != &r->key1_)
    free(r->keys);
  if (r->vals != r->val2_)
    free(r->vals);
}

static gang_status tcp_check(gang_store *st, const char *const *keys, size_t n,
                             int64_t deadline, bool *all_exist) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_CHECK);
  GANG_CHECK(multi_keys(c, "check", &r, keys, n));
  gang__store_rep rep;
  gang_status s = call(st, &r, deadline, &rep);
  if (s == GANG_OK) {
    if (rep.rc == GANG_STORE_RC_OK)
      *all_exist = rep.num != 0;
    else
      s = rep_error(c, &rep);
    gang__store_rep_fini(&rep);
  }
  multi_free(&r);
  return s;
}

static gang_status tcp_wait(gang_store *st, const char *const *keys, size_t n,
                            int64_t deadline) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_WAIT);
  GANG_CHECK(multi_keys(c, "wait", &r, keys, n));
  gang__store_rep rep;
  gang_status s = call(st, &r, deadline, &rep);
  if (s == GANG_OK) {
    s = waited_status(c, &r, &rep);
    gang__store_rep_fini(&rep);
  }
  multi_free(&r);
  return s;
}

static gang_status tcp_multi_get(gang_store *st, const char *const *keys,
                                 size_t n, int64_t deadline, void **values,
                                 size_t *lens) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_MULTI_GET);
  GANG_CHECK(multi_keys(c, "multi_get", &r, keys, n));
  gang__store_rep rep;
  gang_status s = call(st, &r, deadline, &rep);
  if (s == GANG_OK) {
    s = waited_status(c, &r, &rep);
    for (uint32_t i = 0; s == GANG_OK && i < rep.nvals; i++) {
      values[i] = copy_out(&rep.vals[i]);
      if (values[i] == NULL) {
        for (uint32_t j = 0; j < i; j++)
          free(values[j]);
        s = gang__error(GANG_NO_MEMORY, "store multi_get: no memory");
      } else {
        lens[i] = rep.vals[i].len;
      }
    }
    gang__store_rep_fini(&rep);
  }
  multi_free(&r);
  return s;
}

/* multi_get without waiting: asks for the keys with a deadline of now;
 * the server's TIMEOUT answer lists the missing ones, which get NULL, and
 * the rest is asked for again (a key deleted in between is missing the
 * next time, so every round asks for fewer keys). */
static gang_status tcp_peek(gang_store *st, const char *const *keys, size_t n,
                            void **values, size_t *lens) {
  tcp_client *c = impl_of(st);
  for (size_t i = 0; i < n; i++) {
    values[i] = NULL;
    lens[i] = 0;
  }
  const char **ask = malloc((n ? n : 1) * sizeof *ask);
  size_t *at = malloc((n ? n : 1) * sizeof *at);
  gang_status s = ask == NULL || at == NULL
                      ? gang__error(GANG_NO_MEMORY, "store peek: %zu keys", n)
                      : GANG_OK;
  size_t nask = n;
  for (size_t i = 0; s == GANG_OK && i < n; i++) {
    ask[i] = keys[i];
    at[i] = i;
  }
  while (s == GANG_OK && nask > 0) {
    gang__store_req r;
    req_init(&r, GANG_STORE_OP_MULTI_GET);
    s = multi_keys(c, "peek", &r, ask, nask);
    if (s != GANG_OK)
      break;
    gang__store_rep rep;
    s = call(st, &r, gang__now_ns(), &rep);
    if (s != GANG_OK) {
      multi_free(&r);
      break;
    }
    if (rep.rc == GANG_STORE_RC_TIMEOUT) {
      /* Drop the missing ones (their indices ascend) and ask again. */
      size_t keep = 0, m = 0;
      for (size_t j = 0; j < nask; j++) {
        if (m < rep.nmissing &&
            gang__get_u32(rep.missing + 4 * m) == (uint32_t)j) {
          m++;
          continue;
        }
        ask[keep] = ask[j];
        at[keep++] = at[j];
      }
      if (m == 0 || m != rep.nmissing)
        s = gang__error(GANG_PROTOCOL,
                        "store peek: %s named %u missing keys out of order",
                        c->peer, rep.nmissing);
      nask = keep;
    } else if (rep.rc == GANG_STORE_RC_OK && rep.nvals != nask) {
      s = gang__error(GANG_PROTOCOL, "store peek: %s sent %u values for %zu",
                      c->peer, rep.nvals, nask);
    } else if (rep.rc == GANG_STORE_RC_OK) {
      for (size_t j = 0; s == GANG_OK && j < nask; j++) {
        values[at[j]] = copy_out(&rep.vals[j]);
        lens[at[j]] = rep.vals[j].len;
        if (values[at[j]] == NULL)
          s = gang__error(GANG_NO_MEMORY, "store peek: no memory");
      }
      nask = 0;
    } else {
      s = rep_error(c, &rep);
    }
    gang__store_rep_fini(&rep);
    multi_free(&r);
  }
  if (s != GANG_OK)
    for (size_t i = 0; i < n; i++) {
      free(values[i]);
      values[i] = NULL;
    }
  free(ask);
  free(at);
  return s;
}

static gang_status tcp_multi_set(gang_store *st, const char *const *keys,
                                 const void *const *values, const size_t *lens,
                                 size_t n, int64_t deadline) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_MULTI_SET);
  GANG_CHECK(multi_keys(c, "multi_set", &r, keys, n));
  gang_status s = GANG_OK;
  if (n > 2 && (r.vals = calloc(n, sizeof *r.vals)) == NULL)
    s = gang__error(GANG_NO_MEMORY, "store multi_set: %zu values", n);
  for (size_t i = 0; s == GANG_OK && i < n; i++)
    s = val_bytes(c, "multi_set", values[i], lens[i], &r.vals[i]);
  gang__store_rep rep;
  if (s == GANG_OK && (s = call(st, &r, deadline, &rep)) == GANG_OK) {
    if (rep.rc != GANG_STORE_RC_OK)
      s = rep_error(c, &rep);
    gang__store_rep_fini(&rep);
  }
  multi_free(&r);
  return s;
}

static gang_status tcp_add(gang_store *st, const char *key, int64_t delta,
                           int64_t deadline, int64_t *new_value) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_ADD);
  r.num = delta;
  GANG_CHECK(key_bytes(c, "add", key, &r.keys[0]));
  gang__store_rep rep;
  GANG_CHECK(call(st, &r, deadline, &rep));
  gang_status s = GANG_OK;
  if (rep.rc == GANG_STORE_RC_OK)
    *new_value = rep.num;
  else
    s = rep_error(c, &rep);
  gang__store_rep_fini(&rep);
  return s;
}

/* The server never sends unasked: anything to read between calls is its
 * close (or a broken server), which a write would not report until the
 * one after it. */
static gang_status tcp_probe(gang_store *st) {
  tcp_client *c = impl_of(st);
  if (c->broken != GANG_OK)
    return gang__error(c->broken,
                       "store: the connection to %s failed earlier (open a "
                       "new handle): %s",
                       c->peer, c->broken_msg);
  struct pollfd pf = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
  if (poll(&pf, 1, 0) > 0)
    return break_conn(c, gang__error(GANG_PEER_LOST,
                                     "store server %s closed the connection",
                                     c->peer));
  return GANG_OK;
}

/* An add the server does not answer: sent, not waited for. A server
 * without it gets a plain add. */
static gang_status tcp_add_quiet(gang_store *st, const char *key, int64_t delta,
                                 int64_t deadline) {
  tcp_client *c = impl_of(st);
  int64_t ignored;
  if (!c->quiet)
    return tcp_add(st, key, delta, deadline, &ignored);
  GANG_CHECK(tcp_probe(st));
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_ADD_QUIET);
  r.num = delta;
  GANG_CHECK(key_bytes(c, "add_quiet", key, &r.keys[0]));
  c->out.len = 0;
  GANG_CHECK(gang__store_req_encode(&r, &c->caps, &c->out));
  gang_status s =
      gang__sock_write_full(c->fd, c->out.p, c->out.len, deadline, -1, c->peer);
  return s == GANG_OK ? GANG_OK : break_conn(c, s);
}

static gang_status tcp_compare_set(gang_store *st, const char *key,
                                   const void *expected, size_t elen,
                                   const void *desired, size_t dlen,
                                   int64_t deadline, void **current,
                                   size_t *clen) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_COMPARE_SET);
  GANG_CHECK(key_bytes(c, "compare_set", key, &r.keys[0]));
  GANG_CHECK(val_bytes(c, "compare_set", expected, elen, &r.vals[0]));
  GANG_CHECK(val_bytes(c, "compare_set", desired, dlen, &r.vals[1]));
  gang__store_rep rep;
  GANG_CHECK(call(st, &r, deadline, &rep));
  gang_status s = GANG_OK;
  if (rep.rc != GANG_STORE_RC_OK)
    s = rep_error(c, &rep);
  else if (current != NULL) {
    if ((*current = copy_out(&rep.vals[0])) == NULL)
      s = gang__error(GANG_NO_MEMORY, "store compare_set: no memory");
    else
      *clen = rep.vals[0].len;
  }
  gang__store_rep_fini(&rep);
  return s;
}

static gang_status tcp_del(gang_store *st, const char *key, int64_t deadline,
                           bool *deleted) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_DELETE);
  GANG_CHECK(key_bytes(c, "delete", key, &r.keys[0]));
  gang__store_rep rep;
  GANG_CHECK(call(st, &r, deadline, &rep));
  gang_status s = GANG_OK;
  if (rep.rc == GANG_STORE_RC_OK)
    *deleted = rep.num != 0;
  else
    s = rep_error(c, &rep);
  gang__store_rep_fini(&rep);
  return s;
}

static gang_status tcp_num_keys(gang_store *st, int64_t deadline, int64_t *n) {
  tcp_client *c = impl_of(st);
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_NUM_KEYS);
  r.nkeys = 0;
  gang__store_rep rep;
  GANG_CHECK(call(st, &r, deadline, &rep));
  gang_status s = GANG_OK;
  if (rep.rc == GANG_STORE_RC_OK)
    *n = rep.num;
  else
    s = rep_error(c, &rep);
  gang__store_rep_fini(&rep);
  return s;
}

const gang__store_ops gang__store_tcp_ops = {
    .kind = "tcp",
    .open = gang__tcp_open,
    .set = tcp_set,
    .get = tcp_get,
    .check = tcp_check,
    .wait = tcp_wait,
    .add = tcp_add,
    .compare_set = tcp_compare_set,
    .del = tcp_del,
    .num_keys = tcp_num_keys,
    .append = tcp_append,
    .multi_get = tcp_multi_get,
    .peek = tcp_peek,
    .add_quiet = tcp_add_quiet,
    .probe = tcp_probe,
    .multi_set = tcp_multi_set,
    .close = gang__tcp_close,
    .interrupt = tcp_interrupt,
    .broken = tcp_broken,
};
