/* The reconfigurable gang (gang/ft.h): unconfigured it refuses collectives
 * without breaking; configured, it is a gang; every configure needs a
 * fresh prefix; a configure aborts the previous incarnation's in-flight
 * works within a second; and 1000 configure cycles leave no descriptors,
 * threads, arena mappings or memory behind. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/ft.h"
#include "gang/gang.h"
#include "gang/store.h"

static int g_round;

static void addr_of(char *buf, size_t cap, const char *what, int n) {
  snprintf(buf, cap, "127.0.0.1:%d/ft-%s-%d-%d", gt_store_port(), what, g_round,
           n);
}

/* Resident set size in KiB. */
static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f != NULL) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static int basics_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 20000;
  gang_t *g = NULL;
  RCHECK_OK(gang_ft_create(&o, &g));
  RCHECK(!gang_ft_configured(g) && gang_size(g) == 0);
  float v[4] = {1, 2, 3, 4};
  /* Unconfigured: refused, but not broken. */
  RCHECK(gang_all_reduce(g, v, 4, GANG_FLOAT32, GANG_SUM) ==
         GANG_INVALID_USAGE);
  RCHECK(strstr(gang_last_error(), "not configured") != NULL);
  RCHECK(gang_barrier(g) == GANG_INVALID_USAGE);
  char addr[160];
  for (int inc = 0; inc < 3; inc++) {
    addr_of(addr, sizeof addr, "basics", inc);
    RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
    RCHECK(gang_ft_configured(g));
    RCHECK(gang_rank(g) == rank && gang_size(g) == size);
    for (int i = 0; i < 4; i++)
      v[i] = (float)(rank + i + inc);
    RCHECK_OK(gang_all_reduce(g, v, 4, GANG_FLOAT32, GANG_SUM));
    for (int i = 0; i < 4; i++)
      RCHECK(v[i] == (float)(size * (i + inc) + size * (size - 1) / 2));
  }
  /* The same prefix again: refused, naming it. */
  gang_status st = gang_ft_configure(g, addr, rank, size, 20000);
  RCHECK(st == GANG_INVALID_USAGE);
  RCHECK(strstr(gang_last_error(), "used before") != NULL);
  RCHECK(!gang_ft_configured(g));
  /* No prefix at all: refused too. */
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gt_store_port());
  RCHECK(gang_ft_configure(g, addr, rank, size, 20000) ==
         GANG_INVALID_ARGUMENT);
  gang_destroy(g);
  return 0;
}

static void test_configure_cycles_and_prefixes(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, basics_rank, NULL, 60000), 0);
}

/* Rank 1 never joins the all_reduce rank 0 posts; a configure on rank 0
 * while another thread waits for that work must end it with GANG_ABORTED
 * within 1 s. Rank 1 stays until rank 0 says (through the store) it is
 * done, so the work ends by the abort, not by a lost peer. */
typedef struct abort_job {
  gang_work *w;
  gang_status st;
  double ended;
} abort_job;

static void *waiter(void *arg) {
  abort_job *j = arg;
  j->st = gang_work_wait(j->w, -1);
  j->ended = gt_now_s();
  return NULL;
}

static int abort_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 30000;
  gang_t *g = NULL;
  RCHECK_OK(gang_ft_create(&o, &g));
  char addr[160], sync[160];
  addr_of(addr, sizeof addr, "abort", 0);
  addr_of(sync, sizeof sync, "abort-sync", 0);
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(sync, NULL, &st));
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  if (rank == 0) {
    float v[1] = {1};
    abort_job j = {NULL, GANG_OK, 0};
    RCHECK_OK(gang_all_reduce_post(g, v, 1, GANG_FLOAT32, GANG_SUM, &j.w));
    pthread_t t;
    RCHECK(pthread_create(&t, NULL, waiter, &j) == 0);
    double t0 = gt_now_s();
    /* The next incarnation is rank 0 alone. */
    addr_of(addr, sizeof addr, "abort-alone", 0);
    RCHECK_OK(gang_ft_configure(g, addr, 0, 1, 20000));
    pthread_join(t, NULL);
    fprintf(stderr, "in-flight work ended %.3f s after the configure: %s\n",
            j.ended - t0, gang_status_name(j.st));
    RCHECK(j.st == GANG_ABORTED);
    RCHECK(j.ended - t0 < 1.0);
    gang_work_free(j.w);
    v[0] = 5;
    RCHECK_OK(gang_all_reduce(g, v, 1, GANG_FLOAT32, GANG_SUM));
    RCHECK(v[0] == 5);
    RCHECK_OK(gang_store_set(st, "done", "1", 1));
  } else {
    void *v = NULL;
    size_t n = 0;
    RCHECK_OK(gang_store_get(st, "done", &v, &n));
    gang_store_free(v);
  }
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_configure_aborts_in_flight_work(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, abort_rank, NULL, 60000), 0);
}

/* 1000 configure cycles: no growth of fds, threads, arena mappings, RSS. */
#define CYCLES 1000
static int cycles_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = NULL;
  RCHECK_OK(gang_ft_create(NULL, &g));
  char addr[160];
  int fds = 0, threads = 0, maps = 0;
  long rss = 0;
  for (int i = 0; i < CYCLES; i++) {
    addr_of(addr, sizeof addr, "cycles", i);
    RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
    float v[2] = {1, 1};
    RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
    RCHECK(v[0] == (float)size);
    if (i == 99) { /* after warm-up: allocator pools, TLS, caches */
      fds = gt_count_fds();
      threads = gt_count_threads();
      maps = gt_count_shm_maps();
      rss = rss_kib();
    }
  }
  fprintf(stderr,
          "rank %d after %d cycles: fds %d -> %d, threads %d -> %d, arena "
          "maps %d -> %d, RSS %ld -> %ld KiB\n",
          rank, CYCLES, fds, gt_count_fds(), threads, gt_count_threads(), maps,
          gt_count_shm_maps(), rss, rss_kib());
  RCHECK(gt_count_fds() == fds);
  RCHECK(gt_count_threads_settled(threads) == threads);
  RCHECK(gt_count_shm_maps() == maps);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* Sanitizers keep freed memory in quarantine: RSS says nothing there. */
  RCHECK(rss_kib() - rss < 4096); /* under 4 MiB over 900 cycles */
#endif
  gang_destroy(g);
  RCHECK(gt_count_shm_maps() == 0);
  return 0;
}

static void test_thousand_cycles_leak_nothing(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, cycles_rank, NULL, 280000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_configure_cycles_and_prefixes),
      GT_TEST(test_configure_aborts_in_flight_work),
      GT_TEST(test_thousand_cycles_leak_nothing),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
