/* The TCP fabric's parts, shared by its files, which call one way:
 * fabric_engine.c and fabric_setup.c use fabric_recv.c and fabric.c,
 * fabric_recv.c uses fabric.c, never the reverse.
 *
 *   fabric.c         connections: framing, sending queued transfers;
 *                    failure (the fabric fails, tells its peers, completes
 *                    every transfer)
 *   fabric_recv.c    reading frames and matching them to receives or
 *                    keeping them early; a peer's departure
 *   fabric_engine.c  registration of transfers, the progress pass and the
 *                    wait loop: the calls of fabric.h that move bytes
 *   fabric_setup.c   connecting the world (hello, connect and accept, TCP
 *                    tuning) and tearing it down
 *
 * Frame: a 32-byte little-endian header then the payload; a DATA frame of
 * PAD_MIN bytes or more has PAD zero bytes between the two (frame_head).
 *   u32 kind   FRAME_DATA, FRAME_ABORT, or FRAME_BYE (the peer left
 *              normally: its end-of-stream is not a failure)
 *   u32 tag    (ABORT: the sender's failure status; BYE: why it left, a
 *              gang__fabric_leave_why)
 *   u64 ctx
 *   u64 seq
 *   u64 len    payload bytes (ABORT: the reason text)
 *
 * Locking: one mutex guards all engine state. The thread that drives I/O
 * ("driver") holds it during non-blocking syscalls and releases it only
 * while it sleeps in poll(); other waiters sleep on a condition variable and
 * take over driving when the driver's own transfers are done. Every
 * function here but the setup ones is called with f->mu held. */
#ifndef GANG_TRANSPORT_FABRIC_INTERNAL_H
#define GANG_TRANSPORT_FABRIC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "fabric.h"

#define HDR 32
/* A DATA frame of PAD_MIN payload bytes or more carries PAD zero bytes
 * between its header and its payload (frame_head), so its header takes
 * FRAME_PAGE bytes of the stream and its payload keeps the stream's page
 * alignment: over loopback the sender's kernel copies a payload that
 * does not start on a page of the stream markedly slower (figures in
 * docs/performance.md). */
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
  SLIST_ENTRY(spare) link;
  size_t cap;
} spare;

/* A message that arrived before its receive was posted. */
typedef struct umsg {
  TAILQ_ENTRY(umsg) link;
  uint32_t tag;
  uint64_t ctx, seq;
  size_t len, got;
  uint8_t *data;
  size_t cap;          /* bytes allocated at data (early_buf) */
  gang__xfer *waiting; /* a receive posted while the payload was arriving */
} umsg;

TAILQ_HEAD(xfer_queue, gang__xfer);
TAILQ_HEAD(umsg_queue, umsg);
SLIST_HEAD(spare_list, spare);

typedef struct gang__fabric_conn {
  int fd;
  int peer;
  char name[300];
  bool dead;
  bool bye;         /* the peer said goodbye: its EOF is expected */
  uint32_t bye_why; /* ... why it left (gang__fabric_leave_why) */
  int64_t bye_ns;   /* ... and when its goodbye was read */
  bool ended;       /* gang__fabric_drain saw its end of the connection close */
  size_t piece;     /* pacing of its exchanges (send_limit), 0: none */
  uint32_t rtt_us;  /* least round trip the kernel measured, 0: unknown */
  bool hup; /* poll saw the peer hang up: read on to its end of stream */
  /* sending: FIFO of registered sends; the head's header is in shdr */
  struct xfer_queue sq;
  uint8_t shdr[HDR + PAD]; /* the pad stays zero */
  /* receiving: bytes read but not yet consumed are stage[s_off, s_end) */
  uint8_t *stage;
  size_t s_off, s_end;
  uint8_t rhdr[HDR];
  bool in_payload;
  uint32_t rkind;
  uint32_t rtag;
  size_t rlen, rgot;
  gang__xfer *rx;           /* matched receive being filled */
  umsg *rum;                /* or unexpected message being filled */
  uint8_t *rabort;          /* or ABORT text */
  struct xfer_queue posted; /* receives waiting for their frame */
  struct umsg_queue uq;     /* messages before their receive */
  bool last_padded;         /* the last frame read was a large one (pull) */
  struct spare_list spares; /* freed early-message buffers kept */
  size_t early_bytes;       /* bytes buffered in early messages (uq) */
  bool held;                /* a header left staged: early_bytes full */
  size_t spare_bytes;       /* their total size */
  int spare_count;          /* and number */
} gang__fabric_conn;

struct gang__fabric {
  int rank, size;
  gang__fabric_conn *conns; /* indexed by peer; conns[rank] unused */
  int wakefd; /* eventfd: abort, or new work for a driver in poll() */
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
  int64_t spin_ns;  /* GANG_TCP_SPIN_US */
  int64_t busy_ns;  /* of the spin, the first stretch without yielding */
  size_t piece;     /* GANG_TCP_PIECE, 0: sends are never paced */
  size_t early_max; /* GANG_TCP_EARLY_MAX */
  bool piece_set;   /* ... by the user; else chosen per connection */
  int sockbuf;      /* GANG_SOCKET_BUFFER, 0: the kernel's */
  /* GANG_TCP_CONGESTION: cc_all set on every connection; else, unless
   * cc_keep, "reno" on those that stay on this host. */
  char cc[16]; /* the kernel's TCP_CA_NAME_MAX */
  bool cc_all, cc_keep;
  uint64_t moved; /* syscalls that moved bytes, for the spin */
  int lost_peer;  /* the first peer whose connection ended without a
                     goodbye (a crash), -1: none */
  bool *lost;     /* every peer seen so (lost_peer and the others whose
                     end of stream was already there), NULL: none yet */
  /* The progress pass's poll() over the connections (progress in
   * fabric_engine.c), allocated at its first use: fds and their peers. */
  struct pollfd *pass_fds;
  int *pass_peer;
};

/* ---- fabric.c: failure ---- */

/* Marks x done and counts it in its group: its bytes moved. */
void gang__fabric_complete(gang__fabric *f, gang__xfer *x);
/* ... or it ends unfinished (a failure, a withdrawal): its group failed. */
void gang__fabric_abandon(gang__fabric *f, gang__xfer *x);
/* Fails the fabric (first reason wins), tells the peers, completes every
 * transfer. */
void gang__fabric_fail_locked(gang__fabric *f, gang_status st,
                              const char *reason);
/* Fails a transfer to a peer that said goodbye before it. */
void gang__fabric_left_before(gang__fabric *f, gang__fabric_conn *c);
/* "rank 3 (host:port) left (process exit) 1.204 s ago": who left, why
 * and when its goodbye came. */
void gang__fabric_left_text(const gang__fabric_conn *c, char *buf, size_t cap);

/* ---- fabric.c: connections ---- */

/* Bytes before the payload of a frame of this kind and length. */
size_t gang__fabric_frame_head(uint32_t kind, uint64_t len);
void gang__fabric_encode_header(uint8_t *h, uint32_t kind, uint32_t tag,
                                uint64_t ctx, uint64_t seq, uint64_t len);
/* How far into its frame the head send x of its connection may go now. */
size_t gang__fabric_send_limit(gang__fabric *f, const gang__xfer *x);
/* A paced send runs one more piece ahead for every GANG__PACE_RTT_US of
 * its connection's least round trip (send_limit). */
#define GANG__PACE_RTT_US 100
/* TCP_INFO's least round trip of connection fd in us, 0: unknown
 * (tcp_rtt.c). */
uint32_t gang__tcp_min_rtt_us(int fd);
/* Writes queued sends until the socket is full or the head send is paced. */
void gang__fabric_push_sends(gang__fabric *f, gang__fabric_conn *c);

/* ---- fabric_recv.c: receiving ---- */

/* Reads whatever has arrived on c and consumes it. */
void gang__fabric_pull(gang__fabric *f, gang__fabric_conn *c);
/* Whether c holds a deferred message nobody can take yet. */
bool gang__fabric_stalled(const gang__fabric_conn *c);
/* The peer sent len bytes where receive x expects another length. */
void gang__fabric_mismatch(gang__fabric *f, gang__fabric_conn *c,
                           const gang__xfer *x, uint64_t len);
/* Hands a fully arrived early message to its receive. */
void gang__fabric_deliver(gang__fabric *f, gang__fabric_conn *c, umsg *u,
                          gang__xfer *x);
/* Frees what c holds of messages (early ones, kept buffers, stage). */
void gang__fabric_conn_free(gang__fabric_conn *c);

#endif
