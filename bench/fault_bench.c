/* fault_bench: how long survivors take to learn that a peer died.
 *
 * For each trial it starts `ranks` processes that form a gang over a store
 * (in its own process), lets them run, SIGKILLs the last rank and records,
 * on every survivor, the time from the kill to the error its collective
 * returned. Two situations:
 *   busy  survivors and victim loop over a large all_reduce (the kill lands
 *         mid-transfer);
 *   idle  survivors wait in a barrier the victim never enters.
 * Prints p50, p99 and max over all survivors of all trials, and the status
 * every survivor got (expected: PEER_LOST).
 *
 *   fault_bench [--ranks N] [--trials T] [--mode busy|idle] [--mib M]
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gang/gang.h"
#include "gang/store.h"
#include "store_proc.h"

#define MAX_RANKS 64

typedef struct shared {
  atomic_int joined;    /* ranks that created their gang */
  atomic_int entered;   /* survivors inside the measured collective */
  atomic_llong kill_ns; /* when the victim was killed */
  long long took_ns[MAX_RANKS];
  int status[MAX_RANKS];
} shared;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

static void rank_main(int rank, int n, int port, int trial, int busy,
                      size_t count, shared *sh) {
  char addr[96];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/fault/%d", port, trial);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 120000;
  gang_t *g = NULL;
  if (gang_create_with_store(&o, addr, rank, n, &g) != GANG_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, gang_last_error());
    _exit(2);
  }
  float *buf = busy ? calloc(count, sizeof *buf) : NULL;
  atomic_fetch_add(&sh->joined, 1);
  gang_status st = GANG_OK;
  if (rank == n - 1) { /* the victim */
    for (;;)
      if (busy)
        (void)gang_all_reduce(g, buf, count, GANG_FLOAT32, GANG_SUM);
      else
        pause();
  }
  atomic_fetch_add(&sh->entered, 1);
  if (busy)
    while (st == GANG_OK)
      st = gang_all_reduce(g, buf, count, GANG_FLOAT32, GANG_SUM);
  else
    st = gang_barrier(g);
  long long t = now_ns();
  sh->took_ns[rank] = t - atomic_load(&sh->kill_ns);
  sh->status[rank] = st;
  gang_destroy(g);
  free(buf);
  _exit(0);
}

int main(int argc, char **argv) {
  int n = 4, trials = 10, busy = 1;
  size_t mib = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--trials") && i + 1 < argc)
      trials = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
      mib = (size_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
      i++;
      if (strcmp(argv[i], "busy") && strcmp(argv[i], "idle")) {
        fprintf(stderr, "fault_bench: --mode takes busy or idle\n");
        return 2;
      }
      busy = !strcmp(argv[i], "busy");
    } else {
      fprintf(stderr, "usage: fault_bench [--ranks N] [--trials T] "
                      "[--mode busy|idle] [--mib M]\n");
      return 2;
    }
  }
  if (n < 2 || n > MAX_RANKS || trials < 1) {
    fprintf(stderr, "fault_bench: --ranks must be 2..%d, --trials >= 1\n",
            MAX_RANKS);
    return 2;
  }
  int port = -1;
  pid_t store = bench_store_start(&port);
  if (store < 0 || port <= 0) {
    fprintf(stderr, "fault_bench: the store did not start\n");
    return 1;
  }
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  long long *all = calloc((size_t)(trials * n), sizeof *all);
  int samples = 0, bad = 0;
  size_t count = mib * 1024 * 1024 / sizeof(float);
  for (int t = 0; t < trials; t++) {
    memset(sh, 0, sizeof *sh);
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < n; r++) {
      pids[r] = fork();
      if (pids[r] == 0)
        rank_main(r, n, port, t, busy, count, sh);
    }
    /* Wait until everyone joined and the survivors are in their
     * collective, then give the traffic a moment to be mid-flight. */
    long long give_up = now_ns() + 60000000000LL;
    while (
        (atomic_load(&sh->joined) < n || atomic_load(&sh->entered) < n - 1) &&
        now_ns() < give_up)
      pause_ms(1);
    pause_ms(busy ? 50 + (t * 37) % 200 : 20);
    atomic_store(&sh->kill_ns, now_ns());
    kill(pids[n - 1], SIGKILL);
    for (int r = 0; r < n; r++)
      waitpid(pids[r], NULL, 0);
    for (int r = 0; r < n - 1; r++) {
      all[samples++] = sh->took_ns[r];
      if (sh->status[r] != GANG_PEER_LOST)
        bad++;
    }
  }
  kill(store, SIGKILL);
  waitpid(store, NULL, 0);
  qsort(all, (size_t)samples, sizeof *all, cmp_ll);
  printf("# fault_bench: %d ranks, %d trials, mode %s%s, %d survivor samples\n",
         n, trials, busy ? "busy" : "idle",
         busy ? "" : " (barrier the victim never enters)", samples);
  if (busy)
    printf("# all_reduce of %zu MiB float32 per iteration\n", mib);
  printf("detection after kill -9 (ms): p50 %.2f  p99 %.2f  max %.2f\n",
         all[samples / 2] / 1e6, all[(samples * 99) / 100] / 1e6,
         all[samples - 1] / 1e6);
  printf("survivors without PEER_LOST: %d\n", bad);
  free(all);
  munmap(sh, sizeof *sh);
  return bad ? 1 : 0;
}
