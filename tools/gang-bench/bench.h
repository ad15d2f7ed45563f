/* gang-bench internals: the parsed command line (args.c), element values
 * and checks (data.c), shared by the driver (main.c).
 *
 * Nothing here is thread-safe or needs to be: the tool is one thread per
 * rank. Nothing here blocks except the collectives main.c calls. */
#ifndef GANG_BENCH_H
#define GANG_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <gang/gang.h>

/* The collectives gang-bench measures. */
typedef enum bench_coll {
  COLL_ALL_REDUCE,
  COLL_ALL_GATHER,
  COLL_REDUCE_SCATTER,
  COLL_BROADCAST,
  COLL_ALL_TO_ALL,
  COLL_BARRIER,
  COLL_COUNT
} bench_coll;

#define BENCH_MAX_DTYPES 16
#define BENCH_MAX_OPS 8

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
  bench_coll coll;
  gang_dtype dtypes[BENCH_MAX_DTYPES];
  int ndtypes;
  gang_reduce_op ops[BENCH_MAX_OPS];
  int nops;
} bench_args;

/* Parses argv into *a. On a usage error prints one line naming the flag to
 * stderr and returns 2; for --help prints the usage to stdout and returns
 * -1 (the caller exits 0); otherwise returns 0. */
int bench_parse_args(int argc, char **argv, bench_args *a);

/* Short names as nccl-tests prints them: "float", "half", "int32". */
const char *bench_dtype_name(gang_dtype dt);
/* "sum", "prod", "min", "max", "avg". */
const char *bench_op_name(gang_reduce_op op);
const char *bench_coll_name(bench_coll c);

/* ---- data.c: values that make every result exact --------------------- */

/* The value rank `r` (of `n`) contributes at element index `i` for a
 * reducing collective with `op`: small integers, so that any reduction over
 * n ranks is exactly representable in `dt` (float sums included). */
int64_t bench_value(gang_dtype dt, gang_reduce_op op, int r, int n, size_t i);

/* The exact reduction of bench_value over ranks 0..n-1 at index i. */
int64_t bench_reduced(gang_dtype dt, gang_reduce_op op, int n, size_t i);

/* Stores integer v (exactly representable) as element i of buf. */
void bench_store(void *buf, size_t i, gang_dtype dt, int64_t v);

/* Fills elements [0, count) of buf with bench_value(dt, op, r, n, base + k)
 * for element k. */
void bench_fill(void *buf, size_t count, gang_dtype dt, gang_reduce_op op,
                int r, int n, size_t base);

/* Counts elements k of buf that differ (bitwise) from `want(k)`, where
 * want(k) = bench_reduced(dt, op, n, base + k) if `reduced`, else
 * bench_value(dt, op, src, n, base + k). */
size_t bench_count_wrong(const void *buf, size_t count, gang_dtype dt,
                         gang_reduce_op op, int n, int reduced, int src,
                         size_t base);

/* Guard bytes after every buffer's used region: out-of-bounds writes show
 * up as changed guard bytes. */
#define BENCH_GUARD 256
#define BENCH_GUARD_BYTE 0xa5
void bench_guard_set(void *buf, size_t used);
size_t bench_guard_count(const void *buf, size_t used);

#endif
