/* The output of bench_run() (driver.c), printed by rank 0: nccl-tests'
 * table, or JSON Lines in the schema bench/compare reads
 * (docs/benchmarking.md, "The table" and "JSON output"). Internal to
 * bench/lib. */
#ifndef BENCH_LIB_OUTPUT_H
#define BENCH_LIB_OUTPUT_H

#include <stdint.h>

#include "bench.h"
#include "timing.h"

/* One placement of one row. */
typedef struct bench_result {
  int ran;
  bench_timing t; /* t.median_us is the row's time */
  double algbw, busbw;
  int64_t wrong;                   /* -1: not checked */
  double spread_us, after_last_us; /* --arrival only */
  double from_root_us; /* --arrival, a broadcast of one root: else NAN */
  char chosen[48];     /* the algorithm the library says it ran, "": none */
} bench_result;

/* The table's header; `ids` lists the ranks, or is NULL. Nothing with
 * --json. */
void bench_print_header(const bench_backend *b, const bench_args *a,
                        const bench_rank_id *ids);

/* One row: a line of the table (and --arrival's comment line under it),
 * or one JSON object. */
void bench_print_row(const bench_backend *b, const bench_args *a,
                     const bench_call *c, const bench_result *out,
                     const bench_result *in);

/* The footer, or the JSON summary: out-of-bounds bytes, wrong elements and
 * the mean busbw of the `bw_count` placements measured (none: barrier). */
void bench_print_footer(const bench_backend *b, const bench_args *a,
                        int64_t oob, int64_t wrong, double bw_sum,
                        int bw_count);

#endif
