/* The gang-store tool as operators run it: `serve` in a child process
 * (port read from its first stdout line, stopped by SIGTERM/SIGINT), the
 * client commands against it and against a file store, their output and
 * exit codes (0 ok, 1 failed, 2 usage), and a short `bench` run. */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "harness/harness.h"

#include "core/clock.h"

static char *tool;

/* The serve child of the running test, if any: the teardown kills it when
 * a check failed midway, so that no server outlives its test (it would hold
 * the test runner's output pipe open). */
static pid_t live_pid = -1;
static int live_out = -1;

/* A `gang-store serve` child with its stdout on a pipe. */
typedef struct server {
  pid_t pid;
  int out; /* read end of its stdout */
  int port;
  char addr[64];
} server;

static void serve_start(server *s, char *const extra[], char *const envp[]) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  char *argv[16] = {tool, "serve", "--port", "0"};
  int n = 4;
  for (int i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  s->pid = fork();
  assert_true(s->pid >= 0);
  if (s->pid > 0)
    live_pid = s->pid;
  if (s->pid == 0) {
    gt_die_with_parent();
    dup2(p[1], 1);
    for (int i = 0; envp && envp[i]; i++)
      putenv(envp[i]);
    execv(tool, argv);
    _exit(127);
  }
  close(p[1]);
  s->out = p[0];
  live_out = p[0];
  /* The first line is the port; wait for it under a deadline. */
  char line[32];
  size_t got = 0;
  int64_t deadline = gang__now_ns() + 10 * 1000000000LL;
  while (got == 0 || line[got - 1] != '\n') {
    struct pollfd pfd = {s->out, POLLIN, 0};
    int left = (int)((deadline - gang__now_ns()) / 1000000);
    if (left <= 0 || poll(&pfd, 1, left) <= 0)
      fail_msg("gang-store serve printed no port line in 10 s");
    ssize_t r = read(s->out, line + got, sizeof line - 1 - got);
    if (r <= 0)
      fail_msg("gang-store serve exited before printing its port");
    got += (size_t)r;
    assert_true(got < sizeof line - 1);
  }
  line[got] = '\0';
  s->port = atoi(line);
  assert_true(s->port > 0 && s->port < 65536);
  snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", s->port);
}

/* Stops it with `sig` and checks that it exits 0 within 10 s. */
static void serve_stop(server *s, int sig) {
  live_pid = -1;
  assert_int_equal(kill(s->pid, sig), 0);
  int status = 0;
  int64_t deadline = gang__now_ns() + 10 * 1000000000LL;
  pid_t r;
  while ((r = waitpid(s->pid, &status, WNOHANG)) == 0 &&
         gang__now_ns() < deadline) {
    struct pollfd pfd = {s->out, POLLIN, 0};
    poll(&pfd, 1, 10); /* EOF on its stdout comes with its exit */
    char buf[64];
    if (pfd.revents && read(s->out, buf, sizeof buf) < 0 && errno != EINTR)
      break;
  }
  if (r == 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
    fail_msg("gang-store serve did not stop on signal %d", sig);
  }
  close(s->out);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* Runs `gang-store ARGS...` (NULL-terminated) with envp; returns the exit
 * code and leaves the combined output in *out (caller frees). */
static int run(char *const envp[], char **out, ...) {
  char *argv[32] = {tool};
  int n = 1;
  va_list ap;
  va_start(ap, out);
  for (char *a; (a = va_arg(ap, char *)) != NULL && n < 31;)
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  char *output = NULL;
  int st = gt_run_cmd(argv, envp, &output, 30000);
  if (st == -1 || !WIFEXITED(st))
    fail_msg("gang-store %s: killed or crashed; output:\n%s", argv[1], output);
  *out = output;
  return WEXITSTATUS(st);
}

static void expect(int code, const char *want_out, char *const envp[], ...) {
  char *argv[32] = {tool};
  int n = 1;
  va_list ap;
  va_start(ap, envp);
  for (char *a; (a = va_arg(ap, char *)) != NULL && n < 31;)
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  char *output = NULL;
  int st = gt_run_cmd(argv, envp, &output, 30000);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != code ||
      (want_out && strstr(output, want_out) == NULL)) {
    char cmd[512] = "";
    for (int i = 1; argv[i]; i++)
      snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " %s", argv[i]);
    static char msg[8192];
    snprintf(msg, sizeof msg,
             "gang-store%s: status %d, wanted exit %d with '%s'; output:\n%s",
             cmd, st, code, want_out ? want_out : "", output);
    free(output);
    fail_msg("%s", msg);
  }
  free(output);
}

static char secret_env[] = "GANG_STORE_SECRET=tool-test-secret";

static void test_serve_and_client(void **state) {
  (void)state;
  char *env[] = {secret_env, NULL};
  server s;
  serve_start(&s, NULL, env);
  char pre[96];
  snprintf(pre, sizeof pre, "%s/job1", s.addr);

  expect(0, NULL, env, "set", s.addr, "greeting", "hello world", NULL);
  expect(0, "hello world\n", env, "get", s.addr, "greeting", NULL);
  expect(0, "3\n", env, "add", s.addr, "ctr", "3", NULL);
  expect(0, "-2\n", env, "add", s.addr, "ctr", "-5", NULL);
  expect(0, "-1\n", env, "add", s.addr, "ctr", NULL); /* default delta 1 */
  expect(0, "7\n", env, "add", pre, "n", "7", NULL);
  expect(0, "7\n", env, "get", s.addr, "job1/n", NULL);
  expect(0, "3\n", env, "keys", s.addr, NULL);
  expect(0, "all present", env, "check", s.addr, "greeting", "ctr", NULL);
  expect(1, "missing: nope", env, "check", s.addr, "greeting", "nope", NULL);
  expect(0, "all present", env, "wait", s.addr, "greeting", "job1/n", NULL);
  /* Short timeouts, yet long enough for the hello of a sanitized server on
   * a busy machine: the timeout bounds the connection too. */
  expect(1, "'nope'", env, "wait", "--timeout", "1500ms", s.addr, "greeting",
         "nope", NULL);
  /* A longer wait says what it waits for. */
  char *out;
  assert_int_equal(run(env, &out, "wait", "--timeout", "4500ms", s.addr,
                       "greeting", "nope", NULL),
                   1);
  if (strstr(out, "waiting for keys 'greeting', 'nope' at") == NULL ||
      strstr(out, "still missing: 'nope'") == NULL)
    fail_msg("wait for a missing key: output:\n%s", out);
  free(out);
  expect(1, "deadline", env, "get", s.addr, "nope", "--timeout", "1500ms",
         NULL);
  expect(1, "not a decimal integer", env, "add", s.addr, "greeting", NULL);
  expect(0, "deleted", env, "delete", s.addr, "greeting", NULL);
  expect(0, "absent", env, "delete", s.addr, "greeting", NULL);
  expect(0, "2\n", env, "keys", s.addr, NULL);
  /* "--" lets a value start with dashes */
  expect(0, NULL, env, "set", s.addr, "--", "dash", "--x", NULL);
  expect(0, "--x\n", env, "get", s.addr, "dash", NULL);

  /* authentication: no secret, a wrong one, the right one from a file */
  expect(1, "authentication", NULL, "keys", s.addr, "--timeout", "2s", NULL);
  char *bad[] = {"GANG_STORE_SECRET=wrong", NULL};
  expect(1, "authentication", bad, "keys", s.addr, "--timeout", "2s", NULL);
  char sf[] = "/tmp/gang-store-secret-XXXXXX";
  int fd = mkstemp(sf);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "tool-test-secret\n", 17), 17);
  close(fd);
  expect(0, "3\n", NULL, "keys", s.addr, "--secret-file", sf, NULL);
  expect(1, "--secret-file: cannot read secret file /nonexistent/secret", NULL,
         "keys", s.addr, "--secret-file", "/nonexistent/secret", NULL);
  char empty[] = "/tmp/gang-empty-secret-XXXXXX";
  int efd = mkstemp(empty);
  assert_true(efd >= 0);
  assert_int_equal(write(efd, "\n", 1), 1);
  close(efd);
  expect(1, "holds no secret", NULL, "keys", s.addr, "--secret-file", empty,
         NULL);
  unlink(empty);

  /* a bench run against the served store checks its own counter */
  expect(0, "\"ops_per_s\"", env, "bench", s.addr, "--clients", "3", "--ops",
         "300", "--op", "add", "--json", NULL);
  serve_stop(&s, SIGTERM);

  /* serve with --secret-file, stopped by SIGINT */
  char *extra[] = {"--secret-file", sf, "--host", "127.0.0.1", NULL};
  serve_start(&s, extra, NULL);
  expect(0, NULL, env, "set", s.addr, "k", "v", NULL);
  expect(0, "v\n", NULL, "get", s.addr, "k", "--secret-file", sf, NULL);
  serve_stop(&s, SIGINT);
  unlink(sf);

  /* the server is gone: a clear failure naming the address */
  expect(1, s.addr, env, "keys", s.addr, "--timeout", "300ms", NULL);
}

/* A port of 127.0.0.1 where nothing listens, held by this process (bound,
 * never listening: connects are refused) so that nothing else takes it
 * while the test runs. Returns the socket; *port receives the port. */
static int refused_port(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t len = sizeof sa;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* Nothing listens at the address: the client says what it waits for every
 * few seconds, and gives up after its timeout: --timeout, else
 * GANG_STORE_TIMEOUT, else a short default (30 s), not the library's 5 min. */
static void test_nothing_listens(void **state) {
  (void)state;
  int port;
  int fd = refused_port(&port);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  char waiting[128];
  snprintf(waiting, sizeof waiting, "waiting for the store at %s", addr);

  int64_t t0 = gang__now_ns();
  char *out;
  assert_int_equal(run(NULL, &out, "keys", addr, "--timeout", "4s", NULL), 1);
  double took = (double)(gang__now_ns() - t0) / 1e9;
  if (strstr(out, waiting) == NULL || strstr(out, " s of 4 s)") == NULL ||
      strstr(out, "Connection refused") == NULL || took < 3.9 || took > 10)
    fail_msg("keys --timeout 4s, nothing listening: %.1f s, output:\n%s", took,
             out);
  free(out);

  char *env[] = {"GANG_STORE_TIMEOUT=4500ms", NULL};
  assert_int_equal(run(env, &out, "get", addr, "k", NULL), 1);
  if (strstr(out, waiting) == NULL || strstr(out, " s of 4500 ms)") == NULL)
    fail_msg("get with GANG_STORE_TIMEOUT=4500ms: output:\n%s", out);
  free(out);

  /* No --timeout: still waiting after 5 s, and saying out of how long. */
  char *argv[] = {tool, "keys", addr, NULL};
  int st = gt_run_cmd(argv, NULL, &out, 5000);
  if (st != -1 || strstr(out, waiting) == NULL ||
      strstr(out, " s of 30 s)") == NULL)
    fail_msg("keys without --timeout: status %d, output:\n%s", st, out);
  free(out);
  close(fd);
}

/* A host that does not resolve is not a usage error: one line naming the
 * host and the reason, exit 1. */
static void test_unresolvable_host(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(NULL, &out, "keys", "no-such-host.invalid:29500",
                       "--timeout", "5s", NULL),
                   1);
  if (strstr(out, "usage") != NULL ||
      strstr(out, "no-such-host.invalid") == NULL ||
      strstr(out, "resolve") == NULL || strchr(out, '\n') == NULL ||
      strchr(out, '\n')[1] != '\0')
    fail_msg("unresolvable host: output:\n%s", out);
  free(out);
}

static void test_file_addr(void **state) {
  (void)state;
  char dir[] = "/tmp/gang-store-tool-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char addr[128], path[112];
  snprintf(path, sizeof path, "%s/st", dir);
  snprintf(addr, sizeof addr, "file://%s", path);
  expect(0, NULL, NULL, "set", addr, "a", "1", NULL);
  expect(0, "11\n", NULL, "add", addr, "a", "10", NULL);
  expect(0, "1\n", NULL, "keys", addr, NULL);
  expect(1, "'b'", NULL, "wait", addr, "a", "b", "--timeout", "100ms", NULL);
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

static void test_usage_errors(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(NULL, &out, NULL), 2);
  assert_non_null(strstr(out, "usage:"));
  free(out);
  assert_int_equal(run(NULL, &out, "--help", NULL), 0);
  assert_non_null(strstr(out, "gang-store serve"));
  free(out);
  expect(2, "unknown command 'frob'", NULL, "frob", NULL);
  expect(2, "missing arguments", NULL, "get", "127.0.0.1:1", NULL);
  expect(2, "too many arguments", NULL, "set", "h:1", "k", "v", "w", NULL);
  expect(2, "unknown option '--bogus'", NULL, "keys", "h:1", "--bogus", "1",
         NULL);
  expect(2, "needs a value", NULL, "keys", "h:1", "--timeout", NULL);
  expect(2, "--timeout", NULL, "keys", "h:1", "--timeout", "soon", NULL);
  expect(2, "DELTA", NULL, "add", "h:1", "k", "x1", NULL);
  expect(2, "expected host:port", NULL, "keys", "nohost", NULL);
  expect(2, "not in 1..65535", NULL, "keys", "h:99999", NULL);
  expect(2, "--port", NULL, "serve", "--port", "70000", NULL);
  expect(2, "takes no arguments", NULL, "serve", "extra", NULL);
  expect(2, "--op must be", NULL, "bench", "--embedded", "--op", "mul", NULL);
  expect(2, "bench needs ADDR", NULL, "bench", "--clients", "2", NULL);
  expect(2, "--ops", NULL, "bench", "--embedded", "--clients", "4", "--ops",
         "2", NULL);
}

static void test_bench_embedded(void **state) {
  (void)state;
  const char *ops[] = {"set", "get", "add", "wait"};
  for (int i = 0; i < 4; i++) {
    char *out;
    int rc = run(NULL, &out, "bench", "--embedded", "--clients", "4", "--ops",
                 "400", "--op", ops[i], "--value-size", "100", NULL);
    if (rc != 0 || strstr(out, "ops/s") == NULL || strstr(out, "p99") == NULL)
      fail_msg("bench --op %s: exit %d:\n%s", ops[i], rc, out);
    free(out);
  }
}

static int kill_live_server(void **state) {
  if (live_pid > 0) {
    kill(live_pid, SIGKILL);
    waitpid(live_pid, NULL, 0);
    live_pid = -1;
    close(live_out);
  }
  return gt_leak_teardown(state);
}

int main(void) {
  tool = gt_tool_path("gang-store");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_serve_and_client, gt_leak_setup,
                                      kill_live_server),
      GT_TEST(test_nothing_listens),
      GT_TEST(test_unresolvable_host),
      GT_TEST(test_file_addr),
      GT_TEST(test_usage_errors),
      GT_TEST(test_bench_embedded),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(tool);
  return rc;
}
