/* gangrun end to end: it runs the built launcher over gangrun_worker (a
 * helper whose argv picks a behaviour) and checks what workers see, the
 * output relay, failure propagation, signals, restarts and the hosted
 * store, and that no worker outlives gangrun in any of these (usage
 * errors: test_gangrun_flags.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/status.h"

#include "gangrun_test.h"

static void test_env_seen(void **state) {
  (void)state;
  char *out = NULL;
  int st = run(&out, NULL, "--standalone", "--nproc_per_node=3", "--run-id",
               "myrun", "--max-restarts", "4", GR_WORKER, "env", NULL);
  assert_int_equal(exit_code(st), 0);
  char *secret0 = env_of(out, 0, "GANG_STORE_SECRET");
  char *addr0 = env_of(out, 0, "GANG_STORE_ADDR");
  char *port0 = env_of(out, 0, "MASTER_PORT");
  assert_int_equal(strlen(secret0), 64);
  assert_int_equal(strspn(secret0, "0123456789abcdef"), 64);
  assert_true(atoi(port0) > 0);
  /* The store has a port of its own: MASTER_PORT stays free for the
   * TCPStore torch's rank 0 opens there. */
  assert_true(strncmp(addr0, "127.0.0.1:", 10) == 0);
  assert_true(atoi(addr0 + 10) > 0);
  assert_int_not_equal(atoi(addr0 + 10), atoi(port0));
  for (int r = 0; r < 3; r++) {
    struct {
      const char *name;
      const char *want;
    } checks[] = {{"WORLD_SIZE", "3"},
                  {"LOCAL_WORLD_SIZE", "3"},
                  {"GROUP_RANK", "0"},
                  {"GROUP_WORLD_SIZE", "1"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", port0},
                  {"GANG_RESTART_COUNT", "0"},
                  {"GANG_MAX_RESTARTS", "4"},
                  {"GANG_RUN_ID", "myrun"},
                  {"TORCHELASTIC_RUN_ID", "myrun"},
                  {"GANG_STORE_SECRET", secret0},
                  {"GANG_STORE_ADDR", addr0},
                  {"OMP_NUM_THREADS", "1"}};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
      char *v = env_of(out, r, checks[i].name);
      if (strcmp(v, checks[i].want) != 0)
        fail_msg("rank %d: %s=%s, want %s", r, checks[i].name, v,
                 checks[i].want);
      free(v);
    }
    char want[256];
    snprintf(want, sizeof want, "[rank%d]:ENV RANK=%d\n", r, r);
    must_contain(out, want);
    snprintf(want, sizeof want, "[rank%d]:ENV LOCAL_RANK=%d\n", r, r);
    must_contain(out, want);
    /* The library reads the same world back. */
    snprintf(want, sizeof want,
             "[rank%d]:WORLD source=torchrun rank=%d size=3 local=%d/3 "
             "node=0/1 store=%s run=myrun restart=0\n",
             r, r, r, addr0);
    must_contain(out, want);
  }
  free(secret0);
  free(addr0);
  free(port0);
  free(out);

  /* Flags from GANG_<FLAG> variables; a given secret is kept; the flag
   * beats the variable. */
  const char *env2[] = {"GANG_NPROC_PER_NODE=2",
                        "GANG_MASTER_PORT=0",
                        "GANG_STORE_SECRET=s3cret",
                        "GANG_MAX_RESTARTS=1",
                        "RANK=77",
                        NULL};
  st = run(&out, env2, "--max-restarts", "2", GR_WORKER, "env", NULL);
  assert_int_equal(exit_code(st), 0);
  must_contain(out, "[rank1]:ENV WORLD_SIZE=2\n");
  must_contain(out, "[rank1]:ENV RANK=1\n");
  must_contain(out, "[rank0]:ENV GANG_STORE_SECRET=s3cret\n");
  must_contain(out, "[rank0]:ENV GANG_MAX_RESTARTS=2\n");
  must_not_contain(out, "[rank2]");
  free(out);

  /* Multi-node shape (node 1 of 2, not hosting the store), with node 0
   * beside it: every node's gangrun waits at the store for all nodes. */
  int mp = free_port_pair();
  char mps[16], store[64];
  snprintf(mps, sizeof mps, "%d", mp);
  snprintf(store, sizeof store, "127.0.0.1:%d", mp + 1);
  const char *env3[] = {"GANG_STORE_SECRET=abc", NULL};
  pid_t n0 = spawn_node0(env3, "--nnodes", "2:2", "--nproc-per-node", "2",
                         "--master-port", mps, "--join-timeout", "20s",
                         GR_WORKER, "env", NULL);
  st = run(&out, env3, "--nnodes", "2:2", "--node-rank", "1",
           "--nproc-per-node", "2", "--master-port", mps, "--join-timeout",
           "20s", GR_WORKER, "env", NULL);
  assert_int_equal(exit_code(st), 0);
  assert_int_equal(exit_code(gt_wait_child(n0, TIMEOUT_MS)), 0);
  must_contain(out, "[rank3]:ENV RANK=3\n");
  must_contain(out, "[rank3]:ENV LOCAL_RANK=1\n");
  must_contain(out, "[rank2]:ENV WORLD_SIZE=4\n");
  must_contain(out, "[rank2]:ENV GROUP_RANK=1\n");
  /* Across nodes the store is on master_port + 1, known to every node. */
  char want[128];
  snprintf(want, sizeof want, "[rank2]:ENV GANG_STORE_ADDR=%s\n", store);
  must_contain(out, want);
  snprintf(want, sizeof want, "[rank2]:ENV MASTER_PORT=%d\n", mp);
  must_contain(out, want);
  snprintf(want, sizeof want, "[rank2]:ENV GANG_RUN_ID=gangrun-127.0.0.1-%d\n",
           mp);
  must_contain(out, want);
  must_contain(out, "[rank3]:WORLD source=torchrun rank=3 size=4 local=1/2 "
                    "node=1/2");
  must_not_contain(out, "without authentication");
  free(out);

  /* The secret from --secret-file (its first line), over the variable,
   * for every worker; on several nodes nothing warns. */
  char sf[] = "/tmp/gangrun-secret-XXXXXX";
  int fd = mkstemp(sf);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "from-file\nsecond line\n", 23), 23);
  close(fd);
  n0 = spawn_node0(env3, "--nnodes", "2", "--nproc-per-node", "2",
                   "--master-port", mps, "--secret-file", sf, "--join-timeout",
                   "20s", GR_WORKER, "env", NULL);
  st = run(&out, env3, "--nnodes", "2", "--node-rank", "1", "--nproc-per-node",
           "2", "--master-port", mps, "--secret-file", sf, "--join-timeout",
           "20s", GR_WORKER, "env", NULL);
  assert_int_equal(exit_code(st), 0);
  assert_int_equal(exit_code(gt_wait_child(n0, TIMEOUT_MS)), 0);
  must_contain(out, "[rank2]:ENV GANG_STORE_SECRET=from-file\n");
  must_contain(out, "[rank3]:ENV GANG_STORE_SECRET=from-file\n");
  must_not_contain(out, "without authentication");
  free(out);
  /* Node 0 with another secret: node 1 is refused, and says so. */
  const char *env4[] = {"GANG_STORE_SECRET=other", NULL};
  n0 = spawn_node0(env4, "--nnodes", "2", "--master-port", mps,
                   "--join-timeout", "2s", GR_WORKER, "env", NULL);
  st =
      run(&out, NULL, "--nnodes", "2", "--node-rank", "1", "--master-port", mps,
          "--secret-file", sf, "--join-timeout", "2s", GR_WORKER, "env", NULL);
  assert_int_equal(exit_code(st), 1);
  assert_int_equal(exit_code(gt_wait_child(n0, TIMEOUT_MS)), 1);
  must_contain(out, "node 1 of 2 cannot reach the store of node 0 at");
  must_contain(out, "different secrets");
  must_not_contain(out, "[rank1]");
  free(out);
  unlink(sf);

  /* A node that never comes: the other names it, within --join-timeout,
   * and starts no worker; no secret on several nodes: a warning. */
  double t0 = gt_now_s();
  st = run(&out, NULL, "--nnodes", "3", "--node-rank", "0", "--master-port",
           mps, "--join-timeout", "1s", GR_WORKER, "env", NULL);
  double took = gt_now_s() - t0;
  assert_int_equal(exit_code(st), 1);
  must_contain(out, "without authentication");
  must_contain(out, "nodes 1, 2 of 3 never arrived within --join-timeout "
                    "(1000 ms");
  must_not_contain(out, "[rank0]");
  assert_true(took >= 0.9 && took < 5.0);
  free(out);
  /* Node 0 never comes: node 1 cannot reach its store, and says where. */
  st = run(&out, NULL, "--nnodes", "2", "--node-rank", "1", "--master-port",
           mps, "--join-timeout", "1s", GR_WORKER, "env", NULL);
  assert_int_equal(exit_code(st), 1);
  snprintf(want, sizeof want,
           "node 1 of 2 cannot reach the store of node 0 at %s", store);
  must_contain(out, want);
  free(out);
}

/* Each line of out must be a whole line of one rank. */
static void check_lines(const char *out, int nranks, bool want_err,
                        const bool *shown) {
  int seen[16][6] = {{0}};
  const char *p = out;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    int r = -1, pre = 0;
    if (sscanf(p, "[rank%d]:%n", &r, &pre) != 1 || pre == 0 || r < 0 ||
        r >= nranks)
      fail_msg("stray line '%.*s'", (int)(len > 80 ? 80 : len), p);
    const char *body = p + pre;
    size_t bl = len - (size_t)pre;
    if (bl == 3 && memcmp(body, "abc", 3) == 0)
      seen[r][0]++;
    else if (bl == 3 && memcmp(body, "def", 3) == 0)
      seen[r][1]++;
    else if (bl == 65536 && strspn(body, "x") >= bl)
      seen[r][2]++;
    else if (bl == 100000 - 65536 && strspn(body, "x") >= bl)
      seen[r][3]++;
    else if (bl == 4 && memcmp(body, "tail", 4) == 0)
      seen[r][4]++;
    else if (bl == 8 && memcmp(body, "err line", 8) == 0)
      seen[r][5]++;
    else
      fail_msg("rank %d: mangled line of %zu bytes '%.40s'", r, bl, body);
    p += len + (nl != NULL);
  }
  for (int r = 0; r < nranks; r++)
    for (int k = 0; k < 6; k++) {
      int want = shown[r] ? (k == 5 ? want_err : 1) : 0;
      if (seen[r][k] != want)
        fail_msg("rank %d: line kind %d seen %d times, want %d", r, k,
                 seen[r][k], want);
    }
}

static void test_output_prefix(void **state) {
  (void)state;
  char *out = NULL;
  int st = run(&out, NULL, "--standalone", "--nproc-per-node", "4", GR_WORKER,
               "lines", NULL);
  assert_int_equal(exit_code(st), 0);
  bool all[4] = {true, true, true, true};
  check_lines(out, 4, true, all);
  free(out);

  st = run(&out, NULL, "--standalone", "--nproc-per-node", "4",
           "--local-ranks-filter", "1,3", "--tee", "1", GR_WORKER, "lines",
           NULL);
  assert_int_equal(exit_code(st), 0);
  bool some[4] = {false, true, false, true};
  check_lines(out, 4, false, some);
  free(out);

  /* --log-dir: raw per-rank files, and --tee 0 keeps the console quiet. */
  char *dir = make_dir();
  st = run(&out, NULL, "--standalone", "--nproc-per-node", "2", "--log-dir",
           dir, "--tee", "0", GR_WORKER, "lines", NULL);
  assert_int_equal(exit_code(st), 0);
  assert_string_equal(out, "");
  char p[4200];
  snprintf(p, sizeof p, "%s/attempt_0/rank1.stdout.log", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  char head[8] = {0};
  assert_int_equal(fread(head, 1, 7, f), 7);
  assert_string_equal(head, "abc\ndef");
  fseek(f, 0, SEEK_END);
  assert_int_equal(ftell(f), 8 + 100001 + 4);
  fclose(f);
  snprintf(p, sizeof p, "%s/attempt_0/rank0.stderr.log", dir);
  f = fopen(p, "r");
  assert_non_null(f);
  char line[32] = {0};
  assert_non_null(fgets(line, sizeof line, f));
  assert_string_equal(line, "err line\n");
  fclose(f);
  remove_dir(dir);
  free(out);
}

static void test_failure(void **state) {
  (void)state;
  char *dir = make_dir();
  char envd[4200];
  snprintf(envd, sizeof envd, "GR_DIR=%s", dir);
  const char *env[] = {envd, NULL};
  char *out = NULL;
  int st = run(&out, env, "--standalone", "--nproc-per-node", "3", GR_WORKER,
               "fail", "1", "7", NULL);
  assert_int_equal(exit_code(st), 7);
  must_contain(out, "root cause (first failure): rank 1 (local_rank 1), pid ");
  must_contain(out, "exit code 7");
  must_contain(out, "exiting with status 7");
  must_not_contain(out, "also failed"); /* the stopped ones are not causes */
  assert_int_equal(count_pid_files(dir, 3), 2);
  /* The others were stopped with SIGTERM (they record it). */
  assert_int_equal(read_int_file(dir, "term", 0), 1);
  assert_int_equal(read_int_file(dir, "term", 2), 1);
  assert_workers_gone(dir, 3);
  free(out);
  remove_dir(dir);

  /* Death by signal: 128 + SIGKILL, and the summary names it. */
  dir = make_dir();
  snprintf(envd, sizeof envd, "GR_DIR=%s", dir);
  st = run(&out, env, "--standalone", "--nproc-per-node", "2", GR_WORKER,
           "crash", "0", NULL);
  assert_int_equal(exit_code(st), 128 + SIGKILL);
  must_contain(out, "rank 0 (local_rank 0)");
  must_contain(out, "signal 9 (SIGKILL)");
  assert_workers_gone(dir, 2);
  free(out);
  remove_dir(dir);
}

/* A worker ignoring SIGTERM after another failed: SIGKILL after grace. */
static void test_term_grace(void **state) {
  (void)state;
  char *dir = make_dir();
  char envd[4200];
  snprintf(envd, sizeof envd, "GR_DIR=%s", dir);
  const char *env[] = {envd, "GR_IGNORE_TERM=1", NULL};
  char *out = NULL;
  int st = run(&out, env, "--standalone", "--nproc-per-node", "3",
               "--term-grace", "200ms", GR_WORKER, "fail", "2", "5", NULL);
  assert_int_equal(exit_code(st), 5);
  assert_int_equal(count_pid_files(dir, 3), 2);
  assert_int_equal(read_int_file(dir, "term", 0), -1); /* never saw it */
  assert_workers_gone(dir, 3);
  free(out);
  remove_dir(dir);
}

/* Starts gangrun in the background with output to a memfd. */
static pid_t start(int *outfd, const char *dir, char *const argv[]) {
  *outfd = gt_out_fd("gangrun-out");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(*outfd, 1);
    dup2(*outfd, 2);
    setenv("GR_DIR", dir, 1);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static char *slurp(int fd) {
  off_t n = lseek(fd, 0, SEEK_END);
  char *s = calloc(1, (size_t)n + 1);
  pread(fd, s, (size_t)n, 0);
  return s;
}

/* Waits for pid with a deadline; SIGKILLs it on expiry (and fails). */
static int wait_for(pid_t pid, int outfd) {
  int64_t deadline = now_ms() + TIMEOUT_MS;
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return st;
    if (now_ms() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      char *o = slurp(outfd);
      fail_msg("gangrun did not exit; output:\n%s", o);
    }
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void wait_pid_files(const char *dir, int n, pid_t gr, int outfd) {
  int64_t deadline = now_ms() + TIMEOUT_MS;
  while (count_pid_files(dir, n) < n) {
    if (now_ms() > deadline || waitpid(gr, NULL, WNOHANG) == gr) {
      kill(gr, SIGKILL);
      waitpid(gr, NULL, 0);
      fail_msg("workers did not start; output:\n%s", slurp(outfd));
    }
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void test_signal_forwarding(void **state) {
  (void)state;
  int sigs[] = {SIGTERM, SIGINT};
  for (int k = 0; k < 2; k++) {
    char *dir = make_dir();
    char *argv[] = {gangrun_path, "--standalone", "--nproc-per-node",
                    "3",          GR_WORKER,      "wait",
                    NULL};
    int outfd;
    pid_t gr = start(&outfd, dir, argv);
    wait_pid_files(dir, 3, gr, outfd);
    kill(gr, sigs[k]);
    int st = wait_for(gr, outfd);
    char *out = slurp(outfd);
    if (exit_code(st) != 128 + sigs[k])
      fail_msg("exit %d; output:\n%s", exit_code(st), out);
    must_contain(out, "stopped by SIG");
    if (sigs[k] == SIGTERM)
      /* The workers got the very signal (they only handle SIGTERM). */
      for (int r = 0; r < 3; r++)
        assert_int_equal(read_int_file(dir, "term", r), 1);
    assert_workers_gone(dir, 3);
    free(out);
    close(outfd);
    remove_dir(dir);
  }

  /* A second signal kills workers that ignore the first. */
  char *dir = make_dir();
  char *argv[] = {gangrun_path, "--standalone", "--nproc-per-node",
                  "2",          "--term-grace", "1h",
                  GR_WORKER,    "wait",         "ignore-term",
                  NULL};
  int outfd;
  pid_t gr = start(&outfd, dir, argv);
  wait_pid_files(dir, 2, gr, outfd);
  kill(gr, SIGTERM);
  kill(gr, SIGINT);
  int st = wait_for(gr, outfd);
  close(outfd);
  /* Both may be pending at once; the lower-numbered one is read first. */
  assert_true(exit_code(st) == 128 + SIGTERM || exit_code(st) == 128 + SIGINT);
  assert_workers_gone(dir, 2);
  remove_dir(dir);
}

/* SIGUSR1 asks every worker for its flight record: gangrun passes it on
 * and goes on, and so do the workers. */
static void test_sigusr1_dumps_every_worker(void **state) {
  (void)state;
  char *dir = make_dir();
  char *argv[] = {gangrun_path, "--standalone", "--nproc-per-node",
                  "2",          GR_WORKER,      "flight",
                  NULL};
  int outfd;
  pid_t gr = start(&outfd, dir, argv);
  wait_pid_files(dir, 2, gr, outfd);
  kill(gr, SIGUSR1);
  int st = wait_for(gr, outfd);
  char *out = slurp(outfd);
  if (exit_code(st) != 0)
    fail_msg("exit %d; output:\n%s", exit_code(st), out);
  must_contain(out, "gangrun: got SIGUSR1, passing it on to the workers");
  must_contain(out, "FLIGHT rank 0 dump seen, barrier OK");
  must_contain(out, "FLIGHT rank 1 dump seen, barrier OK");
  for (int r = 0; r < 2; r++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/flight.%d", dir, r);
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    char *dump = slurp(fd);
    close(fd);
    must_contain(dump, "reason=SIGUSR1");
    must_contain(dump, " seq=3 call=all_reduce count=1 dtype=int32 op=sum");
    free(dump);
  }
  free(out);
  close(outfd);
  remove_dir(dir);
}

/* gangrun killed outright: its workers die with it (PR_SET_PDEATHSIG). */
static void test_no_orphans_on_sigkill(void **state) {
  (void)state;
  char *dir = make_dir();
  char *argv[] = {gangrun_path, "--standalone", "--nproc-per-node", "3",
                  GR_WORKER,    "wait",         "ignore-term",      NULL};
  int outfd;
  pid_t gr = start(&outfd, dir, argv);
  wait_pid_files(dir, 3, gr, outfd);
  kill(gr, SIGKILL);
  int st = wait_for(gr, outfd);
  assert_true(WIFSIGNALED(st));
  assert_workers_gone(dir, 3);
  close(outfd);
  remove_dir(dir);
}

static void test_restarts(void **state) {
  (void)state;
  char *out = NULL;
  int st = run(&out, NULL, "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "2", GR_WORKER, "failonce", "1", "3", NULL);
  assert_int_equal(exit_code(st), 0);
  must_contain(out, "[rank1]:restart=0\n");
  must_contain(out, "[rank1]:restart=1\n");
  must_contain(out, "[rank0]:restart=1\n");
  must_not_contain(out, "restart=2");
  must_contain(out, "root cause (first failure): rank 1");
  must_contain(out, "restarting the worker group (restart 1 of 2)");
  free(out);

  st = run(&out, NULL, "--standalone", "--nproc-per-node", "2", GR_WORKER,
           "failonce", "1", "3", NULL);
  assert_int_equal(exit_code(st), 3);
  must_not_contain(out, "restarting");
  free(out);

  /* Out of restarts: three attempts fail, the job ends with the root
   * cause's status. */
  st = run(&out, NULL, "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "2", GR_WORKER, "failuntil", "0", "9", "4", NULL);
  assert_int_equal(exit_code(st), 4);
  must_contain(out, "[rank0]:restart=2\n");
  must_contain(out, "restarting the worker group (restart 2 of 2)");
  must_not_contain(out, "restart 3");
  must_not_contain(out, "restart=3");
  must_contain(out, "exit code 4");
  free(out);

  /* A crash in a later attempt: exit 3, then SIGKILL, then success. */
  st = run(&out, NULL, "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "3", GR_WORKER, "failcrash", "1", NULL);
  assert_int_equal(exit_code(st), 0);
  must_contain(out, "exit code 3");
  must_contain(out, "signal 9 (SIGKILL)");
  must_contain(out, "restarting the worker group (restart 2 of 3)");
  must_contain(out, "[rank1]:restart=2\n");
  must_not_contain(out, "restart=3");
  free(out);
}

static void test_store(void **state) {
  (void)state;
  char *out = NULL;
  /* Restarted workers find the same store (keys are per restart). */
  int st = run(&out, NULL, "--standalone", "--nproc-per-node", "4", GR_WORKER,
               "store", NULL);
  if (exit_code(st) != 0)
    fail_msg("exit %d:\n%s", exit_code(st), out);
  for (int r = 0; r < 4; r++) {
    char want[64];
    snprintf(want, sizeof want, "[rank%d]:STORE OK size=4\n", r);
    must_contain(out, want);
  }
  free(out);

  st = run(&out, NULL, "--standalone", "--nproc-per-node", "1", GR_WORKER,
           "store-nosecret", NULL);
  assert_int_equal(exit_code(st), 0);
  must_contain(out, "[rank0]:AUTH REFUSED AUTH");
  free(out);
}

static int port_of(const char *hostport) {
  const char *c = strrchr(hostport, ':');
  return c != NULL ? atoi(c + 1) : -1;
}

/* --replica-groups: every group is a gangrun of its own with
 * master_port 0, so each hosts its store on a free port and hands its
 * workers a MASTER_PORT of their own, apart from the store's and from the
 * other groups' (torch programs in two groups each open a TCPStore
 * there). The groups share the secret and the lighthouse. */
static void test_replica_groups(void **state) {
  (void)state;
  char *out = NULL;
  int st = run(&out, NULL, "--replica-groups", "2", "--nproc-per-node", "2",
               GR_WORKER, "env", NULL);
  if (exit_code(st) != 0)
    fail_msg("exit %d:\n%s", exit_code(st), out);
  char *addr[2], *port[2], *secret[2], *lh[2];
  for (int g = 0; g < 2; g++) {
    char who[32], want[32];
    snprintf(who, sizeof who, "g%d/rank0", g);
    addr[g] = env_at(out, who, "GANG_STORE_ADDR");
    port[g] = env_at(out, who, "MASTER_PORT");
    secret[g] = env_at(out, who, "GANG_STORE_SECRET");
    lh[g] = env_at(out, who, "GANG_LIGHTHOUSE");
    assert_true(port_of(addr[g]) > 0);
    assert_true(atoi(port[g]) > 0);
    assert_int_not_equal(port_of(addr[g]), atoi(port[g]));
    assert_int_equal(strlen(secret[g]), 64);
    assert_true(port_of(lh[g]) > 0);
    /* Both ranks of the group see the same world. */
    snprintf(who, sizeof who, "g%d/rank1", g);
    const char *same[][2] = {{"GANG_STORE_ADDR", addr[g]},
                             {"MASTER_PORT", port[g]},
                             {"WORLD_SIZE", "2"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
      char *v = env_at(out, who, same[i][0]);
      if (strcmp(v, same[i][1]) != 0)
        fail_msg("%s: %s=%s, want %s", who, same[i][0], v, same[i][1]);
      free(v);
    }
    char *grp = env_at(out, who, "GANG_REPLICA_GROUP");
    snprintf(want, sizeof want, "%d", g);
    assert_string_equal(grp, want);
    free(grp);
  }
  assert_int_not_equal(port_of(addr[0]), port_of(addr[1]));
  assert_int_not_equal(atoi(port[0]), atoi(port[1]));
  assert_int_not_equal(port_of(addr[0]), atoi(port[1]));
  assert_int_not_equal(port_of(addr[1]), atoi(port[0]));
  assert_string_equal(secret[0], secret[1]);
  assert_string_equal(lh[0], lh[1]);
  for (int g = 0; g < 2; g++) {
    free(addr[g]);
    free(port[g]);
    free(secret[g]);
    free(lh[g]);
  }
  free(out);

  /* Each group's workers meet in their own store. */
  st = run(&out, NULL, "--replica-groups", "2", "--nproc-per-node", "2",
           GR_WORKER, "store", NULL);
  if (exit_code(st) != 0)
    fail_msg("exit %d:\n%s", exit_code(st), out);
  for (int g = 0; g < 2; g++)
    for (int r = 0; r < 2; r++) {
      char want[64];
      snprintf(want, sizeof want, "[g%d/rank%d]:STORE OK size=2\n", g, r);
      must_contain(out, want);
    }
  free(out);
}

int main(void) {
  gangrun_path = gt_tool_path("gangrun");
  gr_hermetic();
  const struct CMUnitTest tests[] = {
      GT_TEST(test_env_seen),
      GT_TEST(test_output_prefix),
      GT_TEST(test_failure),
      GT_TEST(test_term_grace),
      GT_TEST(test_signal_forwarding),
      GT_TEST(test_sigusr1_dumps_every_worker),
      GT_TEST(test_no_orphans_on_sigkill),
      GT_TEST(test_restarts),
      GT_TEST(test_store),
      GT_TEST(test_replica_groups),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(gangrun_path);
  return rc;
}
