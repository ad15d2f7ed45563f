/* A rank that is done is not a dead rank: ranks of one sub-gang end at
 * random moments -- returning from main or calling exit() with their
 * gangs open, from another thread, after gang_destroy of everything or of
 * their sub-gang only, with a posted work never freed -- while the other
 * sub-gangs run 200 checked all_reduces of assorted sizes; every rank
 * must exit 0. Over TCP, over shared memory, with sub-gangs of 2 and of
 * 4, in blocks and strided, and with fairseq2's parallel and FSDP gangs
 * of 8 ranks that return without closing them. Where the workers then
 * call a collective that needs the leavers, it must fail at once with
 * GANG_PEER_LEFT saying who left. A crash (SIGKILL, abort) stays a
 * failure: the workers get GANG_PEER_LOST within 3 s. The store's host
 * (rank 0) leaving first keeps the store for the others' timeout
 * diagnosis, and exits after them; told not to (GANG_STORE_LINGER=0), the
 * diagnosis says the store went with it.
 *
 * Each rank is exit_rank (a real program: the harness's forked ranks end
 * with _exit, which runs no exit handler). GANG_TEST_EXIT_TRIALS sets how
 * many random worlds each test runs (default below; the closing figures
 * of docs/gang.md, "Lifecycle", ran more). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"

#define MAX_RANKS 8
#define WORLD_TIMEOUT_MS 90000

static const char *rank_prog(void) {
  return GT_BUILD_DIR "/tests/gang/exit_rank";
}

typedef struct world_run {
  int size;
  int status[MAX_RANKS]; /* wait status, -1: killed by the watchdog */
  char *out[MAX_RANKS];
} world_run;

static void world_free(world_run *wr) {
  for (int r = 0; r < wr->size; r++)
    free(wr->out[r]);
}

static void world_print(const world_run *wr, const char *what) {
  fprintf(stderr, "---- %s\n", what);
  for (int r = 0; r < wr->size; r++) {
    int s = wr->status[r];
    if (s == -1)
      fprintf(stderr, "rank %d: killed by the watchdog\n", r);
    else if (WIFEXITED(s))
      fprintf(stderr, "rank %d: exit %d\n", r, WEXITSTATUS(s));
    else
      fprintf(stderr, "rank %d: signal %d\n", r, WTERMSIG(s));
    fprintf(stderr, "%s", wr->out[r] ? wr->out[r] : "");
  }
}

/* Runs `size` exit_rank processes with args[] (NULL-ended, after the
 * program name) and extra environment entries env[] ("NAME=value",
 * NULL-ended), rank 0 hosting the store at a free port, and reaps them
 * all within WORLD_TIMEOUT_MS (the watchdog kills the rest). */
static void run_world(world_run *wr, int size, char *const *args,
                      char *const *env) {
  memset(wr, 0, sizeof *wr);
  wr->size = size;
  int port = gt_free_port();
  pid_t pids[MAX_RANKS];
  int fds[MAX_RANKS];
  char *argv[32];
  int a = 0;
  argv[a++] = (char *)rank_prog();
  for (int i = 0; args[i] != NULL && a < 31; i++)
    argv[a++] = args[i];
  argv[a] = NULL;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < size; r++) {
    fds[r] = gt_out_fd("exit-rank-out");
    pids[r] = fork();
    if (pids[r] == 0) {
      int devnull = open("/dev/null", 0);
      dup2(devnull, 0);
      dup2(fds[r], 1);
      dup2(fds[r], 2);
      char v[32];
      snprintf(v, sizeof v, "%d", r);
      setenv("RANK", v, 1);
      setenv("LOCAL_RANK", v, 1);
      snprintf(v, sizeof v, "%d", size);
      setenv("WORLD_SIZE", v, 1);
      setenv("LOCAL_WORLD_SIZE", v, 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      snprintf(v, sizeof v, "%d", port);
      setenv("MASTER_PORT", v, 1);
      setenv("GANG_TIMEOUT", "30s", 1);
      /* A rank that returns with its gangs open holds them to its end,
       * which LeakSanitizer would report as leaks: that is the program's
       * choice, not the library's. */
      setenv("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1", 1);
      for (int i = 0; env != NULL && env[i] != NULL; i++)
        putenv(env[i]);
      execv(argv[0], argv);
      fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
      _exit(127);
    }
  }
  double deadline = gt_now_s() + WORLD_TIMEOUT_MS / 1000.0;
  int left = size;
  bool reaped[MAX_RANKS] = {false};
  while (left > 0) {
    for (int r = 0; r < size; r++) {
      if (reaped[r])
        continue;
      int st = 0;
      pid_t w = waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r] || (w < 0 && errno != EINTR)) {
        wr->status[r] = w == pids[r] ? st : -1;
        reaped[r] = true;
        left--;
      }
    }
    if (left > 0 && gt_now_s() > deadline) {
      for (int r = 0; r < size; r++) {
        if (reaped[r])
          continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], NULL, 0);
        wr->status[r] = -1;
        reaped[r] = true;
      }
      left = 0;
    }
    if (left > 0)
      gt_nap_ms(2); /* no fd tells of a child's exit without a handler */
  }
  for (int r = 0; r < size; r++) {
    off_t n = lseek(fds[r], 0, SEEK_END);
    wr->out[r] = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    if (wr->out[r] != NULL && n > 0 &&
        pread(fds[r], wr->out[r], (size_t)n, 0) < 0)
      wr->out[r][0] = '\0';
    close(fds[r]);
  }
}

/* The time a rank's process ended, from its "ends at" line. */
static bool end_time(const char *out, double *t) {
  const char *p = out != NULL ? strstr(out, " ends at ") : NULL;
  return p != NULL && sscanf(p, " ends at %lf", t) == 1;
}

static bool exited_ok(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int trials(int dflt) {
  const char *v = getenv("GANG_TEST_EXIT_TRIALS");
  return v != NULL && atoi(v) > 0 ? atoi(v) : dflt;
}

/* splitmix64, for the trial's choices. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Random worlds in which one sub-gang leaves cleanly; all must pass. */
static void leave_trials(bool tcp, int n, uint64_t base) {
  char *env[] = {tcp ? "GANG_SHM_DISABLE=1" : "GANG_SHM_DISABLE=0", NULL};
  int failures = 0;
  for (int t = 0; t < n; t++) {
    uint64_t seed = mix(base + (uint64_t)t);
    bool big = mix(seed ^ 1) % 3 == 0; /* 8 ranks, sub-gangs of 4 or 2 */
    int size = big ? 8 : 4;
    char group[8], seedv[24];
    snprintf(group, sizeof group, "%d", big && mix(seed ^ 2) % 2 ? 4 : 2);
    snprintf(seedv, sizeof seedv, "%llu", (unsigned long long)seed);
    char *args[12];
    int a = 0;
    args[a++] = seedv;
    args[a++] = "--group";
    args[a++] = group;
    if (mix(seed ^ 3) % 2)
      args[a++] = "--stride";
    if (mix(seed ^ 4) % 2)
      args[a++] = "--need";
    args[a] = NULL;
    world_run wr;
    run_world(&wr, size, args, env);
    bool ok = true;
    for (int r = 0; r < size; r++)
      ok = ok && exited_ok(wr.status[r]);
    if (!ok) {
      char what[160];
      snprintf(what, sizeof what, "trial %d (%s, %d ranks, seed %s): failed", t,
               tcp ? "tcp" : "shm", size, seedv);
      world_print(&wr, what);
      failures++;
    }
    world_free(&wr);
  }
  printf("%s: %d of %d worlds with leavers passed\n", tcp ? "tcp" : "shm",
         n - failures, n);
  assert_int_equal(failures, 0);
}

static void test_leave_tcp(void **state) {
  (void)state;
  leave_trials(true, trials(20), 1000);
}

static void test_leave_shm(void **state) {
  (void)state;
  leave_trials(false, trials(20), 2000);
}

/* fairseq2's gangs of 8 ranks, checked once each, then every rank
 * returns at its own moment without closing them. */
static void test_topology_gangs_left_open(void **state) {
  (void)state;
  int n = trials(10), failures = 0;
  for (int t = 0; t < n; t++) {
    char seedv[24];
    snprintf(seedv, sizeof seedv, "%d", 3000 + t);
    char *args[] = {seedv, "--topo", NULL};
    world_run wr;
    run_world(&wr, 8, args, NULL);
    bool ok = true;
    for (int r = 0; r < 8; r++)
      ok = ok && exited_ok(wr.status[r]);
    if (!ok) {
      world_print(&wr, "topology gangs left open");
      failures++;
    }
    world_free(&wr);
  }
  printf("topology: %d of %d worlds passed\n", n - failures, n);
  assert_int_equal(failures, 0);
}

/* A crash is not a leave: the leavers die by a signal, and every worker
 * must get GANG_PEER_LOST promptly (exit_rank checks status and time). */
static void test_crash_is_a_failure(void **state) {
  (void)state;
  const char *hows[] = {"kill", "abort"};
  /* Each (transport, signal) pair twice; once with GANG_TEST_EXIT_TRIALS
   * under 8. */
  int n = trials(8) < 4 ? 4 : trials(8) > 8 ? 8 : trials(8);
  for (int t = 0; t < n; t++) {
    bool tcp = t % 2;
    char *env[] = {tcp ? "GANG_SHM_DISABLE=1" : "GANG_SHM_DISABLE=0", NULL};
    char seedv[24];
    snprintf(seedv, sizeof seedv, "%d", 4000 + t);
    char *args[] = {
        seedv,    "--leave", "1", "--how", (char *)hows[(t / 2) % 2],
        "--need", NULL};
    world_run wr;
    run_world(&wr, 4, args, env);
    bool ok = exited_ok(wr.status[0]) && exited_ok(wr.status[1]);
    for (int r = 2; r < 4; r++)
      ok = ok && wr.status[r] != -1 && WIFSIGNALED(wr.status[r]);
    for (int r = 0; r < 2 && ok; r++)
      ok = strstr(wr.out[r], "as a crash should") != NULL ||
           strstr(wr.out[r], "failed as expected") != NULL;
    if (!ok)
      world_print(&wr, "crash");
    world_free(&wr);
    assert_true(ok);
  }
}

/* Rank 0 hosts the store and leaves first (returning from main); the
 * other pair's last all_reduce times out (its second rank arrives late),
 * and the diagnosis that follows needs the store. */
static void test_store_host_leaves_first(void **state) {
  (void)state;
  char *args[] = {"5",     "--leave", "0",      "--how", "return",
                  "--ops", "20",      "--diag", "2500",  NULL};
  char *env[] = {"GANG_TIMEOUT=1s", "GANG_STORE_LINGER=30s", NULL};
  world_run wr;
  run_world(&wr, 4, args, env);
  bool ok = true;
  for (int r = 0; r < 4; r++)
    ok = ok && exited_ok(wr.status[r]);
  /* It served the store until the others were done with it. */
  double end[4];
  for (int r = 0; r < 4 && ok; r++)
    ok = end_time(wr.out[r], &end[r]);
  ok = ok && end[0] > end[2] && end[0] > end[3];
  if (!ok)
    world_print(&wr, "the store's host leaves first");
  world_free(&wr);
  assert_true(ok);

  /* gang_destroy instead of returning: the store still outlives it for
   * the others (they meet through it before their world barrier). */
  for (int how = 0; how < 2; how++) {
    char *args2[] = {
        "6",      "--leave", "0", "--how", how ? "destroy" : "destroy-sub",
        "--need", NULL};
    run_world(&wr, 4, args2, NULL);
    ok = true;
    for (int r = 0; r < 4; r++)
      ok = ok && exited_ok(wr.status[r]);
    if (!ok)
      world_print(&wr, "the store's host destroys its gangs first");
    world_free(&wr);
    assert_true(ok);
  }

  /* Told not to linger: the others' diagnosis says where the store went. */
  char *env0[] = {"GANG_TIMEOUT=1s", "GANG_STORE_LINGER=0", NULL};
  run_world(&wr, 4, args, env0);
  ok = exited_ok(wr.status[0]) && exited_ok(wr.status[1]) &&
       !exited_ok(wr.status[2]) &&
       strstr(wr.out[2], "the store's host rank 0") != NULL &&
       strstr(wr.out[2], "left (process exit)") != NULL;
  if (!ok)
    world_print(&wr, "the store's host leaves first, GANG_STORE_LINGER=0");
  world_free(&wr);
  assert_true(ok);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      GT_TEST(test_leave_tcp),
      GT_TEST(test_leave_shm),
      GT_TEST(test_topology_gangs_left_open),
      GT_TEST(test_crash_is_a_failure),
      GT_TEST(test_store_host_leaves_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
