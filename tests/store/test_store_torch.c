/* The torch:// store client (src/store/torch_client.c) against a real
 * torch TCPStore server: Debian's python3 with torch hosts one
 * (TCPStore(is_master=True)) in a child process for the whole file, and
 * every case talks to it. Skipped when /usr/bin/python3 cannot import
 * torch. The server's own client checks that what gang writes is what
 * torch reads. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gang/store.h"
#include "harness/harness.h"

#define PYTHON "/usr/bin/python3"

/* Hosts the server, prints its port, then serves "check KEY VALUE" lines
 * from stdin (its own client compares the value) until EOF. */
static const char server_py[] =
    "import sys, datetime\n"
    "import torch.distributed as d\n"
    "s = d.TCPStore('127.0.0.1', 0, 1, True, "
    "timeout=datetime.timedelta(seconds=60), wait_for_workers=False)\n"
    "print(s.port, flush=True)\n"
    "for line in sys.stdin:\n"
    "    k, v = line.split()\n"
    "    print('ok' if s.get(k) == v.encode() else 'bad', flush=True)\n";

static pid_t server_pid = -1;
static FILE *to_server, *from_server;
static char addr[64];

static int setup(void **state) {
  (void)state;
  if (access(PYTHON, X_OK) != 0 ||
      system(PYTHON " -c 'import torch.distributed' >/dev/null 2>&1") != 0)
    return 0; /* the cases skip */
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0)
    return -1;
  server_pid = fork();
  if (server_pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execl(PYTHON, PYTHON, "-c", server_py, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_server = fdopen(in[1], "w");
  from_server = fdopen(out[0], "r");
  char line[32];
  int port = fgets(line, sizeof line, from_server) ? atoi(line) : 0;
  if (port <= 0)
    return -1;
  snprintf(addr, sizeof addr, "torch://127.0.0.1:%d", port);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (server_pid > 0) {
    fclose(to_server); /* EOF: the server exits */
    fclose(from_server);
    if (gt_wait_child(server_pid, 30000) < 0)
      return -1;
  }
  return 0;
}

static gang_store *open_store(const char *suffix) {
  if (server_pid <= 0)
    skip();
  char a[128];
  snprintf(a, sizeof a, "%s%s", addr, suffix);
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 20000;
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(a, &o, &st));
  return st;
}

/* torch's own client reads key and finds value. */
static void torch_sees(const char *key, const char *value) {
  fprintf(to_server, "%s %s\n", key, value);
  fflush(to_server);
  char reply[16] = "";
  assert_non_null(fgets(reply, sizeof reply, from_server));
  assert_string_equal(reply, "ok\n");
}

static void test_set_get_add(void **state) {
  (void)state;
  gang_store *st = open_store("");
  assert_gang_ok(gang_store_set(st, "a", "hello", 5));
  void *v;
  size_t n;
  assert_gang_ok(gang_store_get(st, "a", &v, &n));
  assert_int_equal(n, 5);
  assert_memory_equal(v, "hello", 5);
  assert_int_equal(((char *)v)[5], '\0');
  gang_store_free(v);
  torch_sees("a", "hello");
  int64_t x;
  assert_gang_ok(gang_store_add(st, "ctr", 5, &x));
  assert_int_equal(x, 5);
  assert_gang_ok(gang_store_add(st, "ctr", -2, &x));
  assert_int_equal(x, 3);
  torch_sees("ctr", "3");
  /* an empty value */
  assert_gang_ok(gang_store_set(st, "empty", NULL, 0));
  assert_gang_ok(gang_store_get(st, "empty", &v, &n));
  assert_int_equal(n, 0);
  gang_store_free(v);
  gang_store_close(st);
}

static void test_check_wait_delete(void **state) {
  (void)state;
  gang_store *st = open_store("/pfx");
  bool all;
  const char *keys[] = {"k1", "k2"};
  assert_gang_ok(gang_store_check(st, keys, 2, &all));
  assert_false(all);
  assert_gang_ok(gang_store_set(st, "k1", "1", 1));
  assert_gang_ok(gang_store_set(st, "k2", "2", 1));
  assert_gang_ok(gang_store_check(st, keys, 2, &all));
  assert_true(all);
  assert_gang_ok(gang_store_wait(st, keys, 2, 5000));
  torch_sees("pfx/k2", "2"); /* the prefix view's keys, as torch sees them */
  void *vals[2];
  size_t lens[2];
  assert_gang_ok(gang_store_multi_get(st, keys, 2, vals, lens));
  assert_memory_equal(vals[0], "1", 1);
  assert_memory_equal(vals[1], "2", 1);
  gang_store_free(vals[0]);
  gang_store_free(vals[1]);
  bool deleted;
  assert_gang_ok(gang_store_delete(st, "k1", &deleted));
  assert_true(deleted);
  assert_gang_ok(gang_store_delete(st, "k1", &deleted));
  assert_false(deleted);
  int64_t nk;
  assert_gang_ok(gang_store_num_keys(st, &nk));
  assert_true(nk >= 1);
  gang_store_close(st);
}

static void test_compare_set_append(void **state) {
  (void)state;
  gang_store *st = open_store("");
  void *cur;
  size_t n;
  assert_gang_ok(gang_store_compare_set(st, "cas", "", 0, "x", 1, &cur, &n));
  assert_int_equal(n, 1);
  assert_memory_equal(cur, "x", 1);
  gang_store_free(cur);
  assert_gang_ok(
      gang_store_compare_set(st, "cas", "nope", 4, "y", 1, &cur, &n));
  assert_memory_equal(cur, "x", 1); /* unchanged */
  gang_store_free(cur);
  assert_gang_ok(gang_store_compare_set(st, "cas", "x", 1, "y", 1, NULL, NULL));
  torch_sees("cas", "y");
  assert_gang_ok(gang_store_append(st, "log", "ab", 2));
  assert_gang_ok(gang_store_append(st, "log", "cd", 2));
  torch_sees("log", "abcd");
  const char *keys[] = {"m1", "m2"};
  const void *vals[] = {"v1", "v2"};
  size_t lens[] = {2, 2};
  assert_gang_ok(gang_store_multi_set(st, keys, vals, lens, 2));
  torch_sees("m2", "v2");
  gang_store_close(st);
}

/* A wait that passes its deadline breaks the handle (torch's server would
 * still answer it later), with GANG_TIMEOUT naming the key; a new handle
 * works. */
static void test_timeout_breaks_handle(void **state) {
  (void)state;
  gang_store *st = open_store("");
  const char *key = "never";
  gang_status s = gang_store_wait(st, &key, 1, 100);
  assert_int_equal(s, GANG_TIMEOUT);
  assert_non_null(strstr(gang_last_error(), "never"));
  assert_int_equal(gang_store_set(st, "after", "1", 1), GANG_TIMEOUT);
  gang_store_close(st);
  st = open_store("");
  assert_gang_ok(gang_store_set(st, "after", "1", 1));
  gang_store_close(st);
}

static void test_unreachable(void **state) {
  (void)state;
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 300;
  gang_store *st = NULL;
  /* port 1: nothing listens there */
  assert_int_equal(gang_store_connect("torch://127.0.0.1:1", &o, &st),
                   GANG_TIMEOUT);
  assert_null(st);
  assert_non_null(strstr(gang_last_error(), "torch store"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_set_get_add),        GT_TEST(test_check_wait_delete),
      GT_TEST(test_compare_set_append), GT_TEST(test_timeout_breaks_handle),
      GT_TEST(test_unreachable),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
