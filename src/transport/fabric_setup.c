/* Connecting a world's fabric and tearing it down (fabric_internal.h):
 * every rank publishes a listening address in the store, connects to every
 * lower rank and accepts every higher one; each side checks the other's
 * hello (magic, version, a world token from the store, rank, size) and
 * tunes the connection (congestion control, pacing, socket buffers). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "core/bytes.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/hostport.h"
#include "core/log.h"
#include "core/sock.h"
#include "fabric_internal.h"

typedef struct hello {
  uint64_t magic;
  uint32_t version;
  uint32_t rank;
  uint32_t size;
  uint32_t reserved;
  uint8_t token[16];
} hello;

static void hello_encode(const hello *h, uint8_t *b) {
  gang__put_u64(b, h->magic);
  gang__put_u32(b + 8, h->version);
  gang__put_u32(b + 12, h->rank);
  gang__put_u32(b + 16, h->size);
  gang__put_u32(b + 20, 0);
  memcpy(b + 24, h->token, 16);
}

static void hello_decode(const uint8_t *b, hello *h) {
  h->magic = gang__get_u64(b);
  h->version = gang__get_u32(b + 8);
  h->rank = gang__get_u32(b + 12);
  h->size = gang__get_u32(b + 16);
  memcpy(h->token, b + 24, 16);
}

/* Checks a peer's hello; `want_rank` < 0 accepts any rank not yet seen. */
static gang_status hello_check(const gang__fabric *f, const hello *h,
                               const uint8_t *token, int want_rank,
                               const char *who) {
  if (h->magic != HELLO_MAGIC)
    return gang__error(GANG_PROTOCOL, "%s is not a gang peer (bad magic)", who);
  if (h->version != HELLO_VERSION)
    return gang__error(GANG_PROTOCOL,
                       "%s speaks fabric protocol version %u, this rank %u",
                       who, h->version, HELLO_VERSION);
  if (memcmp(h->token, token, 16) != 0)
    return gang__error(GANG_AUTH,
                       "%s belongs to another world (token "
                       "mismatch)",
                       who);
  if ((int)h->size != f->size)
    return gang__error(GANG_MISMATCH, "%s has world size %u, this rank %d", who,
                       h->size, f->size);
  if (h->rank >= (uint32_t)f->size)
    return gang__error(GANG_PROTOCOL, "%s claims rank %u of a world of %d", who,
                       h->rank, f->size);
  if (want_rank >= 0 && (int)h->rank != want_rank)
    return gang__error(GANG_PROTOCOL, "%s claims rank %u, expected %d", who,
                       h->rank, want_rank);
  return GANG_OK;
}

/* Decodes and checks the hello b from `who` (the peer-facing bytes of
 * setup): `want_rank` >= 0 is the rank connected to; < 0, a connection
 * accepted from any higher rank not yet connected. *them is the decoded
 * hello, whatever the outcome. */
static gang_status hello_accept(const gang__fabric *f, const uint8_t *b,
                                const uint8_t *token, int want_rank,
                                const char *who, hello *them) {
  hello_decode(b, them);
  GANG_CHECK(hello_check(f, them, token, want_rank, who));
  if (want_rank < 0 &&
      ((int)them->rank <= f->rank || f->conns[them->rank].fd >= 0))
    return gang__error(GANG_PROTOCOL, "%s claims rank %u twice or out of order",
                       who, them->rank);
  return GANG_OK;
}

/* GANG_SOCKET_BUFFER: fixed socket buffers instead of autotuning (the
 * kernel caps them at net.core.{w,r}mem_max). Best effort. */
static void set_sockbuf(const gang__fabric *f, int fd) {
  if (f->sockbuf <= 0)
    return;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &f->sockbuf, sizeof f->sockbuf) ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &f->sockbuf, sizeof f->sockbuf))
    GANG_WARN(TCP, "GANG_SOCKET_BUFFER=%d: %s", f->sockbuf, strerror(errno));
}

/* Whether the connection on fd stays on this host: the peer's address is
 * a loopback one, or this socket's own (a host connecting to one of its
 * own addresses goes through the loopback device). */
static bool on_this_host(int fd) {
  struct sockaddr_storage me, them;
  socklen_t ml = sizeof me, tl = sizeof them;
  if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
      getpeername(fd, (struct sockaddr *)&them, &tl) != 0 ||
      me.ss_family != them.ss_family)
    return false;
  if (them.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const void *)&me, *b = (const void *)&them;
    return (ntohl(b->sin_addr.s_addr) >> 24) == 127 ||
           a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (them.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const void *)&me, *b = (const void *)&them;
    const struct in6_addr *x = &b->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(x) ||
           (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127) ||
           memcmp(&a->sin6_addr, x, sizeof *x) == 0;
  }
  return false;
}

/* Pieces of paced exchanges when GANG_TCP_PIECE is unset: under a bbr
 * (any version: they all pace by a bandwidth estimate) 128 KiB measured
 * fastest, under reno 512 KiB, over loopback and over veth
 * (docs/fabric.md). The two ends of a connection may differ: pacing still
 * cannot deadlock (see send_limit). */
#define PIECE_BBR ((size_t)128 << 10)
#define PIECE_OTHER ((size_t)512 << 10)

/* Applies GANG_TCP_CONGESTION to a new peer connection, then chooses the
 * pacing of its exchanges: GANG_TCP_PIECE if set, else by the congestion
 * control it ended up with. Only a name the user asked for can fail: it
 * was tried at creation (cc_setting). */
static gang_status tune_connection(const gang__fabric *f, gang__fabric_conn *c,
                                   int fd) {
  if (!f->cc_keep && (f->cc_all || on_this_host(fd)) &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, f->cc,
                 (socklen_t)strlen(f->cc)) != 0) {
    if (f->cc_all)
      return gang__error_errno(
          GANG_INVALID_ARGUMENT, errno,
          "GANG_TCP_CONGESTION='%s' on the connection to %s", f->cc, c->name);
    GANG_INFO(TCP, "congestion control %s for %s: %s; the system's stays",
              f->cc, c->name, strerror(errno));
  }
  char now[16] = "";
  socklen_t len = sizeof now - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, now, &len) != 0)
    snprintf(now, sizeof now, "?");
  c->piece = f->piece;
  if (!f->piece_set)
    c->piece = strncmp(now, "bbr", 3) == 0 ? PIECE_BBR : PIECE_OTHER;
  c->rtt_us = gang__tcp_min_rtt_us(fd);
  GANG_INFO(TCP,
            "connection to %s: congestion control %s, %s, pieces of %zu, "
            "round trip %u us",
            c->name, now, on_this_host(fd) ? "this host" : "another host",
            c->piece, c->rtt_us);
  return GANG_OK;
}

/* Reads GANG_TCP_CONGESTION and, for a name, tries it on a throwaway
 * socket, so a typo or a forbidden one fails before any connection. */
static gang_status cc_setting(gang__fabric *f) {
  const char *v = gang__setting_str(GANG_SETTING_TCP_CONGESTION);
  f->cc_all = f->cc_keep = false;
  snprintf(f->cc, sizeof f->cc, "reno");
  if (*v == '\0' || strcasecmp(v, "auto") == 0)
    return GANG_OK;
  if (strcasecmp(v, "system") == 0) {
    f->cc_keep = true;
    return GANG_OK;
  }
  if (strlen(v) >= sizeof f->cc)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "GANG_TCP_CONGESTION='%s': longer than any congestion "
                       "control's name (%zu)",
                       v, sizeof f->cc - 1);
  snprintf(f->cc, sizeof f->cc, "%s", v);
  f->cc_all = true;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 && errno == EAFNOSUPPORT) /* an IPv6-only host */
    fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return gang__error_errno(GANG_SYSTEM, errno, "fabric: socket");
  int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, f->cc,
                      (socklen_t)strlen(f->cc));
  int e = errno;
  close(fd);
  if (rc == 0)
    return GANG_OK;
  return gang__error(GANG_INVALID_ARGUMENT, "GANG_TCP_CONGESTION='%s': %s (%s)",
                     v,
                     e == ENOENT  ? "the kernel has no such congestion control"
                     : e == EPERM ? "not allowed for this user (see "
                                    "net.ipv4.tcp_allowed_congestion_control)"
                                  : "refused",
                     strerror(e));
}

static gang_status connect_lower(gang__fabric *f,
                                 const gang__fabric_config *cfg,
                                 const uint8_t *token, int peer) {
  char key[64];
  snprintf(key, sizeof key, "fabric/addr/%d", peer);
  void *val = NULL;
  size_t vlen = 0;
  GANG_CHECK(gang_store_get(cfg->store, key, &val, &vlen));
  gang__hostport hp;
  gang_status st = gang__hostport_parse((const char *)val, 0, &hp, NULL);
  if (st != GANG_OK)
    st = gang__error_wrap(GANG_PROTOCOL, "peer address '%.*s' in the store",
                          (int)(vlen < 300 ? vlen : 300), (const char *)val);
  gang_store_free(val);
  GANG_CHECK(st);
  const char *host = hp.host;
  int port = hp.port;
  gang__fabric_conn *c = &f->conns[peer];
  snprintf(c->name, sizeof c->name, "rank %d (%s:%d)", peer, host, port);
  /* The peer listens before it publishes: a refusal means a stale or wrong
   * address, so retry only briefly within the deadline. */
  int fd = -1, err = 0;
  for (int attempt = 0;; attempt++) {
    st = gang__sock_connect(host, port, cfg->deadline, &fd, &err);
    if (st == GANG_OK || gang__deadline_passed(cfg->deadline) || attempt > 50)
      break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (st != GANG_OK)
    return gang__error_wrap(st, "connecting to %s", c->name);
  hello me = {
      HELLO_MAGIC, HELLO_VERSION, (uint32_t)f->rank, (uint32_t)f->size, 0, {0}};
  memcpy(me.token, token, 16);
  uint8_t b[HELLO_LEN];
  hello_encode(&me, b);
  st = gang__sock_write_full(fd, b, HELLO_LEN, cfg->deadline, -1, c->name);
  if (st == GANG_OK)
    st = gang__sock_read_full(fd, b, HELLO_LEN, cfg->deadline, -1, c->name);
  if (st == GANG_OK) {
    hello them;
    st = hello_accept(f, b, token, peer, c->name, &them);
  }
  if (st == GANG_OK)
    st = tune_connection(f, c, fd);
  if (st != GANG_OK) {
    close(fd);
    return st;
  }
  set_sockbuf(f, fd);
  c->fd = fd;
  return GANG_OK;
}

/* A connection accepted during setup whose hello has not all arrived. */
typedef struct pending {
  int fd;
  size_t got;
  int64_t deadline; /* a stranger's time to say hello */
  uint8_t b[HELLO_LEN];
} pending;

/* At most this many connections wait for their hello at once; beyond it
 * the oldest is dropped, so a flood of strangers can neither exhaust
 * descriptors nor keep the real peers out. */
#define PENDING_MAX 64
#define HELLO_WAIT_MS 5000

static void drop_pending(pending *p, int *np, int i) {
  close(p[i].fd);
  p[i] = p[--*np];
}

/* A complete hello from p: the peer is registered (0), refused (-1, the
 * connection closed) or the setup fails (its status, in *st). */
static int take_hello(gang__fabric *f, const gang__fabric_config *cfg,
                      const uint8_t *token, pending *p, gang_status *st) {
  char who[64];
  snprintf(who, sizeof who, "an incoming connection to rank %d", f->rank);
  hello them;
  gang_status s = hello_accept(f, p->b, token, -1, who, &them);
  if (s != GANG_OK) {
    /* Refuse it and keep waiting for the real peers. */
    GANG_WARN(TCP, "refused a fabric connection: %s", gang_last_error());
    return -1;
  }
  hello me = {
      HELLO_MAGIC, HELLO_VERSION, (uint32_t)f->rank, (uint32_t)f->size, 0, {0}};
  memcpy(me.token, token, 16);
  uint8_t b[HELLO_LEN];
  hello_encode(&me, b);
  gang__fabric_conn *c = &f->conns[them.rank];
  snprintf(c->name, sizeof c->name, "rank %u", them.rank);
  s = gang__sock_write_full(p->fd, b, HELLO_LEN, cfg->deadline, -1, c->name);
  if (s == GANG_OK)
    s = tune_connection(f, c, p->fd);
  if (s != GANG_OK) {
    *st = s;
    return -1;
  }
  set_sockbuf(f, p->fd);
  c->fd = p->fd;
  p->fd = -1;
  return 0;
}

/* Accepts the higher ranks' connections. Hellos are read from every
 * accepted connection at once, as their bytes come, so a connection that
 * says nothing (a port scanner, a health check, a stranger) holds up
 * nobody: it is dropped after HELLO_WAIT_MS, or earlier when PENDING_MAX
 * others are waiting. */
static gang_status accept_higher(gang__fabric *f,
                                 const gang__fabric_config *cfg,
                                 const uint8_t *token, int lfd, int count) {
  pending p[PENDING_MAX];
  int np = 0, got = 0, silent = 0;
  gang_status st = GANG_OK;
  while (got < count && st == GANG_OK) {
    int ms = gang__deadline_poll_ms(cfg->deadline);
    if (ms == 0) {
      st = gang__error(GANG_TIMEOUT,
                       "fabric setup: rank %d got %d of %d connections from "
                       "higher ranks before the deadline",
                       f->rank, got, count);
      break;
    }
    if (cfg->cancel != NULL && atomic_load(cfg->cancel)) {
      st = gang__error(GANG_ABORTED,
                       "fabric setup: rank %d stopped waiting for %d of %d "
                       "connections from higher ranks: the creation was "
                       "aborted",
                       f->rank, count - got, count);
      break;
    }
    if (cfg->cancel != NULL && (ms < 0 || ms > 50))
      ms = 50; /* the cancel flag is looked at this often */
    struct pollfd pfd[PENDING_MAX + 1];
    pfd[0] = (struct pollfd){lfd, POLLIN, 0};
    for (int i = 0; i < np; i++)
      pfd[i + 1] = (struct pollfd){p[i].fd, POLLIN, 0};
    if (ms < 0 || ms > 100)
      ms = 100; /* strangers' deadlines are checked this often */
    if (poll(pfd, (nfds_t)np + 1, ms) < 0 && errno != EINTR) {
      st = gang__error_errno(GANG_SYSTEM, errno, "fabric setup: poll");
      break;
    }
    /* Hellos first (pfd[i + 1] is p[i] as polled; drops move the last
     * pending into i, so go from the end). */
    int64_t now = gang__now_ns();
    for (int i = np - 1; i >= 0 && st == GANG_OK; i--) {
      if (pfd[i + 1].revents != 0) {
        ssize_t r = recv(p[i].fd, p[i].b + p[i].got, HELLO_LEN - p[i].got,
                         MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR)) {
          drop_pending(p, &np, i); /* it hung up before its hello */
          continue;
        }
        if (r > 0)
          p[i].got += (size_t)r;
        if (p[i].got == HELLO_LEN) {
          if (take_hello(f, cfg, token, &p[i], &st) == 0)
            got++;
          if (p[i].fd >= 0)
            close(p[i].fd);
          p[i] = p[--np];
          continue;
        }
      }
      if (now >= p[i].deadline) {
        silent++;
        drop_pending(p, &np, i);
      }
    }
    if (st != GANG_OK || !(pfd[0].revents & POLLIN))
      continue;
    for (;;) { /* every connection waiting on the listener */
      int fd = -1, err = 0;
      if (gang__sock_accept(lfd, &fd, &err) != GANG_OK)
        break;
      if (np == PENDING_MAX) { /* the oldest gives way */
        silent++;
        close(p[0].fd);
        memmove(p, p + 1, sizeof *p * (PENDING_MAX - 1));
        np--;
      }
      int64_t hd = gang__deadline_in_ms(HELLO_WAIT_MS);
      p[np++] = (pending){fd, 0, hd < cfg->deadline ? hd : cfg->deadline, {0}};
    }
  }
  for (int i = 0; i < np; i++)
    close(p[i].fd);
  if (silent + np > 0)
    GANG_WARN(TCP,
              "fabric setup: rank %d dropped %d connection(s) that did not "
              "say hello",
              f->rank, silent + np);
  return st;
}

static gang_status world_token(gang__fabric *f, gang_store *st,
                               uint8_t *token) {
  if (f->rank == 0) {
    if (RAND_bytes(token, 16) != 1)
      return gang__error(GANG_SYSTEM, "fabric: no random bytes for the token");
    GANG_CHECK(gang_store_set(st, "fabric/token", token, 16));
    return GANG_OK;
  }
  void *v = NULL;
  size_t n = 0;
  GANG_CHECK(gang_store_get(st, "fabric/token", &v, &n));
  if (n != 16) {
    gang_store_free(v);
    return gang__error(GANG_PROTOCOL,
                       "fabric/token in the store has %zu "
                       "bytes, expected 16",
                       n);
  }
  memcpy(token, v, 16);
  gang_store_free(v);
  return GANG_OK;
}

/* A fabric of `size` ranks seen from `rank`, with no connections yet
 * (every fd -1): its lock, its connections' queues and stages, the
 * settings it runs by and its wake fd. On failure everything is freed. */
static gang_status fabric_alloc(int rank, int size, gang__fabric **out) {
  gang__fabric *f = calloc(1, sizeof *f);
  if (f == NULL)
    return gang__error(GANG_NO_MEMORY, "fabric: out of memory");
  f->rank = rank;
  f->size = size;
  f->wakefd = -1;
  f->lost_peer = -1;
  pthread_mutex_init(&f->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&f->cv, &ca);
  pthread_condattr_destroy(&ca);
  f->conns = calloc((size_t)size, sizeof *f->conns);
  gang_status st = GANG_OK;
  if (f->conns == NULL) {
    st = gang__error(GANG_NO_MEMORY, "fabric: out of memory");
    goto fail;
  }
  for (int p = 0; p < size; p++) {
    f->conns[p].fd = -1;
    f->conns[p].peer = p;
    TAILQ_INIT(&f->conns[p].sq);
    TAILQ_INIT(&f->conns[p].posted);
    TAILQ_INIT(&f->conns[p].uq);
    SLIST_INIT(&f->conns[p].spares);
  }
  /* Only once every fd is -1: destroying a fabric whose stages could not
   * all be had must not close the calloc'd 0 of the connections after. */
  for (int p = 0; p < size; p++) {
    if (p != rank && (f->conns[p].stage = malloc(STAGE_CAP)) == NULL) {
      st = gang__error(GANG_NO_MEMORY, "fabric: out of memory");
      goto fail;
    }
  }
  int64_t spin_us = 0, sockbuf = 0, piece = 0;
  GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_TCP_SPIN_US, &spin_us), st,
                  fail);
  GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_TCP_PIECE, &piece), st, fail);
  if (piece < 0 || piece > (int64_t)1 << 40) {
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "GANG_TCP_PIECE must be in [0, 2^40] bytes, not %lld",
                     (long long)piece);
    goto fail;
  }
  f->piece = (size_t)piece;
  int64_t early = 0;
  GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_TCP_EARLY_MAX, &early), st,
                  fail);
  if (early < EAGER_MAX) {
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "GANG_TCP_EARLY_MAX must be at least %d bytes (one "
                     "eager message), not %lld",
                     EAGER_MAX, (long long)early);
    goto fail;
  }
  f->early_max = (size_t)early;
  f->piece_set = gang__setting_is_set(GANG_SETTING_TCP_PIECE);
  GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_SOCKET_BUFFER, &sockbuf), st,
                  fail);
  if (spin_us < 0 || spin_us > 1000000 || sockbuf < 0 || sockbuf > INT32_MAX) {
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "GANG_TCP_SPIN_US must be in [0, 1000000] and "
                     "GANG_SOCKET_BUFFER in [0, 2G)");
    goto fail;
  }
  f->spin_ns = spin_us * 1000;
  f->busy_ns = 20000;
  f->sockbuf = (int)sockbuf;
  GANG_CHECK_GOTO(cc_setting(f), st, fail);
  f->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (f->wakefd < 0) {
    st = gang__error_errno(GANG_SYSTEM, errno, "fabric: eventfd");
    goto fail;
  }
  *out = f;
  return GANG_OK;
fail:
  gang__fabric_destroy(f);
  return st;
}

gang_status gang__fabric_create_connected(int rank, int size, const int *fds,
                                          gang__fabric **out) {
  gang__fabric *f = NULL;
  gang_status st;
  if (size < 1 || rank < 0 || rank >= size)
    st = gang__error(GANG_INVALID_ARGUMENT, "fabric: rank %d of a world of %d",
                     rank, size);
  else
    st = fabric_alloc(rank, size, &f);
  if (st != GANG_OK) {
    for (int p = 0; p < size; p++)
      if (p != rank && fds[p] >= 0)
        close(fds[p]);
    return st;
  }
  for (int p = 0; p < size; p++) {
    if (p == rank)
      continue;
    gang__fabric_conn *c = &f->conns[p];
    c->fd = fds[p];
    c->piece = f->piece; /* no congestion control to choose it by */
    snprintf(c->name, sizeof c->name, "rank %d", p);
  }
  *out = f;
  return GANG_OK;
}

gang_status gang__fabric_create(const gang__fabric_config *cfg,
                                gang__fabric **out) {
  gang__fabric *f = NULL;
  GANG_CHECK(fabric_alloc(cfg->rank, cfg->size, &f));
  int lfd = -1;
  gang_status st = GANG_OK;
  if (cfg->size == 1) { /* nobody to meet */
    *out = f;
    return GANG_OK;
  }
  uint8_t token[16];
  GANG_CHECK_GOTO(world_token(f, cfg->store, token), st, fail);
  int port = 0;
  GANG_CHECK_GOTO(gang__sock_listen(cfg->host, 0, 0, &lfd, &port), st, fail);
  char key[64], addr[300];
  snprintf(key, sizeof key, "fabric/addr/%d", cfg->rank);
  gang__sock_peer_name(cfg->host, port, addr, sizeof addr);
  GANG_CHECK_GOTO(gang_store_set(cfg->store, key, addr, strlen(addr)), st,
                  fail);
  for (int p = 0; p < cfg->rank; p++)
    GANG_CHECK_GOTO(connect_lower(f, cfg, token, p), st, fail);
  GANG_CHECK_GOTO(accept_higher(f, cfg, token, lfd, cfg->size - 1 - cfg->rank),
                  st, fail);
  close(lfd);
  GANG_INFO(TCP, "fabric rank %d/%d connected", cfg->rank, cfg->size);
  *out = f;
  return GANG_OK;
fail:
  if (lfd >= 0)
    close(lfd);
  gang__fabric_destroy(f);
  return st;
}

void gang__fabric_destroy(gang__fabric *f) {
  if (f == NULL)
    return;
  /* Say goodbye so the peers do not take our end-of-stream for a crash
   * (a fabric that failed told them why instead). */
  if (f->conns != NULL)
    (void)gang__fabric_leave(f, GANG__LEAVE_DESTROY);
  for (int p = 0; f->conns && p < f->size; p++) {
    gang__fabric_conn *c = &f->conns[p];
    if (c->fd >= 0)
      close(c->fd);
    gang__fabric_conn_free(c);
  }
  free(f->conns);
  free(f->lost);
  free(f->pass_fds);
  free(f->pass_peer);
  if (f->wakefd >= 0)
    close(f->wakefd);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

int gang__fabric_drain(gang__fabric *f, int64_t deadline) {
  int n = 0;
  struct pollfd *fds = calloc((size_t)f->size, sizeof *fds);
  int *peer = calloc((size_t)f->size, sizeof *peer);
  uint8_t *sink = malloc(STAGE_CAP);
  if (fds == NULL || peer == NULL || sink == NULL) {
    free(fds);
    free(peer);
    free(sink);
    return f->size - 1;
  }
  /* Nothing else reads these sockets now: the fabric has failed here
   * (gang__fabric_leave), which stops every other thread's pass. */
  for (int p = 0; p < f->size; p++) {
    if (p != f->rank && f->conns[p].fd >= 0 && !f->conns[p].ended) {
      peer[n] = p;
      fds[n++] = (struct pollfd){f->conns[p].fd, POLLIN | POLLRDHUP, 0};
    }
  }
  int open = n;
  while (open > 0) {
    int ms = gang__deadline_poll_ms(deadline);
    if (ms == 0)
      break;
    if (ms < 0 || ms > 1000)
      ms = 1000;
    if (poll(fds, (nfds_t)n, ms) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < n; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      ssize_t r = recv(fds[i].fd, sink, STAGE_CAP, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                     errno != EINTR)) {
        f->conns[peer[i]].ended = true; /* it is done with us */
        fds[i].fd = -1;
        open--;
      }
    }
  }
  free(fds);
  free(peer);
  free(sink);
  return open;
}
