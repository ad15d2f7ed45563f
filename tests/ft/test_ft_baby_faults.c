/* The subprocess gang's failures (gang/ft.h, gang_baby_create): a child
 * killed from outside fails the waiting call with GANG_PEER_LOST at once,
 * the parent lives on and a configure brings the gang back; a stopped
 * child fails the call at its deadline with GANG_TIMEOUT and is killed and
 * reaped; gang_abort or a configure from another thread ends a waiting
 * work with GANG_ABORTED; a child whose parent dies leaves, even when a
 * process the parent forked holds the parent's end of the socket. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

static pid_t store_pid(gang_store *st, const char *key) {
  void *v = NULL;
  size_t n = 0;
  RCHECK_OK(gang_store_get(st, key, &v, &n));
  pid_t pid = (pid_t)atoi(v);
  gang_store_free(v);
  return pid;
}

/* Rank 0 dies without destroying its gang, after forking a process that
 * keeps a copy of its end of the socket (as a fork-based data loader
 * would): the child must leave anyway, seeing its parent die. Rank 1
 * watches. */
static int orphan_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  gang_store *st = sync_store("orphan");
  if (rank == 0) {
    gang_t *g = baby_new(20000);
    char addr[160], v[32];
    addr_of(addr, sizeof addr, "orphan", 0);
    RCHECK_OK(gang_ft_configure(g, addr, 0, 1, 20000));
    pid_t kid = baby_pid();
    RCHECK(kid > 0);
    pid_t worker = fork();
    if (worker == 0)
      for (;;)
        pause();
    snprintf(v, sizeof v, "%d", (int)worker);
    RCHECK_OK(gang_store_set(st, "worker", v, strlen(v) + 1));
    snprintf(v, sizeof v, "%d", (int)kid);
    RCHECK_OK(gang_store_set(st, "kid", v, strlen(v) + 1));
    _exit(0);
  }
  pid_t worker = store_pid(st, "worker"), kid = store_pid(st, "kid");
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)kid);
  double t0 = now_s();
  char state;
  while ((state = proc_state(path)) != '?' && state != 'Z' && now_s() - t0 < 10)
    nap_ms(5);
  fprintf(stderr, "the orphaned child left after %.3f s (state %c)\n",
          now_s() - t0, state);
  kill(worker, SIGKILL);
  RCHECK(state == '?' || state == 'Z');
  gang_store_close(st);
  return 0;
}

static void test_child_leaves_when_parent_dies(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, orphan_rank, NULL, 60000), 0);
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
