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
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"
#include "lh_replica.h"

#include "core/clock.h"
#include "ft/lighthouse.h"
#include "gang/ft.h"

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
    gt_die_with_parent();
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
                    "import urllib.error\n"
                    "try:\n"
                    "    urllib.request.urlopen(urllib.request.Request(\n"
                    "        sys.argv[1].replace('/status', '/kill?replica='\n"
                    "        'tool-test%3A1'), method='POST'), timeout=10)\n"
                    "    sys.exit('a kill without --allow-kill')\n"
                    "except urllib.error.HTTPError as e:\n"
                    "    assert e.code == 403, e.code\n"
                    "    assert '--allow-kill' in e.read().decode()\n"
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

/* ---- The page an operator keeps open ------------------------------------ */

/* A replica that joins once at `step` and heartbeats every 100 ms until
 * told to stop (it "dies": its heartbeat stops, nothing says goodbye). */
typedef struct page_rep {
  const char *addr, *id;
  int64_t step;
  pthread_t th;
  atomic_bool stop;
  /* A client is for one thread at a time (lighthouse.h): one beats, the
   * other joins, as a manager's heartbeat and quorum threads do. */
  gang__lh_client *c, *cj;
} page_rep;

static void *page_beat(void *arg) {
  page_rep *r = arg;
  while (!atomic_load(&r->stop)) {
    (void)gang__lh_heartbeat(r->c, r->id);
    gt_nap_ms(100);
  }
  return NULL;
}

static void *page_join(void *arg) {
  page_rep *r = arg;
  gang__lh_member me = {"", r->step, 1, false, 0, 0, 0};
  snprintf(me.replica_id, sizeof me.replica_id, "%s", r->id);
  gang__lh_quorum q;
  if (gang__lh_join(r->cj, &me, 20000, &q) == GANG_OK)
    gang__lh_quorum_fini(&q);
  return NULL;
}

/* Three replicas form a quorum (one behind, so it heals); one of them
 * dies; the other two form the next. Then the page's JSON, read with a
 * real HTTP client, has the events (quorum, heal, lost, notice, quorum
 * again), the chart's samples and the dead replica marked; and headless
 * Chromium, given the page, runs its script and draws them: rows marked
 * dead, the events list, the chart's lines (and a screenshot). Skipped
 * where Chromium is not installed. */
static void test_page(void **state) {
  (void)state;
  running t;
  start(&t, (char *[]){"--min-replicas", "2", "--allow-kill", NULL});
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", t.port);
  page_rep reps[3] = {{.id = "alpha:1", .step = 10},
                      {.id = "bravo:1", .step = 10},
                      {.id = "charlie:1", .step = 7}};
  for (int i = 0; i < 3; i++) {
    reps[i].addr = addr;
    atomic_init(&reps[i].stop, false);
    assert_gang_ok(gang__lh_connect(addr, 10000, &reps[i].c));
    assert_gang_ok(gang__lh_connect(addr, 10000, &reps[i].cj));
  }
  pthread_t j[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&j[i], NULL, page_join, &reps[i]), 0);
  for (int i = 0; i < 3; i++)
    pthread_join(j[i], NULL);
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&reps[i].th, NULL, page_beat, &reps[i]), 0);
  /* charlie dies; past the 1 s heartbeat timeout the others go on. */
  atomic_store(&reps[2].stop, true);
  pthread_join(reps[2].th, NULL);
  gt_nap_ms(1500);
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&j[i], NULL, page_join, &reps[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(j[i], NULL);
  gt_nap_ms(300);

  char base[64], *out = NULL;
  snprintf(base, sizeof base, "http://127.0.0.1:%d", t.http_port);
  char *py[] = {
      "/usr/bin/python3", "-c",
      "import json, sys, urllib.request\n"
      "d = json.load(urllib.request.urlopen(sys.argv[1] + '/status', "
      "timeout=10))\n"
      "kinds = [e['kind'] for e in d['events']]\n"
      "texts = ' | '.join(e['text'] for e in d['events'])\n"
      "for k in ('new', 'quorum', 'heal', 'lost', 'notice'):\n"
      "    assert k in kinds, (k, kinds)\n"
      "assert 'charlie:1 heals from a peer: step 7 to 10' in texts, texts\n"
      "assert 'quorum 2: 2 members at step 10: -charlie:1' in texts, texts\n"
      "seqs = [e['seq'] for e in d['events']]\n"
      "assert seqs == sorted(seqs, reverse=True), seqs\n"
      "assert [q['quorum_id'] for q in d['quorums']] == [2, 1], d['quorums']\n"
      "assert d['samples'] and d['samples'][-1][2] == 2, d['samples']\n"
      "assert d['samples'][0][1] == 10, d['samples']\n"
      "c = [r for r in d['replicas'] if r['replica_id'] == 'charlie:1'][0]\n"
      "assert not c['healthy'] and not c['late'], c\n"
      "assert d['allow_kill'] is True and d['now_ms'] > 0\n"
      "print('json ok:', len(kinds), 'events,', len(d['samples']), "
      "'samples')\n",
      base, NULL};
  int st = gt_run_cmd(py, NULL, &out, 30000);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("status JSON: %d:\n%s", st, out);
  free(out);
  out = NULL;

  const char *chromium =
      access("/usr/bin/chromium", X_OK) == 0 ? "/usr/bin/chromium" : NULL;
  if (chromium == NULL) {
    printf("SKIPPED: the page in a browser (no /usr/bin/chromium; Debian's "
           "package chromium)\n");
  } else {
    char url[80], shot[96], prof[96];
    snprintf(url, sizeof url, "%s/", base);
    snprintf(shot, sizeof shot, "/tmp/gang-lh-page-%d.png", (int)getpid());
    snprintf(prof, sizeof prof, "--user-data-dir=/tmp/gang-lh-chromium-%d",
             (int)getpid());
    char shotarg[128];
    snprintf(shotarg, sizeof shotarg, "--screenshot=%s", shot);
    /* --virtual-time-budget lets the page's fetches and timers run before
     * the DOM is taken. */
    char *dom[] = {(char *)chromium,
                   "--headless",
                   "--no-sandbox",
                   "--disable-gpu",
                   "--no-first-run",
                   prof,
                   "--virtual-time-budget=3000",
                   "--dump-dom",
                   url,
                   NULL};
    st = gt_run_cmd(dom, NULL, &out, 60000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("chromium --dump-dom: %d:\n%s", st, out);
    const char *want[] = {"<tr class=\"dead\"><td>charlie:1</td>",
                          "<tr class=\"ok\"><td>alpha:1</td>",
                          "class=\"ev-lost\"",
                          "class=\"ev-heal\"",
                          "class=\"ev-notice\"",
                          "<polyline id=\"steps\"",
                          "<polyline id=\"members\"",
                          "id=\"live\">",
                          "updated 20"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
      if (strstr(out, want[i]) == NULL)
        fail_msg("the page in Chromium has no '%s':\n%s", want[i], out);
    free(out);
    out = NULL;
    char *png[] = {(char *)chromium,
                   "--headless",
                   "--no-sandbox",
                   "--disable-gpu",
                   "--no-first-run",
                   prof,
                   "--hide-scrollbars",
                   "--window-size=900,1400",
                   "--virtual-time-budget=3000",
                   shotarg,
                   url,
                   NULL};
    st = gt_run_cmd(png, NULL, &out, 60000);
    struct stat sb;
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        stat(shot, &sb) != 0 || sb.st_size < 10000)
      fail_msg("chromium --screenshot: %d:\n%s", st, out);
    printf("the page in Chromium: %s (%lld bytes)\n", shot,
           (long long)sb.st_size);
    if (getenv("GANG_TEST_KEEP") == NULL)
      unlink(shot);
    char rm[200];
    snprintf(rm, sizeof rm, "rm -rf /tmp/gang-lh-chromium-%d", (int)getpid());
    if (system(rm) != 0)
      printf("could not remove the browser profile\n");
    free(out);
  }
  /* A drill: bravo is killed from the page. Its watcher gets the kill
   * notice (manager.c then kills the process); the page says so. Bad
   * requests get their status. */
  gang__lh_client *w = NULL;
  assert_gang_ok(gang__lh_connect(addr, 10000, &w));
  char *kill_py[] = {
      "/usr/bin/python3", "-c",
      "import sys, urllib.request, urllib.error\n"
      "def post(q):\n"
      "    try:\n"
      "        r = urllib.request.urlopen(urllib.request.Request(\n"
      "            sys.argv[1] + '/kill' + q, method='POST'), timeout=10)\n"
      "        return r.status, r.read().decode()\n"
      "    except urllib.error.HTTPError as e:\n"
      "        return e.code, e.read().decode()\n"
      "assert post('?replica=nobody:1')[0] == 404\n"
      "assert post('?replica=bad%20id')[0] == 400\n"
      "assert post('')[0] == 400\n"
      "code, text = post('?replica=bravo%3A1')\n"
      "assert code == 202 and 'bravo:1' in text, (code, text)\n"
      "print('kill sent:', text.strip())\n",
      base, NULL};
  st = gt_run_cmd(kill_py, NULL, &out, 30000);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("POST /kill: %d:\n%s", st, out);
  free(out);
  out = NULL;
  int64_t cursor = 0;
  char id[GANG_LH_ID_MAX];
  bool kill = false;
  /* Notice 0 was charlie's failure; the next is the kill. */
  assert_gang_ok(gang__lh_next_notice(w, &cursor, id, sizeof id, 10000, &kill));
  assert_false(kill);
  assert_string_equal(id, "charlie:1");
  assert_gang_ok(gang__lh_next_notice(w, &cursor, id, sizeof id, 10000, &kill));
  assert_true(kill);
  assert_string_equal(id, "bravo:1");
  gang__lh_close(w);

  atomic_store(&reps[0].stop, true);
  atomic_store(&reps[1].stop, true);
  for (int i = 0; i < 2; i++)
    pthread_join(reps[i].th, NULL);
  for (int i = 0; i < 3; i++) {
    gang__lh_close(reps[i].c);
    gang__lh_close(reps[i].cj);
  }
  stop(&t, SIGTERM);
}

/* The drill end to end: a replica group's process (a manager of one
 * rank) is killed from the page, by SIGKILL, as a crash would take it. */
static void test_page_kills_a_replica(void **state) {
  (void)state;
  running t;
  start(&t, (char *[]){"--allow-kill", NULL});
  char addr[64], base[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", t.port);
  snprintf(base, sizeof base, "http://127.0.0.1:%d", t.http_port);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(60);
    gang_manager_options mo = GANG_MANAGER_OPTIONS_INIT;
    mo.lighthouse = addr;
    mo.name = "drill";
    gang_manager *m = NULL;
    RCHECK_OK(gang_manager_create(&mo, &m));
    for (;;)
      pause(); /* the page ends it */
  }
  /* Once it heartbeats, its id is on the page: kill it from there. */
  char *py[] = {"/usr/bin/python3", "-c",
                "import json, sys, time, urllib.request\n"
                "for _ in range(200):\n"
                "    d = json.load(urllib.request.urlopen(sys.argv[1] + "
                "'/status', timeout=10))\n"
                "    ids = [r['replica_id'] for r in d['replicas']\n"
                "           if r['replica_id'].startswith('drill:')]\n"
                "    if ids:\n"
                "        break\n"
                "    time.sleep(0.05)\n"
                "q = urllib.parse.quote(ids[0], safe='')\n"
                "r = urllib.request.urlopen(urllib.request.Request(\n"
                "    sys.argv[1] + '/kill?replica=' + q, method='POST'),\n"
                "    timeout=10)\n"
                "assert r.status == 202, r.status\n"
                "print('killing', ids[0])\n",
                base, NULL};
  char *out = NULL;
  double t0 = gt_now_s();
  int st = gt_run_cmd(py, NULL, &out, 30000);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("the kill from the page: %d:\n%s", st, out);
  free(out);
  int status = gt_wait_child(pid, 10000);
  printf("the replica's process ended %.0f ms after the page was asked\n",
         (gt_now_s() - t0) * 1000);
  if (status == -1) {
    kill(pid, SIGKILL);
    gt_wait_child(pid, 5000);
    fail_msg("the replica killed from the page is still running");
  }
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGKILL);
  stop(&t, SIGTERM);
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

/* A lighthouse that is stalled again and again (stopped 1.4 s, then
 * running 0.3 s: its process starved, say) while a member of its last
 * quorum has gone silent for good. Each stall longer than half the
 * heartbeat timeout is forgiven (the beats of the replicas that live
 * queued up behind it), but only the stall: the silent replica must still
 * be noticed, and the others' next quorum form without it. */
static void test_dead_replica_through_stalls(void **state) {
  (void)state;
  running t;
  start(&t, (char *[]){"--quorum-tick", "600ms", "--join-timeout", "30s",
                       "--http", "off", NULL});
  replica r[3];
  const char *ids[] = {"a", "b", "dies"};
  for (int i = 0; i < 3; i++)
    replica_start_port(&r[i], t.port, ids[i]);
  round_all(r, 3, 0);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", t.port);
  gang__lh_client *watch;
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &watch));
  join_start(&r[0], 11, 0, false, 30000);
  join_start(&r[1], 11, 0, false, 30000);
  int64_t silent = replica_silence(&r[2]);
  int64_t cursor = 0;
  char id[GANG_LH_ID_MAX] = "";
  bool noticed = false;
  for (int cycle = 0; cycle < 10 && !noticed; cycle++) {
    assert_int_equal(kill(t.pid, SIGSTOP), 0);
    gt_nap_ms(1400);
    assert_int_equal(kill(t.pid, SIGCONT), 0);
    noticed = gang__lh_next_notice(watch, &cursor, id, sizeof id, 300, NULL) ==
              GANG_OK;
  }
  printf("silent replica through stalls of 1.4 s every 1.7 s: %s after "
         "%.0f ms\n",
         noticed ? "noticed" : "not noticed", ms_since(silent));
  /* A failure ends the process (as join_ok does): cmocka's would unwind
   * out of this frame while the replicas' threads go on reading it. */
  if (!noticed || strcmp(id, "dies") != 0) {
    fprintf(stderr, "FAILED: notice of 'dies': %s\n", noticed ? id : "none");
    _exit(1);
  }
  /* A join may give up while the lighthouse is stopped (its store does
   * not answer within the wait's grace, and the connection is given up);
   * a manager then connects and joins again. */
  gang_status js[2];
  for (int i = 0; i < 2; i++)
    js[i] = join_wait(&r[i]);
  if (js[0] != GANG_OK || js[1] != GANG_OK) {
    printf("a join gave up during the stalls (%s): both join again\n",
           js[0] != GANG_OK ? r[0].jerr : r[1].jerr);
    for (int i = 0; i < 2; i++) {
      gang__lh_close(r[i].jc);
      assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &r[i].jc));
      join_start(&r[i], 12, 0, false, 30000);
    }
    for (int i = 0; i < 2; i++)
      join_ok(&r[i]);
  }
  for (int i = 0; i < 2; i++)
    if (strcmp(ids_of(&r[i].q), "a,b") != 0) {
      fprintf(stderr, "FAILED: %s's quorum is %s, not a,b\n", r[i].id,
              ids_of(&r[i].q));
      _exit(1);
    }
  gang__lh_close(watch);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  stop(&t, SIGTERM);
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
      GT_TEST(test_page),
      GT_TEST(test_page_kills_a_replica),
      GT_TEST(test_dead_replica_through_stalls),
      GT_TEST(test_bad_flags),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(tool);
  return rc;
}
