/* The manager (gang/ft.h) across replica groups of real processes under a
 * lighthouse in a process of its own:
 *
 *   - a group killed with SIGKILL mid-step: the survivors commit a step
 *     with fewer participants within 0.8 s (heartbeat timeout 1 s: they
 *     report the dead group to the lighthouse); the group started again
 *     heals and every replica ends bit-identical at the target step;
 *   - a group stopped with SIGSTOP: declared dead when its heartbeat
 *     expires, the survivors go on; continued, it rejoins, heals and ends
 *     identical (stopped after its all_reduce, it may commit that step in
 *     the quorum the others left: it is then behind by commit_quorum and
 *     heals all the same);
 *   - replicas that heartbeat but do not join are the other half of a
 *     split: while they beat, the joined half (not more than half) forms no
 *     quorum and commits nothing; once they are gone, it does;
 *   - the lighthouse killed and started again on its port: the replicas
 *     reconnect to the new one and finish identical;
 *   - a group that starts late heals before its first commit;
 *   - the two ranks of a group stopped 30-50 ms apart for 3 s: the others
 *     go on within the heartbeat timeout, and the group either rejoins or
 *     (its own gang broken by the stop) exits and is started again;
 *   - kill -9 of a group's rank 1: its rank 0 exits by itself at once and
 *     the group starts again.
 *
 * In every test the job's committed step never goes back
 * (check_never_back) and the oracle below holds (check_done).
 *
 * Every replica writes one line per step to a log file (O_APPEND, one
 * write per line); the test reads it to time what happened.
 *
 * The oracle: every replica trains on the same data (a quadratic loss
 * whose target moves with the step, so a gradient depends on the
 * parameters it was computed from and on the step), so whatever the
 * faults, each rank's parameters must end equal to a fault-free run's
 * (check_done). Each group starts from parameters of its own, and
 * init_sync makes them the primary's at step 0: a replica ends checking
 * itself against the fault-free run from each group's start, and must
 * match one of them, the same for every group's rank r. A group started
 * again starts from garbage: only healing brings it back. A healing
 * replica counted as a participant, or one whose stale gradient got into
 * the mean, makes a step go wrong and the check fail. The bound: a mean
 * of k identical floats is within k ulp (2^-24 each) of the value, a step
 * moves a parameter by LR times the gradient (|g| < 4 here), so over T
 * steps the error stays below T * LR * 4 * k * 2^-24 = 2e-6 for T = 80,
 * k = 3; ORACLE_TOL is 1e-5, where one wrong step costs at least 1e-3. */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
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
#include "ft_log.h"
#include "lh_proc.h"

#include "gang/ft.h"
#include "gang/gang.h"

/* MAX_SLOTS: processes over every incarnation of a test (MAX_PROCS, the
 * groups: ft_log.h). */
enum { NPARAM = 4096, MAX_SLOTS = 128 };

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

/* ---- The model: the same data everywhere --------------------------------- */

#define LR 0.1f

/* Where group g's rank `rank` starts: its own values; garbage for a group
 * started again (inc > 0), which only healing repairs. */
static void init_params(float *p, int g, int inc, int rank) {
  for (int i = 0; i < NPARAM; i++)
    p[i] = inc > 0 ? 1000.0f + (float)inc
                   : (float)(i % 13) * 0.01f * (float)(g + 1) + (float)rank;
}

/* LR times the gradient of sum_i a_i (p_i - t_i(step))^2 / 2: it depends
 * on the parameters and on the step, and is the same for every replica. */
static void gradient(const float *p, int64_t step, int rank, float *g) {
  for (int i = 0; i < NPARAM; i++) {
    float a = 0.5f + (float)(i % 7) * 0.1f;
    float t = sinf((float)i * 0.37f + (float)step * 0.11f) + (float)rank;
    g[i] = LR * a * (p[i] - t);
  }
}

/* The largest relative difference between p and the fault-free run of
 * `steps` steps from group g0's start. */
static double oracle_error(const float *p, int g0, int rank, int64_t steps) {
  static float ref[NPARAM], grad[NPARAM];
  init_params(ref, g0, 0, rank);
  for (int64_t s = 0; s < steps; s++) {
    gradient(ref, s, rank, grad);
    for (int i = 0; i < NPARAM; i++)
      ref[i] -= grad[i];
  }
  double worst = 0;
  for (int i = 0; i < NPARAM; i++) {
    double d = fabs((double)p[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
    if (d > worst)
      worst = d;
  }
  return worst;
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
    /* Logged before the destroy: it leaves the lighthouse at once, and
     * the others' quorum may form before the destroy returns. */
    log_line(c, "gone g=%d t=%.6f\n", g, gt_now_s());
    gang_manager_destroy(m);
    gang_destroy(group);
    return 0;
  }
  static float params[NPARAM], grad[NPARAM];
  init_params(params, g, inc, rank);
  RCHECK_OK(gang_manager_register_state(m, "params", params, sizeof params));
  while (gang_manager_step(m) < c->target) {
    gang_status cs = gang_manager_start_quorum(m, true, false);
    /* The gradient is computed while the quorum forms (torchft's async
     * quorum, the documented recipe): a replica that heals this step
     * computes from the state it had, and the manager must not let that
     * into the mean. The step it trains on is the one it is at. */
    int64_t step = gang_manager_step(m);
    gradient(params, step, rank, grad);
    gang_status qs = gang_manager_wait_quorum(m);
    if (cs == GANG_OK)
      cs = gang_manager_all_reduce(m, grad, NPARAM, GANG_FLOAT32, GANG_MEAN);
    gt_nap_ms(c->step_ms);
    bool commit = false;
    if (cs == GANG_OK)
      cs = gang_manager_should_commit(m, &commit);
    if (cs != GANG_OK) {
      /* The group's own gang failed (a rank of it stopped or killed): the
       * group ends, to be started again. */
      fprintf(stderr, "group %d rank %d: %s\n", g, rank, gang_last_error());
      log_line(c, "fatal g=%d inc=%d rank=%d t=%.6f\n", g, inc, rank,
               gt_now_s());
      gang_manager_destroy(m);
      gang_destroy(group);
      gt_child_exit(3);
    }
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
  /* Which group's start init_sync gave this rank, and how far from the
   * fault-free run from there it ended. */
  int primary = -1;
  double err = INFINITY;
  for (int g0 = 0; g0 < MAX_PROCS; g0++) {
    double e = oracle_error(params, g0, rank, gang_manager_step(m));
    if (e < err) {
      err = e;
      primary = g0;
    }
  }
  log_line(c,
           "done g=%d inc=%d rank=%d step=%" PRId64 " hash=%016" PRIx64
           " primary=%d err=%.3g t=%.6f\n",
           g, inc, rank, gang_manager_step(m), fnv(params, sizeof params),
           primary, err, gt_now_s());
  gang_manager_destroy(m);
  gang_destroy(group);
  return 0;
}

/* ---- Processes
 * ---------------------------------------------------------------- */

typedef struct procs {
  pid_t pid[MAX_SLOTS];
  int group[MAX_SLOTS];
  int inc[MAX_SLOTS]; /* the group's incarnation it belongs to */
  int n;
} procs;

static void spawn_group(procs *ps, const run_cfg *c, int g, int inc) {
  assert_true(ps->n + c->group_size <= MAX_SLOTS);
  fflush(stdout); /* or the children print it again */
  fflush(stderr);
  for (int r = 0; r < c->group_size; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120); /* no child outlives a broken test */
      gt_child_exit(replica_main(c, g, inc, r));
    }
    assert_true(pid > 0);
    ps->pid[ps->n] = pid;
    ps->group[ps->n] = g;
    ps->inc[ps->n] = inc;
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

/* Runs the job to its end as a launcher with --max-restarts would: a
 * group whose process ends badly (killed, or exited non-zero because the
 * group's own gang failed) loses its other processes and is started again
 * as the next incarnation. Returns the restarts; fails the test when the
 * job does not end within timeout_s or a group is restarted more than
 * max_restarts times. Every process of every group ends with status 0. */
static int supervise(procs *ps, const run_cfg *c, int ngroups, double timeout_s,
                     int max_restarts) {
  int inc[MAX_PROCS] = {0}, restarts = 0;
  for (int i = 0; i < ps->n; i++)
    if (ps->group[i] < MAX_PROCS && ps->inc[i] > inc[ps->group[i]])
      inc[ps->group[i]] = ps->inc[i];
  double end = gt_now_s() + timeout_s;
  for (;;) {
    int alive = 0;
    for (int i = 0; i < ps->n; i++) {
      if (ps->pid[i] <= 0)
        continue;
      int st = 0;
      pid_t pid = ps->pid[i];
      pid_t r = waitpid(pid, &st, WNOHANG);
      if (r == 0) {
        alive++;
        continue;
      }
      ps->pid[i] = -1;
      if (r == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        continue; /* done */
      int g = ps->group[i];
      printf("group %d (incarnation %d): a process ended with status 0x%x: "
             "the group starts again\n",
             g, inc[g], st);
      signal_group(ps, g, SIGKILL);
      signal_group(ps, g, SIGCONT);
      reap_group(ps, g);
      if (++restarts > max_restarts)
        fail_msg("more than %d restarts", max_restarts);
      spawn_group(ps, c, g, ++inc[g]);
      alive++;
    }
    if (alive == 0)
      return restarts;
    if (gt_now_s() > end)
      fail_msg("the job did not end within %.0f s", timeout_s);
    gt_nap_ms(5);
  }
  (void)ngroups;
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
  /* Not the heartbeat timeout (1 s): the survivors saw its connections
   * close and told the lighthouse, which gave it 300 ms to beat. */
  assert_true(t - t_kill < 0.8 * SLACK);
  spawn_group(&s->ps, &c, 1, 1);
  assert_int_equal(reap_all(&s->ps, 90000), 0);
  assert_int_equal(check_done(s->log, c.target), 6);
  /* The restarted group healed: its first commit is past step 10, where
   * the kill came (from scratch it would commit step 1 first). It may be
   * step 11, the survivors' next: a restart that joins their next quorum
   * heals in it. */
  int n = read_log(s->log, g_evs, MAX_LINES);
  int64_t first = -1;
  for (int i = 0; i < n && first < 0; i++)
    if (!strcmp(g_evs[i].kind, "step") && g_evs[i].g == 1 &&
        g_evs[i].inc == 1 && g_evs[i].commit)
      first = g_evs[i].step;
  printf("the restarted group's first commit: step %" PRId64 "\n", first);
  assert_true(first > 10);
  assert_true(check_never_back(s->log) == c.target);
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
  /* The heartbeat timeout (1 s) and a quorum: measured 1.05-1.08 s, also
   * under the sanitizers beside other tests, 1.14-1.31 s beside a chaos run
   * of eight more processes. */
  assert_true(t - t_stop < 1.0 + 0.5 * SLACK);
  wait_committed(s->log, 0, 0, committed(s->log, 0, 0) + 5, 30);
  signal_group(&s->ps, 2, SIGCONT);
  assert_int_equal(reap_all(&s->ps, 90000), 0);
  assert_int_equal(check_done(s->log, c.target), 3);
  assert_true(check_never_back(s->log) == c.target);
  scene_end(s);
}

static void test_split_half_forms_no_quorum(void **state) {
  (void)state;
  /* A heartbeat timeout of 5 s: the beating half leaves the lighthouse
   * when it is done (the quorum forms then), and must not be declared dead
   * before, as a 1 s timeout did once under ThreadSanitizer beside two
   * busy tests (a beat thread starved for over a second). */
  lh_cfg lc = {0, 1, 500, 5000};
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
  /* The split ends when the first of the beating half leaves: the joined
   * half is then a majority of the heartbeating replicas and may commit,
   * possibly before the second one has logged its leave. */
  double gone = 0, first = 0;
  int refused = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(g_evs[i].kind, "gone") && (gone == 0 || g_evs[i].t < gone))
      gone = g_evs[i].t;
    if (!strcmp(g_evs[i].kind, "step") && g_evs[i].commit && first == 0)
      first = g_evs[i].t;
    if (!strcmp(g_evs[i].kind, "step") && !g_evs[i].commit)
      refused++;
  }
  printf("the joined half: %d steps refused, first commit %.0f ms after the "
         "first of the other half left\n",
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
  assert_true(check_never_back(s->log) == c.target);
  scene_end(s);
}

/* A group that starts when the others are well on: it heals before its
 * first commit, and its gradient of that step (from its garbage start)
 * stays out of the mean. */
static void test_late_joiner_heals(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 2000, 1000};
  scene *s = scene_start(&lc);
  run_cfg c = {s->log, s->lh.port, 2, 60, 10, 1000, 10000, false, 0};
  spawn_group(&s->ps, &c, 0, 0);
  spawn_group(&s->ps, &c, 1, 0);
  wait_committed(s->log, 0, 0, 15, 60);
  spawn_group(&s->ps, &c, 2, 1); /* 1: it starts from garbage */
  assert_int_equal(supervise(&s->ps, &c, 3, 90, 0), 0);
  assert_int_equal(check_done(s->log, c.target), 6);
  assert_true(check_never_back(s->log) == c.target);
  scene_end(s);
}

/* Rank 1 of a two-rank group stopped, its rank 0 30-50 ms later, both
 * continued 3 s later, past the 1 s timeouts: the others go on without
 * the group within the heartbeat timeout; the group either rejoins or,
 * when the stop broke its own gang (a vote of its ranks timed out), its
 * ranks exit by themselves and it starts again. Nobody hangs, no other
 * group restarts, the job's step never goes back, and the oracle holds. */
static void test_sigstop_ranks_with_skew(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 2000, 1000};
  scene *s = scene_start(&lc);
  /* Enough steps that the others are still training when the group is
   * back (a group started again after the job's end would train alone,
   * from its garbage). */
  run_cfg c = {s->log, s->lh.port, 2, 400, 15, 1000, 10000, false, 0};
  for (int g = 0; g < 3; g++)
    spawn_group(&s->ps, &c, g, 0);
  wait_committed(s->log, 1, 0, 10, 60);
  pid_t r0 = -1, r1 = -1;
  for (int i = 0; i < s->ps.n; i++)
    if (s->ps.group[i] == 1)
      *(r0 < 0 ? &r0 : &r1) = s->ps.pid[i];
  double t_stop = gt_now_s();
  kill(r1, SIGSTOP);
  gt_nap_ms(30 + (int)(gt_now_s() * 1000) % 20);
  kill(r0, SIGSTOP);
  double t = wait_commit_after(s->log, t_stop, 2, 1, 10);
  assert_true(t > 0);
  printf("SIGSTOP of a group's ranks with skew: the others committed with 2 "
         "participants %.0f ms later\n",
         (t - t_stop) * 1000);
  assert_true(t - t_stop < 1.0 + 0.5 * SLACK);
  gt_nap_ms((int)(3000 - (gt_now_s() - t_stop) * 1000));
  kill(r0, SIGCONT);
  kill(r1, SIGCONT);
  int restarts = supervise(&s->ps, &c, 3, 120, 4);
  for (int i = 0; i < s->ps.n; i++)
    if (s->ps.inc[i] > 0)
      assert_int_equal(s->ps.group[i], 1); /* only the stopped group */
  printf("the stopped group %s\n",
         restarts ? "failed and started again" : "rejoined");
  check_done(s->log, c.target);
  assert_true(check_never_back(s->log) == c.target);
  scene_end(s);
}

/* kill -9 of rank 1 of a group: the group's gang is broken, so its rank 0
 * must exit by itself (not linger, heartbeating, in every quorum) and the
 * group starts again; the others go on. */
static void test_kill_of_a_nonzero_rank(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 2000, 1000};
  scene *s = scene_start(&lc);
  run_cfg c = {s->log, s->lh.port, 2, 200, 15, 1000, 10000, false, 0};
  for (int g = 0; g < 3; g++)
    spawn_group(&s->ps, &c, g, 0);
  wait_committed(s->log, 2, 0, 10, 60);
  pid_t r1 = -1, r0 = -1;
  for (int i = 0; i < s->ps.n; i++)
    if (s->ps.group[i] == 2)
      *(r0 < 0 ? &r0 : &r1) = s->ps.pid[i];
  double t_kill = gt_now_s();
  kill(r1, SIGKILL);
  int st = gt_wait_child(r0, (int)(10000 * SLACK));
  double gone = gt_now_s() - t_kill;
  printf("kill -9 of a group's rank 1: its rank 0 exited (status 0x%x) %.0f "
         "ms later\n",
         st, gone * 1000);
  assert_true(st != -1 && st != 0);
  assert_true(gone < 1.0 + 0.5 * SLACK); /* measured 0.04-0.55 s */
  for (int i = 0; i < s->ps.n; i++)
    if (s->ps.pid[i] == r0)
      s->ps.pid[i] = -1;
  double t = wait_commit_after(s->log, t_kill, 2, 2, 10);
  assert_true(t > 0 && t - t_kill < 1.0 + 0.5 * SLACK);
  reap_group(&s->ps, 2);
  spawn_group(&s->ps, &c, 2, 1);
  assert_int_equal(supervise(&s->ps, &c, 3, 90, 0), 0);
  assert_int_equal(check_done(s->log, c.target), 6);
  assert_true(check_never_back(s->log) == c.target);
  scene_end(s);
}

/* CPU seconds process `pid` has used (user + system); -1 if unknown. */
static double cpu_seconds(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces */
  unsigned long ut = 0, st = 0;
  if (p == NULL ||
      sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
             &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The lighthouse stopped past what a manager's wait for a failure notice
 * allows (0.5 s and the store client's 1 s grace), then continued: every
 * manager's notice watcher must connect again and go on waiting, not spin
 * on the connection the stall broke (it did: a core per replica, every
 * later notice missed, so configures and heals waited out their timeout
 * after any lighthouse stall). */
static void test_notices_after_a_lighthouse_stall(void **state) {
  (void)state;
  lh_cfg lc = {0, 1, 2000, 1000};
  scene *s = scene_start(&lc);
  run_cfg c = {s->log, s->lh.port, 1, 300, 10, 1000, 10000, false, 0};
  for (int g = 0; g < 3; g++)
    spawn_group(&s->ps, &c, g, 0);
  wait_committed(s->log, 2, 0, 10, 60);
  assert_int_equal(kill(s->lh.pid, SIGSTOP), 0);
  gt_nap_ms(2500);
  assert_int_equal(kill(s->lh.pid, SIGCONT), 0);
  wait_committed(s->log, 0, 0, 60, 60);
  double cpu0[3], cpu1[3];
  for (int g = 0; g < 3; g++)
    cpu0[g] = cpu_seconds(s->ps.pid[g]);
  double t0 = gt_now_s();
  gt_nap_ms(1000);
  double wall = gt_now_s() - t0;
  for (int g = 0; g < 3; g++) {
    cpu1[g] = cpu_seconds(s->ps.pid[g]);
    printf("after the lighthouse's stall: group %d used %.2f s of CPU in "
           "%.2f s\n",
           g, cpu1[g] - cpu0[g], wall);
    assert_true(cpu0[g] >= 0 && cpu1[g] >= 0);
    assert_true(cpu1[g] - cpu0[g] <
                0.15 * wall * SLACK); /* 0.25-0.32 spinning, 0.03-0.05 not */
  }
  assert_int_equal(supervise(&s->ps, &c, 3, 90, 0), 0);
  assert_int_equal(check_done(s->log, c.target), 3);
  assert_true(check_never_back(s->log) == c.target);
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
      FT_TEST(test_late_joiner_heals),
      FT_TEST(test_sigstop_ranks_with_skew),
      FT_TEST(test_kill_of_a_nonzero_rank),
      FT_TEST(test_notices_after_a_lighthouse_stall),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
