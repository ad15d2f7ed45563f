/* Sub-gangs share the world's connections: creating 100 of them opens no
 * socket, and collectives on different gangs run concurrently from
 * different threads (each thread may end up driving the other's I/O). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"

static int g_port;

/* Joins the test's world gang `name` through the test's store. */
static gang_status join(int rank, int size, const char *name,
                        int64_t timeout_ms, gang_t **g) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/%s", g_port, name);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  return gang_create_with_store(&o, addr, rank, size, g);
}

/* Runs `fn` as n ranks against a store server of their own. */
static void run_with_store(int n, gt_rank_fn fn) {
  gt_store_proc srv = gt_store_proc_start(NULL);
  g_port = srv.port;
  assert_int_equal(gt_run_ranks(n, fn, NULL, 120000), 0);
  gt_store_proc_stop(&srv);
}

typedef struct job {
  gang_t *g;
  int iters;
  int failed;
  long delay_ns; /* big_reduce_loop: sleep before each collective */
} job;

static void *reduce_loop(void *arg) {
  job *j = arg;
  int n = gang_size(j->g), r = gang_rank(j->g);
  int64_t v[257];
  for (int it = 0; it < j->iters && !j->failed; it++) {
    /* Alternate a small (recursive doubling) and a larger size. */
    int count = it % 2 ? 257 : 3;
    for (int i = 0; i < count; i++)
      v[i] = (int64_t)r * 1000 + i + it;
    if (gang_all_reduce(j->g, v, (size_t)count, GANG_INT64, GANG_SUM) !=
        GANG_OK) {
      fprintf(stderr, "all_reduce: %s\n", gang_last_error());
      j->failed = 1;
      break;
    }
    for (int i = 0; i < count; i++)
      if (v[i] != (int64_t)1000 * n * (n - 1) / 2 + (int64_t)n * (i + it))
        j->failed = 1;
  }
  return NULL;
}

static int rank_main(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = NULL;
  RCHECK_OK(join(rank, size, "sub", 60000, &g));
  int fds = gt_count_fds(), threads = gt_count_threads();
  gang_t *subs[100];
  for (int i = 0; i < 100; i++) {
    /* Alternate split (collective all_gather) and explicit lists. */
    if (i % 2) {
      RCHECK_OK(gang_split(g, (rank + i) % 3, size - rank, &subs[i]));
    } else {
      int all[8];
      for (int k = 0; k < size; k++)
        all[k] = (k + i) % size;
      RCHECK_OK(gang_create_subgang(g, all, size, &subs[i]));
    }
    RCHECK(subs[i] != NULL);
  }
  RCHECK(gt_count_fds() == fds);
  RCHECK(gt_count_threads() == threads);
  /* Each sub-gang works. */
  for (int i = 0; i < 100; i++) {
    int64_t one = 1;
    RCHECK_OK(gang_all_reduce(subs[i], &one, 1, GANG_INT64, GANG_SUM));
    RCHECK(one == gang_size(subs[i]));
  }
  /* Two threads, two gangs over the same ranks, at the same time. */
  job a = {subs[0], 300, 0, 0}, b = {subs[2], 300, 0, 0};
  pthread_t ta, tb;
  RCHECK(pthread_create(&ta, NULL, reduce_loop, &a) == 0);
  RCHECK(pthread_create(&tb, NULL, reduce_loop, &b) == 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  RCHECK(!a.failed && !b.failed);
  for (int i = 0; i < 100; i++)
    gang_destroy(subs[i]);
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  return 0;
}

static void test_subgangs_share_connections(void **state) {
  (void)state;
  run_with_store(4, rank_main);
}

/* Exchanges over TCP run in lockstep pieces (GANG_TCP_PIECE): a send waits
 * for the peer's data. Two gangs over the same pair of ranks, driven by two
 * threads that start in opposite orders on the two ranks, must not wait for
 * each other through the shared connection (each one's send queued behind
 * the other's paced send). */
static void *big_reduce_loop(void *arg) {
  job *j = arg;
  int n = gang_size(j->g), r = gang_rank(j->g);
  size_t count = 256 * 1024; /* 1 MiB of float: many pieces */
  float *v = malloc(count * sizeof *v);
  if (v == NULL) {
    j->failed = 1;
    return NULL;
  }
  for (int it = 0; it < j->iters && !j->failed; it++) {
    struct timespec ts = {0, j->delay_ns};
    nanosleep(&ts, NULL);
    for (size_t i = 0; i < count; i++)
      v[i] = (float)(r + 1) * (float)(i % 7 + it);
    if (gang_all_reduce(j->g, v, count, GANG_FLOAT32, GANG_SUM) != GANG_OK) {
      fprintf(stderr, "all_reduce: %s\n", gang_last_error());
      j->failed = 1;
      break;
    }
    for (size_t i = 0; i < count; i++)
      if (v[i] != (float)(n * (n + 1) / 2) * (float)(i % 7 + it)) {
        fprintf(stderr, "all_reduce: element %zu is %g\n", i, (double)v[i]);
        j->failed = 1;
        break;
      }
  }
  free(v);
  return NULL;
}

static int paced_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_TCP_PIECE", "4k", 1);
  gang_t *g = NULL, *x = NULL, *y = NULL;
  /* A short timeout: a wait cycle fails the test instead of hanging. */
  RCHECK_OK(join(rank, size, "paced", 20000, &g));
  int all[2] = {0, 1};
  RCHECK_OK(gang_create_subgang(g, all, 2, &x));
  RCHECK_OK(gang_create_subgang(g, all, 2, &y));
  /* Each round, rank 0 starts x's all_reduce 1 ms before y's and rank 1
   * the other way round: the two gangs' exchanges are in flight at once,
   * in opposite orders on the two ranks. */
  long late = 1000 * 1000;
  job a = {x, 60, 0, rank ? late : 0}, b = {y, 60, 0, rank ? 0 : late};
  pthread_t ta, tb;
  RCHECK(pthread_create(&ta, NULL, big_reduce_loop, &a) == 0);
  RCHECK(pthread_create(&tb, NULL, big_reduce_loop, &b) == 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  RCHECK(!a.failed && !b.failed);
  gang_destroy(x);
  gang_destroy(y);
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  return 0;
}

static void test_paced_exchanges_of_two_gangs(void **state) {
  (void)state;
  run_with_store(2, paced_rank);
}

/* A blocking call runs without the gang's lock when nothing is queued or
 * running (pg_post). Posted works queued ahead of it must still run first,
 * on every rank, whether the worker thread or the caller runs them. Each
 * call has its own count, so over shared memory (this test's transport)
 * an overtaking shows up at once as a mismatch of the step's signature
 * (over TCP it would be a timeout: messages match by sequence number). */
static int order_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = NULL;
  RCHECK_OK(join(rank, size, "order", 20000, &g));
  enum { K = 6 };
  int64_t v[K][K + 2], b[K + 2];
  for (int round = 0; round < 200; round++) {
    gang_work *w[K];
    int posted = round % K + 1;
    for (int k = 0; k < posted; k++) {
      for (int i = 0; i < k + 1; i++)
        v[k][i] = rank + k + round;
      RCHECK_OK(gang_all_reduce_post(g, v[k], (size_t)k + 1, GANG_INT64,
                                     GANG_SUM, &w[k]));
    }
    for (int i = 0; i < K + 2; i++)
      b[i] = rank;
    RCHECK_OK(gang_all_reduce(g, b, K + 2, GANG_INT64, GANG_SUM));
    for (int i = 0; i < K + 2; i++)
      RCHECK(b[i] == size * (size - 1) / 2);
    for (int k = 0; k < posted; k++) {
      RCHECK_OK(gang_work_wait(w[k], -1));
      gang_work_free(w[k]);
      for (int i = 0; i < k + 1; i++)
        RCHECK(v[k][i] == size * (size - 1) / 2 + size * (k + round));
    }
  }
  gang_destroy(g);
  return 0;
}

static void test_blocking_call_after_posted_works(void **state) {
  (void)state;
  run_with_store(3, order_rank);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_subgangs_share_connections),
      GT_TEST(test_paced_exchanges_of_two_gangs),
      GT_TEST(test_blocking_call_after_posted_works)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
