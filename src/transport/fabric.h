/* The fabric: the connections of one world and the engine that moves
 * messages over them. Every gang of a world (the world gang, sub-gangs, mesh
 * groups) shares one fabric; messages are told apart by a context id (one
 * per gang), a sequence number (one per collective) and a tag (the step of
 * an algorithm, or the user's tag for send/recv).
 *
 * Algorithms are straight-line code: each step hands a small set of sends
 * and receives to gang__fabric_run, which returns when all of them are done
 * (or the fabric failed). Whichever thread waits drives the I/O of every
 * registered transfer, its own and other threads', so two gangs used from
 * two threads cannot deadlock on each other (MPI's "progress by whoever
 * waits"). A message that arrives before its receive is posted is kept as
 * an unexpected message and copied when the receive is posted.
 *
 * Failures are fabric-wide and sticky: a lost peer, a malformed or
 * mismatched frame, a deadline or an abort fails every pending and later
 * transfer of every gang on the fabric, and tells the peers (an ABORT frame
 * with the reason, then the connections are shut down), so that every
 * survivor learns promptly. */
#ifndef GANG_TRANSPORT_FABRIC_H
#define GANG_TRANSPORT_FABRIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "gang/status.h"
#include "gang/store.h"

typedef struct gang__fabric gang__fabric;

typedef struct gang__fabric_config {
  int rank;
  int size;
  gang_store *store; /* rendezvous, namespaced by the caller; borrowed */
  const char *host;  /* address to listen on and publish */
  int64_t deadline;  /* for connection setup (gang__now_ns time) */
  /* Optional: set by another thread to stop waiting for connections
   * (GANG_ABORTED). */
  const atomic_bool *cancel;
} gang__fabric_config;

/* Completion counter of a set of transfers started together, and
 * whether any of them ended by a failure (not by its bytes moving). */
typedef struct gang__xgroup {
  int remaining;
  bool failed;
} gang__xgroup;

/* One send or receive. The caller fills the first block; the engine owns
 * the rest while the transfer is registered. */
typedef struct gang__xfer {
  int peer;
  bool send;
  uint32_t tag;
  uint64_t ctx;
  uint64_t seq;
  void *buf;  /* send: the data (not modified); recv: the destination */
  size_t len; /* exact: a message of another length is a mismatch */
  /* send, optional: a receive started with it (the other half of an
   * exchange). The send then runs at most one piece (GANG_TCP_PIECE) ahead
   * of what has arrived for that receive, so the two directions move in
   * lockstep instead of streaming freely (docs/fabric.md, "Paced
   * exchanges": what it measured, and how the piece is chosen). */
  const struct gang__xfer *pace;
  /* recv, optional: nothing reads or writes buf until the receive
   * completes (no send from it is in flight). The fabric may then read
   * the next frame on the connection into it on the bet that it is this
   * receive's, and move the bytes out again when it is not (read_posted
   * in fabric_recv.c). */
  bool owns_buf;

  TAILQ_ENTRY(gang__xfer) link; /* engine: queue link */
  bool linked;                  /* engine: on a send or receive queue */
  size_t off;                   /* engine: bytes moved */
  bool lost_bet;                /* engine: a read bet on this receive missed */
  gang__xgroup *grp;
  bool done;
} gang__xfer;

/* Connects every pair of ranks (the higher rank connects to the lower one;
 * each side checks the other's hello: magic, version, world token, rank).
 * Collective over the world. */
gang_status gang__fabric_create(const gang__fabric_config *cfg,
                                gang__fabric **out);

/* A fabric over connections made by the caller, for tests and the fuzz
 * target (fuzz/fuzz_fabric_frame.c): no store, no hello, no TCP tuning,
 * but the rest as gang__fabric_create makes it (settings, stages, wake
 * fd). fds[p] is a connected stream socket to rank p (a socketpair's end
 * will do), or -1 for a peer not connected yet, as during setup: no
 * transfer may then name it. fds[rank] is ignored. Takes ownership of
 * every fd in fds, also on failure. Errors: GANG_INVALID_ARGUMENT (rank
 * not in [0, size), or a bad setting), GANG_NO_MEMORY, GANG_SYSTEM. */
gang_status gang__fabric_create_connected(int rank, int size, const int *fds,
                                          gang__fabric **out);

/* This rank's host runs more ranks than it has CPUs: waits spin at most
 * 50 µs before sleeping (a spinning rank takes the CPU its peers need),
 * unless GANG_TCP_SPIN_US is set. */
void gang__fabric_set_oversubscribed(gang__fabric *f);

/* Registers the n transfers (all counted in *grp) without waiting: sends
 * are queued behind earlier sends to the same peer, receives match
 * messages in arrival order. They progress whenever any thread waits on the
 * fabric. Fails (without registering) if the fabric has failed. */
gang_status gang__fabric_start(gang__fabric *f, gang__xfer *x, int n,
                               gang__xgroup *grp, const char *what);

/* Waits until *grp's transfers (x[0..n), for error details) are done.
 * Transfers whose bytes all moved succeed even when the fabric failed
 * meanwhile (a peer's failure that comes behind the data this rank
 * needed): the failure fails the next call instead. */
gang_status gang__fabric_wait(gang__fabric *f, gang__xgroup *grp, gang__xfer *x,
                              int n, int64_t deadline, const char *what);

/* Non-blocking: does what I/O it can; true when *grp is done. Errors like
 * gang__fabric_wait. */
gang_status gang__fabric_test(gang__fabric *f, gang__xgroup *grp,
                              const char *what, bool *done);

/* Withdraws registered transfers that are not done (their owner is going
 * away). A transfer half on the wire cannot be withdrawn without
 * corrupting the stream: then the fabric is failed with `why`. Either way
 * every transfer of x[0..n) is done (and unlinked) on return. */
void gang__fabric_cancel(gang__fabric *f, gang__xfer *x, int n,
                         const char *why);

/* Starts and waits for the n transfers. `what` names the operation in
 * error details ("all_reduce #12"). Errors: GANG_PEER_LOST, GANG_TIMEOUT,
 * GANG_ABORTED, GANG_MISMATCH, GANG_PROTOCOL, GANG_SYSTEM (after which the
 * fabric is failed). Thread-safe. */
gang_status gang__fabric_run(gang__fabric *f, gang__xfer *x, int n,
                             int64_t deadline, const char *what);

/* Fails the fabric with `st` and `reason` (pending transfers end with it,
 * peers are told). Any thread; idempotent (the first reason wins). */
void gang__fabric_fail(gang__fabric *f, gang_status st, const char *reason);

/* Calls hook(arg, status, reason) on the fabric's first failure (at once if
 * it has failed already), under the fabric's lock: the hook must not call
 * back into the fabric. NULL removes it. */
void gang__fabric_set_fail_hook(gang__fabric *f,
                                void (*hook)(void *arg, gang_status st,
                                             const char *reason),
                                void *arg);

/* Non-blocking: moves what bytes it can (unless another thread is driving)
 * so that a lost peer is noticed; returns the fabric's status. Used by
 * waits that do not go through the fabric (shared memory). */
gang_status gang__fabric_poke(gang__fabric *f);

/* The fabric's failure (GANG_OK while healthy) and its detail. */
gang_status gang__fabric_status(gang__fabric *f, char *detail, size_t cap);

/* Closes every connection and frees the fabric. No transfer may be running. */
void gang__fabric_destroy(gang__fabric *f);

/* The peers this rank saw die, the first first: the one whose connection
 * ended without a goodbye, or was reset, before anything else failed the
 * fabric (a peer that only passed another's failure on is not one), and
 * those whose end of stream was already waiting then. Writes at most cap
 * ranks to out; returns how many. What a fault-tolerance manager tells its
 * lighthouse (src/ft). Any thread. */
int gang__fabric_lost_peers(gang__fabric *f, int *out, int cap);
/* Notes `peer` as the one lost, when the shared-memory arena saw its
 * process gone first. */
void gang__fabric_note_lost(gang__fabric *f, int peer);

/* The socket to `peer` (tests use it to inject bytes a broken peer would
 * send). -1 if there is none. */
int gang__fabric_peer_fd(const gang__fabric *f, int peer);

/* Why a rank left its world, as its goodbye (BYE frame) tells the peers. */
typedef enum gang__fabric_leave_why {
  GANG__LEAVE_DESTROY = 0, /* it destroyed the world's last gang */
  GANG__LEAVE_EXIT = 1,    /* its process exited with gangs open */
} gang__fabric_leave_why;

/* Whether `peer` left: it said goodbye and its end of the connection is
 * closed. When it did and `why` is not NULL, writes who left, why and
 * how long ago there ("rank 3 (127.0.0.1:4711) left (process exit) 0.204
 * s ago"). Any thread. */
bool gang__fabric_peer_left(gang__fabric *f, int peer, char *why, size_t cap);

/* This process is exiting with the fabric in use (pg_exit.c): tells every
 * peer it left (a BYE saying so, after any frame it was half way through
 * writing to that peer, within 100 ms over all peers, then end of
 * stream), so that only what needs this rank fails on them. Then fails
 * the fabric here only (GANG_ABORTED "this process is exiting"): the
 * peers are not told of a failure and the fail hook is not called, so
 * the shared-memory arena stays healthy for the other ranks of the host.
 * Nothing when the fabric has failed already (the peers were told).
 * Returns whether it left. Any thread. */
bool gang__fabric_leave(gang__fabric *f, gang__fabric_leave_why why);

/* After gang__fabric_leave: reads and drops whatever the peers still
 * send (so that none is left blocked writing a frame to this rank) until
 * every peer's end of the connection has closed (each left, failed or
 * exited) or `deadline` (gang__now_ns time). Returns how many peers are
 * still connected. The store's host calls it while it lingers at exit
 * (src/gang/pg_exit.c). Not thread-safe: one caller at a time. */
int gang__fabric_drain(gang__fabric *f, int64_t deadline);

/* The pacing piece of exchanges with `peer` (0: unpaced; for tests). */
size_t gang__fabric_peer_piece(const gang__fabric *f, int peer);

#endif
