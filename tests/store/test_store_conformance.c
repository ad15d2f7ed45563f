/* The backend-independent store cases (store_cases.c) over the TCP client:
 * a plain connection, a "host:port/prefix" handle (a view owning its
 * connection) and a view of that, so prefix views behave the same whatever
 * store is underneath. The file store runs them in test_store_file.c. */
#include <stdio.h>

#include "harness/harness.h"
#include "store_cases.h"

#include "gang/store.h"

static gang_store *connect_to(int port, const char *suffix) {
  char addr[128];
  snprintf(addr, sizeof addr, "tcp://127.0.0.1:%d%s", port, suffix);
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 5000;
  o.secret = "";
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(addr, &o, &st));
  return st;
}

static void test_tcp_cases(void **state) {
  (void)state;
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  so.secret = "";
  gang_store_server *srv = NULL;
  assert_gang_ok(gang_store_server_start(&so, &srv));
  int port = gang_store_server_port(srv);

  gang_store *st = connect_to(port, "");
  sc_all_ops(st);
  sc_prefix_views(st);

  gang_store *pre = connect_to(port, "/job7");
  sc_all_ops(pre);
  sc_prefix_views(pre);
  gang_store *view = NULL;
  assert_gang_ok(gang_store_prefix(pre, "outer", &view));
  sc_all_ops(view);
  sc_prefix_views(view);
  /* the prefixed handles' keys are visible under job7/ on the plain one */
  assert_gang_ok(gang_store_set(view, "deep", "d", 1));
  gang_store_close(view);
  assert_gang_ok(gang_store_set(pre, "mine", "m", 1));
  sc_expect_val(st, "job7/mine", "m");
  sc_expect_val(st, "job7/outer/deep", "d");
  gang_store_close(pre);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_tcp_cases),
  };
  sc_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
