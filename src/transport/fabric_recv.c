/* The TCP fabric's receiving side (fabric_internal.h): reading frames,
 * matching them to posted receives or keeping them as early messages, and
 * what a peer's departure does to the transfers it owed. It uses the
 * sending and failure side (fabric.c), which never calls into it. Every
 * function runs under f->mu. */
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

static bool matches(const gang__xfer *x, uint64_t ctx, uint64_t seq,
                    uint32_t tag) {
  return x->ctx == ctx && x->seq == seq && x->tag == tag;
}

void gang__fabric_mismatch(gang__fabric *f, gang__fabric_conn *c,
                           const gang__xfer *x, uint64_t len) {
  char why[1024];
  snprintf(why, sizeof why,
           "%s sent %llu bytes for (ctx %llx, seq %llu, tag %u) but this "
           "rank expected %zu: the ranks disagree on the collective",
           c->name, (unsigned long long)len, (unsigned long long)x->ctx,
           (unsigned long long)x->seq, x->tag, x->len);
  gang__fabric_fail_locked(f, GANG_MISMATCH, why);
}

/* A buffer of at least len bytes for an early message on c (*cap: its
 * size): a kept one large enough, else a new one. NULL when out of
 * memory. */
static uint8_t *early_buf(gang__fabric_conn *c, size_t len, size_t *cap) {
  spare *k;
  SLIST_FOREACH(k, &c->spares, link) {
    if (k->cap < len)
      continue;
    SLIST_REMOVE(&c->spares, k, spare, link);
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
static void early_buf_free(gang__fabric_conn *c, uint8_t *p, size_t cap) {
  if (p == NULL)
    return;
  if (cap < SPARE_MIN || c->spare_count >= SPARE_COUNT ||
      c->spare_bytes + cap > SPARE_MAX) {
    free(p);
    return;
  }
  spare *k = (spare *)(void *)p;
  k->cap = cap;
  SLIST_INSERT_HEAD(&c->spares, k, link);
  c->spare_bytes += cap;
  c->spare_count++;
}

/* The early-message bound (GANG_TCP_EARLY_MAX): whether c may buffer len
 * more bytes. When it may not, c fails with NO_MEMORY naming the peer:
 * this rank needs a message behind what the peer sent ahead (holds_back
 * keeps a rank that needs nothing yet from getting here). */
static bool early_room(gang__fabric *f, gang__fabric_conn *c, size_t len) {
  if (c->early_bytes + len <= f->early_max)
    return true;
  char why[1024];
  snprintf(why, sizeof why,
           "%s sent %zu bytes of messages ahead of this rank's receives, and "
           "a %zu-byte one more would pass GANG_TCP_EARLY_MAX (%zu): this "
           "rank waits for a message behind them. Post receives in the order "
           "the peer sends, or raise GANG_TCP_EARLY_MAX",
           c->name, c->early_bytes, len, f->early_max);
  gang__fabric_fail_locked(f, GANG_NO_MEMORY, why);
  return false;
}

/* Whether the frame whose header is staged at h waits where it is: it
 * would be buffered as an early message past GANG_TCP_EARLY_MAX and no
 * receive is posted on c, so nothing is needed from this peer yet. Not
 * reading makes TCP hold the peer back. */
static bool holds_back(const gang__fabric *f, gang__fabric_conn *c,
                       const uint8_t *h) {
  uint64_t len = gang__get_u64(h + 24);
  c->held = gang__get_u32(h) == FRAME_DATA && len > 0 && len <= EAGER_MAX &&
            c->early_bytes + len > f->early_max && TAILQ_EMPTY(&c->posted) &&
            !c->hup;
  return c->held;
}

/* A header has arrived: find where its payload goes. */
static void on_header(gang__fabric *f, gang__fabric_conn *c) {
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
    c->bye_why = tag;
    c->bye_ns = gang__now_ns();
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
    gang__fabric_fail_locked(f, GANG_PROTOCOL, why);
    return;
  }
  c->rlen = (size_t)len;
  gang__xfer *x;
  TAILQ_FOREACH(x, &c->posted, link) {
    if (!matches(x, ctx, seq, tag))
      continue;
    if (x->len != len) {
      gang__fabric_mismatch(f, c, x, len);
      return;
    }
    TAILQ_REMOVE(&c->posted, x, link);
    x->linked = false;
    c->rx = x;
    return;
  }
  if (len > 0 && len <= EAGER_MAX && !early_room(f, c, (size_t)len))
    return;
  umsg *u = calloc(1, sizeof *u);
  if (u != NULL && len > 0 && len <= EAGER_MAX) {
    u->data = early_buf(c, (size_t)len, &u->cap);
    if (u->data != NULL)
      c->early_bytes += u->cap;
  }
  if (u == NULL || (len > 0 && len <= EAGER_MAX && u->data == NULL)) {
    free(u);
    snprintf(why, sizeof why,
             "cannot buffer a %llu-byte message from %s that arrived before "
             "its receive",
             (unsigned long long)len, c->name);
    gang__fabric_fail_locked(f, GANG_NO_MEMORY, why);
    return;
  }
  u->tag = tag;
  u->ctx = ctx;
  u->seq = seq;
  u->len = (size_t)len;
  TAILQ_INSERT_TAIL(&c->uq, u, link);
  c->rum = u;
}

void gang__fabric_deliver(gang__fabric *f, gang__fabric_conn *c, umsg *u,
                          gang__xfer *x) {
  if (x->len)
    memcpy(x->buf, u->data, x->len);
  TAILQ_REMOVE(&c->uq, u, link);
  c->early_bytes -= u->data != NULL ? u->cap : 0;
  early_buf_free(c, u->data, u->cap);
  free(u);
  gang__fabric_complete(f, x);
}

static void on_payload_done(gang__fabric *f, gang__fabric_conn *c) {
  c->in_payload = false;
  if (c->rkind == FRAME_ABORT) {
    char why[1024];
    snprintf(why, sizeof why, "%s aborted: %s", c->name,
             c->rabort ? (char *)c->rabort : "(no reason)");
    free(c->rabort);
    c->rabort = NULL;
    /* A peer that timed out, was aborted, disagreed or needed a rank that
     * had left passes that on; anything else (including a status we do
     * not know) means we lost it. */
    gang_status st = (c->rtag == GANG_TIMEOUT || c->rtag == GANG_ABORTED ||
                      c->rtag == GANG_MISMATCH || c->rtag == GANG_PEER_LEFT)
                         ? (gang_status)c->rtag
                         : GANG_PEER_LOST;
    gang__fabric_fail_locked(f, st, why);
    return;
  }
  if (c->rx != NULL) {
    gang__xfer *x = c->rx;
    c->rx = NULL;
    gang__fabric_complete(f, x);
  } else if (c->rum != NULL) {
    umsg *u = c->rum;
    c->rum = NULL;
    u->got = u->len;
    if (u->waiting != NULL)
      gang__fabric_deliver(f, c, u, u->waiting);
  }
}

/* Fails what this rank still expects from or owes to a peer that left. */
static bool owes(const gang__fabric_conn *c) {
  return !TAILQ_EMPTY(&c->sq) || !TAILQ_EMPTY(&c->posted) || c->rx != NULL ||
         c->in_payload;
}

/* When one peer died, others may have died with it (a host, or two groups
 * killed at once): the fabric is about to shut every connection, so look
 * now, without waiting, for those whose end of stream (or reset) is
 * already there and nothing before it. Best effort: one behind unread
 * bytes is not seen. */
static void note_others_lost(gang__fabric *f, int first) {
  f->lost = calloc((size_t)f->size, sizeof *f->lost);
  if (f->lost == NULL)
    return;
  f->lost[first] = true;
  for (int p = 0; p < f->size; p++) {
    gang__fabric_conn *c = &f->conns[p];
    if (p == f->rank || p == first || c->fd < 0 || c->dead || c->bye)
      continue;
    char b;
    ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE)))
      f->lost[p] = true;
  }
}

static void peer_closed(gang__fabric *f, gang__fabric_conn *c, int err) {
  char why[1024];
  if (c->bye) {
    /* An orderly departure. Only a transfer that needs this peer fails. */
    c->dead = true;
    if (owes(c)) {
      char left[400];
      gang__fabric_left_text(c, left, sizeof left);
      snprintf(why, sizeof why, "%s, while a transfer with it was pending",
               left);
      gang__fabric_fail_locked(f, GANG_PEER_LEFT, why);
    }
    return;
  }
  if (err == 0)
    snprintf(why, sizeof why, "%s closed the connection", c->name);
  else
    snprintf(why, sizeof why, "connection to %s failed: %s", c->name,
             strerror(err));
  if (f->failed == GANG_OK && f->lost_peer < 0) {
    f->lost_peer = c->peer;
    note_others_lost(f, c->peer);
  }
  gang__fabric_fail_locked(f, GANG_PEER_LOST, why);
}

/* A large early message waits in the socket (u->data == NULL) until:
 * its receive is posted (read straight into it), or this rank waits for
 * another message behind it on the same connection, or the peer hung up
 * (then it is buffered, so nothing can deadlock behind it). Returns whether
 * reading may go on. */
static bool resolve_deferred(gang__fabric *f, gang__fabric_conn *c) {
  umsg *u = c->rum;
  if (u->waiting != NULL) {
    gang__xfer *x = u->waiting;
    TAILQ_REMOVE(&c->uq, u, link);
    free(u);
    c->rum = NULL;
    c->rx = x;
    return true;
  }
  if (TAILQ_EMPTY(&c->posted) && !c->hup)
    return false;
  if (!early_room(f, c, u->len))
    return false;
  u->data = early_buf(c, u->len, &u->cap);
  if (u->data != NULL)
    c->early_bytes += u->cap;
  if (u->data == NULL) {
    char why[1024];
    snprintf(why, sizeof why,
             "cannot buffer a %zu-byte message from %s that arrived before "
             "its receive",
             u->len, c->name);
    gang__fabric_fail_locked(f, GANG_NO_MEMORY, why);
    return false;
  }
  return true;
}

bool gang__fabric_stalled(const gang__fabric_conn *c) {
  if (TAILQ_EMPTY(&c->posted) && !c->hup && c->held)
    return true;
  return c->in_payload && c->rum != NULL && c->rum->data == NULL &&
         c->rum->waiting == NULL && TAILQ_EMPTY(&c->posted) && !c->hup;
}

/* Where the current frame's next payload bytes go: the matched receive,
 * the unexpected message's buffer, the ABORT text, or NULL (an ABORT text
 * that could not be allocated: skipped). */
static uint8_t *payload_dst(gang__fabric_conn *c) {
  if (c->rx)
    return (uint8_t *)c->rx->buf + c->rgot;
  if (c->rum)
    return c->rum->data + c->rgot;
  return c->rabort ? c->rabort + c->rgot : NULL;
}

static void payload_got(gang__fabric_conn *c, size_t n) {
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
static ssize_t read_posted(gang__fabric *f, gang__fabric_conn *c, bool *done) {
  gang__xfer *x = TAILQ_FIRST(&c->posted);
  size_t head = gang__fabric_frame_head(FRAME_DATA, x->len);
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
  if (kind == FRAME_DATA && len == x->len &&
      gang__fabric_frame_head(kind, len) == head &&
      matches(x, gang__get_u64(h + 8), gang__get_u64(h + 16),
              gang__get_u32(h + 4))) {
    c->last_padded = head > HDR;
    memcpy(c->rhdr, h, HDR);
    on_header(f, c); /* x is the first posted receive it matches */
    payload_got(c, got - head);
    /* Stopping early must not let a send about to start skip a goodbye
     * behind this frame (push_sends checks for one before a frame's first
     * byte): with such a send queued, the pass reads on. */
    const gang__xfer *s = TAILQ_FIRST(&c->sq);
    *done = *done || (c->rgot == c->rlen && (s == NULL || s->off > 0));
  } else {
    memcpy(c->stage + head, x->buf, got - head);
    c->s_end = got;
    x->lost_bet = true; /* its frame is not next: no more bets on it */
  }
  return r;
}

/* Whether a read that returned r moved no bytes: nothing to read now
 * (EAGAIN), or the connection ended, which fails or closes it. */
static bool read_ended(gang__fabric *f, gang__fabric_conn *c, ssize_t r) {
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
void gang__fabric_pull(gang__fabric *f, gang__fabric_conn *c) {
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
      size_t head =
          gang__fabric_frame_head(gang__get_u32(h), gang__get_u64(h + 24));
      if (staged >= head && holds_back(f, c, h))
        return; /* a receive posted here, or the peer's end, reads on */
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
    const gang__xfer *first = TAILQ_FIRST(&c->posted);
    if (!c->in_payload && staged == 0 && first != NULL && first->owns_buf &&
        !first->lost_bet && first->len >= SCATTER_MIN) {
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
      bool big = c->last_padded || (first != NULL && first->len >= PAD_MIN);
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

void gang__fabric_conn_free(gang__fabric_conn *c) {
  umsg *u;
  while ((u = TAILQ_FIRST(&c->uq)) != NULL) {
    TAILQ_REMOVE(&c->uq, u, link);
    free(u->data);
    free(u);
  }
  spare *k;
  while ((k = SLIST_FIRST(&c->spares)) != NULL) {
    SLIST_REMOVE_HEAD(&c->spares, link);
    free(k);
  }
  free(c->rabort);
  free(c->stage);
}
