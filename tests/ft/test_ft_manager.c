/* The manager (gang/ft.h) across replica groups of real processes under a
 * lighthouse in a process of its own:
 *
 *   - a group killed with SIGKILL mid-step: the survivors commit a step
 *     with fewer participants within 2 s (timeouts 1 s); the group started
 *     again heals and every replica ends bit-identical at the target step;
 *   - a group stopped with SIGSTOP: declared dead when its heartbeat
 *     expires, the survivors go on; continued, it rejoins, heals and ends
 *     identical (stopped after its all_reduce, it may commit that step in
 *     the quorum the others left: it is then behind by commit_quorum and
 *     heals all the same);
 *   - replicas that heartbeat but do not join are the other half of a
 *     split: while they beat, the joined half (not more than half) forms no
 *     quorum and commits nothing; once they are gone, it does;
 *   - the lighthouse killed and started again on its port: the replicas
 *     reconnect to the new one and finish identical.
 *
 * Every replica writes one line per step to a log file (O_APPEND, one
 * write per line); the test reads it to time what happened. Each group
 * starts from parameters of its own: init_sync makes them alike at step 0,
 * so identical results at the end also show healing worked. */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"
#include "lh_proc.h"

#include "gang/ft.h"
#include "gang/gang.h"

enum { NPARAM = 4096, MAX_PROCS = 16, MAX_LINES = 20000 };

/* The test running: the groups' gangs meet under keys of their own in the
 * store the tests share. */
static int g_test;

/* Bounds on time are the in the Release build; a sanitizer slows
 * every step several times over. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK 3.0
#else
#define SLACK 1.0
#endif

/* ---- The replicas -----------------------------------------------------------
 */

typedef struct run_cfg {
  const char *log;
  int lh_port;
  int group_size;
  int64_t target; /* steps to commit */
  int step_ms;    /* "compute" per step */
  int64_t timeout_ms, quorum_timeout_ms;
  bool just_beat; /* create the manager, never join, leave after beat_ms */
  int beat_ms;
} run_cfg;

static void log_line(const run_cfg *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_line(const run_cfg *c, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  int fd = open(c->log, O_WRONLY | O_APPEND);
  if (fd >= 0) {
    if (write(fd, line, (size_t)n) != n)
      fprintf(stderr, "short log write\n");
    close(fd);
  }
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static int replica_main(const run_cfg *c, int g, int inc, int rank) {
  gang_t *group = NULL;
  if (c->group_size > 1) {
    char ns[64];
    snprintf(ns, sizeof ns, "t%d-grp%d-", g_test, g);
    group = gt_join(ns, inc, rank, c->group_size, 20000, 0);
  }
  char lh[64], name[32];
  snprintf(lh, sizeof lh, "127.0.0.1:%d", c->lh_port);
  snprintf(name, sizeof name, "g%d", g);
  gang_manager_options mo = GANG_MANAGER_OPTIONS_INIT;
  mo.lighthouse = lh;
  mo.name = name;
  mo.group = group;
  mo.timeout_ms = c->timeout_ms;
  mo.quorum_timeout_ms = c->quorum_timeout_ms;
  gang_manager *m = NULL;
  RCHECK_OK(gang_manager_create(&mo, &m));
  if (c->just_beat) {
    log_line(c, "beat g=%d t=%.6f\n", g, gt_now_s());
    gt_nap_ms(c->beat_ms);
    gang_manager_destroy(m);
    log_line(c, "gone g=%d t=%.6f\n", g, gt_now_s());
    gang_destroy(group);
    return 0;
  }
  static float params[NPARAM], grad[NPARAM];
  for (int i = 0; i < NPARAM; i++)
    params[i] = (float)(i % 13) * 0.01f * (float)(g + 1) + (float)rank;
  RCHECK_OK(gang_manager_register_state(m, "params", params, sizeof params));
  while (gang_manager_step(m) < c->target) {
    RCHECK_OK(gang_manager_start_quorum(m, true, false));
    int64_t step = gang_manager_step(m); /* before healing moves it */
    gang_status qs = gang_manager_wait_quorum(m);
    step = gang_manager_step(m);
    int rr = gang_manager_replica_rank(m);
    for (int i = 0; i < NPARAM; i++)
      grad[i] = (float)((step * 31 + i * 7) % 17 - 8) * 0.001f *
                (float)(1 + (rr < 0 ? 0 : rr));
    RCHECK_OK(
        gang_manager_all_reduce(m, grad, NPARAM, GANG_FLOAT32, GANG_MEAN));
    gt_nap_ms(c->step_ms);
    bool commit = false;
    RCHECK_OK(gang_manager_should_commit(m, &commit));
    if (commit)
      for (int i = 0; i < NPARAM; i++)
        params[i] -= grad[i];
    char why[160] = "";
    if (!commit) {
      gang_status e = gang_manager_errored(m, why, sizeof why);
      if (e == GANG_OK && qs != GANG_OK)
        snprintf(why, sizeof why, "quorum: %s", gang_status_name(qs));
      for (char *p = why; *p; p++)
        if (*p == '\n')
          *p = ' ';
    }
    log_line(c,
             "step g=%d inc=%d rank=%d step=%" PRId64 " q=%" PRId64
             " part=%d commit=%d t=%.6f why=%.120s\n",
             g, inc, rank, gang_manager_step(m), gang_manager_quorum_id(m),
             gang_manager_participants(m), commit, gt_now_s(), why);
  }
  log_line(c,
           "done g=%d inc=%d rank=%d step=%" PRId64 " hash=%016" PRIx64
           " t=%.6f\n",
           g, inc, rank, gang_manager_step(m), fnv(params, sizeof params),
           gt_now_s());
  gang_manager_destroy(m);
  gang_destroy(group);
  return 0;
}

/* ---- Processes
 * ---------------------------------------------------------------- */

typedef struct procs {
  pid_t pid[MAX_PROCS];
  int group[MAX_PROCS];
  int n;
} procs;

static void spawn_group(procs *ps, const run_cfg *c, int g, int inc) {
  for (int r = 0; r < c->group_size; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120); /* no child outlives a broken test */
      gt_child_exit(replica_main(c, g, inc, r));
    }
    assert_true(pid > 0);
    ps->pid[ps->n] = pid;
    ps->group[ps->n] = g;
    ps->n++;
  }
}

static void signal_group(procs *ps, int g, int sig) {
  for (int i = 0; i < ps->n; i++)
    if (ps->group[i] == g && ps->pid[i] > 0)
      kill(ps->pid[i], sig);
}

/* Reaps group g's processes (after a SIGKILL). */
static void reap_group(procs *ps, int g) {
  for (int i = 0; i < ps->n; i++)
    if (ps->group[i] == g && ps->pid[i] > 0) {
      gt_wait_child(ps->pid[i], 5000);
      ps->pid[i] = -1;
    }
}

/* Waits for every process left; the number that did not exit 0. */
static int reap_all(procs *ps, int timeout_ms) {
  int bad = 0;
  double end = gt_now_s() + timeout_ms / 1000.0;
  for (int i = 0; i < ps->n; i++) {
    if (ps->pid[i] <= 0)
      continue;
    int left = (int)((end - gt_now_s()) * 1000);
    int st = gt_wait_child(ps->pid[i], left > 0 ? left : 1);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "replica process %d (group %d): status %d\n",
              (int)ps->pid[i], ps->group[i], st);
      bad++;
    }
    ps->pid[i] = -1;
  }
  return bad;
}

/* ---- The log
 * -------------------------------------------------------------------- */

typedef struct ev {
  char kind[8];
  int g, inc, rank, part, commit;
  int64_t step, q;
  double t;
  char hash[24];
} ev;

static int read_log(const char *path, ev *evs, int cap) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  char line[512];
  int n = 0;
  while (n < cap && fgets(line, sizeof line, f) != NULL) {
    ev e;
    memset(&e, 0, sizeof e);
    if (sscanf(line, "%7s", e.kind) != 1)
      continue;
    const char *p;
    if ((p = strstr(line, " g=")) != NULL)
      e.g = atoi(p + 3);
    if ((p = strstr(line, " inc=")) != NULL)
      e.inc = atoi(p + 5);
    if ((p = strstr(line, " rank=")) != NULL)
      e.rank = atoi(p + 6);
    if ((p = strstr(line, " step=")) != NULL)
      e.step = atoll(p + 6);
    if ((p = strstr(line, " q=")) != NULL)
      e.q = atoll(p + 3);
    if ((p = strstr(line, " part=")) != NULL)
      e.part = atoi(p + 6);
    if ((p = strstr(line, " commit=")) != NULL)
      e.commit = atoi(p + 8);
    if ((p = strstr(line, " t=")) != NULL)
      e.t = atof(p + 3);
    if ((p = strstr(line, " hash=")) != NULL)
      sscanf(p + 6, "%16s", e.hash);
    evs[n++] = e;
  }
  fclose(f);
  return n;
}

static ev g_evs[MAX_LINES];

/* Highest committed step logged by group g, incarnation inc. */
static int64_t committed(const char *log, int g, int inc) {
  int n = read_log(log, g_evs, MAX_LINES);
  int64_t best = -1;
  for (int i = 0; i < n; i++)
    if (strcmp(g_evs[i].kind, "step") == 0 && g_evs[i].g == g &&
        g_evs[i].inc == inc && g_evs[i].commit && g_evs[i].step > best)
      best = g_evs[i].step;
  return best;
}

static void wait_committed(const char *log, int g, int inc, int64_t step,
                           double timeout_s) {
  double end = gt_now_s() + timeout_s;
  while (committed(log, g, inc) < step && gt_now_s() < end)
    gt_nap_ms(5);
  if (committed(log, g, inc) < step)
    fail_msg("group %d never committed step %" PRId64, g, step);
}

/* Every "done" line: at `target`, one hash for all. Returns how many. */
static int check_done(const char *log, int64_t target) {
  int n = read_log(log, g_evs, MAX_LINES);
  int done = 0;
  const char *hash = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(g_evs[i].kind, "done") != 0)
      continue;
    done++;
    if (g_evs[i].step != target)
      fail_msg("group %d ended at step %" PRId64 ", not %" PRId64, g_evs[i].g,
               g_evs[i].step, target);
    if (g_evs[i].rank != 0)
      continue; /* ranks of a group hold different parameters */
    if (hash == NULL)
      hash = g_evs[i].hash;
    else if (strcmp(hash, g_evs[i].hash) != 0)
      fail_msg("group %d ended with parameters %s, another with %s", g_evs[i].g,
               g_evs[i].hash, hash);
  }
  return done;
}

static char *new_log(void) {
  char *path = strdup("/tmp/gang-ft-manager-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  return path;
}

/* The first commit with at most `part` participants after time t0 by a
 * group other than `skip`; 0 when none. */
static double first_commit_after(const char *log, double t0, int part,
                                 int skip) {
  int n = read_log(log, g_evs, MAX_LINES);
  for (int i = 0; i < n; i++)
    if (strcmp(g_evs[i].kind, "step") == 0 && g_evs[i].commit &&
        g_evs[i].t > t0 && g_evs[i].part <= part && g_evs[i].g != skip)
      return g_evs[i].t;
  return 0;
}

static double wait_commit_after(const char *log, double t0, int part, int skip,
                                double timeout_s) {
  double end = gt_now_s() + timeout_s, t = 0;
  while ((t = first_commit_after(log, t0, part, skip)) == 0 && gt_now_s() < end)
    gt_nap_ms(5);
  return t;
}

/* ---- A failed test stops its processes --------------------------------------
 */

/* What the running test started, for its teardown: a failed check leaves
 * the test at once, and its replicas and lighthouse must not run on until
 * their alarms (nor hold ctest until its timeout). */
static procs *g_ps;
static lh_proc *g_lh;

static int ft_teardown(void **state) {
  if (g_ps != NULL) {
    for (int i = 0; i < g_ps->n; i++)
      if (g_ps->pid[i] > 0) {
        kill(g_ps->pid[i], SIGKILL);
        gt_wait_child(g_ps->pid[i], 5000);
        g_ps->pid[i] = -1;
      }
    g_ps = NULL;
  }
  if (g_lh != NULL) {
    lh_kill(g_lh);
    g_lh = NULL;
  }
  return gt_leak_teardown(state);
}

#define FT_TEST(fn)                                                            \
  cmocka_unit_test_setup_teardown(fn, gt_leak_setup, ft_teardown)

/* What a test runs: a lighthouse, the replicas' processes and their log.
 * Static: the teardown reads it after a failure. */
typedef struct scene {
  lh_proc lh;
  procs ps;
  char *log;
} scene;

/* Starts a test: its lighthouse (lc) and a fresh log. */
static scene *scene_start(const lh_cfg *lc) {
  static scene sc;
  g_test++;
  memset(&sc.ps, 0, sizeof sc.ps);
  sc.lh = lh_start(lc);
  g_lh = &sc.lh;
  g_ps = &sc.ps;
  assert_true(sc.lh.pid > 0);
  sc.log = new_log();
  return &sc;
}

/* Ends a test that passed: the lighthouse stopped, the log removed. */
static void scene_end(scene *s) {
  lh_kill(&s->lh);
  unlink(s->log);
  free(s->log);
  s->log = NULL;
}

/* ---- Tests
 * ---------------------------------------------------------------------- */

static void test_kill9_survivors_go_on_and_restart_heals(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 2000, 1000};
  scene *s = scene_start(&lc);
  run_cfg c = {s->log, s->lh.port, 2, 80, 15, 1000, 10000, false, 0};
  for (int g = 0; g < 3; g++)
    spawn_group(&s->ps, &c, g, 0);
  wait_committed(s->log, 1, 0, 10, 60);
  double t_kill = gt_now_s();
  signal_group(&s->ps, 1, SIGKILL);
  reap_group(&s->ps, 1);
  double t = wait_commit_after(s->log, t_kill, 2, 1, 10);
  assert_true(t > 0);
  printf("kill -9 of a group: the survivors committed with 2 participants "
         "%.0f ms later\n",
         (t - t_kill) * 1000);
  assert_true(t - t_kill < 2.0 * SLACK);
  spawn_group(&s->ps, &c, 1, 1);
  assert_int_equal(reap_all(&s->ps, 90000), 0);
  assert_int_equal(check_done(s->log, c.target), 6);
  /* The restarted group healed: its first commit is far past step 1. */
  int n = read_log(s->log, g_evs, MAX_LINES);
  int64_t first = -1;
  for (int i = 0; i < n && first < 0; i++)
    if (!strcmp(g_evs[i].kind, "step") && g_evs[i].g == 1 &&
        g_evs[i].inc == 1 && g_evs[i].commit)
      first = g_evs[i].step;
  printf("the restarted group's first commit: step %" PRId64 "\n", first);
  assert_true(first > 11);
  scene_end(s);
}

static void test_sigstop_declared_dead_then_rejoins(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 2000, 1000};
  scene *s = scene_start(&lc);
  run_cfg c = {s->log, s->lh.port, 1, 70, 15, 1000, 10000, false, 0};
  for (int g = 0; g < 3; g++)
    spawn_group(&s->ps, &c, g, 0);
  wait_committed(s->log, 2, 0, 10, 60);
  double t_stop = gt_now_s();
  signal_group(&s->ps, 2, SIGSTOP);
  double t = wait_commit_after(s->log, t_stop, 2, 2, 10);
  assert_true(t > 0);
  printf("SIGSTOP of a group: the survivors committed with 2 participants "
         "%.0f ms later\n",
         (t - t_stop) * 1000);
  /* The heartbeat timeout (1 s) and a quorum. */
  assert_true(t - t_stop < 3.0 * SLACK);
  wait_committed(s->log, 0, 0, committed(s->log, 0, 0) + 5, 30);
  signal_group(&s->ps, 2, SIGCONT);
  assert_int_equal(reap_all(&s->ps, 90000), 0);
  assert_int_equal(check_done(s->log, c.target), 3);
  scene_end(s);
}

static void test_split_half_forms_no_quorum(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 500, 1000};
  scene *s = scene_start(&lc);
  /* Groups 2 and 3 beat for 3 s without joining. */
  run_cfg beat = {s->log, s->lh.port, 1, 0, 0, 1000, 1000, true, 3000};
  run_cfg c = {s->log, s->lh.port, 1, 10, 5, 1000, 1000, false, 0};
  spawn_group(&s->ps, &beat, 2, 0);
  spawn_group(&s->ps, &beat, 3, 0);
  double t_beat = 0;
  for (double end = gt_now_s() + 20; gt_now_s() < end && t_beat == 0;
       gt_nap_ms(5)) {
    int n = read_log(s->log, g_evs, MAX_LINES), beats = 0;
    for (int i = 0; i < n; i++)
      beats += !strcmp(g_evs[i].kind, "beat");
    if (beats == 2)
      t_beat = gt_now_s();
  }
  assert_true(t_beat > 0);
  spawn_group(&s->ps, &c, 0, 0);
  spawn_group(&s->ps, &c, 1, 0);
  assert_int_equal(reap_all(&s->ps, 90000), 0);
  assert_int_equal(check_done(s->log, c.target), 2);
  int n = read_log(s->log, g_evs, MAX_LINES);
  double gone = 0, first = 0;
  int refused = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(g_evs[i].kind, "gone") && g_evs[i].t > gone)
      gone = g_evs[i].t;
    if (!strcmp(g_evs[i].kind, "step") && g_evs[i].commit && first == 0)
      first = g_evs[i].t;
    if (!strcmp(g_evs[i].kind, "step") && !g_evs[i].commit)
      refused++;
  }
  printf("the joined half: %d steps refused, first commit %.0f ms after the "
         "other half stopped beating\n",
         refused, (first - gone) * 1000);
  assert_true(gone > 0 && first > gone);
  assert_true(refused >= 2);
  scene_end(s);
}

static void test_lighthouse_restart(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 500, 1000};
  scene *s = scene_start(&lc);
  run_cfg c = {s->log, s->lh.port, 2, 60, 10, 1000, 10000, false, 0};
  spawn_group(&s->ps, &c, 0, 0);
  spawn_group(&s->ps, &c, 1, 0);
  wait_committed(s->log, 0, 0, 15, 60);
  lh_kill(&s->lh);
  gt_nap_ms(500);
  lc.port = c.lh_port;
  s->lh = lh_start(&lc);
  assert_true(s->lh.pid > 0);
  assert_int_equal(s->lh.port, c.lh_port);
  assert_int_equal(reap_all(&s->ps, 90000), 0);
  assert_int_equal(check_done(s->log, c.target), 4);
  scene_end(s);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("GANG_TEST_FILTER") != NULL) /* one test, by hand */
    cmocka_set_test_filter(getenv("GANG_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      FT_TEST(test_kill9_survivors_go_on_and_restart_heals),
      FT_TEST(test_sigstop_declared_dead_then_rejoins),
      FT_TEST(test_split_half_forms_no_quorum),
      FT_TEST(test_lighthouse_restart),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
