/* The shared-memory floor that small collectives are measured against
 * (docs/performance.md): two processes, no library, one exchange of cache
 * lines per iteration, timed the way gang-bench and the peers' programs
 * time a collective.
 *
 *   line_floor [iters] [lines]
 *
 * Each iteration, between two clock reads, each process writes `lines`
 * cache lines (56 bytes of data and an 8-byte flag stored last, release)
 * and spins until it sees all of the other's lines of that iteration. The
 * figure printed is the median over iterations of the larger of the two
 * processes' times, as bench/compare takes it, followed by the loop's
 * period (the first process's whole timed loop over the iterations), and
 * bench/lib/arrival.h's two parts of the first figure: the spread of the
 * two entries and the time from the later entry to the later exit, the
 * exchange's own cost whatever phase the loop settles into. With one
 * line this is the exchange a 2-rank barrier or small all_reduce cannot beat on
 * this machine; the clock reads are in it, as they are in every library's
 * figure. Processes are not pinned (neither are gang-bench's and the
 * peers' under bench/compare) unless LINE_FLOOR_PIN is set.
 * LINE_FLOOR_FENCE: after writing its lines each process makes a
 * sequentially consistent store to a line of its own that nobody reads,
 * as a library's publish does. Here that takes the per-iteration time
 * from 0.43-0.46 us to 0.32-0.35 (1 line, far placement) but not the
 * period: the two processes settle into another phase, the lines cross no
 * faster (docs/performance.md). LINE_FLOOR_COPY: each also copies the
 * other's data out of the lines, as an all_reduce must.
 *
 * Each process waits for the other's lines one at a time, in the order
 * they were written. LINE_FLOOR_ALL: it reads every line in each pass
 * instead, as gang's flagged steps did before 2c12d3a. LINE_FLOOR_LEAD:
 * it waits for the first line alone, then reads every line in each pass,
 * as gang's steps of three lines and more do since (docs/shm.md). The two
 * exclude each other. */

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/arrival.h"
#include "floor_util.h"

#define SLOTS 16     /* iterations before a line is reused */
#define MAX_LINES 16 /* lines per process and iteration */

typedef struct line {
  _Alignas(64) unsigned char data[56];
  _Atomic uint64_t flag;
} line;

typedef struct shared {
  line lines[2][SLOTS][MAX_LINES];
  line step[2];
} shared;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 100000;
  int nl = argc > 2 ? atoi(argv[2]) : 1;
  if (iters < 1 || nl < 1 || nl > MAX_LINES) {
    fprintf(stderr, "usage: line_floor [iters >= 1] [lines 1..%d]\n",
            MAX_LINES);
    return 2;
  }
  long warm = iters / 10 + 100;
  int fence = getenv("LINE_FLOOR_FENCE") != NULL;
  int copy = getenv("LINE_FLOOR_COPY") != NULL;
  int all = getenv("LINE_FLOOR_ALL") != NULL;
  int lead = getenv("LINE_FLOOR_LEAD") != NULL;
  if (all && lead) {
    fprintf(stderr, "line_floor: set LINE_FLOOR_ALL or LINE_FLOOR_LEAD, "
                    "not both\n");
    return 2;
  }
  shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  /* Per process: the iterations' times, then bench/lib/arrival.h's
   * record. */
  size_t per = 5 * (size_t)iters;
  double *times = mmap(NULL, 2 * per * sizeof *times, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED || times == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  int me = child == 0, peer = 1 - me;
  if (getenv("LINE_FLOOR_PIN") != NULL) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      perror("sched_setaffinity");
  }
  static unsigned char out[56 * MAX_LINES];
  double start = 0;
  for (long i = -warm; i < iters; i++) {
    if (i == 0)
      start = floor_now_us();
    uint64_t flag = (uint64_t)(i + warm + 1);
    line *mine = s->lines[me][flag % SLOTS];
    line *theirs = s->lines[peer][flag % SLOTS];
    double t0 = floor_now_us();
    for (int k = 0; k < nl; k++) {
      memset(mine[k].data, (int)(flag & 0xff), sizeof mine[k].data);
      atomic_store_explicit(&mine[k].flag, flag, memory_order_release);
    }
    if (fence)
      atomic_store_explicit(&s->step[me].flag, flag, memory_order_seq_cst);
    if (all || lead) {
      if (lead)
        while (atomic_load_explicit(&theirs[0].flag, memory_order_relaxed) !=
               flag)
          relax();
      for (;;) {
        int ok = 1;
        for (int k = 0; k < nl; k++)
          ok &= atomic_load_explicit(&theirs[k].flag, memory_order_acquire) ==
                flag;
        if (ok)
          break;
        relax();
      }
    } else {
      for (int k = 0; k < nl; k++)
        while (atomic_load_explicit(&theirs[k].flag, memory_order_acquire) !=
               flag)
          relax();
    }
    if (copy)
      for (int k = 0; k < nl; k++)
        memcpy(out + 56 * k, theirs[k].data, 56);
    double t1 = floor_now_us();
    if (i >= 0) {
      double *mt = times + (size_t)me * per;
      mt[i] = t1 - t0;
      arrival_record(mt + iters, (size_t)iters, (size_t)i, t0, t1, 0);
    }
  }
  double period = (floor_now_us() - start) / (double)iters;
  if (me == 1)
    _exit(0);
  waitpid(child, NULL, 0);
  for (size_t i = 0; i < per; i++) /* the MAX over the two */
    if (times[per + i] > times[i])
      times[i] = times[per + i];
  double spread, after_last, from_root;
  arrival_medians(times + iters, (size_t)iters, &spread, &after_last,
                  &from_root);
  qsort(times, (size_t)iters, sizeof *times, floor_cmp_double);
  /* The median as gang-bench takes it: the middle pair's mean when even. */
  double median = iters % 2 ? times[iters / 2]
                            : (times[iters / 2 - 1] + times[iters / 2]) / 2;
  printf("line_floor %d line%s: %.3f us (median of %ld, max of the two "
         "processes); period %.3f us; entry spread %.3f us, after last "
         "arrival %.3f us\n",
         nl, nl == 1 ? "" : "s", median, iters, period, spread, after_last);
  return 0;
}
