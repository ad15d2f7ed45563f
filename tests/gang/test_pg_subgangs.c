/* Sub-gangs share the world's connections: creating 100 of them opens no
 * socket, and collectives on different gangs run concurrently from
 * different threads (each thread may end up driving the other's I/O).
 * Members that run ahead of the others: a root that left before a member
 * attached, a broadcast root ahead of its readers. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"

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

/* A handle on the test's store under "<name>-sync", for ranks to signal
 * each other outside the gang. */
static gang_status sync_store(const char *name, gang_store **st) {
  char addr[96];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/%s-sync", g_port, name);
  return gang_store_connect(addr, NULL, st);
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
  RCHECK(gt_count_threads_settled(threads) == threads);
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

/* Paced exchanges under load: four gangs over the same four ranks in
 * different orders (so their rings run in different directions over the
 * same connections), each driven by its own thread with its own
 * collective (all_gather, all_reduce or reduce_scatter, sizes varying by
 * round), plus a thread sending point-to-point around the world ring,
 * all over TCP in 1000-byte pieces. Nothing may hang, fail or come out
 * wrong. */
typedef struct mixed_job {
  gang_t *g;
  int kind; /* 0 all_gather, 1 all_reduce, 2 reduce_scatter, 3 p2p ring */
  int seed;
  int failed;
} mixed_job;

static int mixed_round(mixed_job *j, int it) {
  int n = gang_size(j->g), r = gang_rank(j->g);
  size_t blk = 50000 + (size_t)((it * 7919 + j->seed) % 40000);
  gang_status st = GANG_OK;
  int bad = 0;
  if (j->kind == 0) {
    uint8_t *in = malloc(blk), *out = malloc(blk * (size_t)n);
    memset(in, r + it, blk);
    st = gang_all_gather(j->g, out, in, blk, GANG_UINT8);
    for (int q = 0; st == GANG_OK && q < n; q++)
      for (size_t i = 0; i < blk; i += 997)
        bad |= out[(size_t)q * blk + i] != (uint8_t)(q + it);
    free(in), free(out);
  } else if (j->kind == 1) {
    size_t cnt = blk * (size_t)n / 4 + 3;
    float *v = malloc(cnt * sizeof *v);
    for (size_t i = 0; i < cnt; i++)
      v[i] = (float)(r + 1);
    st = gang_all_reduce(j->g, v, cnt, GANG_FLOAT32, GANG_SUM);
    for (size_t i = 0; st == GANG_OK && i < cnt; i += 101)
      bad |= v[i] != (float)(n * (n + 1) / 2);
    free(v);
  } else if (j->kind == 2) {
    size_t cnt = blk / 4;
    int32_t *in = malloc(cnt * sizeof *in * (size_t)n);
    int32_t *out = malloc(cnt * sizeof *out);
    for (size_t i = 0; i < cnt * (size_t)n; i++)
      in[i] = r;
    st = gang_reduce_scatter(j->g, out, in, cnt, GANG_INT32, GANG_SUM);
    for (size_t i = 0; st == GANG_OK && i < cnt; i++)
      bad |= out[i] != n * (n - 1) / 2;
    free(in), free(out);
  } else {
    size_t len = 300000;
    uint8_t *a = malloc(len), *b = malloc(len);
    memset(a, r, len);
    gang_work *ws = NULL, *wr = NULL;
    st = gang_recv_post(j->g, b, len, (r - 1 + n) % n, it, &wr);
    if (st == GANG_OK)
      st = gang_send_post(j->g, a, len, (r + 1) % n, it, &ws);
    if (st == GANG_OK)
      st = gang_work_wait(ws, -1);
    if (st == GANG_OK)
      st = gang_work_wait(wr, -1);
    gang_work_free(ws), gang_work_free(wr);
    bad |= st == GANG_OK && b[len - 1] != (uint8_t)((r - 1 + n) % n);
    free(a), free(b);
  }
  if (st != GANG_OK)
    fprintf(stderr, "kind %d round %d: %s\n", j->kind, it, gang_last_error());
  else if (bad)
    fprintf(stderr, "kind %d round %d: wrong result\n", j->kind, it);
  return st != GANG_OK || bad;
}

static void *mixed_loop(void *arg) {
  mixed_job *j = arg;
  for (int it = 0; it < 12 && !j->failed; it++)
    j->failed = mixed_round(j, it);
  return NULL;
}

static int mixed_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_TCP_PIECE", "1000", 1);
  gang_t *g = NULL, *s[4];
  RCHECK_OK(join(rank, size, "mixed", 30000, &g));
  int orders[4][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {0, 2, 1, 3}, {1, 3, 0, 2}};
  for (int k = 0; k < 4; k++)
    RCHECK_OK(gang_create_subgang(g, orders[k], 4, &s[k]));
  /* Thread k of rank r drives gang (k + r) % 4: each gang is driven by a
   * thread started at a different moment on every rank. */
  mixed_job jobs[5];
  pthread_t t[5];
  for (int k = 0; k < 4; k++) {
    int which = (k + rank) % 4;
    jobs[k] = (mixed_job){s[which], which % 3, which * 131, 0};
  }
  jobs[4] = (mixed_job){g, 3, 0, 0};
  for (int k = 0; k < 5; k++) {
    RCHECK(pthread_create(&t[k], NULL, mixed_loop, &jobs[k]) == 0);
    struct timespec gap = {0, (long)(k % 3) * 1000 * 1000};
    nanosleep(&gap, NULL);
  }
  for (int k = 0; k < 5; k++)
    pthread_join(t[k], NULL);
  for (int k = 0; k < 5; k++)
    RCHECK(!jobs[k].failed);
  for (int k = 0; k < 4; k++)
    gang_destroy(s[k]);
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  return 0;
}

static void test_paced_mixed_load(void **state) {
  (void)state;
  run_with_store(4, mixed_rank);
}

/* A member that runs ahead: the root of small broadcasts never waits for
 * its readers, so it can create a sub-gang, broadcast, destroy it and
 * leave before another member has even created it. The late member must
 * still find what the root published (the channel may not be freed, nor
 * its pages cleared, before every member has attached). Rank 1 tells rank
 * 0 through the store when it is done. */
static int late_member_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = NULL;
  RCHECK_OK(join(rank, size, "late-member", 5000, &g));
  gang_store *st = NULL;
  RCHECK_OK(sync_store("late-member", &st));
  int both[2] = {0, 1};
  gang_t *sub = NULL;
  if (rank == 0) {
    void *v = NULL;
    size_t n = 0;
    RCHECK_OK(gang_store_get(st, "root-left", &v, &n));
    gang_store_free(v);
  }
  RCHECK_OK(gang_create_subgang(g, both, 2, &sub));
  for (int i = 0; i < 3; i++) {
    int32_t v[4] = {rank == 1 ? 100 + i : -1, rank == 1 ? 7 : -1, i, i};
    RCHECK_OK(gang_broadcast(sub, v, 4, GANG_INT32, 1));
    RCHECK(v[0] == 100 + i && v[1] == 7 && v[2] == i);
  }
  gang_destroy(sub);
  if (rank == 1)
    RCHECK_OK(gang_store_set(st, "root-left", "1", 1));
  RCHECK_OK(gang_barrier(g));
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_member_attaching_after_root_left(void **state) {
  (void)state;
  run_with_store(2, late_member_rank);
}

/* The root of mid-sized broadcasts (a slot of a staging buffer each) runs
 * ahead of its readers as a small one does: rank 0 sends twelve of 4 KiB
 * before the others start to read (a root that waits for its readers times
 * out here, and the readers give up waiting for it), and they find every
 * one. Then broadcasts from every root, small (8 B), slotted (4 KiB, and
 * 8000 B of the 8 KiB slots of 64 KiB chunks) and staged in one or two
 * chunks (12 and 80 KB), all_reduces of up to 80 KB that write whole
 * buffers and all_gathers run back to back in an order every rank draws
 * alike, and every result is checked. */
#define AHEAD_CALLS 12
#define AHEAD_COUNT 1024

static int32_t ahead_value(int call, int root, size_t j) {
  return call * 100003 + root * 1009 + (int32_t)j;
}

static int ahead_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_CHUNK", "65536", 1); /* slots of 8 KiB */
  gang_t *g = NULL;
  RCHECK_OK(join(rank, size, "ahead", 5000, &g));
  gang_store *st = NULL;
  RCHECK_OK(sync_store("ahead", &st));
  RCHECK_OK(gang_store_set_timeout(st, 15000));
  static int32_t v[20000], w[3 * 20000];
  if (rank != 0) {
    void *got = NULL;
    size_t n = 0;
    RCHECK_OK(gang_store_get(st, "sent", &got, &n));
    gang_store_free(got);
  }
  for (int i = 0; i < AHEAD_CALLS; i++) {
    for (size_t j = 0; j < AHEAD_COUNT; j++)
      v[j] = rank == 0 ? ahead_value(i, 0, j) : -1;
    RCHECK_OK(gang_broadcast(g, v, AHEAD_COUNT, GANG_INT32, 0));
    for (size_t j = 0; j < AHEAD_COUNT; j++)
      RCHECK(v[j] == ahead_value(i, 0, j));
  }
  if (rank == 0)
    RCHECK_OK(gang_store_set(st, "sent", "1", 1));
  static const size_t counts[] = {2, 1024, 2000, 3072, 20000};
  uint64_t draw = 0x243f6a8885a308d3ull,
           mine = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
  for (int i = 0; i < 300; i++) {
    /* Each rank naps now and then on its own draw, so that a root runs
     * ahead of a reader that is still copying out. */
    mine = mine * 6364136223846793005ull + 1442695040888963407ull;
    if ((mine >> 60) < 3) {
      struct timespec nap = {0, (long)((mine >> 20) % 400000)};
      nanosleep(&nap, NULL);
    }
    draw = draw * 6364136223846793005ull + 1442695040888963407ull;
    int what = (int)(draw >> 60) % 4, root = (int)(draw >> 40) % size;
    size_t count = counts[(draw >> 20) % 5];
    if (what < 2) {
      for (size_t j = 0; j < count; j++)
        v[j] = rank == root ? ahead_value(i, root, j) : -1;
      RCHECK_OK(gang_broadcast(g, v, count, GANG_INT32, root));
      for (size_t j = 0; j < count; j++)
        RCHECK(v[j] == ahead_value(i, root, j));
    } else if (what == 2) {
      for (size_t j = 0; j < count; j++)
        v[j] = ahead_value(i, rank, j);
      RCHECK_OK(gang_all_reduce(g, v, count, GANG_INT32, GANG_MAX));
      for (size_t j = 0; j < count; j++)
        RCHECK(v[j] == ahead_value(i, size - 1, j));
    } else {
      count = count > 10240 ? 10240 : count;
      for (size_t j = 0; j < count; j++)
        v[j] = ahead_value(i, rank, j);
      RCHECK_OK(gang_all_gather(g, w, v, count, GANG_INT32));
      for (int m = 0; m < size; m++)
        for (size_t j = 0; j < count; j++)
          RCHECK(w[(size_t)m * count + j] == ahead_value(i, m, j));
    }
  }
  RCHECK_OK(gang_barrier(g));
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_broadcast_root_runs_ahead(void **state) {
  (void)state;
  run_with_store(3, ahead_rank);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_subgangs_share_connections),
      GT_TEST(test_paced_exchanges_of_two_gangs),
      GT_TEST(test_blocking_call_after_posted_works),
      GT_TEST(test_paced_mixed_load),
      GT_TEST(test_member_attaching_after_root_left),
      GT_TEST(test_broadcast_root_runs_ahead)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
