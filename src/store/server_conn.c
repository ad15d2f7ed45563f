/* One connection of the store server (server.c runs the loop that calls
 * in here, on its one thread).
 *
 * Connections move through HELLO (fixed 48-byte client hello, read into a
 * small fixed buffer: nothing is allocated for an unauthenticated peer),
 * AUTH (32-byte proof, only with a secret) and READY (frames). A connection
 * that has not reached READY within the handshake timeout is dropped; the
 * handshake list is in accept order, which is deadline order, so expiry is
 * O(1) per loop.
 *
 * In READY, a connection executes one request at a time: it reads only
 * while it has no reply waiting to be sent and no parked request, so a
 * client that does not read its replies (slow reader) holds at most one
 * reply, and one that sends slowly (slowloris) holds only the bytes it has
 * actually sent (buffers grow with arriving data, never to a declared
 * length). Buffers are freed when empty, so an idle connection costs only
 * its struct. Every buffer byte is charged to the kv's memory cap.
 *
 * Waiting requests park in the kv (kv.h); the kv's wake callback puts the
 * connection on the runnable list and the loop re-executes the request,
 * which still sits at the head of the input buffer. Parked requests expire
 * at the deadline the client sent (timeout in ms, converted on arrival), and
 * the reply is TIMEOUT with the missing keys: the connection stays usable. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "core/bytes.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "kv.h"
#include "proto.h"
#include "server_impl.h"

/* ---- Lists ------------------------------------------------------------- */

static void hs_remove(gang_store_server *s, gang__store_conn *c) {
  if (!c->in_hs)
    return;
  TAILQ_REMOVE(&s->hs, c, hs_link);
  c->in_hs = false;
}

/* ---- The parked heap (min-heap by deadline) ----------------------------- */

static void heap_put(gang_store_server *s, int i, gang__store_conn *c) {
  s->parked[i] = c;
  c->pk_pos = i;
}

static void heap_up(gang_store_server *s, int i) {
  gang__store_conn *c = s->parked[i];
  while (i > 0 && s->parked[(i - 1) / 2]->deadline > c->deadline) {
    heap_put(s, i, s->parked[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  heap_put(s, i, c);
}

static void heap_down(gang_store_server *s, int i) {
  gang__store_conn *c = s->parked[i];
  for (;;) {
    int k = 2 * i + 1;
    if (k >= s->nparked_heap)
      break;
    if (k + 1 < s->nparked_heap &&
        s->parked[k + 1]->deadline < s->parked[k]->deadline)
      k++;
    if (s->parked[k]->deadline >= c->deadline)
      break;
    heap_put(s, i, s->parked[k]);
    i = k;
  }
  heap_put(s, i, c);
}

static void park_add(gang_store_server *s, gang__store_conn *c) {
  atomic_fetch_add_explicit(&s->nparked, 1, memory_order_relaxed);
  c->parked = true;
  heap_put(s, s->nparked_heap++, c); /* room made at open */
  heap_up(s, c->pk_pos);
}

static void park_remove(gang_store_server *s, gang__store_conn *c) {
  if (!c->parked)
    return;
  atomic_fetch_sub_explicit(&s->nparked, 1, memory_order_relaxed);
  int i = c->pk_pos;
  gang__store_conn *last = s->parked[--s->nparked_heap];
  if (last != c) {
    heap_put(s, i, last);
    heap_up(s, i);
    heap_down(s, last->pk_pos);
  }
  c->parked = false;
}

gang__store_conn *gang__store_park_first(const gang_store_server *s) {
  return s->nparked_heap > 0 ? s->parked[0] : NULL;
}

static void make_runnable(gang_store_server *s, gang__store_conn *c) {
  if (c->runnable || c->dead)
    return;
  c->runnable = true;
  TAILQ_INSERT_TAIL(&s->run, c, run_link);
}

/* kv wake callback: a key this connection waits for appeared. The kv has
 * already unparked it. */
void gang__store_conn_on_wake(void *owner, void *ctx) {
  gang_store_server *s = ctx;
  gang__store_conn *c = owner;
  park_remove(s, c);
  make_runnable(s, c);
}

/* ---- Connection lifetime ------------------------------------------------ */

void gang__store_conn_open(gang_store_server *s, int fd, int64_t now) {
  gang__store_conn *c = calloc(1, sizeof *c);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
  ev.data.ptr = c;
  if (c != NULL && s->nconns + 1 > s->parked_cap) {
    /* Room in the parked heap for every connection. */
    int cap = s->parked_cap ? 2 * s->parked_cap : 64;
    gang__store_conn **p = realloc(s->parked, (size_t)cap * sizeof *p);
    if (p == NULL) {
      free(c);
      c = NULL;
      errno = ENOMEM;
    } else {
      s->parked = p;
      s->parked_cap = cap;
    }
  }
  if (c == NULL || epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    GANG_WARN(STORE, "store server: cannot register a connection: %s",
              strerror(errno));
    free(c);
    close(fd);
    return;
  }
  c->fd = fd;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char hb[48] = "?";
  int port = 0;
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) {
      struct sockaddr_in *a = (struct sockaddr_in *)&ss;
      inet_ntop(AF_INET, &a->sin_addr, hb, sizeof hb);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      inet_ntop(AF_INET6, &a->sin6_addr, hb, sizeof hb);
      port = ntohs(a->sin6_port);
    }
  }
  gang__sock_peer_name(hb, port, c->peer, sizeof c->peer);
  c->state = C_HELLO;
  c->hs_deadline = s->hs_timeout_ms < 0 ? GANG_DEADLINE_NONE
                                        : now + s->hs_timeout_ms * 1000000LL;
  c->in_hs = true;
  TAILQ_INSERT_TAIL(&s->hs, c, hs_link);
  LIST_INSERT_HEAD(&s->all, c, all_link);
  s->nconns++;
  atomic_store_explicit(&s->nclients, s->nconns, memory_order_relaxed);
  GANG_TRACE(STORE, "store server: accepted %s (%d connections)", c->peer,
             s->nconns);
}

/* Re-charges the kv for the connection's buffer capacity. */
static void recharge(gang_store_server *s, gang__store_conn *c) {
  size_t now = c->in.cap + c->out.cap;
  gang__kv_charge(s->kv, (int64_t)now - (int64_t)c->charged, true);
  c->charged = now;
}

/* A watched connection's departure: its key's rest, appended to the log
 * key through the kv (which wakes the log's waiters). */
static void log_departure(gang_store_server *s, gang__store_conn *c) {
  store_watch *wt = atomic_load_explicit(&s->watch, memory_order_acquire);
  if (wt == NULL || c->watched[0] == '\0')
    return;
  char line[sizeof c->watched + 1];
  size_t n = strlen(c->watched);
  memcpy(line, c->watched, n);
  line[n++] = '\n';
  gang__store_req req;
  memset(&req, 0, sizeof req);
  req.op = GANG_STORE_OP_APPEND;
  req.nkeys = 1;
  req.key1_.p = (const uint8_t *)wt->log_key;
  req.key1_.len = (uint32_t)strlen(wt->log_key);
  req.val2_[0].p = (const uint8_t *)line;
  req.val2_[0].len = (uint32_t)n;
  req.keys = &req.key1_;
  req.vals = req.val2_;
  gang__store_buf out = {0};
  gang__kv_park park;
  memset(&park, 0, sizeof park);
  if (gang__kv_exec(s->kv, &req, true, &park, &out) != GANG_KV_DONE)
    GANG_WARN(STORE, "store server: could not log the departure of %s",
              c->peer);
  gang__store_buf_free(&out);
  c->watched[0] = '\0';
}

void gang__store_conn_close(gang_store_server *s, gang__store_conn *c) {
  if (c->dead)
    return;
  log_departure(s, c);
  c->dead = true;
  hs_remove(s, c);
  park_remove(s, c);
  gang__kv_unpark(s->kv, &c->park);
  epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
  gang__store_buf_free(&c->in);
  gang__store_buf_free(&c->out);
  recharge(s, c);
  LIST_REMOVE(c, all_link);
  s->nconns--;
  atomic_store_explicit(&s->nclients, s->nconns, memory_order_relaxed);
  SLIST_INSERT_HEAD(&s->dead, c, dead_link);
}

/* Sends what it can of an error reply and closes: for protocol violations
 * and refused handshakes. The reply is small, so it fits in the socket
 * buffer; a peer that sent more than we read may see a reset instead. */
static void conn_fail(gang_store_server *s, gang__store_conn *c) {
  if (c->out.len > c->out_off) {
    ssize_t w;
    do
      w = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
               MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
  }
  gang__store_conn_close(s, c);
}

void gang__store_conn_expire(gang_store_server *s, gang__store_conn *c) {
  gang__kv_unpark(s->kv, &c->park);
  park_remove(s, c);
  c->expired = true;
  make_runnable(s, c);
}

/* ---- Handshake ---------------------------------------------------------- */

static void send_server_hello(gang_store_server *s, gang__store_conn *c,
                              uint32_t status) {
  gang__store_server_hello h;
  memset(&h, 0, sizeof h);
  h.magic = GANG_STORE_MAGIC;
  h.version = GANG_STORE_VERSION;
  h.kind = GANG_STORE_KIND_SERVER;
  h.flags = (s->secret ? GANG_STORE_HELLO_AUTH : 0) | GANG_STORE_HELLO_QUIET;
  h.status = status;
  h.caps = s->caps;
  memcpy(h.nonce, c->nonce_s, sizeof h.nonce);
  if (s->secret && status == GANG_STORE_HELLO_OK)
    gang__auth_proof(s->secret, GANG_AUTH_SERVER_PROOF, c->nonce_c, c->nonce_s,
                     h.proof);
  if (gang__store_buf_reserve(&c->out, GANG_STORE_SERVER_HELLO_BYTES) ==
      GANG_OK) {
    gang__store_server_hello_encode(&h, c->out.p + c->out.len);
    c->out.len += GANG_STORE_SERVER_HELLO_BYTES;
  }
  recharge(s, c);
}

static void send_auth_result(gang_store_server *s, gang__store_conn *c,
                             uint32_t rc) {
  if (gang__store_buf_reserve(&c->out, GANG_STORE_AUTH_RESULT_BYTES) ==
      GANG_OK) {
    gang__put_u32(c->out.p + c->out.len, rc);
    c->out.len += GANG_STORE_AUTH_RESULT_BYTES;
  }
  recharge(s, c);
}

/* A complete client hello is in c->hs. Returns false if c was closed. */
static bool on_hello(gang_store_server *s, gang__store_conn *c) {
  gang__store_client_hello h;
  gang__store_client_hello_decode(c->hs, &h);
  memcpy(c->nonce_c, h.nonce, sizeof c->nonce_c);
  if (gang__auth_random(c->nonce_s, sizeof c->nonce_s) != GANG_OK) {
    GANG_WARN(STORE, "store server: %s", gang_last_error());
    gang__store_conn_close(s, c);
    return false;
  }
  if (h.version != GANG_STORE_VERSION || h.kind != GANG_STORE_KIND_CLIENT) {
    GANG_INFO(STORE,
              "store server: %s speaks protocol version %u kind %u (this "
              "server: version %u): refused",
              c->peer, h.version, h.kind, GANG_STORE_VERSION);
    send_server_hello(s, c,
                      h.version != GANG_STORE_VERSION
                          ? GANG_STORE_HELLO_BAD_VERSION
                          : GANG_STORE_HELLO_BAD_KIND);
    conn_fail(s, c);
    return false;
  }
  send_server_hello(s, c, GANG_STORE_HELLO_OK);
  if (s->secret) {
    c->state = C_AUTH;
    c->hs_len = 0;
  } else {
    c->state = C_READY;
    hs_remove(s, c);
  }
  return true;
}

static bool on_auth(gang_store_server *s, gang__store_conn *c) {
  if (!gang__auth_check(s->secret, GANG_AUTH_CLIENT_PROOF, c->nonce_c,
                        c->nonce_s, c->hs)) {
    GANG_WARN(STORE,
              "store server: authentication failed for %s (wrong or missing "
              "secret): connection closed",
              c->peer);
    send_auth_result(s, c, 1);
    conn_fail(s, c);
    return false;
  }
  send_auth_result(s, c, 0);
  c->state = C_READY;
  hs_remove(s, c);
  return true;
}

/* Reads handshake bytes. Returns 1 to continue, 0 to wait for input, -1
 * when the connection was closed. */
static int handshake_read(gang_store_server *s, gang__store_conn *c) {
  size_t need = c->state == C_HELLO ? GANG_STORE_CLIENT_HELLO_BYTES
                                    : GANG_STORE_AUTH_BYTES;
  ssize_t r = recv(c->fd, c->hs + c->hs_len, need - c->hs_len, 0);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  if (r <= 0) {
    GANG_INFO(STORE, "store server: %s closed during the handshake", c->peer);
    gang__store_conn_close(s, c);
    return -1;
  }
  size_t before = c->hs_len;
  c->hs_len += (size_t)r;
  if (c->state == C_HELLO && before < 4 && c->hs_len >= 4 &&
      gang__get_u32(c->hs) != GANG_STORE_MAGIC) {
    GANG_INFO(STORE,
              "store server: %s sent magic 0x%08x, not a gang store client: "
              "closed",
              c->peer, gang__get_u32(c->hs));
    gang__store_conn_close(s, c);
    return -1;
  }
  if (c->hs_len < need)
    return 1;
  bool ok = c->state == C_HELLO ? on_hello(s, c) : on_auth(s, c);
  return ok ? 1 : -1;
}

/* ---- Requests ----------------------------------------------------------- */

/* Protocol violation: tell the peer why, then close. */
static void protocol_error(gang_store_server *s, gang__store_conn *c,
                           const char *why) {
  GANG_INFO(STORE, "store server: %s: %s: connection closed", c->peer, why);
  c->out.len = c->out_off = 0;
  gang__store_rep_error(&c->out, GANG_STORE_RC_PROTOCOL, "%s", why);
  recharge(s, c);
  conn_fail(s, c);
}

/* Consumes the frame of `flen` bytes (length field included) at the head
 * of the input buffer. */
static void consume(gang_store_server *s, gang__store_conn *c, size_t flen) {
  memmove(c->in.p, c->in.p + flen, c->in.len - flen);
  c->in.len -= flen;
  if (c->in.len == 0) {
    gang__store_buf_free(&c->in);
    recharge(s, c);
  }
  c->started = c->expired = false;
}

/* Runs the request at the head of the input buffer if it is complete.
 * Returns 1 if one ran (or parked), 0 if more input is needed, -1 if the
 * connection was closed. */
static int run_request(gang_store_server *s, gang__store_conn *c) {
  uint32_t len;
  uint8_t op;
  if (!gang__store_frame_header(c->in.p, c->in.len, &len, &op))
    return 0;
  if (len < 1 || len > s->caps.max_frame) {
    char why[128];
    snprintf(why, sizeof why, "frame length %u outside 1..%u", len,
             s->caps.max_frame);
    protocol_error(s, c, why);
    return -1;
  }
  size_t flen = 4 + (size_t)len;
  if (c->in.len < flen)
    return 0;
  gang__store_req req;
  if (gang__store_req_decode(op, c->in.p + GANG_STORE_FRAME_HDR, len - 1,
                             &s->caps, &req) != GANG_OK) {
    protocol_error(s, c, gang_last_error());
    return -1;
  }
  atomic_store_explicit(&s->last_request, gang__now_ns(), memory_order_relaxed);
  if (!c->started) {
    c->started = true;
    c->expired = req.timeout_ms == 0;
    c->deadline = req.timeout_ms < 0 ? GANG_DEADLINE_NONE
                                     : gang__deadline_in_ms(req.timeout_ms);
  }
  store_watch *wt = atomic_load_explicit(&s->watch, memory_order_acquire);
  bool quiet = op == GANG_STORE_OP_ADD_QUIET;
  if (wt != NULL && (op == GANG_STORE_OP_ADD || quiet) && req.num > 0 &&
      req.nkeys == 1) {
    size_t pl = strlen(wt->prefix);
    const gang__store_bytes *k = &req.keys[0];
    if (k->len > pl && k->len - pl < sizeof c->watched &&
        memcmp(k->p, wt->prefix, pl) == 0) {
      memcpy(c->watched, k->p + pl, k->len - pl);
      c->watched[k->len - pl] = '\0';
    }
  }
  c->park.owner = c;
  size_t before = c->out.len;
  gang__kv_result r = gang__kv_exec(s->kv, &req, c->expired, &c->park, &c->out);
  gang__store_req_fini(&req);
  recharge(s, c);
  s->replied += !quiet;
  if (r == GANG_KV_FAILED) {
    GANG_WARN(STORE, "store server: out of memory replying to %s: closed",
              c->peer);
    gang__store_conn_close(s, c);
    return -1;
  }
  if (r == GANG_KV_PARKED) {
    park_add(s, c);
    return 1;
  }
  if (quiet && c->out.len > before) {
    /* No reply to send: a failure is only logged. */
    if (c->out.p[before + 4] != GANG_STORE_RC_OK)
      GANG_INFO(STORE, "store server: %s: add_quiet failed: %.*s", c->peer,
                (int)(c->out.len - before - GANG_STORE_FRAME_HDR),
                (const char *)c->out.p + before + GANG_STORE_FRAME_HDR);
    c->out.len = before;
  }
  if (gang__log_on(GANG_LOG_TRACE, GANG_SUB_STORE) && c->out.len > before)
    GANG_TRACE(STORE, "store server: %s %s -> status %u", c->peer,
               gang__store_op_name(op), c->out.p[before + 4]);
  consume(s, c, flen);
  return 1;
}

/* Reads request bytes. Returns 1 if bytes arrived, 0 on EAGAIN, -1 when
 * the connection was closed. */
static int request_read(gang_store_server *s, gang__store_conn *c) {
  if (c->in.len == c->in.cap) {
    /* Grow with what actually arrives: double, but never past the frame
     * being received (a peer that announces 64 MiB and sends nothing gets
     * nothing allocated). */
    uint32_t len = 0;
    uint8_t op;
    size_t need = gang__store_frame_header(c->in.p, c->in.len, &len, &op)
                      ? 4 + (size_t)len
                      : GANG_STORE_FRAME_HDR;
    size_t cap = c->in.cap ? 2 * c->in.cap : 4096;
    if (cap > need && need > c->in.cap)
      cap = need;
    if (cap < 4096)
      cap = 4096;
    if (!gang__kv_charge(s->kv, (int64_t)(cap - c->in.cap), false)) {
      if (need > GANG_STORE_FRAME_HDR) {
        /* The frame does not fit under the memory cap: skip the rest of
         * it without storing it, then answer NO_MEMORY. The connection
         * stays usable and nothing was allocated for the frame. */
        c->discard = need - c->in.len;
        c->discard_total = need;
        c->in.len = 0;
        gang__store_buf_free(&c->in);
        recharge(s, c);
        return 1;
      }
      GANG_WARN(STORE,
                "store server: %s: the memory cap of %zu bytes is reached "
                "(%zu in use): closed",
                c->peer, gang__kv_max(s->kv), gang__kv_used(s->kv));
      gang__store_conn_close(s, c);
      return -1;
    }
    uint8_t *p = realloc(c->in.p, cap);
    if (p == NULL) {
      gang__kv_charge(s->kv, -(int64_t)(cap - c->in.cap), true);
      GANG_WARN(STORE, "store server: out of memory reading from %s", c->peer);
      gang__store_conn_close(s, c);
      return -1;
    }
    c->in.p = p;
    c->charged += cap - c->in.cap;
    c->in.cap = cap;
  }
  size_t room = c->in.cap - c->in.len;
  ssize_t r = recv(c->fd, c->in.p + c->in.len, room, 0);
  if (r > 0 && (size_t)r < room)
    c->drained = true;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    if (c->in.len == 0) { /* nothing buffered: give the memory back */
      gang__store_buf_free(&c->in);
      recharge(s, c);
    }
    return 0;
  }
  if (r <= 0) {
    if (r < 0)
      GANG_INFO(STORE, "store server: %s: %s: closed", c->peer,
                strerror(errno));
    else
      GANG_TRACE(STORE, "store server: %s disconnected", c->peer);
    gang__store_conn_close(s, c);
    return -1;
  }
  c->in.len += (size_t)r;
  return 1;
}

/* Skips the rest of a frame refused for memory. Returns 1 when done (the
 * NO_MEMORY reply is queued) or progress was made, 0 on EAGAIN, -1 closed. */
static int discard_read(gang_store_server *s, gang__store_conn *c) {
  uint8_t scratch[16384];
  size_t want = c->discard < sizeof scratch ? c->discard : sizeof scratch;
  ssize_t r = recv(c->fd, scratch, want, 0);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  if (r <= 0) {
    gang__store_conn_close(s, c);
    return -1;
  }
  c->discard -= (size_t)r;
  if (c->discard == 0) {
    GANG_INFO(STORE,
              "store server: %s: request of %zu bytes refused: memory cap "
              "of %zu bytes reached (%zu in use)",
              c->peer, c->discard_total, gang__kv_max(s->kv),
              gang__kv_used(s->kv));
    gang__store_rep_error(&c->out, GANG_STORE_RC_NO_MEMORY,
                          "store: a request of %zu bytes does not fit under "
                          "the server's memory cap of %zu bytes (%zu in use)",
                          c->discard_total, gang__kv_max(s->kv),
                          gang__kv_used(s->kv));
    recharge(s, c);
    c->started = c->expired = false;
  }
  return 1;
}

/* Sends pending output. Returns 1 when all sent, 0 on EAGAIN, -1 closed. */
static int flush(gang_store_server *s, gang__store_conn *c) {
  while (c->out_off < c->out.len) {
    ssize_t w = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
                     MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (w < 0) {
      GANG_INFO(STORE, "store server: write to %s: %s: closed", c->peer,
                strerror(errno));
      gang__store_conn_close(s, c);
      return -1;
    }
    c->out_off += (size_t)w;
  }
  gang__store_buf_free(&c->out);
  c->out_off = 0;
  recharge(s, c);
  return 1;
}

/* Advances a connection as far as it can go without blocking; yields to
 * others (via the runnable list) after a batch of requests. */
void gang__store_conn_run(gang_store_server *s, gang__store_conn *c) {
  int budget = 64;
  while (!c->dead) {
    if (c->out_off < c->out.len) {
      if (flush(s, c) <= 0)
        return;
      continue;
    }
    if (c->parked)
      return;
    if (c->discard > 0) {
      if (discard_read(s, c) <= 0)
        return;
      continue;
    }
    if (c->state != C_READY) {
      if (handshake_read(s, c) <= 0)
        return;
      continue;
    }
    int r = run_request(s, c);
    if (r < 0)
      return;
    if (r > 0) {
      if (--budget == 0) {
        make_runnable(s, c);
        return;
      }
      continue;
    }
    if (c->drained) /* the last read emptied the socket: wait for more */
      return;
    if (request_read(s, c) <= 0)
      return;
  }
}
