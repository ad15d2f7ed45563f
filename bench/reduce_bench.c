/* reduce_bench: bandwidth of the float32 SUM reduce kernels against memcpy,
 * for every instruction set this CPU can run, at a memory-bound size
 * (64 MiB per buffer) and a cache-resident one (256 KiB per buffer).
 *
 * Each figure is the median of --runs timed runs (default 21) after one
 * warm-up run; a cache-resident run repeats the kernel until it has moved
 * as many bytes as one 64 MiB call, so every run lasts long enough to time.
 *
 * "touched" GB/s counts every byte the kernel reads or writes:
 *   reduce  dst += src      3 x size (read dst, read src, write dst)
 *   reduce3 dst = a + b     3 x size (read a, read b, write dst)
 *   memcpy  dst = src       2 x size (read src, write dst)
 * (write-allocate reads of a destination line are not counted). "size"
 * GB/s is size / time, the rate at which one buffer is consumed. Build in
 * Release; the library itself is portable and picks AVX2/AVX-512 at run
 * time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/reduce.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum kind { K_REDUCE, K_REDUCE3, K_MEMCPY };
static const char *const kind_names[] = {"reduce dst+=src", "reduce3 d=a+b",
                                         "memcpy"};
static const int touched_factor[] = {3, 3, 2};

/* Median seconds per call of `kind` on buffers of `bytes`. */
static double measure(enum kind kind, float *d, float *a, float *b,
                      size_t bytes, int reps, int runs) {
  size_t n = bytes / sizeof(float);
  double *t = malloc(sizeof(double) * (size_t)runs);
  if (t == NULL)
    abort();
  for (int r = -1; r < runs; r++) {
    double t0 = now_s();
    for (int k = 0; k < reps; k++) {
      switch (kind) {
      case K_REDUCE:
        gang__reduce(d, a, n, GANG_FLOAT32, GANG_SUM);
        break;
      case K_REDUCE3:
        gang__reduce3(d, a, b, n, GANG_FLOAT32, GANG_SUM);
        break;
      case K_MEMCPY:
        memcpy(d, a, bytes);
        break;
      }
    }
    double dt = (now_s() - t0) / reps;
    if (r >= 0)
      t[r] = dt;
  }
  qsort(t, (size_t)runs, sizeof(double), cmp_double);
  double med = t[runs / 2];
  free(t);
  return med;
}

int main(int argc, char **argv) {
  int runs = 21;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--runs N] [--isa avx512|avx2|baseline]\n",
              argv[0]);
      return 2;
    }
  }
  if (runs < 1)
    runs = 1;

  const size_t big = (size_t)64 << 20, small = (size_t)256 << 10;
  float *d = aligned_alloc(64, big), *a = aligned_alloc(64, big),
        *b = aligned_alloc(64, big);
  if (!d || !a || !b) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  /* Touch every page now so no run pays for page faults. Values stay small
   * and finite however many times dst accumulates. */
  for (size_t i = 0; i < big / sizeof(float); i++) {
    d[i] = 1.0f;
    a[i] = 0x1p-20f * (float)(i & 1023);
    b[i] = 0.5f;
  }

  printf("reduce_bench: float32 SUM, median of %d runs; auto-selected ISA: "
         "%s\n",
         runs, gang__reduce_isa());
  printf("%-9s %-16s %9s %10s %14s %11s\n", "isa", "kernel", "size", "time(us)",
         "touched GB/s", "size GB/s");
  static const char *const isas[] = {"avx512", "avx2", "baseline"};
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (only && strcmp(only, isas[s]) != 0)
      continue;
    if (gang__reduce_set_isa(isas[s]) != 0)
      continue;
    const size_t sizes[] = {big, small};
    for (size_t z = 0; z < 2; z++) {
      size_t bytes = sizes[z];
      int reps = (int)(big / bytes);
      for (int k = 0; k < 3; k++) {
        if (k == K_MEMCPY && s > 0 && !only)
          continue; /* memcpy does not depend on the ISA: print it once */
        double sec = measure((enum kind)k, d, a, b, bytes, reps, runs);
        printf("%-9s %-16s %6zu %s %10.1f %14.1f %11.1f\n",
               k == K_MEMCPY ? "-" : isas[s], kind_names[k],
               bytes >= (1u << 20) ? bytes >> 20 : bytes >> 10,
               bytes >= (1u << 20) ? "MiB" : "KiB", sec * 1e6,
               (double)touched_factor[k] * (double)bytes / sec * 1e-9,
               (double)bytes / sec * 1e-9);
      }
    }
  }
  /* Keep the results observable so nothing is optimised away. */
  volatile float sink = d[12345] + d[(big / sizeof(float)) - 1];
  (void)sink;
  free(d);
  free(a);
  free(b);
  return 0;
}
