/* The TCP fabric: connection setup through the store, framing, matching of
 * messages to receives, and the progress engine described in fabric.h.
 *
 * Frame: a 32-byte little-endian header then the payload; a DATA frame of
 * PAD_MIN bytes or more has PAD zero bytes between the two (frame_head).
 *   u32 kind   FRAME_DATA, FRAME_ABORT, or FRAME_BYE (the peer destroyed
 *              its gang normally: its end-of-stream is not a failure)
 *   u32 tag    (ABORT: the sender's failure status)
 *   u64 ctx
 *   u64 seq
 *   u64 len    payload bytes (ABORT: the reason text)
 *
 * Locking: one mutex guards all engine state. The thread that drives I/O
 * ("driver") holds it during non-blocking syscalls and releases it only
 * while it sleeps in poll(); other waiters sleep on a condition variable and
 * take over driving when the driver's own transfers are done. */
#include "fabric.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "core/bytes.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"

#define HDR 32
/* A DATA frame of PAD_MIN payload bytes or more carries PAD zero bytes
 * between its header and its payload (frame_head), so its header takes
 * FRAME_PAGE bytes of the stream and its payload keeps the stream's page
 * alignment. Measured, not fully understood: over loopback, a large
 * payload that follows a 32- to 64-byte header costs the sender's kernel
 * copy about twice as much as with none; after a 256- or 1024-byte one it
 * is still ~10 % slower than with none or a 4096-byte one
 * (docs/performance.md). */
#define FRAME_PAGE 4096
#define PAD (FRAME_PAGE - HDR)
#define PAD_MIN (64 * 1024)
#define FRAME_DATA 0x474e4701u
#define FRAME_ABORT 0x474e4702u
#define FRAME_BYE 0x474e4703u
#define HELLO_MAGIC 0x31504354474e4147ull /* "GANGTCP1" */
#define HELLO_VERSION 3u /* 2: padded large frames; 3: to a page */
#define HELLO_LEN 40
#define MAX_FRAME (1ull << 40)
#define MAX_ABORT_TEXT 4096
/* An early message up to this size is read into a buffer at once; a larger
 * one is left in the socket until its receive is posted, so it lands in
 * the caller's buffer with no allocation and no extra copy. */
#define EAGER_MAX (64 * 1024)
/* A payload remainder this large or larger is read straight into its
 * destination; a smaller one goes through the connection's stage, so the
 * read can take the frames behind it too. */
#define STAGE (32 * 1024)
/* The stage: reads into it take a header with its small payload (and any
 * frames behind it), up to this many bytes. At most EAGER_MAX + HDR:
 * everything staged behind the header of a deferred message is then that
 * message's payload. */
#define STAGE_CAP (EAGER_MAX + HDR)
_Static_assert(STAGE <= STAGE_CAP, "the stage holds a staged remainder");
_Static_assert(FRAME_PAGE <= STAGE_CAP, "the stage holds a padded head");
/* The first posted receive on a connection expecting this many bytes or
 * more is bet on: the next frame's head is read into the stage and its
 * payload straight into the receive, by one recvmsg (read_posted). */
#define SCATTER_MIN 2048

/* Early messages' buffers: freed ones are kept on their connection, up to
 * this many bytes in all, for the next early messages there instead of
 * going back to malloc. Freeing and allocating them per message let glibc
 * trim and regrow its heap, a page fault per 4 KiB each time: a 2-rank
 * ring all_reduce of 2 MiB cut into 64 KiB chunks (more chunks than its
 * window of receives, so most arrive early) took 1.2-1.6 ms, and up to
 * 10 ms, instead of 0.7-0.8 with glibc told not to trim. */
#define SPARE_MAX ((size_t)1 << 20)
/* ... and only buffers of at least a page, at most this many: smaller ones
 * come from malloc's caches without touching the heap's top, and the list
 * searched for each early message stays short. */
#define SPARE_MIN ((size_t)4096)
#define SPARE_COUNT 16
_Static_assert(SPARE_MIN >= 2 * sizeof(void *), "a kept buffer holds a spare");

/* A kept buffer; its first bytes hold this. */
typedef struct spare {
  struct spare *next;
  size_t cap;
} spare;

/* A message that arrived before its receive was posted. */
typedef struct umsg {
  struct umsg *next;
  uint32_t tag;
  uint64_t ctx, seq;
  size_t len, got;
  uint8_t *data;
  size_t cap;          /* bytes allocated at data (early_buf) */
  gang__xfer *waiting; /* a receive posted while the payload was arriving */
} umsg;

typedef struct conn {
  int fd;
  int peer;
  char name[300];
  bool dead;
  bool bye;     /* the peer said goodbye: its EOF is expected */
  size_t piece; /* pacing of its exchanges (send_limit), 0: none */
  bool hup;     /* poll saw the peer hang up: read on to its end of stream */
  /* sending: FIFO of registered sends; the head's header is in shdr */
  gang__xfer *sq_head, *sq_tail;
  uint8_t shdr[HDR + PAD]; /* the pad stays zero */
  /* receiving: bytes read but not yet consumed are stage[s_off, s_end) */
  uint8_t *stage;
  size_t s_off, s_end;
  uint8_t rhdr[HDR];
  bool in_payload;
  uint32_t rkind;
  uint32_t rtag;
  size_t rlen, rgot;
  gang__xfer *rx;  /* matched receive being filled */
  umsg *rum;       /* or unexpected message being filled */
  uint8_t *rabort; /* or ABORT text */
  gang__xfer *posted_head, *posted_tail;
  umsg *uq_head, *uq_tail;
  bool last_padded;     /* the last frame read was a large one (pull) */
  struct spare *spares; /* freed early-message buffers kept for the next */
  size_t spare_bytes;   /* their total size */
  int spare_count;      /* and number */
} conn;

struct gang__fabric {
  int rank, size;
  conn *conns; /* indexed by peer; conns[rank] unused */
  int wakefd;  /* eventfd: abort, or new work for a driver in poll() */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool driving;
  bool polling;
  gang_status failed;
  char fail_detail[1024];
  /* Told of the first failure, under mu (the shm arena wakes its
   * sleepers). */
  void (*fail_hook)(void *arg, gang_status st, const char *reason);
  void *fail_arg;
  int64_t spin_ns; /* GANG_TCP_SPIN_US */
  size_t piece;    /* GANG_TCP_PIECE, 0: sends are never paced */
  bool piece_set;  /* ... by the user; else chosen per connection */
  int sockbuf;     /* GANG_SOCKET_BUFFER, 0: the kernel's */
  /* GANG_TCP_CONGESTION: cc_all set on every connection; else, unless
   * cc_keep, "reno" on those that stay on this host. */
  char cc[16]; /* the kernel's TCP_CA_NAME_MAX */
  bool cc_all, cc_keep;
  uint64_t moved; /* syscalls that moved bytes, for the spin */
};

size_t gang__fabric_peer_piece(const gang__fabric *f, int peer) {
  return peer >= 0 && peer < f->size && peer != f->rank ? f->conns[peer].piece
                                                        : 0;
}

int gang__fabric_rank(const gang__fabric *f) { return f->rank; }
int gang__fabric_size(const gang__fabric *f) { return f->size; }

int gang__fabric_peer_fd(const gang__fabric *f, int peer) {
  if (peer < 0 || peer >= f->size || peer == f->rank)
    return -1;
  return f->conns[peer].fd;
}

static void progress(gang__fabric *f);

/* ---- Failure ------------------------------------------------------------- */

static void complete(gang__fabric *f, gang__xfer *x) {
  (void)f;
  x->done = true;
  x->grp->remaining--;
}

static void fail_list(gang__fabric *f, gang__xfer *x) {
  for (; x != NULL; x = x->next)
    if (!x->done)
      complete(f, x);
}

/* Under f->mu. */
static void fail_locked(gang__fabric *f, gang_status st, const char *reason) {
  if (f->failed != GANG_OK)
    return;
  f->failed = st;
  snprintf(f->fail_detail, sizeof f->fail_detail, "%s", reason);
  GANG_INFO(TCP, "fabric failed (%s): %s", gang_status_name(st), reason);
  char text[512];
  int tl = snprintf(text, sizeof text, "rank %d: %s", f->rank, reason);
  if (tl < 0 || tl >= (int)sizeof text)
    tl = (int)sizeof text - 1;
  for (int p = 0; p < f->size; p++) {
    conn *c = &f->conns[p];
    if (p == f->rank || c->fd < 0)
      continue;
    /* Tell the peer why, unless a frame is half written (the stream would
     * be corrupt): then the shutdown alone tells it. Best effort. */
    if (!c->dead && (c->sq_head == NULL || c->sq_head->off == 0)) {
      uint8_t h[HDR];
      memset(h, 0, sizeof h);
      gang__put_u32(h, FRAME_ABORT);
      gang__put_u32(h + 4, (uint32_t)st); /* peers fail with the same status */
      gang__put_u64(h + 24, (uint64_t)tl);
      struct iovec iov[2] = {{h, HDR}, {text, (size_t)tl}};
      struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
      (void)!sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(c->fd, SHUT_RDWR);
    c->dead = true;
    fail_list(f, c->sq_head);
    fail_list(f, c->posted_head);
    if (c->rx != NULL && !c->rx->done)
      complete(f, c->rx);
    for (umsg *u = c->uq_head; u; u = u->next) {
      if (u->waiting && !u->waiting->done)
        complete(f, u->waiting);
      u->waiting = NULL;
    }
    /* The transfers live on their callers' stacks: forget them. */
    c->sq_head = c->sq_tail = NULL;
    c->posted_head = c->posted_tail = NULL;
    c->rx = NULL;
  }
  uint64_t one = 1;
  (void)!write(f->wakefd, &one, sizeof one);
  pthread_cond_broadcast(&f->cv);
  if (f->fail_hook != NULL)
    f->fail_hook(f->fail_arg, st, text);
}

void gang__fabric_set_fail_hook(gang__fabric *f,
                                void (*hook)(void *arg, gang_status st,
                                             const char *reason),
                                void *arg) {
  pthread_mutex_lock(&f->mu);
  f->fail_hook = hook;
  f->fail_arg = arg;
  gang_status st = f->failed;
  pthread_mutex_unlock(&f->mu);
  /* Failed before the hook was set: tell it now. */
  if (hook != NULL && st != GANG_OK)
    hook(arg, st, f->fail_detail);
}

void gang__fabric_set_oversubscribed(gang__fabric *f) {
  if (gang__setting_is_set(GANG_SETTING_TCP_SPIN_US))
    return;
  pthread_mutex_lock(&f->mu);
  if (f->spin_ns > 50000)
    f->spin_ns = 50000;
  pthread_mutex_unlock(&f->mu);
}

gang_status gang__fabric_poke(gang__fabric *f) {
  pthread_mutex_lock(&f->mu);
  if (f->failed == GANG_OK && !f->driving) {
    f->driving = true;
    progress(f);
    f->driving = false;
    pthread_cond_broadcast(&f->cv);
  }
  gang_status st = f->failed;
  pthread_mutex_unlock(&f->mu);
  return st;
}

void gang__fabric_fail(gang__fabric *f, gang_status st, const char *reason) {
  pthread_mutex_lock(&f->mu);
  fail_locked(f, st, reason);
  pthread_mutex_unlock(&f->mu);
}

gang_status gang__fabric_status(gang__fabric *f, char *detail, size_t cap) {
  pthread_mutex_lock(&f->mu);
  gang_status st = f->failed;
  if (detail != NULL && cap > 0)
    snprintf(detail, cap, "%s", f->fail_detail);
  pthread_mutex_unlock(&f->mu);
  return st;
}

/* ---- Sending ------------------------------------------------------------- */

/* Bytes before the payload of a frame of this kind and length. */
static size_t frame_head(uint32_t kind, uint64_t len) {
  return kind == FRAME_DATA && len >= PAD_MIN && len <= MAX_FRAME ? HDR + PAD
                                                                  : HDR;
}

static void encode_header(uint8_t *h, uint32_t kind, uint32_t tag, uint64_t ctx,
                          uint64_t seq, uint64_t len) {
  gang__put_u32(h, kind);
  gang__put_u32(h + 4, tag);
  gang__put_u64(h + 8, ctx);
  gang__put_u64(h + 16, seq);
  gang__put_u64(h + 24, len);
}

static void left_before(gang__fabric *f, conn *c);

/* Payload bytes that have arrived for receive x. */
static size_t arrived(gang__fabric *f, const gang__xfer *x) {
  if (x->done)
    return x->len;
  conn *c = &f->conns[x->peer];
  if (c->rx == x)
    return c->rgot;
  for (umsg *u = c->uq_head; u; u = u->next)
    if (u->waiting == x)
      return u->got;
  return 0;
}

/* How far into its frame (header included) send x, the head of its
 * connection's queue, may go now: to the end, or, when paced, one piece
 * beyond the pieces of its receive that have fully arrived.
 *
 * Why pacing cannot deadlock: a send with another queued behind it is not
 * paced (else two gangs' exchanges over one pair of ranks, started in
 * opposite orders, each wait behind the other's paced send: the test
 * test_paced_exchanges_of_two_gangs). So a paced send waits only for the
 * head send of the peer's connection, and in a cycle of such sends each
 * may always go one piece beyond what its predecessor sent. That holds
 * with a different piece at each send (the two ends of a connection may
 * choose differently, tune_connection): all stuck would need each s_i to
 * be at least (s_pred / p_i + 1) p_i > s_pred, round the whole cycle. */
static size_t send_limit(gang__fabric *f, const gang__xfer *x) {
  size_t head = frame_head(FRAME_DATA, x->len);
  size_t end = head + x->len;
  size_t piece = f->conns[x->peer].piece;
  if (x->pace == NULL || piece == 0 || x->next != NULL)
    return end;
  size_t got = arrived(f, x->pace);
  if (got >= x->pace->len)
    return end;
  size_t lim = head + (got / piece + 1) * piece;
  return lim < end ? lim : end;
}

/* Writes queued sends until the socket is full or the head send is paced.
 * Under f->mu. */
static void push_sends(gang__fabric *f, conn *c) {
  if (c->sq_head != NULL && c->bye && c->sq_head->off == 0) {
    /* Its goodbye was read (maybe before its end of stream): a frame
     * written now would vanish unread. */
    left_before(f, c);
    return;
  }
  while (c->sq_head != NULL && !c->dead) {
    gang__xfer *x = c->sq_head;
    size_t lim = send_limit(f, x);
    if (x->off >= lim)
      return; /* paced: waits for the peer's next piece */
    if (x->off == 0)
      encode_header(c->shdr, FRAME_DATA, x->tag, x->ctx, x->seq, x->len);
    size_t head = frame_head(FRAME_DATA, x->len);
    struct iovec iov[2];
    int n = 0;
    if (x->off < head)
      iov[n++] = (struct iovec){c->shdr + x->off, head - x->off};
    size_t poff = x->off > head ? x->off - head : 0;
    if (lim - head > poff)
      iov[n++] = (struct iovec){(uint8_t *)x->buf + poff, lim - head - poff};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return;
      char why[1024];
      int e = errno;
      snprintf(why, sizeof why, "sending to %s: %s", c->name, strerror(e));
      fail_locked(
          f, e == EPIPE || e == ECONNRESET ? GANG_PEER_LOST : GANG_SYSTEM, why);
      return;
    }
    x->off += (size_t)w;
    f->moved++;
    if (x->off < lim)
      return; /* socket full */
    if (x->off < head + x->len)
      continue; /* paced: the limit may have moved on since */
    c->sq_head = x->next;
    if (c->sq_head == NULL)
      c->sq_tail = NULL;
    x->next = NULL;
    complete(f, x);
  }
}

/* ---- Receiving ----------------------------------------------------------- */

static bool matches(const gang__xfer *x, uint64_t ctx, uint64_t seq,
                    uint32_t tag) {
  return x->ctx == ctx && x->seq == seq && x->tag == tag;
}

static void mismatch(gang__fabric *f, conn *c, const gang__xfer *x,
                     uint64_t len) {
  char why[1024];
  snprintf(why, sizeof why,
           "%s sent %llu bytes for (ctx %llx, seq %llu, tag %u) but this "
           "rank expected %zu: the ranks disagree on the collective",
           c->name, (unsigned long long)len, (unsigned long long)x->ctx,
           (unsigned long long)x->seq, x->tag, x->len);
  fail_locked(f, GANG_MISMATCH, why);
}

/* A header has arrived: find where its payload goes. */
/* A buffer of at least len bytes for an early message on c (*cap: its
 * size): a kept one large enough, else a new one. NULL when out of
 * memory. */
static uint8_t *early_buf(conn *c, size_t len, size_t *cap) {
  for (spare **pp = &c->spares; *pp != NULL; pp = &(*pp)->next) {
    spare *k = *pp;
    if (k->cap < len)
      continue;
    *pp = k->next;
    c->spare_bytes -= k->cap;
    c->spare_count--;
    *cap = k->cap;
    return (uint8_t *)k;
  }
  *cap = len; /* kept later only if at least SPARE_MIN, room for a spare */
  return malloc(len);
}

/* Gives an early message's buffer back: kept on c when it is at least
 * SPARE_MIN bytes and the kept ones stay within SPARE_MAX bytes and
 * SPARE_COUNT buffers, freed otherwise. */
static void early_buf_free(conn *c, uint8_t *p, size_t cap) {
  if (p == NULL)
    return;
  if (cap < SPARE_MIN || c->spare_count >= SPARE_COUNT ||
      c->spare_bytes + cap > SPARE_MAX) {
    free(p);
    return;
  }
  spare *k = (spare *)(void *)p;
  k->cap = cap;
  k->next = c->spares;
  c->spares = k;
  c->spare_bytes += cap;
  c->spare_count++;
}

static void on_header(gang__fabric *f, conn *c) {
  uint32_t kind = gang__get_u32(c->rhdr);
  uint32_t tag = gang__get_u32(c->rhdr + 4);
  uint64_t ctx = gang__get_u64(c->rhdr + 8);
  uint64_t seq = gang__get_u64(c->rhdr + 16);
  uint64_t len = gang__get_u64(c->rhdr + 24);
  char why[1024];
  c->rkind = kind;
  c->rtag = tag;
  c->rgot = 0;
  c->in_payload = true;
  if (kind == FRAME_BYE && len == 0) {
    c->bye = true;
    c->in_payload = false;
    return;
  }
  if (kind == FRAME_ABORT) {
    if (len > MAX_ABORT_TEXT)
      len = 0; /* a hostile length: ignore the text, still fail */
    c->rlen = (size_t)len;
    c->rabort = calloc(1, (size_t)len + 1);
    if (c->rabort == NULL)
      c->rlen = 0;
    return;
  }
  if (kind != FRAME_DATA || len > MAX_FRAME) {
    snprintf(why, sizeof why,
             "%s sent a malformed frame (kind %08x, %llu bytes)", c->name, kind,
             (unsigned long long)len);
    fail_locked(f, GANG_PROTOCOL, why);
    return;
  }
  c->rlen = (size_t)len;
  gang__xfer *prev = NULL;
  for (gang__xfer *x = c->posted_head; x; prev = x, x = x->next) {
    if (!matches(x, ctx, seq, tag))
      continue;
    if (x->len != len) {
      mismatch(f, c, x, len);
      return;
    }
    if (prev)
      prev->next = x->next;
    else
      c->posted_head = x->next;
    if (c->posted_tail == x)
      c->posted_tail = prev;
    x->next = NULL;
    c->rx = x;
    return;
  }
  umsg *u = calloc(1, sizeof *u);
  if (u != NULL && len > 0 && len <= EAGER_MAX)
    u->data = early_buf(c, (size_t)len, &u->cap);
  if (u == NULL || (len > 0 && len <= EAGER_MAX && u->data == NULL)) {
    free(u);
    snprintf(why, sizeof why,
             "cannot buffer a %llu-byte message from %s that arrived before "
             "its receive",
             (unsigned long long)len, c->name);
    fail_locked(f, GANG_NO_MEMORY, why);
    return;
  }
  u->tag = tag;
  u->ctx = ctx;
  u->seq = seq;
  u->len = (size_t)len;
  if (c->uq_tail)
    c->uq_tail->next = u;
  else
    c->uq_head = u;
  c->uq_tail = u;
  c->rum = u;
}

static void unlink_umsg(conn *c, umsg *u) {
  umsg *prev = NULL;
  for (umsg *p = c->uq_head; p; prev = p, p = p->next) {
    if (p != u)
      continue;
    if (prev)
      prev->next = u->next;
    else
      c->uq_head = u->next;
    if (c->uq_tail == u)
      c->uq_tail = prev;
    return;
  }
}

/* Hands a fully arrived unexpected message to its receive. */
static void deliver(gang__fabric *f, conn *c, umsg *u, gang__xfer *x) {
  if (x->len)
    memcpy(x->buf, u->data, x->len);
  unlink_umsg(c, u);
  early_buf_free(c, u->data, u->cap);
  free(u);
  complete(f, x);
}

static void on_payload_done(gang__fabric *f, conn *c) {
  c->in_payload = false;
  if (c->rkind == FRAME_ABORT) {
    char why[1024];
    snprintf(why, sizeof why, "%s aborted: %s", c->name,
             c->rabort ? (char *)c->rabort : "(no reason)");
    free(c->rabort);
    c->rabort = NULL;
    /* A peer that timed out or was aborted passes that on; anything else
     * (including a status we do not know) means we lost it. */
    gang_status st = (c->rtag == GANG_TIMEOUT || c->rtag == GANG_ABORTED ||
                      c->rtag == GANG_MISMATCH)
                         ? (gang_status)c->rtag
                         : GANG_PEER_LOST;
    fail_locked(f, st, why);
    return;
  }
  if (c->rx != NULL) {
    gang__xfer *x = c->rx;
    c->rx = NULL;
    complete(f, x);
  } else if (c->rum != NULL) {
    umsg *u = c->rum;
    c->rum = NULL;
    u->got = u->len;
    if (u->waiting != NULL)
      deliver(f, c, u, u->waiting);
  }
}

/* Fails what this rank still expects from or owes to a peer that left. */
static bool owes(const conn *c) {
  return c->sq_head != NULL || c->posted_head != NULL || c->rx != NULL ||
         c->in_payload;
}

static void peer_closed(gang__fabric *f, conn *c, int err) {
  char why[1024];
  if (c->bye) {
    /* An orderly departure. Only a transfer that needs this peer fails. */
    c->dead = true;
    if (owes(c)) {
      snprintf(why, sizeof why,
               "%s left (destroyed its gang) while a transfer with it was "
               "pending",
               c->name);
      fail_locked(f, GANG_PEER_LOST, why);
    }
    return;
  }
  if (err == 0)
    snprintf(why, sizeof why, "%s closed the connection", c->name);
  else
    snprintf(why, sizeof why, "connection to %s failed: %s", c->name,
             strerror(err));
  fail_locked(f, GANG_PEER_LOST, why);
}

/* A large early message waits in the socket (u->data == NULL) until:
 * its receive is posted (read straight into it), or this rank waits for
 * another message behind it on the same connection, or the peer hung up
 * (then it is buffered, so nothing can deadlock behind it). Returns whether
 * reading may go on. */
static bool resolve_deferred(gang__fabric *f, conn *c) {
  umsg *u = c->rum;
  if (u->waiting != NULL) {
    gang__xfer *x = u->waiting;
    unlink_umsg(c, u);
    free(u);
    c->rum = NULL;
    c->rx = x;
    return true;
  }
  if (c->posted_head == NULL && !c->hup)
    return false;
  u->data = early_buf(c, u->len, &u->cap);
  if (u->data == NULL) {
    char why[1024];
    snprintf(why, sizeof why,
             "cannot buffer a %zu-byte message from %s that arrived before "
             "its receive",
             u->len, c->name);
    fail_locked(f, GANG_NO_MEMORY, why);
    return false;
  }
  return true;
}

/* Whether c holds a deferred message nobody can take yet. */
static bool stalled(const conn *c) {
  return c->in_payload && c->rum != NULL && c->rum->data == NULL &&
         c->rum->waiting == NULL && c->posted_head == NULL && !c->hup;
}

/* Where the current frame's next payload bytes go: the matched receive,
 * the unexpected message's buffer, the ABORT text, or NULL (an ABORT text
 * that could not be allocated: skipped). */
static uint8_t *payload_dst(conn *c) {
  if (c->rx)
    return (uint8_t *)c->rx->buf + c->rgot;
  if (c->rum)
    return c->rum->data + c->rgot;
  return c->rabort ? c->rabort + c->rgot : NULL;
}

static void payload_got(conn *c, size_t n) {
  c->rgot += n;
  if (c->rum)
    c->rum->got = c->rgot;
}

/* Reads the next frame into the stage (its head) and the first posted
 * receive (its payload) with one recvmsg, betting that the frame is that
 * receive's, as it is in a collective's exchange: the payload then lands in
 * place with no copy through the stage, and an unpadded payload (under
 * 64 KiB) takes one read (32 KiB exchanges over loopback measured 2.5-3 us
 * faster in bench/tcp_floor). A lost bet costs a copy: the bytes that went
 * into the receive's buffer are moved back behind the head, where a read
 * into the stage would have put them. Until the receive completes its
 * buffer is the fabric's to write: nothing else reads it meanwhile
 * (x->owns_buf: a receive whose buffer a send may still be reading from
 * is never bet on), and its own payload overwrites all of it when it
 * completes; one that fails keeps whatever landed in it. Returns what
 * recvmsg did; *done says whether to stop reading: the socket had less
 * than asked for, or the bet won and its whole payload came, which in an
 * exchange is most likely all there was (reading on cost 0.5-1 us at
 * 2-8 KiB, a recv that said EAGAIN; poll() still sees anything left). */
static ssize_t read_posted(gang__fabric *f, conn *c, bool *done) {
  gang__xfer *x = c->posted_head;
  size_t head = frame_head(FRAME_DATA, x->len);
  size_t body = x->len < STAGE_CAP - head ? x->len : STAGE_CAP - head;
  c->s_off = c->s_end = 0;
  struct iovec iov[2] = {{c->stage, head}, {x->buf, body}};
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
  ssize_t r = recvmsg(c->fd, &mh, MSG_DONTWAIT);
  if (r <= 0)
    return r;
  size_t got = (size_t)r;
  *done = got < head + body;
  if (got <= head) {
    c->s_end = got;
    return r;
  }
  const uint8_t *h = c->stage;
  uint32_t kind = gang__get_u32(h);
  uint64_t len = gang__get_u64(h + 24);
  if (kind == FRAME_DATA && len == x->len && frame_head(kind, len) == head &&
      matches(x, gang__get_u64(h + 8), gang__get_u64(h + 16),
              gang__get_u32(h + 4))) {
    c->last_padded = head > HDR;
    memcpy(c->rhdr, h, HDR);
    on_header(f, c); /* x is the first posted receive it matches */
    payload_got(c, got - head);
    /* Stopping early must not let a send about to start skip a goodbye
     * behind this frame (push_sends checks for one before a frame's first
     * byte): with such a send queued, the pass reads on. */
    *done = *done ||
            (c->rgot == c->rlen && (c->sq_head == NULL || c->sq_head->off > 0));
  } else {
    memcpy(c->stage + head, x->buf, got - head);
    c->s_end = got;
    x->lost_bet = true; /* its frame is not next: no more bets on it */
  }
  return r;
}

/* Whether a read that returned r moved no bytes: nothing to read now
 * (EAGAIN), or the connection ended, which fails or closes it. */
static bool read_ended(gang__fabric *f, conn *c, ssize_t r) {
  if (r > 0)
    return false;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return true;
  peer_closed(f, c, r < 0 ? errno : 0);
  return true;
}

/* Reads whatever has arrived on c and consumes it. Under f->mu. A read
 * that returns less than asked for has emptied the socket, so the loop
 * stops there instead of paying for one more recv that says EAGAIN; so
 * does a won bet that completed its receive (read_posted). */
static void pull(gang__fabric *f, conn *c) {
  bool drained = false;
  while (!c->dead && f->failed == GANG_OK) {
    size_t staged = c->s_end - c->s_off;
    uint8_t *dst = NULL;
    size_t want = 0;
    if (c->in_payload) {
      size_t left = c->rlen - c->rgot;
      if (left == 0) {
        on_payload_done(f, c);
        continue;
      }
      if (c->rum != NULL && c->rum->data == NULL) {
        if (!resolve_deferred(f, c))
          return; /* staged bytes are its payload: they wait with it */
        continue;
      }
      dst = payload_dst(c);
      if (staged > 0) {
        size_t n = staged < left ? staged : left;
        if (dst != NULL)
          memcpy(dst, c->stage + c->s_off, n);
        c->s_off += n;
        payload_got(c, n);
        continue;
      }
      if (dst != NULL && left >= STAGE)
        want = left; /* large: straight into place */
      else
        dst = NULL;
    } else if (staged >= HDR) {
      const uint8_t *h = c->stage + c->s_off;
      size_t head = frame_head(gang__get_u32(h), gang__get_u64(h + 24));
      if (staged >= head) { /* the header and its pad, if any */
        c->last_padded = head > HDR;
        memcpy(c->rhdr, h, HDR);
        c->s_off += head;
        on_header(f, c);
        continue;
      }
    }
    if (drained)
      return;
    if (!c->in_payload && staged == 0 && c->posted_head != NULL &&
        c->posted_head->owns_buf && !c->posted_head->lost_bet &&
        c->posted_head->len >= SCATTER_MIN) {
      if (read_ended(f, c, read_posted(f, c, &drained)))
        return;
      f->moved++;
      continue;
    }
    bool into_stage = dst == NULL;
    if (into_stage) {
      /* Into the stage, after what is left of a partial header (or of a
       * header whose pad has not all arrived). */
      if (c->s_off > 0) {
        memmove(c->stage, c->stage + c->s_off, staged);
        c->s_off = 0;
        c->s_end = staged;
      }
      dst = c->stage + c->s_end;
      want = STAGE_CAP - c->s_end;
      /* When the next frame is likely a large (padded) one -- the last
       * one was, or the next receive posted here expects one -- headers
       * are read a page at a time: its header and pad fill one read
       * exactly, and its payload then lands straight in the destination,
       * page-aligned with the stream, instead of having its first 28 KiB
       * copied through here (128 KiB-1 MiB all_reduces 2-6 % faster, A/B
       * alternated). Otherwise one read takes a whole small or mid-size
       * frame (8 KiB all_reduces read in two measured 1.6 us slower). A
       * wrong guess costs time, never bytes. */
      bool big = c->last_padded ||
                 (c->posted_head != NULL && c->posted_head->len >= PAD_MIN);
      if (!c->in_payload && big && want > FRAME_PAGE - c->s_end % FRAME_PAGE)
        want = FRAME_PAGE - c->s_end % FRAME_PAGE;
    }
    ssize_t r = recv(c->fd, dst, want, MSG_DONTWAIT);
    if (read_ended(f, c, r))
      return;
    drained = (size_t)r < want;
    f->moved++;
    if (into_stage)
      c->s_end += (size_t)r;
    else
      payload_got(c, (size_t)r);
  }
}

/* ---- Registration and the wait loop -------------------------------------- */

static void left_before(gang__fabric *f, conn *c) {
  char why[1024];
  snprintf(why, sizeof why, "%s left (destroyed its gang) before this transfer",
           c->name);
  fail_locked(f, GANG_PEER_LOST, why);
}

static void register_xfer(gang__fabric *f, gang__xfer *x) {
  conn *c = &f->conns[x->peer];
  x->next = NULL;
  x->off = 0;
  x->lost_bet = false;
  x->done = false;
  if (x->send) {
    if (c->bye) { /* it said goodbye: nobody will read this */
      left_before(f, c);
      return;
    }
    if (c->sq_tail)
      c->sq_tail->next = x;
    else
      c->sq_head = x;
    c->sq_tail = x;
    return;
  }
  /* An unexpected message that already (partly) arrived? FIFO order. */
  for (umsg *u = c->uq_head; u; u = u->next) {
    if (u->waiting != NULL || u->ctx != x->ctx || u->seq != x->seq ||
        u->tag != x->tag)
      continue;
    if (u->len != x->len) {
      mismatch(f, c, x, u->len);
      return;
    }
    if (u->got == u->len && c->rum != u) {
      deliver(f, c, u, x);
    } else {
      u->waiting = x;
    }
    return;
  }
  /* A peer that left can have sent this before it did, but nothing more. */
  if (c->dead && c->bye) {
    left_before(f, c);
    return;
  }
  if (c->posted_tail)
    c->posted_tail->next = x;
  else
    c->posted_head = x;
  c->posted_tail = x;
}

/* Non-blocking pass over every connection. Under f->mu. */
static void progress(gang__fabric *f) {
  for (int p = 0; p < f->size && f->failed == GANG_OK; p++) {
    if (p == f->rank || f->conns[p].dead)
      continue;
    conn *c = &f->conns[p];
    /* Read first: a goodbye waiting in the socket must fail a send to that
     * peer instead of letting it vanish into a closing connection. Unless
     * the head send is one half of an exchange with this peer whose other
     * half has not arrived yet: the goodbye fails that receive (and the
     * exchange), so the send can go first and not wait behind a read that
     * finds nothing, a syscall on the exchange's critical path (measured:
     * 10.2 -> 9.0 µs per 8-byte all_reduce over TCP). Any other posted
     * receive proves nothing: it may be satisfied before the goodbye. */
    const gang__xfer *h = c->sq_head;
    if (h != NULL && h->pace != NULL && h->pace->peer == p && !h->pace->done) {
      push_sends(f, c);
      if (f->failed == GANG_OK)
        pull(f, c);
    } else {
      pull(f, c);
      if (f->failed == GANG_OK)
        push_sends(f, c);
    }
  }
}

/* Sleeps in poll() until some connection is ready, the wake fd fires or
 * `deadline`. Releases f->mu while sleeping. */
static void sleep_in_poll(gang__fabric *f, int64_t deadline) {
  struct pollfd stackfds[64];
  struct pollfd *fds = stackfds;
  if (f->size + 1 > 64)
    fds = malloc(sizeof *fds * (size_t)(f->size + 1));
  if (fds == NULL)
    return;
  int n = 0;
  fds[n++] = (struct pollfd){f->wakefd, POLLIN, 0};
  for (int p = 0; p < f->size; p++) {
    conn *c = &f->conns[p];
    if (p == f->rank || c->dead)
      continue;
    /* A stalled connection has data we do not want yet: watch it only for
     * the peer hanging up. */
    short in = stalled(c) ? POLLRDHUP : POLLIN;
    fds[n++] = (struct pollfd){
        c->fd,
        (short)(in | (c->sq_head != NULL &&
                              c->sq_head->off < send_limit(f, c->sq_head)
                          ? POLLOUT
                          : 0)),
        0};
  }
  int ms = gang__deadline_poll_ms(deadline);
  if (ms < 0 || ms > 1000)
    ms = 1000; /* re-check state now and then */
  f->polling = true;
  pthread_mutex_unlock(&f->mu);
  int r = poll(fds, (nfds_t)n, ms);
  if (r > 0 && (fds[0].revents & POLLIN)) {
    uint64_t v;
    (void)!read(f->wakefd, &v, sizeof v);
  }
  pthread_mutex_lock(&f->mu);
  f->polling = false;
  for (int i = 1; r > 0 && i < n; i++) {
    if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
      continue;
    for (int p = 0; p < f->size; p++)
      if (p != f->rank && f->conns[p].fd == fds[i].fd)
        f->conns[p].hup = true;
  }
  if (fds != stackfds)
    free(fds);
}

static void describe_pending(gang__xfer *x, int n, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o + 64 < cap; i++) {
    if (x[i].done)
      continue;
    o += (size_t)snprintf(buf + o, cap - o, "%s%s rank %d (tag %u)",
                          o ? ", " : "", x[i].send ? "send to" : "receive from",
                          x[i].peer, x[i].tag);
  }
}

static gang_status failure_locked(gang__fabric *f, const char *what) {
  gang_status st = f->failed;
  char d[1024];
  snprintf(d, sizeof d, "%s", f->fail_detail);
  pthread_mutex_unlock(&f->mu);
  /* The reason may already say which operation failed. */
  if (strncmp(d, what, strlen(what)) == 0)
    return gang__error(st, "%s", d);
  return gang__error(st, "%s: %s", what, d);
}

gang_status gang__fabric_start(gang__fabric *f, gang__xfer *x, int n,
                               gang__xgroup *grp, const char *what) {
  pthread_mutex_lock(&f->mu);
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  grp->remaining = n;
  for (int i = 0; i < n && f->failed == GANG_OK; i++) {
    x[i].grp = grp;
    register_xfer(f, &x[i]);
  }
  if (f->polling) {
    uint64_t one = 1;
    (void)!write(f->wakefd, &one, sizeof one);
  }
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

/* Unlinks x from a singly linked transfer list; true if it was there. */
static bool unlink_xfer(gang__xfer **head, gang__xfer **tail, gang__xfer *x) {
  gang__xfer *prev = NULL;
  for (gang__xfer *p = *head; p; prev = p, p = p->next) {
    if (p != x)
      continue;
    if (prev)
      prev->next = x->next;
    else
      *head = x->next;
    if (*tail == x)
      *tail = prev;
    x->next = NULL;
    return true;
  }
  return false;
}

void gang__fabric_cancel(gang__fabric *f, gang__xfer *x, int n,
                         const char *why) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n; i++) {
    if (x[i].done || f->failed != GANG_OK)
      continue;
    conn *c = &f->conns[x[i].peer];
    bool on_wire = c->rx == &x[i] || (c->sq_head == &x[i] && x[i].off > 0);
    if (on_wire) {
      fail_locked(f, GANG_ABORTED, why);
      continue;
    }
    if (!unlink_xfer(&c->sq_head, &c->sq_tail, &x[i]) &&
        !unlink_xfer(&c->posted_head, &c->posted_tail, &x[i]))
      for (umsg *u = c->uq_head; u; u = u->next)
        if (u->waiting == &x[i])
          u->waiting = NULL;
    complete(f, &x[i]);
  }
  /* A failure completed the rest. */
  pthread_mutex_unlock(&f->mu);
}

gang_status gang__fabric_test(gang__fabric *f, gang__xgroup *grp,
                              const char *what, bool *done) {
  pthread_mutex_lock(&f->mu);
  if (f->failed == GANG_OK && grp->remaining > 0 && !f->driving) {
    f->driving = true;
    progress(f);
    f->driving = false;
    pthread_cond_broadcast(&f->cv);
  }
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  *done = grp->remaining == 0;
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

gang_status gang__fabric_wait(gang__fabric *f, gang__xgroup *grp, gang__xfer *x,
                              int n, int64_t deadline, const char *what) {
  pthread_mutex_lock(&f->mu);
  bool driving = false;
  int64_t spin_until = gang__now_ns() + f->spin_ns;
  uint64_t seen = f->moved;
  while (grp->remaining > 0 && f->failed == GANG_OK) {
    if (!driving && !f->driving)
      f->driving = driving = true;
    if (driving) {
      progress(f);
      /* Others' transfers may have completed too. */
      pthread_cond_broadcast(&f->cv);
      if (grp->remaining == 0 || f->failed != GANG_OK ||
          gang__deadline_passed(deadline))
        break;
      /* Spin while bytes keep moving, and for spin_ns after they stop:
       * a sleep in poll() costs a wake-up on the critical path. */
      int64_t now = gang__now_ns();
      if (f->moved != seen) {
        seen = f->moved;
        spin_until = now + f->spin_ns;
      }
      if (now < spin_until) {
        /* Busy for the first stretch (a reply on another core lands within
         * microseconds), then hand the CPU over between passes in case the
         * peer waits for it. */
        pthread_mutex_unlock(&f->mu);
        if (now - (spin_until - f->spin_ns) >= 20000)
          sched_yield();
        pthread_mutex_lock(&f->mu);
      } else {
        sleep_in_poll(f, deadline);
      }
    } else {
      if (gang__deadline_passed(deadline))
        break;
      gang__cond_wait_slice(&f->cv, &f->mu, deadline, 10000000);
    }
  }
  if (driving) {
    f->driving = false;
    pthread_cond_broadcast(&f->cv);
  }
  if (grp->remaining > 0 && f->failed == GANG_OK) {
    char pend[512], why[1024];
    describe_pending(x, n, pend, sizeof pend);
    snprintf(why, sizeof why,
             "%s on rank %d: deadline exceeded, still waiting for: %s", what,
             f->rank, pend);
    fail_locked(f, GANG_TIMEOUT, why);
  }
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

gang_status gang__fabric_run(gang__fabric *f, gang__xfer *x, int n,
                             int64_t deadline, const char *what) {
  gang__xgroup grp;
  GANG_CHECK(gang__fabric_start(f, x, n, &grp, what));
  return gang__fabric_wait(f, &grp, x, n, deadline, what);
}

/* ---- Setup --------------------------------------------------------------- */

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
  if ((int)h->rank >= f->size || (want_rank >= 0 && (int)h->rank != want_rank))
    return gang__error(GANG_PROTOCOL, "%s claims rank %u, expected %d", who,
                       h->rank, want_rank);
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
static gang_status tune_connection(const gang__fabric *f, conn *c, int fd) {
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
  GANG_INFO(TCP, "connection to %s: congestion control %s, %s, pieces of %zu",
            c->name, now, on_this_host(fd) ? "this host" : "another host",
            c->piece);
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

static gang_status split_hostport(const char *s, char *host, size_t cap,
                                  int *port) {
  const char *colon = strrchr(s, ':');
  if (colon == NULL || (size_t)(colon - s) >= cap)
    return gang__error(GANG_PROTOCOL, "bad peer address '%s' in the store", s);
  const char *h = s;
  size_t hl = (size_t)(colon - s);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = atoi(colon + 1);
  if (*port <= 0 || *port > 65535)
    return gang__error(GANG_PROTOCOL, "bad peer address '%s' in the store", s);
  return GANG_OK;
}

static gang_status connect_lower(gang__fabric *f,
                                 const gang__fabric_config *cfg,
                                 const uint8_t *token, int peer) {
  char key[64];
  snprintf(key, sizeof key, "fabric/addr/%d", peer);
  void *val = NULL;
  size_t vlen = 0;
  GANG_CHECK(gang_store_get(cfg->store, key, &val, &vlen));
  char host[256];
  int port = 0;
  gang_status st = split_hostport((char *)val, host, sizeof host, &port);
  gang_store_free(val);
  GANG_CHECK(st);
  conn *c = &f->conns[peer];
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
    hello_decode(b, &them);
    st = hello_check(f, &them, token, peer, c->name);
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

static gang_status accept_higher(gang__fabric *f,
                                 const gang__fabric_config *cfg,
                                 const uint8_t *token, int lfd, int count) {
  int got = 0;
  while (got < count) {
    struct pollfd pfd = {lfd, POLLIN, 0};
    int ms = gang__deadline_poll_ms(cfg->deadline);
    if (ms == 0)
      return gang__error(GANG_TIMEOUT,
                         "fabric setup: rank %d got %d of %d connections from "
                         "higher ranks before the deadline",
                         f->rank, got, count);
    if (poll(&pfd, 1, ms < 0 || ms > 1000 ? 1000 : ms) <= 0)
      continue;
    int fd = -1, err = 0;
    if (gang__sock_accept(lfd, &fd, &err) != GANG_OK)
      continue;
    uint8_t b[HELLO_LEN];
    char who[64];
    snprintf(who, sizeof who, "an incoming connection to rank %d", f->rank);
    /* A stranger gets a short time to say hello, so it cannot stall setup. */
    int64_t hd = gang__deadline_in_ms(5000);
    if (hd > cfg->deadline)
      hd = cfg->deadline;
    gang_status st = gang__sock_read_full(fd, b, HELLO_LEN, hd, -1, who);
    hello them;
    if (st == GANG_OK) {
      hello_decode(b, &them);
      st = hello_check(f, &them, token, -1, who);
    }
    if (st == GANG_OK &&
        ((int)them.rank <= f->rank || f->conns[them.rank].fd >= 0))
      st = gang__error(GANG_PROTOCOL, "%s claims rank %u twice or out of order",
                       who, them.rank);
    if (st != GANG_OK) {
      /* Refuse it and keep waiting for the real peers. */
      GANG_WARN(TCP, "refused a fabric connection: %s", gang_last_error());
      close(fd);
      continue;
    }
    hello me = {
        HELLO_MAGIC, HELLO_VERSION, (uint32_t)f->rank, (uint32_t)f->size, 0,
        {0}};
    memcpy(me.token, token, 16);
    hello_encode(&me, b);
    conn *c = &f->conns[them.rank];
    snprintf(c->name, sizeof c->name, "rank %u", them.rank);
    st = gang__sock_write_full(fd, b, HELLO_LEN, cfg->deadline, -1, c->name);
    if (st == GANG_OK)
      st = tune_connection(f, c, fd);
    if (st != GANG_OK) {
      close(fd);
      return st;
    }
    set_sockbuf(f, fd);
    c->fd = fd;
    got++;
  }
  return GANG_OK;
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

gang_status gang__fabric_create(const gang__fabric_config *cfg,
                                gang__fabric **out) {
  gang__fabric *f = calloc(1, sizeof *f);
  if (f == NULL)
    return gang__error(GANG_NO_MEMORY, "fabric: out of memory");
  f->rank = cfg->rank;
  f->size = cfg->size;
  f->wakefd = -1;
  pthread_mutex_init(&f->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&f->cv, &ca);
  pthread_condattr_destroy(&ca);
  f->conns = calloc((size_t)cfg->size, sizeof *f->conns);
  int lfd = -1;
  gang_status st = GANG_OK;
  if (f->conns == NULL) {
    st = gang__error(GANG_NO_MEMORY, "fabric: out of memory");
    goto fail;
  }
  for (int p = 0; p < cfg->size; p++) {
    f->conns[p].fd = -1;
    f->conns[p].peer = p;
    if (p != cfg->rank && (f->conns[p].stage = malloc(STAGE_CAP)) == NULL) {
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
  f->sockbuf = (int)sockbuf;
  GANG_CHECK_GOTO(cc_setting(f), st, fail);
  f->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (f->wakefd < 0) {
    st = gang__error_errno(GANG_SYSTEM, errno, "fabric: eventfd");
    goto fail;
  }
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
  for (int p = 0; f->conns && p < f->size; p++) {
    conn *c = &f->conns[p];
    if (c->fd >= 0) {
      if (!c->dead && f->failed == GANG_OK &&
          (c->sq_head == NULL || c->sq_head->off == 0)) {
        /* Say goodbye so the peer does not take our end-of-stream for a
         * crash; 32 bytes fit in any socket buffer that is not full, and a
         * full one means the peer is stuck anyway. */
        uint8_t h[HDR];
        encode_header(h, FRAME_BYE, 0, 0, 0, 0);
        (void)!send(c->fd, h, HDR, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      shutdown(c->fd, SHUT_WR);
      close(c->fd);
    }
    for (umsg *u = c->uq_head, *n; u; u = n) {
      n = u->next;
      free(u->data);
      free(u);
    }
    free(c->rabort);
    free(c->stage);
    for (spare *k = c->spares, *n; k; k = n) {
      n = k->next;
      free(k);
    }
  }
  free(f->conns);
  if (f->wakefd >= 0)
    close(f->wakefd);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}
