/* Many clients: a 64-process rendezvous (set address, add, multi_get of
 * everyone's), and 1024 concurrent connections from 16 processes while a
 * parked get on another connection blocks none of them. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <string.h>

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

/* The server runs in its own process: gt_run_ranks forks, and a fork
 * taken while the server thread holds a lock (malloc's, OpenSSL's RNG)
 * would hand the child a lock nobody will release. */
typedef struct {
  pid_t pid;
  int ctl; /* closing it stops the server */
} server_proc;

static server_proc start(void) {
  int to[2], from[2];
  assert_int_equal(pipe2(to, O_CLOEXEC), 0);
  assert_int_equal(pipe2(from, O_CLOEXEC), 0);
  server_proc sp;
  sp.pid = fork();
  assert_true(sp.pid >= 0);
  if (sp.pid == 0) {
    close(to[1]);
    close(from[0]);
    gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
    o.secret = "scale-secret";
    gang_store_server *srv = NULL;
    int port = -1;
    if (gang_store_server_start(&o, &srv) == GANG_OK)
      port = gang_store_server_port(srv);
    if (write(from[1], &port, sizeof port) != sizeof port || port < 0)
      _exit(1);
    char c;
    while (read(to[0], &c, 1) > 0)
      ;
    gang_store_server_stop(srv);
    _exit(0);
  }
  close(to[0]);
  close(from[1]);
  int port = -1;
  assert_int_equal(read(from[0], &port, sizeof port), sizeof port);
  close(from[0]);
  assert_true(port > 0);
  g_port = port;
  sp.ctl = to[1];
  return sp;
}

static void stop(server_proc sp) {
  close(sp.ctl);
  int status = 0;
  assert_int_equal(waitpid(sp.pid, &status, 0), sp.pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_64_process_rendezvous(void **state) {
  (void)state;
  server_proc srv = start();
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
  stop(srv);
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

typedef struct {
  gang_store *st;
  gang_status got;
} parked_arg;

static void *parked_get(void *arg) {
  parked_arg *p = arg;
  void *v;
  size_t n;
  p->got = gang_store_get(p->st, "release", &v, &n);
  if (p->got == GANG_OK)
    gang_store_free(v);
  return NULL;
}

static void test_1024_connections(void **state) {
  (void)state;
  server_proc srv = start();
  gang_store *waiter = rank_connect("");
  gang_store *ctl = rank_connect("");
  assert_non_null(waiter);
  assert_non_null(ctl);
  parked_arg p = {waiter, GANG_INTERNAL};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, parked_get, &p), 0);
  int64_t t0 = gang__now_ns();
  assert_int_equal(gt_run_ranks(PROCS, many_conns_rank, NULL, 120000), 0);
  printf("%d concurrent connections joined and released in %lld ms\n",
         PROCS * PER_PROC, (long long)((gang__now_ns() - t0) / 1000000));
  /* The parked get was still waiting all along; now release it. */
  assert_int_equal(p.got, GANG_INTERNAL);
  assert_gang_ok(gang_store_set(ctl, "release", "x", 1));
  pthread_join(t, NULL);
  assert_gang_ok(p.got);
  int64_t n;
  assert_gang_ok(gang_store_add(ctl, "joined", 0, &n));
  assert_int_equal(n, PROCS * PER_PROC);
  gang_store_close(waiter);
  gang_store_close(ctl);
  stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_64_process_rendezvous),
      GT_TEST(test_1024_connections),
  };
  store_test_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
