/* The TCP fabric's connections (fabric_internal.h): sending queued
 * transfers as frames, and failure: how the fabric fails and tells its
 * peers. Receiving is fabric_recv.c. Every function but the fabric.h calls
 * runs under f->mu. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "fabric_internal.h"

size_t gang__fabric_peer_piece(const gang__fabric *f, int peer) {
  return peer >= 0 && peer < f->size && peer != f->rank ? f->conns[peer].piece
                                                        : 0;
}

bool gang__fabric_peer_left(gang__fabric *f, int peer, char *why, size_t cap) {
  if (peer < 0 || peer >= f->size || peer == f->rank)
    return false;
  pthread_mutex_lock(&f->mu);
  const gang__fabric_conn *c = &f->conns[peer];
  bool left = c->bye && c->dead;
  if (left && why != NULL && cap > 0)
    gang__fabric_left_text(c, why, cap);
  pthread_mutex_unlock(&f->mu);
  return left;
}

int gang__fabric_lost_peers(gang__fabric *f, int *out, int cap) {
  pthread_mutex_lock(&f->mu);
  int n = 0;
  if (f->lost_peer >= 0 && n < cap)
    out[n++] = f->lost_peer;
  for (int p = 0; f->lost != NULL && p < f->size && n < cap; p++)
    if (f->lost[p] && p != f->lost_peer)
      out[n++] = p;
  pthread_mutex_unlock(&f->mu);
  return n;
}

void gang__fabric_note_lost(gang__fabric *f, int peer) {
  pthread_mutex_lock(&f->mu);
  if (f->lost_peer < 0 && peer >= 0 && peer < f->size && peer != f->rank)
    f->lost_peer = peer;
  pthread_mutex_unlock(&f->mu);
}

int gang__fabric_peer_fd(const gang__fabric *f, int peer) {
  if (peer < 0 || peer >= f->size || peer == f->rank)
    return -1;
  return f->conns[peer].fd;
}

/* ---- Failure ------------------------------------------------------------- */

void gang__fabric_complete(gang__fabric *f, gang__xfer *x) {
  (void)f;
  x->done = true;
  x->grp->remaining--;
}

void gang__fabric_abandon(gang__fabric *f, gang__xfer *x) {
  x->grp->failed = true;
  gang__fabric_complete(f, x);
}

/* Completes and forgets every transfer on q: they live on their callers'
 * stacks, which may be gone once they are complete. */
static void fail_queue(gang__fabric *f, struct xfer_queue *q) {
  gang__xfer *x;
  TAILQ_FOREACH(x, q, link) {
    x->linked = false;
    if (!x->done)
      gang__fabric_abandon(f, x);
  }
  TAILQ_INIT(q);
}

/* How long a failing rank may spend, over all its peers, finishing a
 * frame it had half written and writing its reason: a peer that reads
 * learns why; one that does not (stopped, or failing too) costs at most
 * this once. */
#define FAIL_WRITE_MS 100

/* Writes iov[0..n) whole before `deadline` (waiting for room in the
 * socket); false if it could not. Advances the iovecs. */
static bool write_by(int fd, struct iovec *iov, int n, int64_t deadline) {
  while (n > 0) {
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return false;
    if (w < 0) {
      struct pollfd pf = {fd, POLLOUT, 0};
      int ms = gang__deadline_poll_ms(deadline);
      if (ms == 0 || (poll(&pf, 1, ms) < 0 && errno != EINTR))
        return false;
      continue;
    }
    size_t left = (size_t)w;
    while (n > 0 && left >= iov[0].iov_len) {
      left -= iov[0].iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov[0].iov_base = (uint8_t *)iov[0].iov_base + left;
      iov[0].iov_len -= left;
    }
  }
  return true;
}

/* The bytes of x's DATA frame on c from x->off up to frame offset `lim`
 * (at least its head): what is left of the head (c->shdr) and of the
 * payload. Returns how many iovecs it filled. */
static int frame_iov(gang__fabric_conn *c, const gang__xfer *x, size_t lim,
                     struct iovec iov[2]) {
  size_t head = gang__fabric_frame_head(FRAME_DATA, x->len);
  int n = 0;
  if (x->off < head)
    iov[n++] = (struct iovec){c->shdr + x->off, head - x->off};
  size_t poff = x->off > head ? x->off - head : 0;
  if (lim - head > poff)
    iov[n++] = (struct iovec){(uint8_t *)x->buf + poff, lim - head - poff};
  return n;
}

/* Finishes the DATA frame x had half written to c, so that a reason can
 * follow it on the stream; false if the peer did not take it in time.
 * x's buffer is still the caller's: x has not completed. */
static bool finish_frame(gang__fabric_conn *c, gang__xfer *x,
                         int64_t deadline) {
  struct iovec iov[2];
  int n = frame_iov(c, x, gang__fabric_frame_head(FRAME_DATA, x->len) + x->len,
                    iov);
  return write_by(c->fd, iov, n, deadline);
}

/* Ends every connection: writes the frame msg[0..n) to each live peer,
 * after the frame being written to it if one is half written (msg cannot
 * go in the middle of it), best effort within FAIL_WRITE_MS for all peers
 * (a peer that did not take it learns from the closed connection); then
 * shuts the connection down `how` and completes every transfer on it. */
static void end_conns(gang__fabric *f, const struct iovec *msg, int n,
                      int how) {
  int64_t deadline = gang__deadline_in_ms(FAIL_WRITE_MS);
  for (int p = 0; p < f->size; p++) {
    gang__fabric_conn *c = &f->conns[p];
    if (p == f->rank || c->fd < 0)
      continue;
    gang__xfer *h = TAILQ_FIRST(&c->sq);
    if (!c->dead &&
        (h == NULL || h->off == 0 || finish_frame(c, h, deadline))) {
      struct iovec iov[2] = {msg[0], n > 1 ? msg[1] : msg[0]};
      (void)write_by(c->fd, iov, n, deadline);
    }
    shutdown(c->fd, how);
    c->dead = true;
    fail_queue(f, &c->sq);
    fail_queue(f, &c->posted);
    if (c->rx != NULL && !c->rx->done)
      gang__fabric_abandon(f, c->rx);
    umsg *u;
    TAILQ_FOREACH(u, &c->uq, link) {
      if (u->waiting && !u->waiting->done)
        gang__fabric_abandon(f, u->waiting);
      u->waiting = NULL;
    }
    c->rx = NULL;
  }
  uint64_t one = 1;
  (void)!write(f->wakefd, &one, sizeof one);
  pthread_cond_broadcast(&f->cv);
}

void gang__fabric_fail_locked(gang__fabric *f, gang_status st,
                              const char *reason) {
  if (f->failed != GANG_OK)
    return;
  f->failed = st;
  snprintf(f->fail_detail, sizeof f->fail_detail, "%s", reason);
  GANG_INFO(TCP, "fabric failed (%s): %s", gang_status_name(st), reason);
  char text[512];
  int tl = snprintf(text, sizeof text, "rank %d: %s", f->rank, reason);
  if (tl < 0 || tl >= (int)sizeof text)
    tl = (int)sizeof text - 1;
  /* Tell each peer why; it fails with the same status. */
  uint8_t hd[HDR];
  memset(hd, 0, sizeof hd);
  gang__put_u32(hd, FRAME_ABORT);
  gang__put_u32(hd + 4, (uint32_t)st);
  gang__put_u64(hd + 24, (uint64_t)tl);
  struct iovec msg[2] = {{hd, HDR}, {text, (size_t)tl}};
  end_conns(f, msg, 2, SHUT_RDWR);
  if (f->fail_hook != NULL)
    f->fail_hook(f->fail_arg, st, text);
}

bool gang__fabric_leave(gang__fabric *f, gang__fabric_leave_why why) {
  pthread_mutex_lock(&f->mu);
  bool healthy = f->failed == GANG_OK;
  if (healthy) {
    f->failed = GANG_ABORTED;
    snprintf(f->fail_detail, sizeof f->fail_detail,
             "rank %d is leaving its world (%s): its gangs can no longer be "
             "used",
             f->rank,
             why == GANG__LEAVE_EXIT ? "its process is exiting"
                                     : "its gang was destroyed");
    GANG_INFO(TCP, "fabric rank %d leaves (%s)", f->rank,
              why == GANG__LEAVE_EXIT ? "process exit" : "destroyed");
    uint8_t hd[HDR];
    gang__fabric_encode_header(hd, FRAME_BYE, (uint32_t)why, 0, 0, 0);
    struct iovec msg[1] = {{hd, HDR}};
    /* Write side only: a peer still sending to this rank is not reset,
     * and the store's host reads on while it lingers. */
    end_conns(f, msg, 1, SHUT_WR);
  }
  pthread_mutex_unlock(&f->mu);
  return healthy;
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

void gang__fabric_fail(gang__fabric *f, gang_status st, const char *reason) {
  pthread_mutex_lock(&f->mu);
  gang__fabric_fail_locked(f, st, reason);
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

void gang__fabric_left_text(const gang__fabric_conn *c, char *buf, size_t cap) {
  const char *how = c->bye_why == GANG__LEAVE_EXIT      ? "process exit"
                    : c->bye_why == GANG__LEAVE_DESTROY ? "destroyed its gang"
                                                        : "said goodbye";
  double ago = (double)(gang__now_ns() - c->bye_ns) / 1e9;
  snprintf(buf, cap, "%s left (%s) %.3f s ago", c->name, how, ago);
}

void gang__fabric_left_before(gang__fabric *f, gang__fabric_conn *c) {
  char left[400], why[1024];
  gang__fabric_left_text(c, left, sizeof left);
  snprintf(why, sizeof why, "%s, before this transfer", left);
  gang__fabric_fail_locked(f, GANG_PEER_LEFT, why);
}

/* ---- Sending ------------------------------------------------------------- */

size_t gang__fabric_frame_head(uint32_t kind, uint64_t len) {
  return kind == FRAME_DATA && len >= PAD_MIN && len <= MAX_FRAME ? HDR + PAD
                                                                  : HDR;
}

void gang__fabric_encode_header(uint8_t *h, uint32_t kind, uint32_t tag,
                                uint64_t ctx, uint64_t seq, uint64_t len) {
  gang__put_u32(h, kind);
  gang__put_u32(h + 4, tag);
  gang__put_u64(h + 8, ctx);
  gang__put_u64(h + 16, seq);
  gang__put_u64(h + 24, len);
}

/* Payload bytes that have arrived for receive x. */
static size_t arrived(gang__fabric *f, const gang__xfer *x) {
  if (x->done)
    return x->len;
  gang__fabric_conn *c = &f->conns[x->peer];
  if (c->rx == x)
    return c->rgot;
  umsg *u;
  TAILQ_FOREACH(u, &c->uq, link)
  if (u->waiting == x)
    return u->got;
  return 0;
}

/* How far into its frame (header included) send x, the head of its
 * connection's queue, may go now: to the end, or, when paced, one piece
 * beyond the pieces of its receive that have fully arrived, and one more
 * for every GANG__PACE_RTT_US of the connection's round trip. Lockstep
 * pays where the round trip is short (loopback, a veth pair: a few
 * microseconds); across a real round trip, one piece per one-way delay
 * would cap the rate (128 KiB per 500 us is 0.26 GB/s), so the send may
 * run a round trip's worth of pieces ahead (docs/fabric.md).
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
size_t gang__fabric_send_limit(gang__fabric *f, const gang__xfer *x) {
  size_t head = gang__fabric_frame_head(FRAME_DATA, x->len);
  size_t end = head + x->len;
  size_t piece = f->conns[x->peer].piece;
  if (x->pace == NULL || piece == 0 || TAILQ_NEXT(x, link) != NULL)
    return end;
  size_t got = arrived(f, x->pace);
  if (got >= x->pace->len)
    return end;
  size_t ahead = 1 + f->conns[x->peer].rtt_us / GANG__PACE_RTT_US;
  size_t lim = head + (got / piece + ahead) * piece;
  return lim < end ? lim : end;
}

/* Under f->mu. */
void gang__fabric_push_sends(gang__fabric *f, gang__fabric_conn *c) {
  gang__xfer *x = TAILQ_FIRST(&c->sq);
  if (x != NULL && c->bye && x->off == 0) {
    /* Its goodbye was read (maybe before its end of stream): a frame
     * written now would vanish unread. */
    gang__fabric_left_before(f, c);
    return;
  }
  while ((x = TAILQ_FIRST(&c->sq)) != NULL && !c->dead) {
    /* A paced send longer than a piece learns the connection's round
     * trip as it starts: the least the kernel has seen so far, which a
     * busy machine's late acks do not raise. */
    if (x->off == 0 && x->pace != NULL && c->piece != 0 && x->len > c->piece)
      c->rtt_us = gang__tcp_min_rtt_us(c->fd);
    size_t lim = gang__fabric_send_limit(f, x);
    if (x->off >= lim)
      return; /* paced: waits for the peer's next piece */
    if (x->off == 0)
      gang__fabric_encode_header(c->shdr, FRAME_DATA, x->tag, x->ctx, x->seq,
                                 x->len);
    size_t head = gang__fabric_frame_head(FRAME_DATA, x->len);
    struct iovec iov[2];
    int n = frame_iov(c, x, lim, iov);
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return;
      int e = errno;
      if (c->bye && (e == EPIPE || e == ECONNRESET)) {
        /* It left, and its process is gone with unread bytes: the reset
         * says nothing its goodbye did not. */
        gang__fabric_left_before(f, c);
        return;
      }
      char why[1024];
      snprintf(why, sizeof why, "sending to %s: %s", c->name, strerror(e));
      if ((e == EPIPE || e == ECONNRESET) && f->failed == GANG_OK &&
          f->lost_peer < 0)
        f->lost_peer = c->peer;
      gang__fabric_fail_locked(
          f, e == EPIPE || e == ECONNRESET ? GANG_PEER_LOST : GANG_SYSTEM, why);
      return;
    }
    x->off += (size_t)w;
    f->moved++;
    if (x->off < lim)
      return; /* socket full */
    if (x->off < head + x->len)
      continue; /* paced: the limit may have moved on since */
    TAILQ_REMOVE(&c->sq, x, link);
    x->linked = false;
    gang__fabric_complete(f, x);
  }
}
