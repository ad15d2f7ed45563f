/* The subprocess gang's failures (gang/ft.h, gang_baby_create): a child
 * killed from outside fails the waiting call with GANG_PEER_LOST at once,
 * the parent lives on and a configure brings the gang back; a stopped
 * child fails the call at its deadline with GANG_TIMEOUT and is killed and
 * reaped; gang_abort or a configure from another thread ends a waiting
 * work with GANG_ABORTED; a child whose parent dies leaves, even when a
 * process the parent forked holds the parent's end of the socket. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "baby_test.h"

/* ---- A child killed from outside ---------------------------------------- */

typedef struct killer {
  pid_t kid;
  char task[64]; /* /proc/self/task/<tid>/stat of the caller */
  atomic_int go;
  double killed;
} killer;

/* Kills the child once the caller sleeps inside its call, waiting for the
 * child's answer to a collective rank 1 never joins. */
static void *kill_thread(void *arg) {
  killer *k = arg;
  while (!atomic_load(&k->go))
    nap_ms(1);
  while (proc_state(k->task) != 'S')
    nap_ms(1);
  k->killed = now_s();
  kill(k->kid, SIGKILL);
  return NULL;
}

static int killed_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = baby_new(30000);
  gang_store *st = sync_store("killed");
  char addr[160];
  addr_of(addr, sizeof addr, "killed", 0);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  if (rank == 0) {
    killer k = {.kid = baby_pid()};
    RCHECK(k.kid > 0);
    snprintf(k.task, sizeof k.task, "/proc/self/task/%d/stat", (int)gettid());
    pthread_t t;
    RCHECK(pthread_create(&t, NULL, kill_thread, &k) == 0);
    float *v = calloc(1 << 18, sizeof *v);
    atomic_store(&k.go, 1);
    gang_status s = gang_all_reduce(g, v, 1 << 18, GANG_FLOAT32, GANG_SUM);
    double ended = now_s();
    pthread_join(t, NULL);
    double took = ended - k.killed;
    fprintf(stderr, "call ended %.3f s after the kill: %s: %s\n", took,
            gang_status_name(s), gang_last_error());
    RCHECK(s == GANG_PEER_LOST);
    RCHECK(strstr(gang_last_error(), "signal 9") != NULL);
    RCHECK(took < 2.0);
    RCHECK(!gang_ft_configured(g) && gt_count_children() == 0);
    /* Broken until configured again. */
    RCHECK(gang_barrier(g) == GANG_PEER_LOST);
    free(v);
    RCHECK_OK(gang_store_set(st, "killed", "1", 1));
  } else {
    store_wait(st, "killed");
  }
  addr_of(addr, sizeof addr, "killed", 1);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  RCHECK(gang_ft_configured(g));
  check_all_reduce(g, rank, size);
  gang_store_close(st);
  gang_destroy(g);
  RCHECK(gt_count_children() == 0);
  return 0;
}

static void test_killed_child_is_peer_lost(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, killed_rank, NULL, 60000), 0);
}

/* ---- A child that hangs ------------------------------------------------- */

static int hung_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = baby_new(1500); /* every collective's deadline */
  gang_store *st = sync_store("hung");
  char addr[160];
  addr_of(addr, sizeof addr, "hung", 0);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  if (rank == 0) {
    pid_t kid = baby_pid();
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)kid);
    RCHECK(kid > 0 && kill(kid, SIGSTOP) == 0);
    while (proc_state(path) != 'T')
      nap_ms(1);
    float v[4] = {1, 2, 3, 4};
    double t0 = now_s();
    gang_status s = gang_all_reduce(g, v, 4, GANG_FLOAT32, GANG_SUM);
    double took = now_s() - t0;
    fprintf(stderr, "call ended after %.3f s: %s: %s\n", took,
            gang_status_name(s), gang_last_error());
    RCHECK(s == GANG_TIMEOUT);
    RCHECK(strstr(gang_last_error(), "deadline") != NULL);
    RCHECK(took >= 1.4 && took < 5.0);
    /* Killed and reaped: no such process, no child. */
    RCHECK(kill(kid, 0) == -1 && errno == ESRCH);
    RCHECK(gt_count_children() == 0 && !gang_ft_configured(g));
    RCHECK_OK(gang_store_set(st, "hung", "1", 1));
  } else {
    store_wait(st, "hung");
  }
  addr_of(addr, sizeof addr, "hung", 1);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  check_all_reduce(g, rank, size);
  gang_store_close(st);
  gang_destroy(g);
  RCHECK(gt_count_children() == 0);
  return 0;
}

static void test_hung_child_times_out(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, hung_rank, NULL, 60000), 0);
}

/* ---- Abort and configure from another thread ---------------------------- */

typedef struct waiter_job {
  gang_work *w;
  atomic_int tid;
  gang_status st;
  double ended;
} waiter_job;

static void *waiter(void *arg) {
  waiter_job *j = arg;
  atomic_store(&j->tid, (int)gettid());
  j->st = gang_work_wait(j->w, -1);
  j->ended = now_s();
  return NULL;
}

/* Posts an all_reduce rank 1 never joins, waits for it in a thread, runs
 * `end` here and returns how long the work took to end after it, which
 * must be with GANG_ABORTED. */
static double ended_by(gang_t *g, void (*end)(gang_t *, void *), void *arg) {
  float v[1] = {1};
  waiter_job j = {NULL, 0, GANG_OK, 0};
  RCHECK_OK(gang_all_reduce_post(g, v, 1, GANG_FLOAT32, GANG_SUM, &j.w));
  pthread_t t;
  RCHECK(pthread_create(&t, NULL, waiter, &j) == 0);
  /* End it while the thread sleeps in the wait. */
  while (atomic_load(&j.tid) == 0)
    nap_ms(1);
  char task[64];
  snprintf(task, sizeof task, "/proc/self/task/%d/stat", atomic_load(&j.tid));
  while (proc_state(task) != 'S')
    nap_ms(1);
  double t0 = now_s();
  end(g, arg);
  pthread_join(t, NULL);
  fprintf(stderr, "work ended %.3f s after: %s\n", j.ended - t0,
          gang_status_name(j.st));
  RCHECK(j.st == GANG_ABORTED);
  gang_work_free(j.w);
  return j.ended - t0;
}

static void do_abort(gang_t *g, void *arg) {
  (void)arg;
  gang_abort(g);
}

static void do_configure_alone(gang_t *g, void *arg) {
  RCHECK_OK(gang_ft_configure(g, arg, 0, 1, 20000));
}

static int abort_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = baby_new(30000);
  gang_store *st = sync_store("abort");
  char addr[160];
  addr_of(addr, sizeof addr, "abort", 0);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  if (rank == 0) {
    RCHECK(ended_by(g, do_abort, NULL) < 1.0);
    RCHECK(!gang_ft_configured(g) && gt_count_children() == 0);
    RCHECK_OK(gang_store_set(st, "aborted", "1", 1));
  } else {
    store_wait(st, "aborted");
  }
  addr_of(addr, sizeof addr, "abort", 1);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  check_all_reduce(g, rank, size);
  if (rank == 0) {
    char alone[160];
    addr_of(alone, sizeof alone, "abort-alone", 0);
    RCHECK(ended_by(g, do_configure_alone, alone) < 1.0);
    float v[1] = {5};
    RCHECK_OK(gang_all_reduce(g, v, 1, GANG_FLOAT32, GANG_SUM));
    RCHECK(v[0] == 5 && gang_size(g) == 1);
    RCHECK_OK(gang_store_set(st, "done", "1", 1));
  } else {
    store_wait(st, "done");
  }
  gang_store_close(st);
  gang_destroy(g);
  RCHECK(gt_count_children() == 0);
  return 0;
}

static void test_abort_and_configure_end_waiting_work(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, abort_rank, NULL, 60000), 0);
}

/* ---- The parent dies ---------------------------------------------------- */

/* Waits up to timeout_s for `pid` (a child of ours) to exit; returns its
 * wait status, or -1 if it is still running. */
static int wait_exit(pid_t pid, double timeout_s) {
  double t0 = now_s();
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (now_s() - t0 > timeout_s)
      return -1;
    nap_ms(2);
  }
  return st;
}

/* A parent process dies without destroying its gang, after forking a
 * process that keeps a copy of its end of the socket (as a fork-based data
 * loader would): the child must leave anyway, seeing its parent die. The
 * rank is a subreaper, so the orphans come back to it to be reaped. */
static int orphan_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  RCHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  /* Close on exec: the gang-baby child must not hold the write end, or a
   * parent that fails before writing would leave the read below waiting. */
  int fds[2];
  RCHECK(pipe2(fds, O_CLOEXEC) == 0);
  pid_t parent = fork();
  RCHECK(parent >= 0);
  if (parent == 0) {
    close(fds[0]);
    gang_t *g = baby_new(20000);
    char addr[160];
    addr_of(addr, sizeof addr, "orphan", 0);
    RCHECK_OK(gang_ft_configure(g, addr, 0, 1, 20000));
    pid_t pids[2];
    pids[0] = baby_pid();
    pids[1] = fork();
    if (pids[1] == 0)
      for (;;)
        pause();
    RCHECK(write(fds[1], pids, sizeof pids) == sizeof pids);
    _exit(0);
  }
  close(fds[1]);
  pid_t pids[2] = {-1, -1};
  RCHECK(read(fds[0], pids, sizeof pids) == sizeof pids);
  close(fds[0]);
  RCHECK(pids[0] > 0 && pids[1] > 0);
  RCHECK(wait_exit(parent, 20) == 0);
  double t0 = now_s();
  int st = wait_exit(pids[0], 10);
  fprintf(stderr, "the orphaned child left after %.3f s: status 0x%x\n",
          now_s() - t0, (unsigned)st);
  kill(pids[1], SIGKILL);
  RCHECK(wait_exit(pids[1], 10) != -1);
  if (st == -1) {
    kill(pids[0], SIGKILL);
    waitpid(pids[0], NULL, 0);
  }
  RCHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return 0;
}

static void test_child_leaves_when_parent_dies(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(1, orphan_rank, NULL, 60000), 0);
}

int main(void) {
  /* Run by hand, the test finds the program in its build tree (CTest sets
   * GANG_BABY_PATH itself). */
  setenv("GANG_BABY_PATH", GT_BUILD_DIR "/tools/gang-baby/gang-baby", 0);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_killed_child_is_peer_lost),
      GT_TEST(test_hung_child_times_out),
      GT_TEST(test_abort_and_configure_end_waiting_work),
      GT_TEST(test_child_leaves_when_parent_dies),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
