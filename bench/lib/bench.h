/* The measurement every benchmark program of this repository makes, in
 * nccl-tests' terms (STYLE.md rule 22): tools/gang-bench for gang and the
 * peer programs of bench/peers/ for Open MPI, MPICH and Gloo are each a
 * backend (the collective calls and four helper reductions) handed to
 * bench_run(). The command line, the sizes, the values and their checks,
 * the timed loop, the timing summary (timing.h), the arrival split
 * (arrival.h) and the output (table or JSON Lines) are here, once, so that
 * bench/compare reads every library's figures with one parser and compares
 * like with like (docs/benchmarking.md).
 *
 * Plain C11 with no dependency but libc and libm: gang-bench links it from
 * CMake (bench/lib/CMakeLists.txt), bench/compare compiles it with each
 * library's compiler (mpicc, gcc for Gloo's C++ program).
 *
 * One thread per rank; nothing here is thread-safe. bench_run() blocks in
 * the backend's calls. */
#ifndef BENCH_LIB_BENCH_H
#define BENCH_LIB_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- What is measured --------------------------------------------------- */

typedef enum bench_coll {
  BENCH_ALL_REDUCE,
  BENCH_ALL_GATHER,
  BENCH_REDUCE_SCATTER,
  BENCH_BROADCAST,
  BENCH_ALL_TO_ALL,
  BENCH_BARRIER,
  BENCH_NCOLL
} bench_coll;

/* Element types, in the order "-d all" runs them. */
typedef enum bench_dtype {
  BENCH_FLOAT,
  BENCH_DOUBLE,
  BENCH_HALF,
  BENCH_BFLOAT16,
  BENCH_INT8,
  BENCH_UINT8,
  BENCH_INT16,
  BENCH_INT32,
  BENCH_UINT32,
  BENCH_INT64,
  BENCH_UINT64,
  BENCH_NDTYPE
} bench_dtype;

/* Reduce operations; avg is gang's MEAN. */
typedef enum bench_op {
  BENCH_SUM,
  BENCH_PROD,
  BENCH_MIN,
  BENCH_MAX,
  BENCH_AVG,
  BENCH_NOP
} bench_op;

/* Names as nccl-tests prints them: "all_reduce", "float", "sum". */
const char *bench_coll_name(bench_coll c);
const char *bench_dtype_name(bench_dtype t);
const char *bench_op_name(bench_op op);
size_t bench_dtype_size(bench_dtype t);
int bench_reduces(bench_coll c);

/* nccl-tests' bus bandwidth factor of `c` on n ranks (busbw / algbw). */
double bench_bus_factor(bench_coll c, int n);

/* One row's element counts and bytes, with nccl-tests' meaning of the size:
 * the whole buffer (all_gather: the gathered output; reduce_scatter: the
 * input; all_to_all: one rank's buffer), rounded down to whole elements
 * per rank. */
typedef struct bench_shape {
  size_t count;                     /* elements in the size column */
  size_t per;                       /* elements per rank block, or count */
  size_t bytes;                     /* the size column: count * element size */
  size_t out_inplace, out_outplace; /* bytes of output checked */
} bench_shape;

bench_shape bench_shape_of(bench_coll c, size_t bytes, size_t elem_size, int n);

/* ---- Command line (args.c) ---------------------------------------------- */

#define BENCH_MAX_ALGOS 8

typedef struct bench_args {
  size_t min_bytes, max_bytes;
  double step_factor; /* > 1, or 0 when step_bytes is used */
  size_t step_bytes;  /* > 0 for arithmetic steps (-i) */
  int iters, warmup;
  int check;
  int root;     /* -1: every rank in turn (-r all) */
  int inplace;  /* run the in-place placement */
  int outplace; /* run the out-of-place placement */
  int json;
  int arrival; /* --arrival: entry spread and time after the last arrival */
  int late_us; /* --late-us: rank 0 enters each timed call this much later */
  int sync;    /* --sync: an untimed barrier before each timed call */
  bench_coll coll;
  bench_dtype dtypes[BENCH_NDTYPE];
  int ndtypes;
  bench_op ops[BENCH_NOP];
  int nops;
  /* -A/--algo: the backend's algorithms to measure in turn, pointing into
   * argv; none: the backend's default. */
  const char *algos[BENCH_MAX_ALGOS];
  int nalgos;
} bench_args;

/* What a program accepts beyond the common flags, and how it introduces
 * itself in --help. */
typedef struct bench_program {
  const char *name;  /* "gang-bench": messages, the table's first line */
  const char *about; /* --help lines between "usage:" and the flags */
  unsigned dtypes;   /* bit (1u << t) per bench_dtype the library has */
  unsigned ops;      /* bit (1u << op) per bench_op */
  int algos;         /* accepts -A/--algo */
} bench_program;

#define BENCH_ALL_DTYPES ((1u << BENCH_NDTYPE) - 1)
#define BENCH_ALL_OPS ((1u << BENCH_NOP) - 1)

/* Parses argv into *a: nccl-tests' flags (-b -e -f -i -n -w -c -o -d -r),
 * --op, --inplace-only, --outofplace-only, --json, --arrival, --late-us,
 * and -A when the program takes it. On a usage error prints one line
 * naming the flag to stderr and returns 2; for --help prints the usage to
 * stdout and returns -1 (the caller exits 0); otherwise returns 0. Every
 * rank parses the same argv before joining, so a bad flag ends every rank
 * with status 2 without any rendezvous. */
int bench_parse_args(int argc, char **argv, const bench_program *p,
                     bench_args *a);

/* The size after `size` (-f or -i). */
size_t bench_next_size(const bench_args *a, size_t size);

/* ---- Values and checks (data.c) ----------------------------------------- */

/* The value rank `r` (of `n`) contributes at element index `i` for a
 * reducing collective with `op`: small integers, so that any reduction over
 * n ranks is exactly representable in `t` (float sums included). */
int64_t bench_value(bench_dtype t, bench_op op, int r, int n, size_t i);

/* The exact reduction of bench_value over ranks 0..n-1 at index i. */
int64_t bench_reduced(bench_dtype t, bench_op op, int n, size_t i);

/* Fills elements [0, count) of buf with bench_value(t, op, r, n, base + k)
 * for element k. */
void bench_fill(void *buf, size_t count, bench_dtype t, bench_op op, int r,
                int n, size_t base);

/* Counts elements k of buf that differ (bitwise) from want(k), where
 * want(k) = bench_reduced(t, op, n, base + k) if `reduced`, else
 * bench_value(t, op, src, n, base + k). */
size_t bench_count_wrong(const void *buf, size_t count, bench_dtype t,
                         bench_op op, int n, int reduced, int src, size_t base);

/* Guard bytes after every buffer's used region: out-of-bounds writes show
 * up as changed guard bytes. */
#define BENCH_GUARD 256
#define BENCH_GUARD_BYTE 0xa5
void bench_guard_set(void *buf, size_t used);
size_t bench_guard_count(const void *buf, size_t used);

/* ---- A library under measurement (driver.c) ----------------------------- */

/* Everything one call needs. `algo` indexes bench_args.algos, or is -1 for
 * the backend's default. */
typedef struct bench_call {
  bench_coll coll;
  int inplace;
  bench_shape s;
  bench_dtype dtype;
  bench_op op;
  int root; /* broadcast's source, else -1 */
  int algo;
  unsigned char *send, *recv, *stage; /* each max_bytes + BENCH_GUARD */
} bench_call;

/* A rank as the table's header lists it. */
typedef struct bench_rank_id {
  int32_t pid;
  char host[60];
} bench_rank_id;

/* A library. Each function returns 0 on success; on failure it prints
 * what failed to stderr and returns non-zero (the run then ends with 1). */
typedef struct bench_backend {
  const char *program; /* "gang-bench": messages, the table's first line */
  /* "gang 0.1.0", "Open MPI 4.1.4": the table's first line; the JSON
   * names it in every row and the summary as "library", except when
   * gang_version is set: gang-bench's rows name no library and its summary
   * gives "gang_version" (the schema bench/compare reads). */
  const char *library;
  const char *gang_version;
  int rank, size;
  void *ctx;
  /* In-place reduce_scatter leaves the result at the start of the buffer
   * (MPI_IN_PLACE) rather than at this rank's block (nccl-tests, gang). */
  int reduce_scatter_inplace_at_start;
  /* Bit (1u << coll) per collective whose call does not compute the
   * collective's result (bench/copy_floor's all_reduce, a copy of the same
   * bytes): its results are not checked (#wrong N/A). */
  unsigned unchecked;
  /* Rank 0 flips a bit of each checked result before the check, to test
   * the checker (GANG_BENCH_CORRUPT=1 for gang-bench). */
  int corrupt;
  /* Untimed, before the warm-up of each row and placement: build plans or
   * register buffers. May be NULL. */
  int (*setup)(void *ctx, const bench_call *c);
  /* One call of the collective: this is what is timed. */
  int (*run)(void *ctx, const bench_call *c);
  /* After the row and placement (and its check). May be NULL. */
  void (*teardown)(void *ctx, const bench_call *c);
  int (*max_f64)(void *ctx, double *v, size_t n);
  int (*sum_i64)(void *ctx, int64_t *v, size_t n);
  int (*min_i64)(void *ctx, int64_t *v, size_t n);
  int (*barrier)(void *ctx);
  /* Every rank's id into all[size], in rank order; the table's header
   * then lists the ranks and --arrival's one-host check names them. May
   * be NULL. */
  int (*gather_ids)(void *ctx, const bench_rank_id *mine, bench_rank_id *all);
  /* The algorithm the library ran for the latest call, as it names them,
   * or NULL when it does not say (gang_last_algorithm). May be NULL. */
  const char *(*chosen)(void *ctx);
  /* Comment lines for the table's header about how this library's
   * placements of `coll` are measured ("# ...\n" each), or NULL. */
  const char *(*placement_note)(bench_coll coll);
  /* The rank's buffer `which` (0 send, 1 recv, 2 stage) of at least
   * `bytes`, page-aligned, owned by the backend (bench/copy_floor's live
   * in memory every rank maps); NULL, or the hook NULL: the driver's own. */
  unsigned char *(*buffer)(void *ctx, int which, size_t bytes);
} bench_backend;

/* Runs every row on every rank; rank 0 prints. Returns the exit status:
 * 0, 1 if a call failed or a result was wrong, 2 for a root that is not a
 * rank or --arrival across hosts. */
int bench_run(const bench_backend *b, const bench_args *a);

#ifdef __cplusplus
}
#endif

#endif
