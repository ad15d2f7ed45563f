/* The flight recorder (GANG_FLIGHT, docs/flight-recorder.md) and its
 * reader, gang-flight.
 *
 * - A 4-rank desync: rank 3 skips the 21st all_reduce. The three others
 *   time out and dump on their failure; rank 3 dumps on SIGUSR1 and lives
 *   on. gang-flight, given the four files, names gang rank 3 and
 *   collective #21, and each rank's ring kept only its last 16 calls.
 * - Ranks that disagree (all_reduce against broadcast): gang-flight names
 *   the collective and both calls.
 * - SIGUSR1 arriving every millisecond during thousands of collectives
 *   over shared memory and TCP: every result right, the signals dumped.
 * - Off (the default): no thread, SIGUSR1 keeps its default action,
 *   gang_flight_dump says how to turn it on; a malformed GANG_FLIGHT fails
 *   gang creation naming it. On, a destroyed gang leaves no thread and
 *   gives SIGUSR1 back.
 * - gang-flight on written inputs: logs with prefixes, a truncated dump,
 *   rings that rolled at different points, agreement, nothing to read. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"

#include "gang/gang.h"

static char g_dir[64];

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    fwrite(chunk, 1, n, m);
  fclose(f);
  fclose(m);
  return buf;
}

/* Waits (up to ms) for the dump file of world rank r to hold a complete
 * dump. */
static bool wait_dump(const char *prefix, int r, int ms) {
  char path[128];
  snprintf(path, sizeof path, "%s%d", prefix, r);
  for (int t = 0; t < ms; t += 10) {
    char *s = slurp(path);
    bool done = s != NULL && strstr(s, "gang-flight end ") != NULL;
    free(s);
    if (done)
      return true;
    gt_nap_ms(10);
  }
  return false;
}

/* Runs gang-flight on args; returns its exit status, output in *out. */
static int run_tool(char *const *args, char **out) {
  char *tool = gt_tool_path("gang-flight");
  char *argv[16] = {tool};
  int n = 1;
  for (; args[n - 1] != NULL && n < 15; n++)
    argv[n] = args[n - 1];
  argv[n] = NULL;
  int st = gt_run_cmd(argv, NULL, out, 30000);
  free(tool);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- A desync: one rank never posts a collective ------------------------ */

static int missing_rank(int rank, int size, void *arg) {
  const char *prefix = arg;
  setenv("GANG_FLIGHT", "16", 1);
  setenv("GANG_FLIGHT_DUMP", prefix, 1);
  gang_t *g = gt_join("flight-missing-", 0, rank, size, 1500, 0);
  float buf[64];
  for (int k = 1; k <= 20; k++) {
    for (int i = 0; i < 64; i++)
      buf[i] = (float)(rank + i);
    RCHECK_OK(gang_all_reduce(g, buf, 64, GANG_FLOAT32, GANG_SUM));
    RCHECK(buf[5] == (float)(4 * 5 + 6));
  }
  if (rank == 3) {
    /* Rank 3 is elsewhere (in the test: here) when the others post #21;
     * a user asks it for its record with SIGUSR1, and it goes on. */
    RCHECK(kill(getpid(), SIGUSR1) == 0);
    RCHECK(wait_dump(prefix, 3, 10000));
    for (int r = 0; r < 3; r++)
      RCHECK(wait_dump(prefix, r, 20000));
    gang_destroy(g);
    return 0;
  }
  gang_status st = gang_all_reduce(g, buf, 64, GANG_FLOAT32, GANG_SUM);
  RCHECK(st != GANG_OK);
  /* The dump is taken before the error returns. */
  char path[128];
  snprintf(path, sizeof path, "%s%d", prefix, rank);
  char *s = slurp(path);
  RCHECK(s != NULL && strstr(s, "gang-flight end ") != NULL);
  RCHECK(strstr(s, "seq=21 call=all_reduce count=64 dtype=float32 op=sum") !=
         NULL);
  RCHECK(strstr(s, "state=done status=OK") != NULL);
  /* 16 kept: #6-#21 of the collectives, nothing older. */
  RCHECK(strstr(s, " seq=6 ") != NULL && strstr(s, " seq=5 ") == NULL);
  free(s);
  gang_destroy(g);
  return 0;
}

static void test_desync_names_the_missing_rank(void **state) {
  (void)state;
  char prefix[96];
  snprintf(prefix, sizeof prefix, "%s/missing.", g_dir);
  assert_int_equal(gt_run_ranks(4, missing_rank, prefix, 120000), 0);
  char f[4][128];
  char *args[5];
  for (int r = 0; r < 4; r++) {
    snprintf(f[r], sizeof f[r], "%s%d", prefix, r);
    args[r] = f[r];
  }
  args[4] = NULL;
  char *out = NULL;
  int rc = run_tool(args, &out);
  printf("%s", out);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "first difference: gang rank 3 (world rank 3) "
                              "never posted collective #21; its last is #20"));
  assert_non_null(strstr(out, "=>     21"));
  assert_non_null(strstr(out, "world rank 3, "));
  assert_non_null(strstr(out, ": SIGUSR1\n"));
  free(out);
  /* Rank 3's dump came from SIGUSR1 and holds #5-#20 (16 kept). */
  char *s = slurp(f[3]);
  assert_non_null(s);
  assert_non_null(strstr(s, "reason=SIGUSR1"));
  assert_non_null(strstr(s, " seq=20 "));
  assert_null(strstr(s, " seq=21 "));
  assert_null(strstr(s, " seq=4 "));
  free(s);
}

/* ---- Ranks that disagree on a collective -------------------------------- */

static int disagree_rank(int rank, int size, void *arg) {
  const char *prefix = arg;
  setenv("GANG_FLIGHT", "64", 1);
  setenv("GANG_FLIGHT_DUMP", prefix, 1);
  gang_t *g = gt_join("flight-disagree-", 0, rank, size, 1500, 0);
  int32_t buf[32] = {0};
  RCHECK_OK(gang_all_reduce(g, buf, 32, GANG_INT32, GANG_SUM));
  RCHECK_OK(gang_barrier(g));
  /* #3: all_reduce on rank 0, broadcast from 1 on rank 1. Whatever the
   * transport makes of it, each rank dumps after it. */
  if (rank == 0)
    (void)gang_all_reduce(g, buf, 32, GANG_INT32, GANG_MAX);
  else
    (void)gang_broadcast(g, buf, 32, GANG_INT32, 1);
  (void)gang_barrier(g);
  RCHECK_OK(gang_flight_dump("end of the disagreement"));
  gang_destroy(g);
  return 0;
}

static void test_disagreement_is_named(void **state) {
  (void)state;
  char prefix[96];
  snprintf(prefix, sizeof prefix, "%s/disagree.", g_dir);
  assert_int_equal(gt_run_ranks(2, disagree_rank, prefix, 60000), 0);
  char f0[128], f1[128];
  snprintf(f0, sizeof f0, "%s0", prefix);
  snprintf(f1, sizeof f1, "%s1", prefix);
  char *out = NULL;
  int rc = run_tool((char *[]){f0, f1, NULL}, &out);
  printf("%s", out);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "first difference: ranks disagree on "
                              "collective #3: gang rank 0 (world rank 0) "
                              "called all_reduce 32 int32 max, gang rank 1 "
                              "(world rank 1) broadcast 32 int32 root 1"));
  free(out);
}

/* ---- SIGUSR1 storms during collectives ---------------------------------- */

#if defined(__SANITIZE_THREAD__)
#define STORM_CALLS 150 /* a 1 MiB all_reduce costs ms under TSan */
#else
#define STORM_CALLS 600
#endif

static atomic_bool g_stop;

static void *signaller(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    kill(getpid(), SIGUSR1);
    gt_nap_ms(1);
  }
  return NULL;
}

static int storm_rank(int rank, int size, void *arg) {
  const char *mode = ((const char **)arg)[0];
  const char *prefix = ((const char **)arg)[1];
  if (strcmp(mode, "tcp") == 0)
    setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_FLIGHT", "256", 1);
  setenv("GANG_FLIGHT_DUMP", prefix, 1);
  char ns[48];
  snprintf(ns, sizeof ns, "flight-storm-%s-", mode);
  gang_t *g = gt_join(ns, 0, rank, size, 30000, 0);
  size_t big = (size_t)1 << 18; /* 1 MiB of floats */
  float *buf = malloc(big * sizeof *buf);
  RCHECK(buf != NULL);
  pthread_t t;
  atomic_store(&g_stop, false);
  RCHECK(pthread_create(&t, NULL, signaller, NULL) == 0);
  for (int k = 0; k < STORM_CALLS; k++) {
    size_t n = k % 3 == 0 ? big : k % 3 == 1 ? 1000 : 2;
    for (size_t i = 0; i < n; i++)
      buf[i] = (float)((i * 7 + (size_t)rank) % 1000);
    RCHECK_OK(gang_all_reduce(g, buf, n, GANG_FLOAT32, GANG_SUM));
    for (size_t i = 0; i < n; i += 97)
      RCHECK(buf[i] == (float)((i * 7) % 1000 + (i * 7 + 1) % 1000));
    gang_work *w = NULL;
    int32_t x = rank + k;
    RCHECK_OK(gang_broadcast_post(g, &x, 1, GANG_INT32, k % 2, &w));
    RCHECK_OK(gang_work_wait(w, -1));
    gang_work_free(w);
    RCHECK(x == k % 2 + k);
  }
  atomic_store(&g_stop, true);
  pthread_join(t, NULL);
  free(buf);
  gang_destroy(g);
  char path[128];
  snprintf(path, sizeof path, "%s%d", prefix, rank);
  char *s = slurp(path);
  RCHECK(s != NULL);
  int dumps = 0;
  for (const char *p = s; (p = strstr(p, "reason=SIGUSR1")) != NULL; p++)
    dumps++;
  fprintf(stderr, "rank %d (%s): %d SIGUSR1 dumps\n", rank, mode, dumps);
  RCHECK(dumps >= 1);
  free(s);
  return 0;
}

static void test_signals_during_collectives(void **state) {
  (void)state;
  const char *modes[] = {"shm", "tcp"};
  for (int m = 0; m < 2; m++) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s/storm-%s.", g_dir, modes[m]);
    const char *arg[2] = {modes[m], prefix};
    assert_int_equal(gt_run_ranks(2, storm_rank, arg, 240000), 0);
  }
}

/* ---- Off by default; on, it cleans up ----------------------------------- */

static bool usr1_default(void) {
  struct sigaction sa;
  return sigaction(SIGUSR1, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) &&
         sa.sa_handler == SIG_DFL;
}

static int off_rank(int rank, int size, void *arg) {
  (void)arg;
  unsetenv("GANG_FLIGHT");
  int threads = gt_count_threads();
  gang_t *g = gt_join("flight-off-", 0, rank, size, 20000, 0);
  RCHECK(gt_count_threads_settled(threads) == threads);
  RCHECK(usr1_default());
  RCHECK(gang_flight_dump("x") == GANG_INVALID_USAGE);
  RCHECK(strstr(gang_last_error(), "GANG_FLIGHT") != NULL);
  gang_destroy(g);
  /* On: the dump thread and the handler live while a gang does. */
  setenv("GANG_FLIGHT", "8", 1);
  g = gt_join("flight-off-", 1, rank, size, 20000, 0);
  RCHECK(!usr1_default());
  RCHECK(gt_count_threads() == threads + 1);
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  RCHECK(usr1_default());
  RCHECK(gt_count_threads_settled(threads) == threads);
  /* Malformed: creation fails naming the setting. */
  const char *bad[] = {"abc", "-5", "2000000"};
  for (int i = 0; i < 3; i++) {
    setenv("GANG_FLIGHT", bad[i], 1);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d/flight-bad-%d-", gt_store_port(),
             i);
    gang_options o = GANG_OPTIONS_INIT;
    o.timeout_ms = 20000;
    gang_t *b = NULL;
    gang_status st = gang_create_with_store(&o, addr, rank, size, &b);
    fprintf(stderr, "GANG_FLIGHT=%s: %s: %s\n", bad[i], gang_status_name(st),
            gang_last_error());
    RCHECK(st == GANG_INVALID_ARGUMENT && b == NULL);
    RCHECK(strstr(gang_last_error(), "GANG_FLIGHT") != NULL);
  }
  unsetenv("GANG_FLIGHT");
  return 0;
}

static void test_off_by_default_and_clean_when_on(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(2, off_rank, NULL, 60000), 0);
}

/* ---- The reader on written inputs --------------------------------------- */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* A dump of world rank r of a 2-rank world holding collectives lo..hi,
 * the last one `last_state`. */
static void dump_text(char *out, size_t cap, int r, int lo, int hi,
                      const char *last_state, const char *prefix) {
  size_t o = 0;
  o += (size_t)snprintf(out + o, cap - o,
                        "%sgang-flight begin dump=h:%d:1 rank=%d pid=%d "
                        "host=h mono=9000000000 real=1 reason=test\n"
                        "unrelated line\n"
                        "%sgang-flight gang dump=h:%d:1 world=w ctx="
                        "0000000000000001 wrank=%d grank=%d gsize=2 "
                        "recorded=%d ranks=0,1\n",
                        prefix, 100 + r, r, 100 + r, prefix, 100 + r, r, r, hi);
  for (int s = lo; s <= hi; s++)
    o += (size_t)snprintf(
        out + o, cap - o,
        "%sgang-flight call dump=h:%d:1 ctx=0000000000000001 seq=%d "
        "call=all_reduce count=4 dtype=float32 op=sum root=-1 tag=0 "
        "state=%s status=OK posted=1000 started=1000 ended=%d algo=ring\n",
        prefix, 100 + r, s, s == hi ? last_state : "done",
        s == hi && strcmp(last_state, "running") == 0 ? 0 : 5000);
  snprintf(out + o, cap - o, "%sgang-flight end dump=h:%d:1\n", prefix,
           100 + r);
}

static void test_reader_cases(void **state) {
  (void)state;
  static char a[16384], b[16384];
  char fa[128], fb[128], fc[128];
  snprintf(fa, sizeof fa, "%s/in-a", g_dir);
  snprintf(fb, sizeof fb, "%s/in-b", g_dir);
  snprintf(fc, sizeof fc, "%s/in-c", g_dir);
  char *out = NULL;

  /* Agreement, rings rolled at different points, log prefixes. */
  dump_text(a, sizeof a, 0, 10, 20, "done", "[rank0]: ");
  dump_text(b, sizeof b, 1, 1, 20, "done", "");
  write_file(fa, a);
  write_file(fb, b);
  assert_int_equal(run_tool((char *[]){fa, fb, NULL}, &out), 0);
  assert_non_null(strstr(out, "every rank posted the same 11 collectives "
                              "(#10-#20 kept) and finished them"));
  free(out);

  /* One rank still running #20. */
  dump_text(b, sizeof b, 1, 1, 20, "running", "");
  write_file(fb, b);
  assert_int_equal(run_tool((char *[]){fa, fb, NULL}, &out), 1);
  assert_non_null(strstr(out, "the first not finished everywhere is #20 "
                              "all_reduce 4 float32 sum: RUNNING 9.00 s on "
                              "gang rank 1"));
  free(out);

  /* A truncated dump is not read: rank 1 has no record. */
  dump_text(b, sizeof b, 1, 1, 20, "done", "");
  *strstr(b, "gang-flight end") = '\0';
  write_file(fb, b);
  assert_int_equal(run_tool((char *[]){fa, fb, NULL}, &out), 1);
  assert_non_null(strstr(out, "no record from gang rank 1 (world rank 1)"));
  free(out);

  /* Both in one file read twice, and a file of no dump. */
  dump_text(b, sizeof b, 1, 1, 19, "done", "");
  char *both = malloc(strlen(a) + strlen(b) + 1);
  strcpy(both, a);
  strcat(both, b);
  write_file(fc, both);
  free(both);
  assert_int_equal(run_tool((char *[]){fc, fc, NULL}, &out), 1);
  assert_non_null(strstr(out, "gang rank 1 (world rank 1) never posted "
                              "collective #20; its last is #19"));
  free(out);
  write_file(fa, "nothing here\n");
  assert_int_equal(run_tool((char *[]){fa, NULL}, &out), 2);
  assert_non_null(strstr(out, "no complete dump"));
  free(out);
  assert_int_equal(run_tool((char *[]){"--rows", "x", NULL}, &out), 2);
  assert_non_null(strstr(out, "--rows needs a number"));
  free(out);
  char missing[128];
  snprintf(missing, sizeof missing, "%s/no-such-file", g_dir);
  assert_int_equal(run_tool((char *[]){missing, NULL}, &out), 2);
  assert_non_null(strstr(out, "cannot read"));
  free(out);
}

static int setup(void **state) {
  snprintf(g_dir, sizeof g_dir, "/tmp/gang-flight-test-XXXXXX");
  if (mkdtemp(g_dir) == NULL)
    return -1;
  return gt_store_group_setup(state);
}

static int teardown(void **state) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", g_dir);
  return gt_store_group_teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_desync_names_the_missing_rank),
      GT_TEST(test_disagreement_is_named),
      GT_TEST(test_signals_during_collectives),
      GT_TEST(test_off_by_default_and_clean_when_on),
      GT_TEST(test_reader_cases),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
