/* Peers of a process-group gang that die, stop or are aborted, with real
 * processes: a peer killed with SIGKILL in the middle of a 64 MiB
 * all_reduce (over shared memory and over TCP), a stopped (hung) peer or
 * store host, works queued behind a timeout, and an abort from another
 * thread. Every survivor must get the right status promptly, later calls
 * must fail fast with the same status, and nothing may leak: no fd, no
 * child, no arena mapping. The ranks share this host, so collectives go
 * over shared memory unless a test sets GANG_SHM_DISABLE. Arenas are
 * memfds, which vanish with the last process that maps them: nothing of
 * the test's is ever in /dev/shm, so the test does not look there
 * (another program's files would only make it flaky). Ranks that disagree
 * are test_pg_wire's, the host and its settings test_pg_host's. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"
#include "gang_impl.h"
#include "pg.h"
#include "transport/fabric.h"

static int g_round;

static gang_t *join(int rank, int size, int64_t timeout_ms) {
  return gt_join("faults", g_round, rank, size, timeout_ms, 0);
}

/* Runs `victim` as gang rank `rank` in a grandchild; returns its pid after
 * it reported (one byte on a pipe) that it joined the gang. */
static pid_t spawn_victim(int rank, int size, void (*victim)(gang_t *, int),
                          int64_t timeout_ms) {
  int fds[2];
  RCHECK(pipe(fds) == 0);
  pid_t pid = fork();
  RCHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    gang_t *g = join(rank, size, timeout_ms);
    victim(g, fds[1]);
    _exit(0);
  }
  close(fds[1]);
  char c;
  RCHECK(read(fds[0], &c, 1) == 1);
  close(fds[0]);
  return pid;
}

/* ---- kill -9 during a 64 MiB all_reduce --------------------------------- */

#define BIG ((size_t)16 << 20) /* floats: 64 MiB */

static void reduce_forever(gang_t *g, int ready_fd) {
  float *buf = calloc(BIG, sizeof *buf);
  RCHECK(write(ready_fd, "r", 1) == 1);
  for (;;)
    if (gang_all_reduce(g, buf, BIG, GANG_FLOAT32, GANG_SUM) != GANG_OK)
      _exit(3);
}

/* arg: the algorithm the survivors' all_reduces must run (a transport
 * that quietly fell back to another would test something else). */
static int kill_rank(int rank, int size, void *arg) {
  if (rank == size - 1) {
    pid_t v = spawn_victim(rank, size, reduce_forever, 120000);
    /* Let the all_reduce get going, then kill it mid-transfer. */
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(v, SIGKILL);
    int st;
    RCHECK(waitpid(v, &st, 0) == v);
    RCHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    return 0;
  }
  int fds0 = gt_count_fds();
  gang_t *g = join(rank, size, 120000);
  float *buf = calloc(BIG, sizeof *buf);
  gang_status st = GANG_OK;
  double t0 = gt_now_s();
  while (st == GANG_OK) {
    t0 = gt_now_s();
    st = gang_all_reduce(g, buf, BIG, GANG_FLOAT32, GANG_SUM);
  }
  double took = gt_now_s() - t0;
  fprintf(stderr, "rank %d: %s after %.3f s (%s): %s\n", rank,
          gang_status_name(st), took, gang__pg_last_algo(g), gang_last_error());
  RCHECK(gt_ran(g, (const char *)arg, "kill -9"));
  RCHECK(st == GANG_PEER_LOST);
  /* From the connection, not the 120 s deadline. */
  RCHECK(took < 10.0 * gt_time_slack());
  /* It names the call: kind, sequence number, rank and size. */
  char named[64];
  snprintf(named, sizeof named, "(gang rank %d/%d", rank, size);
  RCHECK(strstr(gang_get_last_error(g), "all_reduce #") != NULL);
  RCHECK(strstr(gang_get_last_error(g), named) != NULL);
  /* Sticky: the next call fails at once with the same status. */
  double t1 = gt_now_s();
  RCHECK(gang_barrier(g) == GANG_PEER_LOST);
  RCHECK(gt_now_s() - t1 < 0.1 * gt_time_slack());
  free(buf);
  gang_destroy(g);
  RCHECK(gt_count_fds() == fds0);
  RCHECK(gt_count_shm_maps() == 0);
  return 0;
}

/* Single copy, forced: 4 ranks on 2 CPUs would stage by default. */
static void test_kill9_during_all_reduce(void **state) {
  (void)state;
  setenv("GANG_SHM_CMA", "1", 1);
  g_round++;
  int rc = gt_run_ranks(4, kill_rank, "single_copy", 120000);
  unsetenv("GANG_SHM_CMA");
  assert_int_equal(rc, 0);
}

/* Staged copies only: survivors notice through their waits, not through a
 * failing process_vm_readv. */
static void test_kill9_during_staged_all_reduce(void **state) {
  (void)state;
  setenv("GANG_SHM_CMA", "0", 1);
  g_round++;
  int rc = gt_run_ranks(4, kill_rank, "staged", 120000);
  unsetenv("GANG_SHM_CMA");
  assert_int_equal(rc, 0);
}

static void test_kill9_during_tcp_all_reduce(void **state) {
  (void)state;
  setenv("GANG_SHM_DISABLE", "1", 1);
  g_round++;
  int rc = gt_run_ranks(4, kill_rank, "ring", 120000);
  unsetenv("GANG_SHM_DISABLE");
  assert_int_equal(rc, 0);
}

/* ---- a stopped peer ------------------------------------------------------ */

static void hang(gang_t *g, int ready_fd) {
  (void)g;
  RCHECK(write(ready_fd, "r", 1) == 1);
  for (;;)
    pause();
}

typedef struct stop_state {
  atomic_int done;  /* survivors finished */
  atomic_int named; /* survivors whose error names who reached the op */
} stop_state;

/* Keeps the stopped victim v stopped (not dead) until `want` survivors
 * have their answer (30 s at most), then kills and reaps it. */
static int hold_stopped(pid_t v, stop_state *ss, int want) {
  double t0 = gt_now_s();
  while (atomic_load(&ss->done) < want && gt_now_s() - t0 < 30)
    gt_nap_ms(5);
  kill(v, SIGKILL);
  kill(v, SIGCONT);
  int st;
  RCHECK(waitpid(v, &st, 0) == v);
  return 0;
}

/* Runs fn on `size` ranks sharing a fresh stop_state (shared memory the
 * survivors count themselves in); *named gets its count. */
static int run_with_stop_state(int size, gt_rank_fn fn, int *named) {
  g_round++;
  stop_state *ss = mmap(NULL, sizeof *ss, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(ss != MAP_FAILED);
  atomic_init(&ss->done, 0);
  atomic_init(&ss->named, 0);
  int rc = gt_run_ranks(size, fn, ss, 60000);
  if (named != NULL)
    *named = atomic_load(&ss->named);
  munmap(ss, sizeof *ss);
  return rc;
}

static int stop_rank(int rank, int size, void *arg) {
  (void)arg;
  if (rank == size - 1) {
    pid_t v = spawn_victim(rank, size, hang, 60000);
    kill(v, SIGSTOP);
    /* Keep it stopped (not dead) until every survivor has its answer. */
    stop_state *ss = arg;
    return hold_stopped(v, ss, size - 1);
  }
  gang_t *g = join(rank, size, 1500);
  float x[4] = {1, 2, 3, 4};
  double t0 = gt_now_s();
  gang_status st = gang_all_reduce(g, x, 4, GANG_FLOAT32, GANG_SUM);
  double took = gt_now_s() - t0;
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", rank, gang_status_name(st),
          took, gang_last_error());
  RCHECK(st == GANG_TIMEOUT);
  RCHECK(took >= 1.45 && took < 1.5 + 0.5 * gt_time_slack());
  RCHECK(strstr(gang_last_error(), "deadline") != NULL);
  /* Every survivor names the operation and its sequence number, what the
   * first rank to time out was waiting for, and -- from the cross-rank
   * diagnosis -- which ranks reached the collective and which did not. */
  stop_state *ss = arg;
  RCHECK(strstr(gang_last_error(), "all_reduce #1") != NULL);
  char named[64];
  snprintf(named, sizeof named, "all_reduce #1 (gang rank %d/%d", rank, size);
  RCHECK(strstr(gang_last_error(), named) != NULL);
  RCHECK(strstr(gang_last_error(), "still waiting for: receive from rank") !=
             NULL ||
         strstr(gang_last_error(), "still waiting for: gang rank") != NULL);
  if (strstr(gang_last_error(), "reached all_reduce #1: 0,1,2;") != NULL &&
      strstr(gang_last_error(), "did not answer within 150 ms: 3]") != NULL)
    atomic_fetch_add(&ss->named, 1);
  gang_destroy(g);
  atomic_fetch_add(&ss->done, 1);
  return 0;
}

static void test_stopped_peer_times_out(void **state) {
  (void)state;
  int named = 0;
  assert_int_equal(run_with_stop_state(4, stop_rank, &named), 0);
  assert_int_equal(named, 3);
}

/* Rank 3 hangs; rank 1 waits for it in a barrier of the world, and rank 0
 * for rank 1 in a barrier of their sub-gang {0, 1}. Rank 0's collective
 * never waited for rank 3, and its diagnosis finds rank 1 missing, which
 * is itself waiting: the rank that hangs is named as the one rank of the
 * world in no diagnosis at all. */
static void subgang_then_hang(gang_t *g, int ready_fd) {
  int member[2] = {0, 1};
  gang_t *sub = NULL;
  RCHECK_OK(gang_create_subgang(g, member, 2, &sub)); /* NULL: not one */
  hang(g, ready_fd);
}

static int across_rank(int rank, int size, void *arg) {
  stop_state *ss = arg;
  if (rank == 3) {
    pid_t v = spawn_victim(rank, size, subgang_then_hang, 1500);
    kill(v, SIGSTOP);
    return hold_stopped(v, ss, size - 1);
  }
  gang_t *g = join(rank, size, 1500);
  gang_t *sub = NULL;
  int member[2] = {0, 1};
  RCHECK_OK(gang_create_subgang(g, member, 2, &sub));
  gang_status st = rank == 0 ? gang_barrier(sub) : gang_barrier(g);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_TIMEOUT);
  if (rank == 0)
    RCHECK(strstr(gang_last_error(), "other world ranks in no diagnosis: 3]") !=
           NULL);
  gang_destroy(sub);
  gang_destroy(g);
  atomic_fetch_add(&ss->done, 1);
  return 0;
}

static void test_stopped_rank_named_across_gangs(void **state) {
  (void)state;
  assert_int_equal(run_with_stop_state(4, across_rank, NULL), 0);
}

/* Ranks that time out in different calls of one gang. Over TCP, 4 ranks:
 * the binomial broadcast from rank 0 reaches rank 3 through rank 2, which
 * is stopped; ranks 0 and 1 get their data, go on to the next all_reduce
 * and time out there, rank 3 times out in the broadcast. Each survivor's
 * diagnosis must name the others as in another call (ahead or behind),
 * and only rank 2 as not answering. */
static void warm_then_hang(gang_t *g, int ready_fd) {
  float x = 1;
  RCHECK_OK(gang_all_reduce(g, &x, 1, GANG_FLOAT32, GANG_SUM));
  hang(g, ready_fd);
}

static int skew_rank(int rank, int size, void *arg) {
  stop_state *ss = arg;
  if (rank == 2) {
    pid_t v = spawn_victim(rank, size, warm_then_hang, 1500);
    kill(v, SIGSTOP);
    return hold_stopped(v, ss, size - 1);
  }
  gang_t *g = join(rank, size, 1500);
  float x = 1;
  RCHECK_OK(gang_all_reduce(g, &x, 1, GANG_FLOAT32, GANG_SUM)); /* #1 */
  gang_status st = gang_broadcast(g, &x, 1, GANG_FLOAT32, 0);   /* #2 */
  if (st == GANG_OK)
    st = gang_all_reduce(g, &x, 1, GANG_FLOAT32, GANG_SUM); /* #3 */
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_TIMEOUT);
  const char *want =
      rank == 3 ? "reached broadcast #2: 3; that timed out in another call: "
                  "0 (#3, 1 ahead),1 (#3, 1 ahead); that did not answer "
                  "within 150 ms: 2]"
                : "reached all_reduce #3: 0,1; that timed out in another call: "
                  "3 (#2, 1 behind); that did not answer within 150 ms: 2]";
  if (strstr(gang_last_error(), want) != NULL)
    atomic_fetch_add(&ss->named, 1);
  gang_destroy(g);
  atomic_fetch_add(&ss->done, 1);
  return 0;
}

static void test_ranks_timed_out_in_different_calls(void **state) {
  (void)state;
  setenv("GANG_SHM_DISABLE", "1", 1);
  int named = 0;
  int rc = run_with_stop_state(4, skew_rank, &named);
  unsetenv("GANG_SHM_DISABLE");
  assert_int_equal(rc, 0);
  assert_int_equal(named, 3);
}

/* ---- works queued behind a timed-out one ----------------------------------
 */

/* After a timeout, works that were queued behind the timed-out one fail
 * without running: they must not each wait for a diagnosis of their own
 * (who reached a collective nobody ran), or the error path grows by the
 * diagnosis budget (500 ms at this timeout) per queued work. */
#define QUEUED_TIMEOUT_MS 5000

static int queued_rank(int rank, int size, void *arg) {
  stop_state *ss = arg;
  if (rank == 1) {
    pid_t v = spawn_victim(rank, size, hang, QUEUED_TIMEOUT_MS);
    kill(v, SIGSTOP);
    return hold_stopped(v, ss, 1);
  }
  gang_t *g = join(rank, size, QUEUED_TIMEOUT_MS);
  float x[3][4] = {{1}, {2}, {3}};
  gang_work *w[3];
  double t0 = gt_now_s();
  for (int i = 0; i < 3; i++)
    RCHECK_OK(gang_all_reduce_post(g, x[i], 4, GANG_FLOAT32, GANG_SUM, &w[i]));
  for (int i = 0; i < 3; i++) {
    gang_status st = gang_work_wait(w[i], -1);
    double took = gt_now_s() - t0;
    fprintf(stderr, "work %d: %s after %.3f s: %s\n", i, gang_status_name(st),
            took, gang_last_error());
    RCHECK(st == GANG_TIMEOUT);
    gang_work_free(w[i]);
  }
  double took = gt_now_s() - t0;
  RCHECK(took < QUEUED_TIMEOUT_MS / 1000.0 + gt_time_slack());
  gang_destroy(g);
  atomic_fetch_add(&ss->done, 1);
  return 0;
}

static void test_works_queued_behind_a_timeout(void **state) {
  (void)state;
  assert_int_equal(run_with_stop_state(2, queued_rank, NULL), 0);
}

/* ---- a stopped store host ------------------------------------------------ */

/* Rank 0 of gang_create_default hosts the store in its own process when
 * no launcher does; stopping rank 0 stops the store with it. The
 * survivors' diagnosis after the timeout asks that store: it must not
 * wait on it beyond the error path's bound (the timeout + 1 s), and the
 * error must say that rank 0, the store's host, does not answer. */
#define HOST_STOP_TIMEOUT_MS 2000

typedef struct host_stop_state {
  int port;           /* MASTER_PORT: free when the test began */
  atomic_int entered; /* survivors about to enter the all_reduce */
  atomic_int done;    /* survivors finished */
} host_stop_state;

/* gang_create_default as torchrun's environment has it. */
static gang_t *join_default(const host_stop_state *hs, int rank, int size) {
  char v[32];
  snprintf(v, sizeof v, "%d", rank);
  setenv("RANK", v, 1);
  snprintf(v, sizeof v, "%d", size);
  setenv("WORLD_SIZE", v, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  snprintf(v, sizeof v, "%d", hs->port);
  setenv("MASTER_PORT", v, 1);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = HOST_STOP_TIMEOUT_MS;
  gang_t *g = NULL;
  RCHECK_OK(gang_create_default(&o, &g));
  return g;
}

/* Waits (bounded) until *v reaches at least `want`. */
static bool wait_at_least(atomic_int *v, int want, double limit_s) {
  double t0 = gt_now_s();
  while (atomic_load(v) < want) {
    if (gt_now_s() - t0 > limit_s)
      return false;
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return true;
}

static int stop_host_rank(int rank, int size, void *arg) {
  host_stop_state *hs = arg;
  if (rank == 0) {
    /* In a grandchild: hosts the store, joins, never enters a collective. */
    pid_t v = fork();
    RCHECK(v >= 0);
    if (v == 0) {
      (void)join_default(hs, 0, size);
      for (;;)
        pause();
    }
    RCHECK(wait_at_least(&hs->entered, size - 1, 30));
    kill(v, SIGSTOP);
    int wst;
    RCHECK(waitpid(v, &wst, WUNTRACED) == v && WIFSTOPPED(wst));
    /* Stopped, not dead, until every survivor has its answer. */
    (void)wait_at_least(&hs->done, size - 1, 30);
    kill(v, SIGKILL);
    kill(v, SIGCONT);
    int st;
    RCHECK(waitpid(v, &st, 0) == v);
    return 0;
  }
  gang_t *g = join_default(hs, rank, size);
  atomic_fetch_add(&hs->entered, 1);
  float x[4] = {1, 2, 3, 4};
  double t0 = gt_now_s();
  gang_status st = gang_all_reduce(g, x, 4, GANG_FLOAT32, GANG_SUM);
  double took = gt_now_s() - t0;
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", rank, gang_status_name(st),
          took, gang_last_error());
  RCHECK(st == GANG_TIMEOUT);
  /* The whole error path, diagnosis included, within the timeout + 1 s. */
  RCHECK(took < HOST_STOP_TIMEOUT_MS / 1000.0 + gt_time_slack());
  char named[64];
  snprintf(named, sizeof named, "all_reduce #1 (gang rank %d/%d", rank, size);
  RCHECK(strstr(gang_last_error(), named) != NULL);
  RCHECK(strstr(gang_last_error(), "world rank 0 hosts the store") != NULL);
  gang_destroy(g);
  atomic_fetch_add(&hs->done, 1);
  return 0;
}

static void test_stopped_store_host_times_out(void **state) {
  (void)state;
  host_stop_state *hs = mmap(NULL, sizeof *hs, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(hs != MAP_FAILED);
  hs->port = gt_free_port();
  assert_true(hs->port > 0);
  atomic_init(&hs->entered, 0);
  atomic_init(&hs->done, 0);
  int rc = gt_run_ranks(4, stop_host_rank, hs, 60000);
  munmap(hs, sizeof *hs);
  assert_int_equal(rc, 0);
}

/* ---- abort from another thread ------------------------------------------- */

static void *abort_later(void *arg) {
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  gang_abort(arg);
  return NULL;
}

static int abort_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size, 60000);
  double t0 = gt_now_s();
  gang_status st;
  if (rank == 0) {
    pthread_t t;
    RCHECK(pthread_create(&t, NULL, abort_later, g) == 0);
    /* Rank 1 never joins this all_reduce (it waits in a receive): only
     * the abort can end either. */
    float x = 1;
    st = gang_all_reduce(g, &x, 1, GANG_FLOAT32, GANG_SUM);
    pthread_join(t, NULL);
    RCHECK(x == 1);
  } else {
    /* Waits for a message rank 0 never sends. */
    float y;
    st = gang_recv(g, &y, sizeof y, 0, 7);
  }
  double took = gt_now_s() - t0;
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", rank, gang_status_name(st),
          took, gang_last_error());
  RCHECK(st == GANG_ABORTED);
  RCHECK(took < 1.5 * gt_time_slack());
  RCHECK(gang_barrier(g) == GANG_ABORTED);
  gang_destroy(g);
  return 0;
}

static void test_abort_from_thread(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, abort_rank, NULL, 30000), 0);
}

/* A sub-gang's abort reaches the whole world, where its rank in the
 * sub-gang means nothing: peers learn the world rank that aborted. */
static int subgang_abort_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size, 60000);
  gang_t *sub = NULL;
  RCHECK_OK(gang_split(g, rank / 2, rank, &sub));
  if (rank == 3)
    gang_abort(sub); /* gang rank 1 of {2, 3} */
  /* A barrier every rank reached (rank 3's may begin before it sees its
   * own abort) may still succeed on some: the abort shows on a later
   * call. */
  gang_status st = GANG_OK;
  for (int i = 0; i < 100 && st == GANG_OK; i++)
    st = gang_barrier(g);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_ABORTED);
  if (rank != 3) {
    RCHECK(strstr(gang_last_error(), "gang rank 1/2") != NULL);
    RCHECK(strstr(gang_last_error(), "(world rank 3)") != NULL);
  }
  gang_destroy(sub);
  gang_destroy(g);
  return 0;
}

static void test_abort_of_a_subgang(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(4, subgang_abort_rank, NULL, 30000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_kill9_during_all_reduce),
      GT_TEST(test_kill9_during_staged_all_reduce),
      GT_TEST(test_kill9_during_tcp_all_reduce),
      GT_TEST(test_stopped_peer_times_out),
      GT_TEST(test_stopped_store_host_times_out),
      GT_TEST(test_works_queued_behind_a_timeout),
      GT_TEST(test_stopped_rank_named_across_gangs),
      GT_TEST(test_ranks_timed_out_in_different_calls),
      GT_TEST(test_abort_from_thread),
      GT_TEST(test_abort_of_a_subgang),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
