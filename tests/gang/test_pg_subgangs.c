/* Sub-gangs share the world's connections: creating 100 of them opens no
 * socket, and collectives on different gangs run concurrently from
 * different threads (each thread may end up driving the other's I/O). */
#include <pthread.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"

static int g_port;

typedef struct job {
  gang_t *g;
  int iters;
  int failed;
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
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/sub", g_port);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 60000;
  gang_t *g = NULL;
  RCHECK_OK(gang_create_with_store(&o, addr, rank, size, &g));
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
  job a = {subs[0], 300, 0}, b = {subs[2], 300, 0};
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
  gt_store_proc srv = gt_store_proc_start(NULL);
  g_port = srv.port;
  assert_int_equal(gt_run_ranks(4, rank_main, NULL, 120000), 0);
  gt_store_proc_stop(&srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {GT_TEST(test_subgangs_share_connections)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
