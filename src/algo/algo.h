/* Collective algorithms over the fabric. Each algorithm is straight-line
 * code in its own file: a sequence of steps, each a small set of sends and
 * receives run together by gang__fabric_run (so a step that sends to one
 * peer and receives from another uses both directions of the links at
 * once). Costs in the alpha-beta model are in docs/algorithms.md. */
#ifndef GANG_ALGO_H
#define GANG_ALGO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/way.h"
#include "gang/types.h"
#include "run.h"
#include "transport/fabric.h"

/* What the members of one path have timed of contests over TCP
 * (tcp_timed.c): per collective, a record by size class, and the two
 * algorithms (ids + 1) each class chose between. */
typedef struct algo_timed {
  gang__way_book book[ALGO_COLL_COUNT];
  uint8_t pair[ALGO_COLL_COUNT][GANG__WAY_CLASSES][2];
  uint8_t state[ALGO_COLL_COUNT][GANG__WAY_CLASSES]; /* algo_contest's */
} algo_timed;

/* One call's part in a contest between two ways (tcp_timed.c): the
 * model's choice (`chosen`, way 0 or 1) runs until its times are in, and
 * if the slowest member's median took more than GANG__ALGO_HOLDS times
 * its price the two are timed against each other from then on, as a
 * close call is from the start. *state is the class's: 0 the model's
 * choice on trial, 1 it held, 2 timed. */
typedef struct algo_contest {
  gang__way_book *book;
  uint8_t *state;
  int k;           /* the size class */
  int chosen;      /* the model's way */
  bool close;      /* priced within GANG__ALGO_CLOSE: timed at once */
  double price_ns; /* the model's price of this call by the chosen way */
  size_t bytes;
  uint32_t tags; /* of the agreeing rounds */
  /* Set by gang__algo_contest_way for the log: what was agreed in this
   * call (0 nothing, 1 the model's choice held or failed, 2 a way), with
   * each way's slowest median (ns per MiB). */
  int agreed;
  double slow[2];
} algo_contest;

/* What an algorithm needs to know about the gang and the call. */
typedef struct algo_ctx {
  gang__fabric *f;
  int rank;         /* in the gang */
  int size;         /* of the gang */
  const int *world; /* gang rank -> fabric rank */
  uint64_t ctx;     /* the gang's context id */
  uint64_t seq;     /* the collective's sequence number */
  int64_t deadline;
  const char *what; /* "all_reduce #12" */
  /* Reusable buffers owned by the gang (grown on demand, never shrunk), so
   * steady-state collectives allocate nothing: the algorithm's scratch,
   * and a stage for a whole call that a handler copies through (kept apart
   * from the scratch, which the algorithm under it uses). */
  void **scratch;
  size_t *scratch_cap;
  void **stage;
  size_t *stage_cap;
  /* Two members' measured all_reduce: what this member has timed on this
   * path's pair (NULL: it runs recursive doubling). */
  gang__way_book *way;
  /* Contests' record of this path's members (NULL: the table's
   * choice runs). */
  algo_timed *timed;
} algo_ctx;

/* Contests' agreement (tcp_timed.c): every member of a sends the
 * others its two medians of class c in b (tags from `tags` on), and all
 * get each way's slowest median (ns per MiB, slow[way]) and the way
 * whose slowest is lower, the same on every member. */
gang_status gang__algo_timed_agree(algo_ctx *a, const gang__way_book *b, int c,
                                   uint32_t tags, double slow[2], int *way);
/* The way this call of contest t runs, agreeing with the other members
 * of a first where a step is due. */
gang_status gang__algo_contest_way(algo_ctx *a, algo_contest *t, int *way);
/* Keeps the call's time: wall ns by `way`. */
void gang__algo_contest_done(algo_contest *t, int way, int64_t wall);
/* The tags of the two paths' agreement (pg_exec.c). */
#define GANG__ALGO_PATHS_TAGS 0x61680000u

/* Scratch, or the stage, of at least `bytes` bytes. */
gang_status gang__algo_scratch(algo_ctx *a, size_t bytes, void **out);
gang_status gang__algo_stage(algo_ctx *a, size_t bytes, void **out);

/* One step: send `slen` bytes to gang rank `to` (skip when to < 0) and
 * receive exactly `rlen` bytes from gang rank `from` (skip when from < 0),
 * both with tag `tag`. rbuf must not overlap sbuf: the receive owns it
 * (gang__xfer.owns_buf). */
gang_status gang__algo_sendrecv(algo_ctx *a, int to, const void *sbuf,
                                size_t slen, int from, void *rbuf, size_t rlen,
                                uint32_t tag);

/* Splits `count` elements into `parts` nearly equal blocks: block i starts
 * at *off and has *len elements (the first count % parts blocks get one
 * more). */
void gang__algo_block(size_t count, int parts, int i, size_t *off, size_t *len);
/* Blocks [lo, hi) of that split, one run: *off its first element, *len
 * its elements. */
void gang__algo_span(size_t count, int parts, int lo, int hi, size_t *off,
                     size_t *len);

/* The handlers of run.c (call k as run.h describes it; every rank runs
 * the same one). all_reduce is in place and leaves MEAN as a SUM. */
gang_status gang__algo_barrier_dissemination(algo_ctx *a, const algo_call *k);
gang_status gang__algo_allreduce_rd(algo_ctx *a, const algo_call *k);
gang_status gang__algo_allreduce_ring(algo_ctx *a, const algo_call *k);
gang_status gang__algo_allreduce_hd(algo_ctx *a, const algo_call *k);
/* Two members: recursive doubling or halving-doubling, as measured. */
gang_status gang__algo_allreduce_measured(algo_ctx *a, const algo_call *k);
gang_status gang__algo_bcast_binomial(algo_ctx *a, const algo_call *k);
gang_status gang__algo_bcast_sag(algo_ctx *a, const algo_call *k);
gang_status gang__algo_allgather_ring(algo_ctx *a, const algo_call *k);
gang_status gang__algo_allgather_bruck(algo_ctx *a, const algo_call *k);
gang_status gang__algo_reduce_scatter_ring(algo_ctx *a, const algo_call *k);
gang_status gang__algo_reduce_scatter_halving(algo_ctx *a, const algo_call *k);
gang_status gang__algo_alltoall_pairwise(algo_ctx *a, const algo_call *k);
/* in_counts[i] elements go to rank i, out_counts[j] come from rank j,
 * blocks packed in rank order. */
gang_status gang__algo_alltoallv_pairwise(algo_ctx *a, const algo_call *k);

/* Calls the measured all_reduce ran by recursive doubling, then by
 * halving-doubling (tests). */
extern _Atomic uint64_t gang__tcp_way_taken[2];
/* Contested calls run by the pair's lower algorithm id, then by the other
 * (tests). */
extern _Atomic uint64_t gang__tcp_timed_taken[2];

#endif
