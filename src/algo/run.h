/* Running a collective with the algorithm the table chose: one handler per
 * (collective, algorithm) pair, on each path, looked up by the algorithm's
 * id. Whatever gang__algo_select returns (GANG_ALGO's forced choice
 * included) is what runs; a pair without a handler is an internal error,
 * never another algorithm. The handlers take every call in one shape, so
 * the table is plain data (run.c); test_pg_algos checks that it and the
 * selection table name the same pairs.
 *
 * The hierarchical path is no algorithm of its own here: it runs these
 * handlers inside each host and among the hosts' leaders
 * (src/gang/pg_hier.c). */
#ifndef GANG_ALGO_RUN_H
#define GANG_ALGO_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include "gang/types.h"
#include "select.h"

/* One call as every handler takes it. Bytes per block are count times the
 * element size, whatever the collective does with the elements. */
typedef struct algo_call {
  void *out;      /* all_reduce, broadcast: the buffer (in place) */
  const void *in; /* all_gather: this member's block; reduce_scatter,
                     all_to_all(_v): the input blocks */
  size_t count;   /* elements: all_reduce, broadcast of the buffer; others
                     per member's block */
  gang_dtype dtype;
  gang_reduce_op op;                    /* all_reduce, reduce_scatter */
  int root;                             /* broadcast */
  const size_t *out_counts, *in_counts; /* all_to_all_v: per member */
} algo_call;

struct gang__shm_chan;
struct algo_ctx;

/* Runs call k of collective coll with algorithm `algo` over shared-memory
 * channel c, or over the fabric with the algorithms' context a. */
gang_status gang__algo_run_shm(struct gang__shm_chan *c, algo_coll coll,
                               algo_id algo, const algo_call *k);
gang_status gang__algo_run_tcp(struct algo_ctx *a, algo_coll coll, algo_id algo,
                               const algo_call *k);

/* Runs it with `first`, the table's choice for facts f, or, where it
 * has a contest (gang__algo_rival) and a has a record (timed), with
 * whichever of the two the contest says (tcp_timed.c). *ran: the
 * algorithm that ran. */
gang_status gang__algo_run_tcp_timed(struct algo_ctx *a,
                                     const algo_choice *choice, algo_coll coll,
                                     const algo_facts *f, algo_id first,
                                     const algo_call *k, algo_id *ran);

/* Whether coll has a handler for algo (on the path algo belongs to). */
bool gang__algo_runs(algo_coll coll, algo_id algo);

#endif
