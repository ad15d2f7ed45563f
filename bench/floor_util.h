/* Helpers shared by the floor tools (bench/tcp_floor.c, bench/line_floor.c):
 * programs with no library that time what the machine itself costs. */
#ifndef GANG_BENCH_FLOOR_UTIL_H
#define GANG_BENCH_FLOOR_UTIL_H

#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline double floor_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* qsort comparator for doubles, ascending. */
static inline int floor_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
