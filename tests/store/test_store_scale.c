/* Many clients: a 64-process rendezvous (set address, add, multi_get of
 * everyone's), and 1024 concurrent connections from 16 processes while a
 * parked get on another connection blocks none of them. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"
#include "raw.h"

#include "core/clock.h"
#include "gang/store.h"

static int g_port;

static gang_store *rank_connect(const char *suffix) {
  char addr[96];
  snprintf(addr, sizeof addr, "127.0.0.1:%d%s", g_port, suffix);
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.secret = "scale-secret";
  o.timeout_ms = 60000;
  gang_store *st = NULL;
  if (gang_store_connect(addr, &o, &st) != GANG_OK) {
    fprintf(stderr, "connect: %s\n", gang_last_error());
    return NULL;
  }
  return st;
}

static int rendezvous_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_store *st = rank_connect("/rdzv");
  RCHECK(st != NULL);
  char key[32], val[64];
  snprintf(key, sizeof key, "addr/%d", rank);
  snprintf(val, sizeof val, "host-%d:%d", rank, 1000 + rank);
  RCHECK_OK(gang_store_set(st, key, val, strlen(val)));
  int64_t n = 0;
  RCHECK_OK(gang_store_add(st, "arrived", 1, &n));
  RCHECK(n >= 1 && n <= size);
  char *kbuf = malloc((size_t)size * 32);
  const char **keys = malloc(sizeof *keys * (size_t)size);
  void **vals = malloc(sizeof *vals * (size_t)size);
  size_t *lens = malloc(sizeof *lens * (size_t)size);
  for (int i = 0; i < size; i++) {
    snprintf(kbuf + 32 * i, 32, "addr/%d", i);
    keys[i] = kbuf + 32 * i;
  }
  RCHECK_OK(gang_store_multi_get(st, keys, (size_t)size, vals, lens));
  for (int i = 0; i < size; i++) {
    snprintf(val, sizeof val, "host-%d:%d", i, 1000 + i);
    RCHECK(lens[i] == strlen(val) && memcmp(vals[i], val, lens[i]) == 0);
    gang_store_free(vals[i]);
  }
  /* A store barrier: the last to arrive opens it. */
  RCHECK_OK(gang_store_add(st, "done", 1, &n));
  if (n == size)
    RCHECK_OK(gang_store_set(st, "barrier", "open", 4));
  const char *b[] = {"barrier"};
  RCHECK_OK(gang_store_wait(st, b, 1, -1));
  free(kbuf), free(keys), free(vals), free(lens);
  gang_store_close(st);
  return 0;
}

/* The server runs in its own process (gt_store_proc_start says why). */
static gt_store_proc start(void) {
  gt_store_proc sp = gt_store_proc_start("scale-secret");
  g_port = sp.port;
  return sp;
}

static void test_64_process_rendezvous(void **state) {
  (void)state;
  gt_store_proc srv = start();
  int64_t t0 = gang__now_ns();
  assert_int_equal(gt_run_ranks(64, rendezvous_rank, NULL, 90000), 0);
  printf("64-process rendezvous: %lld ms\n",
         (long long)((gang__now_ns() - t0) / 1000000));
  gang_store *st = rank_connect("/rdzv");
  assert_non_null(st);
  int64_t n;
  assert_gang_ok(gang_store_add(st, "arrived", 0, &n));
  assert_int_equal(n, 64);
  gang_store_close(st);
  gt_store_proc_stop(&srv);
}

#define PROCS 16
#define PER_PROC 64

static int many_conns_rank(int rank, int size, void *arg) {
  (void)rank;
  (void)arg;
  gang_store *h[PER_PROC];
  for (int i = 0; i < PER_PROC; i++) {
    h[i] = rank_connect("");
    RCHECK(h[i] != NULL);
  }
  const int total = size * PER_PROC;
  for (int i = 0; i < PER_PROC; i++) {
    int64_t n;
    RCHECK_OK(gang_store_add(h[i], "joined", 1, &n));
    if (n == total)
      RCHECK_OK(gang_store_set(h[i], "all-joined", "1", 1));
  }
  /* Every connection is open and waits for the last one. */
  for (int i = 0; i < PER_PROC; i++) {
    void *v;
    size_t n;
    RCHECK_OK(gang_store_get(h[i], "all-joined", &v, &n));
    gang_store_free(v);
  }
  for (int i = 0; i < PER_PROC; i++)
    gang_store_close(h[i]);
  return 0;
}

/* The parked get runs in a process of its own, not a thread: forking the
 * ranks while this process has a thread of its own risks a child that
 * inherits a lock held by that thread (ThreadSanitizer's runtime takes
 * locks the C library's fork handlers do not know about). Exits 0 once
 * its get returns the value. */
static pid_t start_parked_get(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  gang_store *st = rank_connect("");
  int64_t n;
  void *v;
  size_t len;
  if (st == NULL || gang_store_add(st, "parked", 1, &n) != GANG_OK)
    _exit(2);
  if (gang_store_get(st, "release", &v, &len) != GANG_OK) {
    fprintf(stderr, "parked get: %s\n", gang_last_error());
    _exit(3);
  }
  gang_store_free(v);
  gang_store_close(st);
  gt_child_exit(0);
}

static void test_1024_connections(void **state) {
  (void)state;
  gt_store_proc srv = start();
  gang_store *ctl = rank_connect("");
  assert_non_null(ctl);
  pid_t getter = start_parked_get();
  assert_true(getter > 0);
  /* Its add comes just before its get on one connection. */
  const char *parked[] = {"parked"};
  assert_gang_ok(gang_store_wait(ctl, parked, 1, 60000));
  int64_t t0 = gang__now_ns();
  assert_int_equal(gt_run_ranks(PROCS, many_conns_rank, NULL, 120000), 0);
  printf("%d concurrent connections joined and released in %lld ms\n",
         PROCS * PER_PROC, (long long)((gang__now_ns() - t0) / 1000000));
  /* The parked get was still waiting all along; now release it. */
  int status;
  assert_int_equal(waitpid(getter, &status, WNOHANG), 0);
  assert_gang_ok(gang_store_set(ctl, "release", "x", 1));
  status = gt_wait_child(getter, 60000);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  int64_t n;
  assert_gang_ok(gang_store_add(ctl, "joined", 0, &n));
  assert_int_equal(n, PROCS * PER_PROC);
  gang_store_close(ctl);
  gt_store_proc_stop(&srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_64_process_rendezvous),
      GT_TEST(test_1024_connections),
  };
  store_test_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
