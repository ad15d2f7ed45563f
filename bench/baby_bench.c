/* baby_bench: what the subprocess gang (gang_baby_create) costs over the
 * direct gang, for all_reduce of 8 B, 1 MiB and 64 MiB.
 *
 * Each rank makes a direct gang (gang_create_default) and a subprocess
 * gang configured through the same store under a fresh prefix, then times
 * blocks of calls on one and the other in turn (alternating which goes
 * first), so both see the machine in the same state. Prints, on rank 0, the
 * median and the 10th and 90th percentiles of single calls, and the median
 * of one memcpy of the payload (the subprocess gang adds two per call: in
 * and out of its shared memory).
 *
 *   gangrun --standalone --nproc-per-node 2 bench/baby_bench [rounds]
 *
 * GANG_BABY_PATH defaults to this build's gang-baby. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gang/ft.h"
#include "gang/gang.h"

#define MAX_SAMPLES 20000

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static double pct(int64_t *v, int n, double p) {
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  int i = (int)(p * (n - 1) + 0.5);
  return (double)v[i] / 1000.0;
}

static void die(const char *what, gang_status st) {
  fprintf(stderr, "baby_bench: %s: %s: %s\n", what, gang_status_name(st),
          gang_last_error());
  exit(1);
}

/* Times `iters` all_reduces of `count` floats on g, appending to t. */
static void block(gang_t *direct, gang_t *g, float *buf, size_t count,
                  int iters, int64_t *t, int *n) {
  gang_status st = gang_barrier(direct);
  if (st != GANG_OK)
    die("barrier", st);
  for (int i = 0; i < iters && *n < MAX_SAMPLES; i++) {
    int64_t t0 = now_ns();
    st = gang_all_reduce(g, buf, count, GANG_FLOAT32, GANG_SUM);
    t[(*n)++] = now_ns() - t0;
    if (st != GANG_OK)
      die("all_reduce", st);
  }
}

int main(int argc, char **argv) {
#ifdef BABY_HELPER
  setenv("GANG_BABY_PATH", BABY_HELPER, 0);
#endif
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (rounds < 1)
    rounds = 1;
  const char *store = getenv("GANG_STORE_ADDR");
  if (store == NULL) {
    fprintf(stderr, "baby_bench: run it under gangrun (no GANG_STORE_ADDR)\n");
    return 2;
  }
  gang_t *direct = NULL, *baby = NULL;
  gang_status st = gang_create_default(NULL, &direct);
  if (st != GANG_OK)
    die("gang_create_default", st);
  int rank = gang_rank(direct), size = gang_size(direct);
  /* A prefix no earlier run used: rank 0's clock and pid, shared. */
  uint64_t nonce = rank == 0 ? (uint64_t)now_ns() ^ (uint64_t)getpid() : 0;
  if ((st = gang_broadcast(direct, &nonce, 1, GANG_UINT64, 0)) != GANG_OK)
    die("broadcast", st);
  char addr[512];
  snprintf(addr, sizeof addr, "%s/baby-bench-%016" PRIx64, store, nonce);
  if ((st = gang_baby_create(NULL, &baby)) != GANG_OK)
    die("gang_baby_create", st);
  int64_t t0 = now_ns();
  if ((st = gang_ft_configure(baby, addr, rank, size, 60000)) != GANG_OK)
    die("gang_ft_configure", st);
  double conf_ms = (double)(now_ns() - t0) / 1e6;

  static const size_t bytes[] = {8, 1 << 20, 64 << 20};
  static const int iters[] = {500, 40, 3};
  float *buf = calloc((64 << 20) / sizeof(float), sizeof(float));
  float *copy = calloc((64 << 20) / sizeof(float), sizeof(float));
  int64_t *td = malloc(MAX_SAMPLES * sizeof *td);
  int64_t *tb = malloc(MAX_SAMPLES * sizeof *tb);
  int64_t *tc = malloc(MAX_SAMPLES * sizeof *tc);
  if (buf == NULL || copy == NULL || td == NULL || tb == NULL || tc == NULL) {
    fprintf(stderr, "baby_bench: out of memory\n");
    return 1;
  }
  if (rank == 0) {
    printf("# baby_bench: %d ranks, %d rounds; first configure %.1f ms\n", size,
           rounds, conf_ms);
    printf("# all_reduce float32 sum; times of single calls in us on rank 0: "
           "median [p10, p90]\n");
    printf("%10s %28s %28s %12s %8s %12s\n", "bytes", "direct", "subprocess",
           "overhead", "ratio", "memcpy");
  }
  for (int s = 0; s < 3; s++) {
    size_t count = bytes[s] / sizeof(float);
    int nd = 0, nb = 0, nc = 0;
    /* Warm-up: the subprocess gang's shared memory grows on first use. */
    block(direct, direct, buf, count, iters[s], td, &nd);
    block(direct, baby, buf, count, iters[s], tb, &nb);
    nd = nb = 0;
    for (int r = 0; r < rounds; r++) {
      gang_t *first = r % 2 ? baby : direct, *second = r % 2 ? direct : baby;
      block(direct, first, buf, count, iters[s], first == baby ? tb : td,
            first == baby ? &nb : &nd);
      block(direct, second, buf, count, iters[s], second == baby ? tb : td,
            second == baby ? &nb : &nd);
      for (int i = 0; i < iters[s] && nc < MAX_SAMPLES; i++) {
        int64_t c0 = now_ns();
        memcpy(copy, buf, bytes[s]);
        tc[nc++] = now_ns() - c0;
      }
    }
    if (rank == 0) {
      double d50 = pct(td, nd, 0.5), b50 = pct(tb, nb, 0.5);
      char d[64], b[64];
      snprintf(d, sizeof d, "%.1f [%.1f, %.1f]", d50, pct(td, nd, 0.1),
               pct(td, nd, 0.9));
      snprintf(b, sizeof b, "%.1f [%.1f, %.1f]", b50, pct(tb, nb, 0.1),
               pct(tb, nb, 0.9));
      printf("%10zu %28s %28s %12.1f %8.2f %12.1f\n", bytes[s], d, b, b50 - d50,
             b50 / d50, pct(tc, nc, 0.5));
      fflush(stdout);
    }
  }
  gang_destroy(baby);
  gang_destroy(direct);
  free(buf);
  free(copy);
  free(td);
  free(tb);
  free(tc);
  return 0;
}
