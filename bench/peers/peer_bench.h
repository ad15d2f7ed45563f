/* The measurement gang-bench makes, for other libraries: command line,
 * sizes, values and checks, the timed loop and the output (table or JSON
 * Lines in gang-bench's schema), shared by the peer programs mpi_bench.c
 * (Open MPI, MPICH) and gloo_bench.cc (Gloo). A peer program supplies a
 * backend: the collective calls and three reductions the driver needs to
 * combine timings and counts. Keeping the method in one place is what
 * makes the peers' figures comparable with gang-bench's and each other's
 * (docs/benchmarking.md, "Comparing with other libraries").
 *
 * One thread per rank; nothing here is thread-safe. Everything blocks in
 * the backend's calls. */
#ifndef PEER_BENCH_H
#define PEER_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pb_coll {
  PB_ALL_REDUCE,
  PB_ALL_GATHER,
  PB_REDUCE_SCATTER,
  PB_BROADCAST,
  PB_ALL_TO_ALL,
  PB_BARRIER,
  PB_NCOLL
} pb_coll;

/* The types every peer has a native type and reductions for. gang-bench's
 * half and bfloat16 have no standard MPI type, so they are left out. */
typedef enum pb_dtype {
  PB_FLOAT,
  PB_DOUBLE,
  PB_INT8,
  PB_UINT8,
  PB_INT32,
  PB_UINT32,
  PB_INT64,
  PB_UINT64,
  PB_NDTYPE
} pb_dtype;

/* gang-bench's avg (gang's MEAN) has no MPI or Gloo operation. */
typedef enum pb_op { PB_SUM, PB_PROD, PB_MIN, PB_MAX, PB_NOP } pb_op;

#define PB_MAX_ALGOS 8

typedef struct pb_args {
  size_t min_bytes, max_bytes;
  double step_factor; /* > 1, or 0 when step_bytes is used */
  size_t step_bytes;
  int iters, warmup, check, root, json;
  int arrival; /* --arrival (tools/gang-bench/arrival.h) */
  int late_us; /* --late-us (tools/gang-bench/timing.h) */
  int inplace, outplace;
  pb_coll coll;
  pb_dtype dtype;
  pb_op op;
  /* -A/--algo: names of the backend's algorithms to measure, each in
   * turn (Gloo's all_reduce); empty: the backend's default. */
  const char *algos[PB_MAX_ALGOS];
  int nalgos;
} pb_args;

/* The shape of one row, as gang-bench computes it (nccl-tests' sizes). */
typedef struct pb_shape {
  size_t count; /* elements in the size column */
  size_t per;   /* elements per rank block, or count */
  size_t bytes;
  size_t out_inplace, out_outplace; /* bytes of output checked */
} pb_shape;

/* Everything one call needs. `algo` is an index into pb_args.algos, or -1
 * for the backend's default. */
typedef struct pb_call {
  pb_coll coll;
  int inplace;
  pb_shape s;
  pb_dtype dtype;
  pb_op op;
  int root;
  int algo;
  unsigned char *send, *recv, *stage; /* each max_bytes + guard */
} pb_call;

/* A library. Each function returns 0 on success; on failure it prints
 * what failed to stderr and returns non-zero (the run then ends with 1). */
struct pb_backend {
  const char *library; /* "Open MPI 4.1.4", printed in the summary */
  int rank, size;
  void *ctx;
  /* In-place reduce_scatter leaves the result at the start of the buffer
   * (MPI_IN_PLACE) rather than at this rank's block (nccl-tests, gang). */
  int reduce_scatter_inplace_at_start;
  /* Untimed, before the warm-up of each row and placement: build plans or
   * register buffers. May be NULL. */
  int (*setup)(void *ctx, const pb_call *c);
  /* One call of the collective: this is what is timed. */
  int (*run)(void *ctx, const pb_call *c);
  /* After the row and placement (and its check). May be NULL. */
  void (*teardown)(void *ctx, const pb_call *c);
  int (*max_f64)(void *ctx, double *v, size_t n);
  int (*sum_i64)(void *ctx, int64_t *v, size_t n);
  int (*min_i64)(void *ctx, int64_t *v, size_t n);
  int (*barrier)(void *ctx);
};

typedef struct pb_backend pb_backend;

/* Parses argv (gang-bench's flags: -b -e -f -i -n -w -c -o -d -r --op
 * --inplace-only --outofplace-only --json, plus -A/--algo). Prints one
 * line naming a bad flag to stderr and returns 2; --help prints usage and
 * returns -1; otherwise 0. `prog` names the program in messages. */
int pb_parse_args(int argc, char **argv, const char *prog, pb_args *a);

/* Runs every row on every rank; rank 0 prints. Returns the exit status:
 * 0, or 1 if a call failed or a result was wrong. */
int pb_run(pb_backend *b, const pb_args *a);

const char *pb_coll_name(pb_coll c);
const char *pb_dtype_name(pb_dtype t);
const char *pb_op_name(pb_op op);
size_t pb_dtype_size(pb_dtype t);

#ifdef __cplusplus
}
#endif

#endif
