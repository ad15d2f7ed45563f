/* Failures of a process-group gang with real processes: a peer killed with
 * SIGKILL in the middle of a 64 MiB all_reduce (over shared memory and
 * over TCP), a stopped (hung) peer, an abort from another thread, ranks
 * that disagree on the collective, and a peer that sends garbage. Every
 * survivor must get the right status promptly, later calls must fail fast
 * with the same status, and nothing may leak: no fd, no child, no arena
 * mapping. The ranks share this host, so collectives go over shared
 * memory unless a test sets GANG_SHM_DISABLE. Arenas are memfds, which
 * vanish with the last process that maps them: nothing of the test's is
 * ever in /dev/shm, so the test does not look there (another program's
 * files would only make it flaky). */
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

/* Whether the gang's last collective ran algorithm `want` (names of
 * src/algo/select.h); says what ran otherwise. */
static bool is_algo(gang_t *g, const char *want) {
  const char *ran = gang__pg_last_algo(g);
  if (strcmp(ran, want) == 0)
    return true;
  fprintf(stderr, "ran %s, not %s\n", ran, want);
  return false;
}

/* Writes the n low bytes of v little-endian (hand-made fabric frames). */
static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
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
  RCHECK(is_algo(g, (const char *)arg));
  RCHECK(st == GANG_PEER_LOST);
  /* From the connection, not the 120 s deadline. */
  RCHECK(took < 10.0);
  /* It names the call: kind, sequence number, rank and size. */
  char named[64];
  snprintf(named, sizeof named, "(gang rank %d/%d", rank, size);
  RCHECK(strstr(gang_get_last_error(g), "all_reduce #") != NULL);
  RCHECK(strstr(gang_get_last_error(g), named) != NULL);
  /* Sticky: the next call fails at once with the same status. */
  double t1 = gt_now_s();
  RCHECK(gang_barrier(g) == GANG_PEER_LOST);
  RCHECK(gt_now_s() - t1 < 0.1);
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
  RCHECK(took >= 1.45 && took < 2.0);
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
  RCHECK(took < QUEUED_TIMEOUT_MS / 1000.0 + 1.0);
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
  RCHECK(took < HOST_STOP_TIMEOUT_MS / 1000.0 + 1.0);
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
  RCHECK(took < 1.5);
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

/* ---- ranks disagree --------------------------------------------------------
 */

/* arg: the two ranks' counts (floats); NULL for 1000 and 2000. */
static int mismatch_rank(int rank, int size, void *arg) {
  const size_t *counts = arg;
  gang_t *g = join(rank, size, 30000);
  size_t n = counts ? counts[rank] : rank == 0 ? 1000 : 2000;
  /* Each buffer is exactly as large as its own rank asked for, so an
   * out-of-bounds write would show under ASan. */
  float *buf = calloc(n, sizeof *buf);
  gang_status st = gang_all_reduce(g, buf, n, GANG_FLOAT32, GANG_SUM);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(gang_last_error(), "bytes") != NULL);
  free(buf);
  gang_destroy(g);
  return 0;
}

static void test_mismatched_counts(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, mismatch_rank, NULL, 30000), 0);
}

/* Small all_reduces move in flagged lines that carry the call's signature:
 * different line counts (40 and 80 bytes) and the same line count with
 * different sizes (80 and 84 bytes) must both be mismatches, not reads of
 * the other's bytes; so must those of steps that wait for a member's first
 * flag (three lines and more): 120 and 124 bytes (3 lines each), 112 and
 * 160 (2 against 3), 504 and 400 (9 against 8). */
static void test_mismatched_small_counts(void **state) {
  (void)state;
  size_t pairs[][2] = {{10, 20}, {20, 21}, {30, 31}, {28, 40}, {126, 100}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, mismatch_rank, pairs[i], 30000), 0);
  }
}

/* A barrier is a flagged step too (one byte, its own signature): against
 * an all_reduce on the other rank, in flagged lines (2 floats) or in the
 * small slot (200 floats), both ranks must see a mismatch naming both
 * calls, not return as if they had met. arg: rank 1's count. */
static int barrier_mismatch_rank(int rank, int size, void *arg) {
  size_t n = *(const size_t *)arg;
  gang_t *g = join(rank, size, 30000);
  float buf[200] = {0};
  gang_status st = rank == 0
                       ? gang_barrier(g)
                       : gang_all_reduce(g, buf, n, GANG_FLOAT32, GANG_SUM);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(gang_last_error(), "barrier") != NULL);
  RCHECK(strstr(gang_last_error(), "all_reduce") != NULL);
  gang_destroy(g);
  return 0;
}

static void test_barrier_against_all_reduce(void **state) {
  (void)state;
  size_t counts[] = {2, 200};
  for (size_t i = 0; i < 2; i++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, barrier_mismatch_rank, &counts[i], 30000),
                     0);
  }
}

/* ---- the signature check ------------------------------------------------ */

static int checked_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("faults", g_round, rank, size, 30000, 1);
  /* Agreeing calls pass the check, on the world and on a sub-gang. */
  float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  RCHECK_OK(gang_all_reduce(g, x, 10, GANG_FLOAT32, GANG_SUM));
  RCHECK(x[9] == 10.0f * size);
  gang_t *sub = NULL;
  RCHECK_OK(gang_split(g, 0, -rank, &sub));
  RCHECK_OK(gang_broadcast(sub, x, 10, GANG_FLOAT32, 0));
  gang_destroy(sub);
  /* Rank 1 calls a broadcast where the others all_reduce: caught before
   * any data moves, with both sides named. */
  gang_status st;
  if (rank == 1)
    st = gang_broadcast(g, x, 10, GANG_FLOAT32, 0);
  else
    st = gang_all_reduce(g, x, 10, GANG_FLOAT32, GANG_MAX);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(gang_last_error(), "broadcast") != NULL);
  RCHECK(strstr(gang_last_error(), "all_reduce") != NULL);
  RCHECK(strstr(gang_last_error(), "rank 1") != NULL);
  RCHECK(gang_barrier(g) == GANG_MISMATCH); /* sticky */
  gang_destroy(g);
  return 0;
}

static void test_signature_check(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(3, checked_rank, NULL, 30000), 0);
}

/* ---- a peer that sends garbage ---------------------------------------------
 */

/* arg NULL: 64 bytes of junk; else a DATA header claiming 2^41 bytes,
 * which must fail at once (not wait for a pad or a payload that never
 * comes). */
static int garbage_rank(int rank, int size, void *arg) {
  setenv("GANG_SHM_DISABLE", "1", 1); /* the bytes must cross TCP */
  gang_t *g = join(rank, size, 30000);
  gang_status st;
  if (rank == 1) {
    uint8_t junk[64];
    memset(junk, 0xab, sizeof junk);
    if (arg != NULL) {
      memset(junk, 0, sizeof junk);
      put_le(junk, 0x474e4701u, 4); /* DATA */
      put_le(junk + 24, (uint64_t)1 << 41, 8);
    }
    int fd = gang__fabric_peer_fd(gang__pg_fabric(g), 0);
    RCHECK(fd >= 0);
    RCHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    st = gang_barrier(g);
  } else {
    float x[8] = {0};
    st = gang_all_reduce(g, x, 8, GANG_FLOAT32, GANG_SUM);
  }
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  if (rank == 0) {
    RCHECK(st == GANG_PROTOCOL);
    RCHECK(strstr(gang_last_error(), "malformed") != NULL);
  } else {
    RCHECK(st == GANG_PEER_LOST); /* rank 0 hung up on it */
  }
  gang_destroy(g);
  return 0;
}

static void test_garbage_from_peer(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, garbage_rank, NULL, 30000), 0);
  g_round++;
  assert_int_equal(gt_run_ranks(2, garbage_rank, "huge", 30000), 0);
}

/* ---- A padded frame whose pad arrives in two parts ---------------------
 * A DATA frame of 64 KiB or more has 4064 zero bytes between its 32-byte
 * header and its payload (docs/fabric.md). Rank 1 writes one by hand (a
 * point-to-point message: the world's context 1 with the point-to-point
 * bit, sequence 0, tag 7) in two parts: the header and 100 bytes of pad,
 * then the rest. Rank 0 runs a progress pass on its posted receive in
 * between (the store tells each side when the other is there), so it sees
 * a header whose pad is incomplete and must wait for the rest. */
#define SPLIT_LEN ((size_t)64 << 10)
#define SPLIT_HEAD 4096 /* header and pad */

/* Writes all n bytes to the fabric's socket, which is non-blocking. */
static void write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      RCHECK(poll(&pfd, 1, 10000) == 1);
      continue;
    }
    RCHECK(w > 0);
    p += w;
    n -= (size_t)w;
  }
}

static int split_pad_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  gang_t *g = join(rank, size, 30000);
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/split%d", gt_store_port(), g_round);
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(addr, NULL, &st));
  uint8_t *data = calloc(1, SPLIT_LEN + SPLIT_HEAD);
  RCHECK(data != NULL);
  void *val = NULL;
  size_t vlen = 0;
  if (rank == 1) {
    uint8_t *frame = data; /* header, pad, payload */
    put_le(frame, 0x474e4701u, 4);
    put_le(frame + 4, 7, 4);
    put_le(frame + 8, 1 | (uint64_t)1 << 63, 8);
    put_le(frame + 24, SPLIT_LEN, 8);
    for (size_t i = 0; i < SPLIT_LEN; i++)
      frame[SPLIT_HEAD + i] = (uint8_t)(i * 13 + 5);
    int fd = gang__fabric_peer_fd(gang__pg_fabric(g), 0);
    RCHECK(fd >= 0);
    write_all(fd, frame, 132);
    RCHECK_OK(gang_store_set(st, "part1", "1", 1));
    RCHECK_OK(gang_store_get(st, "polled", &val, &vlen));
    gang_store_free(val);
    write_all(fd, frame + 132, SPLIT_LEN + SPLIT_HEAD - 132);
  } else {
    gang_work *w = NULL;
    RCHECK_OK(gang_recv_post(g, data, SPLIT_LEN, 1, 7, &w));
    RCHECK_OK(gang_store_get(st, "part1", &val, &vlen));
    gang_store_free(val);
    int done = 0;
    for (int i = 0; i < 3; i++)
      RCHECK_OK(gang_work_test(w, &done));
    RCHECK(!done);
    RCHECK_OK(gang_store_set(st, "polled", "1", 1));
    RCHECK_OK(gang_work_wait(w, -1));
    gang_work_free(w);
    for (size_t i = 0; i < SPLIT_LEN; i++)
      RCHECK(data[i] == (uint8_t)(i * 13 + 5));
  }
  RCHECK_OK(gang_barrier(g));
  free(data);
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_padded_frame_in_two_parts(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, split_pad_rank, NULL, 60000), 0);
}

/* ---- A malformed setting is an error naming it, on every rank ---------- */

/* arg: the setting's expected text in the error. */
static int bad_setting_rank(int rank, int size, void *arg) {
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/faults%d", gt_store_port(),
           g_round);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 20000;
  gang_t *g = NULL;
  RCHECK(gang_create_with_store(&o, addr, rank, size, &g) ==
         GANG_INVALID_ARGUMENT);
  RCHECK(g == NULL);
  fprintf(stderr, "rank %d: %s\n", rank, gang_last_error());
  RCHECK(strstr(gang_last_error(), (const char *)arg) != NULL);
  return 0;
}

static void test_bad_shm_cma_setting(void **state) {
  (void)state;
  setenv("GANG_SHM_CMA", "sometimes", 1);
  g_round++;
  int rc = gt_run_ranks(2, bad_setting_rank, "GANG_SHM_CMA='sometimes'", 60000);
  unsetenv("GANG_SHM_CMA");
  assert_int_equal(rc, 0);
}

/* ---- Single copy forced where the kernel refuses it -------------------- */

/* Drops CAP_SYS_PTRACE from this process's effective set (root has it,
 * and with it reads any process's memory). */
static void drop_ptrace_capability(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  RCHECK(syscall(SYS_capget, &h, d) == 0);
  d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  RCHECK(syscall(SYS_capset, &h, d) == 0);
}

/* With GANG_SHM_CMA=1 on both ranks, rank 1 makes itself non-dumpable
 * while the gang is made and rank 0 gives up CAP_SYS_PTRACE, so rank 0's
 * probe of rank 1 is refused as a container's ptrace rules would refuse
 * it. The gang must still work, staged, and both ranks must say so with
 * a warning (rank 0 with the failed read's reason): the setting asked for
 * single copy by name. Each rank reads its own stderr back from a memfd
 * it put there while the gang was made. */
static int refused_rank(int rank, int size, void *arg) {
  (void)arg;
  if (rank == 0)
    drop_ptrace_capability();
  else
    RCHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
  int log = memfd_create("stderr", MFD_CLOEXEC), saved = dup(2);
  RCHECK(log >= 0 && saved >= 0 && dup2(log, 2) == 2);
  gang_t *g = join(rank, size, 20000);
  RCHECK(dup2(saved, 2) == 2);
  close(saved);
  if (rank == 1)
    RCHECK(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0);
  char said[4096] = "";
  ssize_t got = pread(log, said, sizeof said - 1, 0);
  close(log);
  RCHECK(got >= 0);
  said[got] = '\0';
  fprintf(stderr, "rank %d said while joining: %s\n", rank, said);
  RCHECK(strstr(said, "GANG_SHM_CMA=1 asks for single copy, but") != NULL);
  if (rank == 0)
    RCHECK(strstr(said, "process_vm_readv from local rank 1") != NULL);
  size_t n = (size_t)1 << 18; /* floats: 1 MiB */
  float *a = malloc(n * sizeof *a);
  RCHECK(a != NULL);
  for (size_t i = 0; i < n; i++)
    a[i] = rank == 0 ? (float)(i % 1009) : -1.0f;
  RCHECK_OK(gang_broadcast(g, a, n, GANG_FLOAT32, 0));
  RCHECK(is_algo(g, "staged"));
  for (size_t i = 0; i < n; i++)
    RCHECK(a[i] == (float)(i % 1009));
  free(a);
  gang_destroy(g);
  return 0;
}

static void test_forced_single_copy_refused(void **state) {
  (void)state;
  setenv("GANG_SHM_CMA", "1", 1);
  g_round++;
  int rc = gt_run_ranks(2, refused_rank, NULL, 60000);
  unsetenv("GANG_SHM_CMA");
  assert_int_equal(rc, 0);
}

static void test_bad_tcp_congestion_setting(void **state) {
  (void)state;
  const char *bad[] = {"no-such-cc", "a-name-longer-than-sixteen"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("GANG_TCP_CONGESTION", bad[i], 1);
    char want[64];
    snprintf(want, sizeof want, "GANG_TCP_CONGESTION='%s'", bad[i]);
    g_round++;
    int rc = gt_run_ranks(2, bad_setting_rank, want, 60000);
    unsetenv("GANG_TCP_CONGESTION");
    assert_int_equal(rc, 0);
  }
}

/* ---- The congestion control of connections that stay on this host ------ */

/* arg: the congestion control the connection to the peer must use. The
 * ranks meet over 127.0.0.1, so by default (auto) it is reno, whatever the
 * system's; the gang must still work. Unless GANG_TCP_PIECE is set, the
 * connection's exchanges move in 128 KiB pieces under bbr and 512 KiB
 * ones otherwise. */
static int cc_rank(int rank, int size, void *arg) {
  gang_t *g = join(rank, size, 20000);
  gang__fabric *f = gang__pg_fabric(g);
  int fd = gang__fabric_peer_fd(f, 1 - rank);
  RCHECK(fd >= 0);
  char cc[16] = "";
  socklen_t len = sizeof cc - 1;
  RCHECK(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) == 0);
  size_t piece = gang__fabric_peer_piece(f, 1 - rank);
  fprintf(stderr, "rank %d: %s, pieces of %zu (want %s)\n", rank, cc, piece,
          (const char *)arg);
  RCHECK(strcmp(cc, (const char *)arg) == 0);
  if (getenv("GANG_TCP_PIECE") != NULL)
    RCHECK(piece == 3000);
  else
    RCHECK(piece ==
           (strcmp(cc, "bbr") == 0 ? (size_t)128 << 10 : (size_t)512 << 10));
  float x[4] = {1, 2, 3, (float)rank};
  RCHECK_OK(gang_all_reduce(g, x, 4, GANG_FLOAT32, GANG_SUM));
  RCHECK(x[0] == 2 && x[3] == 1);
  gang_destroy(g);
  return 0;
}

/* The system's default, as new sockets get it. */
static void system_cc(char *out, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  socklen_t len = (socklen_t)cap - 1;
  memset(out, 0, cap);
  assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, out, &len), 0);
  close(fd);
}

/* Whether this user may set congestion control `name` on a socket; if
 * not, *err says why. */
static bool cc_allowed(const char *name, int *err) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  bool ok = fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name,
                                  (socklen_t)strlen(name)) == 0;
  *err = errno;
  if (fd >= 0)
    close(fd);
  return ok;
}

/* "=<name>" (GANG_SOCKET_IFNAME's exact form) of the first up IPv4
 * interface that is not a loopback one; false if there is none. */
static bool other_interface(char *out, size_t cap) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0)
    return false;
  bool found = false;
  for (struct ifaddrs *i = all; i != NULL && !found; i = i->ifa_next)
    if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
        (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) {
      snprintf(out, cap, "=%s", i->ifa_name);
      found = true;
    }
  freeifaddrs(all);
  return found;
}

static void test_congestion_control_on_this_host(void **state) {
  (void)state;
  char sys[16];
  system_cc(sys, sizeof sys);
  g_round++;
  assert_int_equal(gt_run_ranks(2, cc_rank, "reno", 60000), 0);
  setenv("GANG_TCP_CONGESTION", "system", 1);
  g_round++;
  int rc = gt_run_ranks(2, cc_rank, sys, 60000);
  unsetenv("GANG_TCP_CONGESTION");
  assert_int_equal(rc, 0);
  /* A name is set on every connection (reno is always allowed), and a
   * piece the user sets is every connection's. */
  setenv("GANG_TCP_CONGESTION", "reno", 1);
  setenv("GANG_TCP_PIECE", "3000", 1);
  g_round++;
  rc = gt_run_ranks(2, cc_rank, "reno", 60000);
  unsetenv("GANG_TCP_CONGESTION");
  unsetenv("GANG_TCP_PIECE");
  assert_int_equal(rc, 0);
}

/* The parts that need what a machine may lack run as ctest entries of
 * their own (main's argument), skipped visibly where they cannot run:
 *
 *   cc=<name>    a name other than auto's reno (cubic: 512 KiB pieces;
 *                bbr: 128 KiB), whatever the system's default, where
 *                this user may set it (GANG_TEST_REQUIRE_CC lists those
 *                scripts/test.sh knows to be settable);
 *   own-address  ranks that publish a non-loopback address of this host
 *                connect to it through the loopback device from that
 *                same address: still this host, so reno. In a network
 *                namespace of the test's own (root), else on an interface
 *                of the machine's (GANG_TEST_REQUIRE_NETNS). */
static const char *g_cc;
static char g_ifname[IF_NAMESIZE + 2];

static void test_named_congestion_control(void **state) {
  (void)state;
  setenv("GANG_TCP_CONGESTION", g_cc, 1);
  g_round++;
  int rc = gt_run_ranks(2, cc_rank, (void *)g_cc, 60000);
  unsetenv("GANG_TCP_CONGESTION");
  assert_int_equal(rc, 0);
}

static void test_own_address_is_this_host(void **state) {
  (void)state;
  print_message("GANG_SOCKET_IFNAME=%s\n", g_ifname);
  setenv("GANG_SOCKET_IFNAME", g_ifname, 1);
  g_round++;
  int rc = gt_run_ranks(2, cc_rank, "reno", 60000);
  unsetenv("GANG_SOCKET_IFNAME");
  assert_int_equal(rc, 0);
}

static int run_part(const char *part) {
  struct CMUnitTest one[1];
  if (strncmp(part, "cc=", 3) == 0) {
    g_cc = part + 3;
    int err = 0;
    if (!cc_allowed(g_cc, &err))
      return gt_cannot_run(
          gt_required("GANG_TEST_REQUIRE_CC", g_cc), "GANG_TEST_REQUIRE_CC",
          "congestion control %s cannot be set here: %s", g_cc, strerror(err));
    one[0] = (struct CMUnitTest)GT_TEST(test_named_congestion_control);
  } else if (strcmp(part, "own-address") == 0) {
    char why[512];
    if (gt_private_netns(why, sizeof why) == 0)
      snprintf(g_ifname, sizeof g_ifname, "=gangt0");
    else if (!other_interface(g_ifname, sizeof g_ifname))
      return gt_cannot_run(
          gt_required("GANG_TEST_REQUIRE_NETNS", "own-address"),
          "GANG_TEST_REQUIRE_NETNS",
          "no up non-loopback IPv4 interface, and no "
          "namespace to make one in (%s)",
          why);
    one[0] = (struct CMUnitTest)GT_TEST(test_own_address_is_this_host);
  } else {
    fprintf(stderr, "test_pg_faults: unknown part '%s'\n", part);
    return 2;
  }
  return cmocka_run_group_tests(one, gt_store_group_setup,
                                gt_store_group_teardown);
}

/* ---- Ranks of one host that see different machines --------------------- */

/* Rank 0 may run on one CPU only, so it counts its host (two ranks) as
 * oversubscribed where rank 1 does not; rank 1 alone forces single copy.
 * Both choose algorithms from these, so they must agree (through the
 * store) or their steps would not line up: large broadcast, all_gather
 * and reduce_scatter, checked. They agree on single copy where the two
 * ranks have two CPUs between them (the probe allows it and nobody is
 * oversubscribed), which must be what ran: staged copies on both ranks
 * would pass without testing the agreement. arg: the algorithms that
 * must run, the broadcast's (two_ends: single copy between two members)
 * and the others' (single_copy); staged on a single CPU. */
static int cpus_rank(int rank, int size, void *arg) {
  const char *const *want = arg; /* broadcast, the others */
  if (rank == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
    RCHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  } else {
    setenv("GANG_SHM_CMA", "1", 1);
  }
  gang_t *g = join(rank, size, 20000);
  size_t n = (size_t)1 << 18; /* floats: 1 MiB */
  float *a = malloc(n * sizeof *a), *all = malloc(2 * n * sizeof *all);
  RCHECK(a != NULL && all != NULL);
  for (size_t i = 0; i < n; i++)
    a[i] = rank == 0 ? (float)(i % 1000) : -1.0f;
  RCHECK_OK(gang_broadcast(g, a, n, GANG_FLOAT32, 0));
  RCHECK(is_algo(g, want[0]));
  for (size_t i = 0; i < n; i++)
    RCHECK(a[i] == (float)(i % 1000));
  for (size_t i = 0; i < n; i++)
    a[i] = (float)(rank * 7 + (int)(i % 5));
  RCHECK_OK(gang_all_gather(g, all, a, n, GANG_FLOAT32));
  RCHECK(is_algo(g, want[1]));
  for (int q = 0; q < 2; q++)
    for (size_t i = 0; i < n; i++)
      RCHECK(all[(size_t)q * n + i] == (float)(q * 7 + (int)(i % 5)));
  for (size_t i = 0; i < 2 * n; i++)
    all[i] = (float)(rank + (int)(i % 3));
  RCHECK_OK(gang_reduce_scatter(g, a, all, n, GANG_FLOAT32, GANG_SUM));
  RCHECK(is_algo(g, want[1]));
  for (size_t i = 0; i < n; i++)
    RCHECK(a[i] == (float)(1 + 2 * (int)(((size_t)rank * n + i) % 3)));
  free(a);
  free(all);
  gang_destroy(g);
  return 0;
}

static void test_ranks_that_count_cpus_differently(void **state) {
  (void)state;
  cpu_set_t mine;
  assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
  static const char *const single[] = {"two_ends", "single_copy"};
  static const char *const staged[] = {"staged", "staged"};
  const char *const *want = CPU_COUNT(&mine) >= 2 ? single : staged;
  g_round++;
  assert_int_equal(gt_run_ranks(2, cpus_rank, (void *)want, 60000), 0);
}

int main(int argc, char **argv) {
  if (argc > 1)
    return run_part(argv[1]);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_kill9_during_all_reduce),
      GT_TEST(test_kill9_during_staged_all_reduce),
      GT_TEST(test_kill9_during_tcp_all_reduce),
      GT_TEST(test_stopped_peer_times_out),
      GT_TEST(test_stopped_store_host_times_out),
      GT_TEST(test_works_queued_behind_a_timeout),
      GT_TEST(test_stopped_rank_named_across_gangs),
      GT_TEST(test_abort_from_thread),
      GT_TEST(test_abort_of_a_subgang),
      GT_TEST(test_mismatched_counts),
      GT_TEST(test_mismatched_small_counts),
      GT_TEST(test_barrier_against_all_reduce),
      GT_TEST(test_signature_check),
      GT_TEST(test_garbage_from_peer),
      GT_TEST(test_padded_frame_in_two_parts),
      GT_TEST(test_bad_shm_cma_setting),
      GT_TEST(test_forced_single_copy_refused),
      GT_TEST(test_bad_tcp_congestion_setting),
      GT_TEST(test_congestion_control_on_this_host),
      GT_TEST(test_ranks_that_count_cpus_differently),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
