/* Fuzz target for the fabric's peer-facing bytes (src/transport): what a
 * peer writes on a connection, read and matched by the real engine, and the
 * hello a connection opens with. The first input byte picks a mode (bit 0):
 *
 *   0: a rank-0 fabric of two ranks whose connection to rank 1 is one end
 *      of a socketpair (gang__fabric_create_connected); the rest of the
 *      input is a script of operations, each a byte (op % 8) and its
 *      arguments:
 *        0 WRITE n:u16 bytes[n]   the peer writes these bytes
 *        1 FILL n:u16 v:u8        the peer writes 8n bytes of a pattern
 *                                 from v (payloads larger than inputs)
 *        2 RECV tag ctx seq l     a receive is posted; l: bits 0-3 pick its
 *                                 length from `lens`, bit 4 owns_buf
 *        3 SEND tag l             a send is posted; l as for RECV, bit 4:
 *                                 paced by the last receive posted
 *        4 PULL                   a progress pass (gang__fabric_poke)
 *        5 CANCEL i               transfer i % count is withdrawn
 *        6 SHUT                   the peer shuts its end for writing, and
 *                                 the fabric is told it hung up (as poll)
 *        7 DRAIN                  the peer reads what the fabric sent it
 *      Bits 1-2 of the first byte pick GANG_TCP_EARLY_MAX, bits 3-4 the
 *      pacing piece, bit 5 closes the peer's end before the last pass.
 *      A pass follows every write the socket has no room for, so a peer
 *      that writes more than the fabric reads is held back as TCP holds it.
 *   1: [rank][size][want][connected mask][hello: 40 bytes], checked as
 *      setup checks a peer's hello (hello_accept) by a fabric of that size
 *      in which the peers of the mask are connected already.
 *
 * Besides crashes, leaks and sanitizer reports it checks what the fabric
 * promises a peer cannot break: the fabric fails only with a status a
 * peer's bytes can cause; every transfer completes when the fabric fails
 * or is withdrawn; each receive that completed while the fabric was
 * healthy holds exactly the payload of the frame it matched (the n-th
 * receive of a (tag, ctx, seq) gets the n-th such frame of the stream,
 * checked in scripts without CANCEL); a receive that does not own its
 * buffer keeps it untouched until its frame comes; the early-message
 * and kept-buffer counts add up; and a hello is accepted only when every
 * field is right. Built with libFuzzer (fuzz/CMakeLists.txt) and
 * replayed from fuzz/corpus/fuzz_fabric_frame in every build. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bytes.h"
#include "gang/status.h"

/* The code under test is compiled into this file, as fuzz_store_frame.c
 * does with the store's, so that the hello's static functions are in
 * reach. These definitions take precedence over the archive's, whose
 * fabric objects are then not linked. */
#include "../src/transport/fabric.c"
#include "../src/transport/fabric_engine.c"
#include "../src/transport/fabric_setup.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_X 16
#define WRITE_MAX ((size_t)512 << 10) /* bytes a peer writes per input */
#define UNTOUCHED 0xa5

static const size_t lens[16] = {0,     1,     7,      32,    100,   2047,
                                2048,  4096,  8192,   32767, 32768, 65535,
                                65536, 65537, 100000, 300001};
static const size_t early_maxes[4] = {EAGER_MAX, 128 << 10, 1 << 20, 0};
static const size_t pieces[4] = {0, 1000, 4096, 65536};
static const uint8_t token[16] = "gang fuzz token";

typedef struct run {
  gang__fabric *f;
  int peer;      /* rank 1's end; -1 once closed */
  bool shut;     /* ... shut for writing */
  uint8_t *sent; /* every byte the peer wrote, in order */
  size_t nsent;
  gang__xfer x[MAX_X];
  gang__xgroup grp[MAX_X];
  int nx;
  bool registered[MAX_X];
  bool good[MAX_X]; /* completed while the fabric was healthy */
  bool seen[MAX_X]; /* completion noted */
  bool cancelled;   /* a CANCEL ran: matching order is no longer known */
  int last_recv;    /* index of the last receive posted, -1: none */
} run;

static void pull(run *r) { (void)gang__fabric_poke(r->f); }

/* The statuses a peer's bytes or departure may fail the fabric with. */
static void check_status(run *r) {
  char detail[1024];
  gang_status st = gang__fabric_status(r->f, detail, sizeof detail);
  switch (st) {
  case GANG_OK:
    break;
  case GANG_PEER_LOST:
  case GANG_PEER_LEFT:
  case GANG_TIMEOUT:
  case GANG_ABORTED:
  case GANG_MISMATCH:
  case GANG_PROTOCOL:
  case GANG_NO_MEMORY:
    if (detail[0] == '\0')
      abort(); /* a failure must say why */
    break;
  default:
    abort();
  }
  /* Note the receives that completed since the last look: while the
   * fabric is healthy, a completion is a delivery. */
  for (int i = 0; i < r->nx; i++) {
    if (r->seen[i] || !r->x[i].done)
      continue;
    r->seen[i] = true;
    r->good[i] = st == GANG_OK && !r->x[i].send;
  }
}

/* The peer writes p[0..n): as much as the socket takes, a progress pass
 * whenever it is full, and gives up on the rest when a pass made no room
 * (the fabric does not want those bytes yet). */
static void peer_write(run *r, const uint8_t *p, size_t n) {
  if (r->peer < 0 || r->shut)
    return;
  if (n > WRITE_MAX - r->nsent)
    n = WRITE_MAX - r->nsent;
  bool stalled = false;
  while (n > 0) {
    ssize_t w = send(r->peer, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      memcpy(r->sent + r->nsent, p, (size_t)w);
      r->nsent += (size_t)w;
      p += w;
      n -= (size_t)w;
      stalled = false;
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !stalled) {
      pull(r);
      stalled = true;
      continue;
    }
    return; /* held back, or the fabric closed its end */
  }
}

/* Writes n bytes of a pattern that repeats every 251 bytes, from its
 * v-th byte on, so a payload delivered at the wrong offset does not
 * compare equal. The pattern is made once: a loop over every byte here
 * would cost more than the fabric's work (each comparison is traced). */
static void peer_fill(run *r, size_t n, uint8_t v) {
  enum { CHUNK = 64 << 10 };
  static uint8_t pattern[CHUNK + 256];
  if (pattern[1] == 0)
    for (size_t k = 0; k < sizeof pattern; k++)
      pattern[k] = (uint8_t)(k % 251 + 1);
  while (n > 0 && r->peer >= 0 && !r->shut && r->nsent < WRITE_MAX) {
    size_t k = n < CHUNK ? n : CHUNK;
    size_t before = r->nsent;
    peer_write(r, pattern + v, k);
    if (r->nsent - before < k)
      return; /* held back */
    n -= k;
  }
}

static void peer_drain(run *r) {
  static uint8_t sink[64 << 10];
  while (r->peer >= 0 && recv(r->peer, sink, sizeof sink, MSG_DONTWAIT) > 0)
    ;
}

static void post(run *r, bool send, uint32_t tag, uint64_t ctx, uint64_t seq,
                 uint8_t l) {
  if (r->nx == MAX_X)
    return;
  int i = r->nx;
  gang__xfer *x = &r->x[i];
  size_t len = lens[l & 15];
  uint8_t *buf = malloc(len ? len : 1);
  if (buf == NULL)
    return;
  memset(buf, send ? 0x5a : UNTOUCHED, len ? len : 1);
  *x = (gang__xfer){.peer = 1,
                    .send = send,
                    .tag = tag,
                    .ctx = ctx,
                    .seq = seq,
                    .buf = buf,
                    .len = len,
                    .owns_buf = !send && (l & 16)};
  if (send && (l & 16) && r->last_recv >= 0)
    x->pace = &r->x[r->last_recv];
  r->nx++;
  if (gang__fabric_start(r->f, x, 1, &r->grp[i], "fuzz") != GANG_OK) {
    /* Not registered (the fabric had failed, or failed on it): nothing
     * of the fabric refers to it. */
    r->seen[i] = true;
    return;
  }
  r->registered[i] = true;
  if (!send)
    r->last_recv = i;
}

/* Whether receive x is being filled or waits on an early message that is
 * (it may hold part of its frame). */
static bool in_flight(gang__fabric_conn *c, const gang__xfer *x) {
  if (c->rx == x)
    return true;
  umsg *u;
  TAILQ_FOREACH(u, &c->uq, link)
  if (u->waiting == x)
    return true;
  return false;
}

/* The peer's stream as the fabric reads it, up to its first frame that
 * fails the fabric or is incomplete: the payload (offset into sent, or -1
 * when it did not all arrive) of the n-th DATA frame with x's key. */
static long nth_payload(const run *r, const gang__xfer *x, int n,
                        uint64_t *len) {
  size_t pos = 0;
  while (r->nsent - pos >= HDR) {
    const uint8_t *h = r->sent + pos;
    uint32_t kind = gang__get_u32(h);
    uint64_t l = gang__get_u64(h + 24);
    if (kind == FRAME_BYE && l == 0) {
      pos += HDR;
      continue;
    }
    if (kind != FRAME_DATA || l > MAX_FRAME)
      return -1;
    size_t head = gang__fabric_frame_head(kind, l);
    bool whole = r->nsent - pos >= head && r->nsent - pos - head >= l;
    if (gang__get_u32(h + 4) == x->tag && gang__get_u64(h + 8) == x->ctx &&
        gang__get_u64(h + 16) == x->seq && n-- == 0) {
      *len = l;
      return whole ? (long)(pos + head) : -1;
    }
    if (!whole)
      return -1;
    pos += head + (size_t)l;
  }
  return -1;
}

/* The checks of a finished script, before anything is withdrawn. */
static void check_end(run *r) {
  gang__fabric *f = r->f;
  gang__fabric_conn *c = &f->conns[1];
  /* Delivered receives hold their frame's payload, in matching order. */
  for (int i = 0; i < r->nx && !r->cancelled; i++) {
    const gang__xfer *x = &r->x[i];
    if (!r->good[i])
      continue;
    int n = 0;
    for (int j = 0; j < i; j++)
      n += r->good[j] && r->x[j].tag == x->tag && r->x[j].ctx == x->ctx &&
           r->x[j].seq == x->seq;
    uint64_t len = 0;
    long off = nth_payload(r, x, n, &len);
    if (off < 0 || len != x->len ||
        (x->len && memcmp(x->buf, r->sent + off, x->len) != 0))
      abort(); /* a receive got bytes that are not its frame's */
  }
  /* A receive that does not own its buffer is not written before its
   * frame comes (bets are placed only on owned buffers). */
  for (int i = 0; i < r->nx; i++) {
    const gang__xfer *x = &r->x[i];
    if (x->send || x->owns_buf || x->done || in_flight(c, x))
      continue;
    static uint8_t untouched[4096];
    memset(untouched, UNTOUCHED, sizeof untouched);
    for (size_t k = 0; k < x->len; k += sizeof untouched) {
      size_t m = x->len - k < sizeof untouched ? x->len - k : sizeof untouched;
      if (memcmp((const uint8_t *)x->buf + k, untouched, m) != 0)
        abort();
    }
  }
  /* The counts of early messages and kept buffers add up. */
  size_t early = 0, spare_bytes = 0;
  int spare_count = 0;
  umsg *u;
  TAILQ_FOREACH(u, &c->uq, link)
  early += u->data != NULL ? u->cap : 0;
  spare *k;
  SLIST_FOREACH(k, &c->spares, link) {
    spare_bytes += k->cap;
    spare_count++;
  }
  if (early != c->early_bytes || early > f->early_max + SPARE_MAX ||
      spare_bytes != c->spare_bytes || spare_count != c->spare_count ||
      spare_bytes > SPARE_MAX || spare_count > SPARE_COUNT ||
      c->s_off > c->s_end || c->s_end > STAGE_CAP)
    abort();
}

#ifdef GANG_FUZZ_TRACE
#include <stdio.h>
/* With -DGANG_FUZZ_TRACE, each script's outcome is printed: what a new
 * seed does is then seen, not guessed. */
static void trace(run *r) {
  char detail[1024];
  gang_status st = gang__fabric_status(r->f, detail, sizeof detail);
  gang__fabric_conn *c = &r->f->conns[1];
  fprintf(stderr, "  %s%s%s; %zu bytes written, %zu early, stage %zu-%zu%s\n",
          gang_status_name(st), st ? ": " : "", st ? detail : "", r->nsent,
          c->early_bytes, c->s_off, c->s_end, c->held ? ", held" : "");
  for (int i = 0; i < r->nx; i++)
    fprintf(stderr, "  %s tag %u len %zu: %s%s%s\n",
            r->x[i].send ? "send" : "recv", r->x[i].tag, r->x[i].len,
            !r->registered[i] ? "not registered"
            : r->x[i].done    ? "done"
                              : "pending",
            r->good[i] ? ", delivered" : "",
            r->x[i].lost_bet ? ", lost a bet" : "");
}
#endif

static void run_stream(uint8_t opts, const uint8_t *p, size_t n) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    abort(); /* out of descriptors: an earlier input leaked some */
  int fds[2] = {-1, sv[0]};
  static uint8_t sent[WRITE_MAX]; /* static: no page faults per input */
  run r;
  memset(&r, 0, sizeof r);
  r.sent = sent;
  r.peer = sv[1];
  r.last_recv = -1;
  if (gang__fabric_create_connected(0, 2, fds, &r.f) != GANG_OK) {
    close(sv[1]);
    return;
  }
  /* The settings, as the input picks them instead of the environment. */
  if (early_maxes[(opts >> 1) & 3] != 0)
    r.f->early_max = early_maxes[(opts >> 1) & 3];
  r.f->conns[1].piece = pieces[(opts >> 3) & 3];

  while (n > 0) {
    uint8_t op = p[0] % 8;
    const uint8_t *a = p + 1; /* arguments */
    size_t na = n - 1;
    size_t used = 1;
    switch (op) {
    case 0: { /* WRITE */
      size_t len = na >= 2 ? gang__get_u16(a) : 0;
      size_t avail = na >= 2 ? na - 2 : 0;
      if (len > avail)
        len = avail;
      peer_write(&r, a + 2, len);
      used += (na >= 2 ? 2 : na) + len;
      break;
    }
    case 1: /* FILL */
      if (na >= 3)
        peer_fill(&r, (size_t)gang__get_u16(a) * 8, a[2]);
      used += na >= 3 ? 3 : na;
      break;
    case 2: /* RECV */
      if (na >= 4)
        post(&r, false, a[0], a[1], a[2], a[3]);
      used += na >= 4 ? 4 : na;
      break;
    case 3: /* SEND */
      if (na >= 2)
        post(&r, true, a[0], 1, 1, a[1]);
      used += na >= 2 ? 2 : na;
      break;
    case 4: /* PULL */
      pull(&r);
      break;
    case 5: /* CANCEL */
      if (na >= 1 && r.nx > 0) {
        int i = a[0] % r.nx;
        gang__xfer *x = &r.x[i];
        if (!x->done) {
          r.cancelled = true;
          r.seen[i] = true; /* withdrawn, not delivered */
        }
        gang__fabric_cancel(r.f, x, 1, "fuzz: withdrawn");
      }
      used += na >= 1 ? 1 : 0;
      break;
    case 6: /* SHUT */
      if (r.peer >= 0 && !r.shut) {
        shutdown(r.peer, SHUT_WR);
        r.shut = true;
        pthread_mutex_lock(&r.f->mu);
        r.f->conns[1].hup = true; /* what poll() would have seen */
        pthread_mutex_unlock(&r.f->mu);
      }
      break;
    case 7: /* DRAIN */
      peer_drain(&r);
      break;
    }
    check_status(&r);
    p += used;
    n -= used;
  }
  if ((opts & 32) && r.peer >= 0) {
    close(r.peer);
    r.peer = -1;
    r.f->conns[1].hup = true;
  }
  pull(&r);
  check_status(&r);
  check_end(&r);
#ifdef GANG_FUZZ_TRACE
  trace(&r);
#endif

  /* Every transfer is done once withdrawn (or failed), and only then may
   * the fabric go. */
  for (int i = 0; i < r.nx; i++)
    if (r.registered[i] && !r.x[i].done)
      gang__fabric_cancel(r.f, &r.x[i], 1, "fuzz: the end");
  for (int i = 0; i < r.nx; i++)
    if (r.registered[i] &&
        (!r.x[i].done || r.x[i].linked || r.grp[i].remaining != 0))
      abort();
  gang__fabric_destroy(r.f);
  if (r.peer >= 0)
    close(r.peer);
  for (int i = 0; i < r.nx; i++)
    free(r.x[i].buf);
}

static void run_hello(const uint8_t *p, size_t n) {
  if (n < 4 + HELLO_LEN)
    return;
  int size = 1 + p[1] % 8;
  int rank = p[0] % size;
  int want = p[2] % (size + 1) - 1;
  int fds[8];
  for (int i = 0; i < 8; i++)
    fds[i] = -1;
  gang__fabric *f = NULL;
  if (gang__fabric_create_connected(rank, size, fds, &f) != GANG_OK)
    return;
  /* Peers of the mask count as connected; only fd >= 0 is looked at, and
   * the fds are unset again before the fabric is destroyed. */
  for (int i = 0; i < size; i++)
    if (i != rank && ((p[3] >> i) & 1))
      f->conns[i].fd = f->wakefd;
  const uint8_t *b = p + 4;
  hello them = {0};
  gang_status st = hello_accept(f, b, token, want, "the fuzzer", &them);
  uint8_t back[HELLO_LEN];
  hello_encode(&them, back);
  if (memcmp(back, b, 20) != 0 || gang__get_u32(back + 20) != 0 ||
      memcmp(back + 24, b + 24, HELLO_LEN - 24) != 0)
    abort(); /* the hello does not round-trip */
  if (st == GANG_OK) {
    if (them.magic != HELLO_MAGIC || them.version != HELLO_VERSION ||
        memcmp(them.token, token, 16) != 0 || (int)them.size != size ||
        them.rank >= (uint32_t)size || (want >= 0 && (int)them.rank != want) ||
        (want < 0 && ((int)them.rank <= rank || f->conns[them.rank].fd >= 0)))
      abort(); /* accepted a hello setup must refuse */
  } else if ((st != GANG_PROTOCOL && st != GANG_AUTH && st != GANG_MISMATCH) ||
             gang_last_error()[0] == '\0') {
    abort();
  }
#ifdef GANG_FUZZ_TRACE
  fprintf(stderr, "  %s%s%s\n", gang_status_name(st), st ? ": " : "",
          st ? gang_last_error() : "");
#endif
  for (int i = 0; i < size; i++)
    if (i != rank)
      f->conns[i].fd = -1;
  gang__fabric_destroy(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  if (data[0] & 1)
    run_hello(data + 1, size - 1);
  else
    run_stream(data[0], data + 1, size - 1);
  return 0;
}
