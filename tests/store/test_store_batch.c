/* The store's calls for many keys and many waiters at once, which the
 * lighthouse leans on with a thousand replicas: gang__store_peek (every
 * key that exists now, in one request), gang__store_add_quiet (an add the
 * server does not answer), and the server's parked requests, which time
 * out in deadline order however many wait. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/clock.h"
#include "gang/store.h"
#include "store/server.h"

#include "live.h"

/* Peeks keys "k<i>" for i in 0..n; i is present when present(i). */
static void check_peek(gang_store *st, int n, bool (*present)(int)) {
  char(*names)[16] = calloc((size_t)n, sizeof *names);
  const char **keys = calloc((size_t)n, sizeof *keys);
  void **vals = calloc((size_t)n, sizeof *vals);
  size_t *lens = calloc((size_t)n, sizeof *lens);
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "k%d", i);
    keys[i] = names[i];
  }
  int64_t t0 = gang__now_ns();
  assert_gang_ok(gang__store_peek(st, keys, (size_t)n, vals, lens));
  assert_true((gang__now_ns() - t0) / 1000000 < 1000); /* never waits */
  for (int i = 0; i < n; i++) {
    if (!present(i)) {
      assert_null(vals[i]);
      assert_int_equal(lens[i], 0);
      continue;
    }
    char want[16];
    snprintf(want, sizeof want, "v%d", i);
    assert_non_null(vals[i]);
    assert_int_equal(lens[i], strlen(want));
    assert_memory_equal(vals[i], want, lens[i]);
    gang_store_free(vals[i]);
  }
  free(names);
  free(keys);
  free(vals);
  free(lens);
}

static bool every_third(int i) { return i % 3 == 0; }
static bool all(int i) { return i >= 0; }
static bool none(int i) { return i < 0; }

static void set_every_third(gang_store *st, int n) {
  for (int i = 0; i < n; i += 3) {
    char k[16], v[16];
    snprintf(k, sizeof k, "k%d", i);
    int len = snprintf(v, sizeof v, "v%d", i);
    assert_gang_ok(gang_store_set(st, k, v, (size_t)len));
  }
}

static void test_peek(void **state) {
  (void)state;
  gang_store_server *srv = start_server();
  /* A long deadline: peek must not use it. */
  gang_store *st = connect_to(srv, NULL, 30000);
  check_peek(st, 1, none);
  set_every_third(st, 1200);
  check_peek(st, 1200, every_third);
  check_peek(st, 1, all);
  assert_gang_ok(gang__store_peek(st, NULL, 0, NULL, NULL));
  /* The connection is as usable afterwards. */
  int64_t v = 0;
  assert_gang_ok(gang_store_add(st, "after", 2, &v));
  assert_int_equal(v, 2);
  /* Bad arguments. */
  const char *k[] = {"k0"};
  assert_int_equal(gang__store_peek(st, k, 1, NULL, NULL),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang__store_peek(NULL, k, 1, (void *[1]){0}, (size_t[1]){0}),
                   GANG_INVALID_ARGUMENT);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

/* The file store has no peek of its own: a get per key. */
static void test_peek_file_store(void **state) {
  (void)state;
  char dir[] = "/tmp/gang_peek_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/store", dir);
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 30000;
  gang_store *st = NULL;
  assert_gang_ok(gang_store_file_open(path, &o, &st));
  set_every_third(st, 30);
  check_peek(st, 30, every_third);
  gang_store_close(st);
  unlink(path);
  rmdir(dir);
}

static void test_add_quiet(void **state) {
  (void)state;
  gang_store_server *srv = start_server();
  assert_gang_ok(gang__store_server_watch(srv, "hb/", "departed"));
  gang_store *st = connect_to(srv, NULL, 5000);
  gang_store *other = connect_to(srv, NULL, 5000);
  for (int i = 0; i < 1000; i++)
    assert_gang_ok(gang__store_add_quiet(st, "hb/a", 1));
  /* The next answered call on the same connection gets its own answer:
   * no reply of the quiet ones is in the way. */
  int64_t v = 0;
  assert_gang_ok(gang_store_add(st, "hb/a", 0, &v));
  assert_int_equal(v, 1000);
  assert_gang_ok(gang__store_add_quiet(st, "hb/a", -10));
  void *val = NULL;
  size_t n = 0;
  assert_gang_ok(gang_store_get(st, "hb/a", &val, &n));
  assert_int_equal(n, 3);
  assert_memory_equal(val, "990", 3);
  gang_store_free(val);
  /* A failure is the server's to log: the connection stays usable. */
  assert_gang_ok(gang_store_set(st, "text", "abc", 3));
  assert_gang_ok(gang__store_add_quiet(st, "text", 1));
  assert_gang_ok(gang_store_add(st, "hb/a", 1, &v));
  assert_int_equal(v, 991);
  /* A quiet add counts for the server's watch, as an add does. */
  gang_store_close(st);
  assert_gang_ok(
      gang_store_wait(other, (const char *const[]){"departed"}, 1, 3000));
  assert_gang_ok(gang_store_get(other, "departed", &val, &n));
  assert_int_equal(n, 2);
  assert_memory_equal(val, "a\n", 2);
  gang_store_free(val);
  gang_store_close(other);
  gang_store_server_stop(srv);
}

/* Many parked gets with deadlines in no order: each answered TIMEOUT at
 * its own deadline, not at another's. */
#define WAITERS 64

typedef struct waiter {
  gang_store_server *srv;
  int64_t timeout_ms, took_ms;
  gang_status s;
} waiter;

static void *wait_main(void *arg) {
  waiter *w = arg;
  /* Connected with time to spare (64 hellos at once take over 100 ms
   * beside the sanitizer stage's other tests), then given the timeout
   * the wait is measured against. */
  gang_store *st = connect_to(w->srv, NULL, 5000);
  void *v = NULL;
  size_t n = 0;
  int64_t t0 = gang__now_ns();
  w->s = gang_store_set_timeout(st, w->timeout_ms);
  if (w->s == GANG_OK)
    w->s = gang_store_get(st, "never", &v, &n);
  w->took_ms = (gang__now_ns() - t0) / 1000000;
  gang_store_close(st);
  return NULL;
}

static void test_parked_deadlines(void **state) {
  (void)state;
  gang_store_server *srv = start_server();
  waiter w[WAITERS];
  pthread_t t[WAITERS];
  for (int i = 0; i < WAITERS; i++) {
    /* 100 .. 1360 ms in a shuffled order (37 is prime to 64). */
    w[i] = (waiter){srv, 100 + 20 * ((i * 37) % WAITERS), 0, GANG_OK};
    assert_int_equal(pthread_create(&t[i], NULL, wait_main, &w[i]), 0);
  }
  /* One that is answered in between leaves the others in place. */
  gang_store *st = connect_to(srv, NULL, 5000);
  void *v = NULL;
  size_t n = 0;
  assert_gang_ok(gang_store_set(st, "soon", "x", 1));
  assert_gang_ok(gang_store_get(st, "soon", &v, &n));
  gang_store_free(v);
  for (int i = 0; i < WAITERS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].s, GANG_TIMEOUT);
    assert_true(w[i].took_ms >= w[i].timeout_ms - 5);
    /* Near its own deadline, not at a later waiter's (up to 1.3 s on). */
    assert_true(w[i].took_ms < w[i].timeout_ms + 500);
  }
  gang_store_close(st);
  gang_store_server_stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_peek),
      GT_TEST(test_peek_file_store),
      GT_TEST(test_add_quiet),
      GT_TEST(test_parked_deadlines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
