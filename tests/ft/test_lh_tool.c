/* The gang-lighthouse tool as operators run it: started on port 0 it
 * prints its two ports, replicas form a quorum through it, its status page
 * answers a real HTTP client, SIGTERM and SIGINT stop it with exit 0, and
 * bad flags exit 2 naming the flag. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/clock.h"
#include "ft/lighthouse.h"

static char *tool;

typedef struct running {
  pid_t pid;
  int out; /* read end of its stdout */
  int port, http_port;
} running;

/* Reads one line of the tool's stdout within the deadline. */
static int read_line(int fd, char *line, size_t cap, int64_t deadline) {
  size_t got = 0;
  while (got == 0 || line[got - 1] != '\n') {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, gang__deadline_poll_ms(deadline)) <= 0)
      fail_msg("gang-lighthouse printed no port line in time");
    ssize_t r = read(fd, line + got, 1); /* a line at a time: no overshoot */
    if (r <= 0)
      fail_msg("gang-lighthouse exited before printing its ports");
    got += (size_t)r;
    assert_true(got < cap - 1);
  }
  line[got] = '\0';
  return atoi(line);
}

static void start(running *t, char *const extra[]) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  char *argv[24] = {tool,          "--bind",
                    "127.0.0.1:0", "--quorum-tick",
                    "50ms",        "--heartbeat-timeout",
                    "1s",          "--join-timeout",
                    "500ms"};
  int n = 9;
  for (int i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  t->pid = fork();
  assert_true(t->pid >= 0);
  if (t->pid == 0) {
    dup2(p[1], 1);
    execv(tool, argv);
    _exit(127);
  }
  close(p[1]);
  t->out = p[0];
  int64_t deadline = gang__deadline_in_ms(20000);
  char line[32];
  t->port = read_line(t->out, line, sizeof line, deadline);
  t->http_port = read_line(t->out, line, sizeof line, deadline);
  assert_true(t->port > 0 && t->port < 65536);
}

/* Sends sig and checks it exits 0 within 10 s. */
static void stop(running *t, int sig) {
  assert_int_equal(kill(t->pid, sig), 0);
  int status = gt_wait_child(t->pid, 10000);
  close(t->out);
  if (status == -1)
    fail_msg("gang-lighthouse did not stop on signal %d", sig);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_serve(void **state) {
  (void)state;
  running t;
  start(&t, (char *[]){"--min-replicas", "1", NULL});
  assert_true(t.http_port > 0);
  /* A replica forms a quorum through it. */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", t.port);
  gang__lh_client *c = NULL;
  assert_gang_ok(gang__lh_connect(addr, 10000, &c));
  gang__lh_member me = {"tool-test:1", 3, 1, false, 0, 0, 0};
  gang__lh_quorum q;
  assert_gang_ok(gang__lh_join(c, &me, 10000, &q));
  assert_int_equal(q.quorum_id, 1);
  assert_int_equal(q.n, 1);
  gang__lh_quorum_fini(&q);
  gang__lh_close(c);
  /* Its status page, with a real HTTP client. */
  char url[96], *out = NULL;
  snprintf(url, sizeof url, "http://127.0.0.1:%d/status", t.http_port);
  if (access("/usr/bin/python3", X_OK) == 0) {
    char *argv[] = {"/usr/bin/python3", "-c",
                    "import json, sys, urllib.request\n"
                    "d = json.load(urllib.request.urlopen(sys.argv[1], "
                    "timeout=10))\n"
                    "assert d['quorum_id'] == 1, d\n"
                    "assert d['replicas'][0]['replica_id'] == 'tool-test:1'\n"
                    "assert d['quorum_tick_ms'] == 50, d\n"
                    "print('status ok')\n",
                    url, NULL};
    int st = gt_run_cmd(argv, NULL, &out, 30000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("status page: %d:\n%s", st, out);
  } else if (access("/usr/bin/curl", X_OK) == 0) {
    char *argv[] = {"/usr/bin/curl", "-sf", "--max-time", "10", url, NULL};
    int st = gt_run_cmd(argv, NULL, &out, 30000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        strstr(out, "\"quorum_id\": 1") == NULL)
      fail_msg("curl %s: %d:\n%s", url, st, out);
  } else {
    printf("SKIPPED: the status page fetch (neither /usr/bin/python3 nor "
           "/usr/bin/curl is installed)\n");
  }
  free(out);
  stop(&t, SIGTERM);

  /* Without a status page, stopped by SIGINT. */
  start(&t, (char *[]){"--http", "off", NULL});
  assert_int_equal(t.http_port, -1);
  stop(&t, SIGINT);
}

/* Runs the tool with args (NULL-terminated); checks exit code and that
 * the output contains `want`. */
static void expect(int code, const char *want, ...) {
  char *argv[16] = {tool};
  int n = 1;
  va_list ap;
  va_start(ap, want);
  for (char *a; (a = va_arg(ap, char *)) != NULL && n < 15;)
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  char *out = NULL;
  int st = gt_run_cmd(argv, NULL, &out, 20000);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != code ||
      strstr(out, want) == NULL)
    fail_msg("gang-lighthouse %s ...: status %d, wanted exit %d with '%s':\n%s",
             argv[1], st, code, want, out);
  free(out);
}

static void test_bad_flags(void **state) {
  (void)state;
  expect(0, "usage: gang-lighthouse", "--help", NULL);
  expect(2, "--min-replicas", "--min-replicas", "0", NULL);
  expect(2, "--min-replicas", "--min-replicas", "many", NULL);
  expect(2, "--quorum-tick", "--quorum-tick", "5x", NULL);
  expect(2, "--quorum-tick", "--quorum-tick", "0", NULL);
  expect(2, "--heartbeat-timeout", "--heartbeat-timeout=-1s", NULL);
  expect(2, "--join-timeout", "--join-timeout", "soon", NULL);
  expect(2, "--bind", "--bind", "nonsense", NULL);
  expect(2, "--http", "--http", "host:99999", NULL);
  expect(2, "--frobnicate", "--frobnicate", "1", NULL);
  expect(2, "--bind", "--bind", NULL);
  expect(2, "stray", "stray", NULL);
  expect(1, "cannot read secret file /nonexistent/secret", "--bind",
         "127.0.0.1:0", "--secret-file", "/nonexistent/secret", NULL);
}

int main(void) {
  tool = gt_tool_path("gang-lighthouse");
  const struct CMUnitTest tests[] = {
      GT_TEST(test_serve),
      GT_TEST(test_bad_flags),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(tool);
  return rc;
}
