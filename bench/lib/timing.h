/* The figures of a row of per-iteration times (each the slowest rank's),
 * so that every library is summarised the same way (bench.h): the median,
 * which the tables show, and the 99th percentile, minimum and maximum,
 * which the JSON carries for runs on a busy machine (bench/compare
 * --load; docs/benchmarking.md). */
#ifndef BENCH_LIB_TIMING_H
#define BENCH_LIB_TIMING_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct bench_timing {
  double median_us; /* of an even count, the mean of the middle two */
  double p99_us;    /* nearest rank: the ceil(0.99 n)-th smallest */
  double min_us, max_us;
  double cpu_frac; /* the busiest rank's CPU time over the timed loop's
                      wall time (1: it never left the CPU) */
  double loop_us;  /* the timed loop's wall time over its calls, the
                      slowest rank's: what a program calling it back to
                      back gets per call. Below the median when calls
                      overlap across ranks (a rank that leaves a call
                      early enters the next while others are still in
                      this one), as on a machine with more ranks than
                      CPUs, where one call's slowest rank is mostly
                      waiting for others to be scheduled. */
} bench_timing;

/* CPU time this process has used (user + system), in microseconds. */
static inline double bench_cpu_us(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0)
    return 0;
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* --late-us: rank 0 enters each timed iteration this much after the others,
 * so that they wait for it inside the call; their CPU time then shows what
 * a library's wait costs the machine (spinning, yielding or sleeping). */
static inline void bench_arrive_late(int rank, double late_us) {
  if (rank != 0 || late_us <= 0)
    return;
  struct timespec ts = {(time_t)(late_us / 1e6),
                        (long)(fmod(late_us, 1e6) * 1e3)};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

static inline int bench_timing_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Summarises times[0..n) (n >= 1) through scratch (n doubles); the
 * caller fills in cpu_frac and loop_us. */
static inline bench_timing bench_timing_of(const double *times, size_t n,
                                           double *scratch) {
  memcpy(scratch, times, n * sizeof *scratch);
  qsort(scratch, n, sizeof *scratch, bench_timing_cmp);
  size_t m = n / 2, r = (99 * n + 99) / 100;
  bench_timing t;
  t.median_us = n % 2 ? scratch[m] : (scratch[m - 1] + scratch[m]) / 2;
  t.p99_us = scratch[r - 1];
  t.min_us = scratch[0];
  t.max_us = scratch[n - 1];
  t.cpu_frac = 0;
  t.loop_us = 0;
  return t;
}

/* Prints the JSON members `"time_us":..,"p99_us":..,"min_us":..,"max_us":..,
 * "cpu_frac":..,"loop_us":..` followed by a comma. */
static inline void bench_timing_json(const bench_timing *t) {
  printf("\"time_us\":%.6g,\"p99_us\":%.6g,\"min_us\":%.6g,\"max_us\":%.6g,"
         "\"cpu_frac\":%.3f,\"loop_us\":%.6g,",
         t->median_us, t->p99_us, t->min_us, t->max_us, t->cpu_frac,
         t->loop_us);
}

#endif
