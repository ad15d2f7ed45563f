/* Where a small collective's time goes between the ranks' arrivals and the
 * exchange itself (`--arrival` of gang-bench and the peer programs, and
 * bench/line_floor; docs/benchmarking.md).
 *
 * The figure every program prints is the median over iterations of the
 * slowest rank's time in the call. For one iteration that is at least the
 * time from the last rank's entry to the last rank's exit (the rank that
 * leaves last entered no later than the last arrival), and at most that plus
 * the spread of the entries. The first part is what the collective costs
 * once everyone is there; the spread is the phase the ranks' loop settles
 * into, which a symmetric exchange has nothing to pull back. Reported apart
 * they tell a faster exchange from a luckier phase.
 *
 * A broadcast's root cannot send before it enters, so the time from the
 * root's entry to the last exit is one broadcast's time, whenever the
 * others come (with --sync, which keeps back-to-back broadcasts from
 * overlapping, the time a single call takes).
 *
 * The ranks' clocks are compared, so every rank must be on one machine
 * (CLOCK_MONOTONIC is shared by its processes, network namespaces
 * included).
 *
 * Usage: a buffer of 4 * n doubles; arrival_record() for each timed
 * iteration, an element-wise MAX over the ranks of the whole buffer, then
 * arrival_medians(). */
#ifndef BENCH_LIB_ARRIVAL_H
#define BENCH_LIB_ARRIVAL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* Layout: [0, n) entries, [n, 2n) negated entries (so MAX gives the
 * earliest), [2n, 3n) exits, [3n, 4n) the root's entry (-HUGE_VAL on the
 * other ranks, and on every rank where the call has no root), all in
 * microseconds. */
static inline void arrival_record(double *t, size_t n, size_t i, double entry,
                                  double exit, int is_root) {
  t[i] = entry;
  t[n + i] = -entry;
  t[2 * n + i] = exit;
  t[3 * n + i] = is_root ? entry : -HUGE_VAL;
}

static inline int arrival_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static inline double arrival_median(double *t, size_t n) {
  qsort(t, n, sizeof *t, arrival_cmp);
  size_t m = n / 2;
  return n % 2 ? t[m] : (t[m - 1] + t[m]) / 2;
}

/* After the MAX over ranks: the median over iterations of the spread of
 * the entries (latest minus earliest), of the time from the latest entry
 * to the latest exit, and of the time from the root's entry to the latest
 * exit (NAN where no rank was the root). Reuses the buffer. */
static inline void arrival_medians(double *t, size_t n, double *spread,
                                   double *after_last, double *from_root) {
  int rooted = n > 0;
  for (size_t i = 0; i < n; i++) {
    double last = t[i], first = -t[n + i];
    t[i] = last - first;
    t[n + i] = t[2 * n + i] - last;
    rooted = rooted && isfinite(t[3 * n + i]);
    t[3 * n + i] = t[2 * n + i] - t[3 * n + i];
  }
  *spread = arrival_median(t, n);
  *after_last = arrival_median(t + n, n);
  *from_root = rooted ? arrival_median(t + 3 * n, n) : NAN;
}

/* The table's comment line under a row: out-of-place then in-place, each
 * when it ran (ran[k]). */
static inline void arrival_print(const int ran[2], const double spread[2],
                                 const double after_last[2],
                                 const double from_root[2]) {
  static const char *const name[2] = {"out-of-place", "in-place"};
  printf("#  arrival:");
  for (int k = 0, n = 0; k < 2; k++)
    if (ran[k]) {
      printf("%s %s spread %.3f us, after last %.3f us", n++ ? ";" : "",
             name[k], spread[k], after_last[k]);
      if (isfinite(from_root[k]))
        printf(", root's entry to last exit %.3f us", from_root[k]);
    }
  printf("\n");
}

/* The JSON fields added to a placement's object (after a comma). */
static inline void arrival_json(double spread, double after_last,
                                double from_root) {
  printf("\"spread_us\":%.6g,\"after_last_us\":%.6g", spread, after_last);
  if (isfinite(from_root))
    printf(",\"from_root_us\":%.6g", from_root);
}

#endif
