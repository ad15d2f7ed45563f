/* Test harness shared by every test file.
 *
 * - gt_run_ranks: run fn(rank, size, arg) in `size` real child processes
 *   with a watchdog; a child that hangs is killed at the deadline and the
 *   test fails. Every child's output is captured and printed, prefixed with
 *   its rank, when anything fails.
 * - gt_run_cmd: run a program (a tool under test) with a watchdog and
 *   capture its output.
 * - Leak checks: file descriptors, threads and child processes are counted
 *   around each cmocka test (GT_TEST) and a difference fails the test.
 *
 * - Leaks in children: a child process ends with _exit, so LeakSanitizer's
 *   check at exit never runs in it; gt_child_exit runs that check first
 *   (in ASan builds) and turns a reported leak into exit status
 *   GT_EXIT_LEAK. Every child that ends well goes through it: the ranks of
 *   gt_run_ranks, the store server process, and tests' own children.
 *
 * Children must not use cmocka's assert_* (its longjmp would resume the
 * parent's test list inside the child): they use RCHECK, which prints where
 * and exits the child with status 1. */
#ifndef GANG_TESTS_HARNESS_H
#define GANG_TESTS_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

typedef int (*gt_rank_fn)(int rank, int size, void *arg);

/* Exit status of a child whose leak check found leaks (LeakSanitizer's
 * own default exit code). */
#define GT_EXIT_LEAK 23

/* Runs LeakSanitizer's check now (ASan builds with detect_leaks on; a
 * no-op returning 0 otherwise): prints a report of unreachable blocks to
 * stderr and returns nonzero when there are any. */
int gt_leak_check(void);

/* Ends a child process: with code 0, runs gt_leak_check first and exits
 * GT_EXIT_LEAK when it reports; otherwise exits `code` at once (a child
 * that already failed leaves its objects behind on purpose, and a leak
 * report would only bury its error). Flushes stdout and stderr. */
_Noreturn void gt_child_exit(int code);

/* Returns 0 when every child exited 0 before timeout_ms; otherwise prints
 * each child's output and status and returns -1. No child outlives it. */
int gt_run_ranks(int size, gt_rank_fn fn, void *arg, int timeout_ms);

/* Waits up to timeout_ms for child `pid`, then kills it (SIGKILL). Returns
 * its wait status, or -1 when the watchdog killed it. */
int gt_wait_child(pid_t pid, int timeout_ms);

/* Runs argv (argv[0] is a path) with extra environment entries envp
 * ("NAME=value", NULL-terminated, may be NULL), stdin from /dev/null.
 * Captures stdout+stderr into *output (malloc'd, NUL-terminated; caller
 * frees). Returns the wait status, or -1 if it had to be killed at the
 * deadline (then *output still holds what it printed). */
int gt_run_cmd(char *const argv[], char *const envp[], char **output,
               int timeout_ms);

/* Path of a built tool: GT_BUILD_DIR "/tools/<name>/<name>". Static buffer
 * per call site is not needed: returns a malloc'd string the caller frees. */
char *gt_tool_path(const char *name);

/* A store server in its own process, for tests that fork ranks: a fork
 * taken while an in-process server thread holds a lock (malloc's, the
 * sanitizers', OpenSSL's RNG) would hand the child a lock nobody releases.
 * `secret` may be NULL. Returns the port; stop it with gt_store_proc_stop,
 * which fails the calling cmocka test if the server did not exit cleanly. */
typedef struct gt_store_proc {
  pid_t pid;
  int ctl; /* closing it stops the server */
  int port;
} gt_store_proc;
gt_store_proc gt_store_proc_start(const char *secret);
void gt_store_proc_stop(gt_store_proc *sp);

/* One store server process for a whole cmocka group (pass these as the
 * group's setup and teardown); gt_store_port() is its port. */
int gt_store_group_setup(void **state);
int gt_store_group_teardown(void **state);
int gt_store_port(void);

/* In a rank: a client of the group's store under namespace `ns` with a
 * 60 s timeout, for ranks to order their steps; exits the rank on failure. */
struct gang_store;
struct gang_store *gt_store_at(const char *ns);
/* In a rank: waits (the client's timeout) until `key` is set. */
void gt_wait_key(struct gang_store *st, const char *key);

/* In a rank: joins the gang of `size` ranks that rendezvous under
 * "<ns><round>" in the group's store, with the given timeout and signature
 * check (1 on, 0 default). Exits the rank (RCHECK) on failure. */
struct gang;
struct gang *gt_join(const char *ns, int round, int rank, int size,
                     int64_t timeout_ms, int check);

/* Whether the last collective of process-group gang g ran algorithm
 * `algo` (names of src/algo/select.h); says on stderr what ran instead,
 * after `what`, when it did not. */
bool gt_ran(struct gang *g, const char *algo, const char *what);

/* ---- Tests that cannot run everywhere --------------------------------
 * A test that needs what a machine may lack (root, a kernel module, a CPU
 * feature) is a ctest entry of its own with SKIP_RETURN_CODE 77, so a
 * skip shows in ctest's summary instead of passing. Where the suite's
 * claims rest on it, scripts/test.sh sets a GANG_TEST_REQUIRE_* variable
 * wherever it can be met, and a skip under it is a failure. */

/* Whether environment variable `var` requires `item`: it is "1", or a
 * comma list naming item. */
bool gt_required(const char *var, const char *item);

/* The exit status of a test that cannot run here: prints "SKIP: <why>"
 * and returns 77, or, when `required`, prints a FAIL line naming `var`
 * and returns 1. */
int gt_cannot_run(bool required, const char *var, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Moves this process into a network namespace of its own, with lo up and
 * two non-loopback interfaces nobody else sees: a veth pair gangt0
 * (198.18.0.1/24) and gangt1 (198.18.1.1/24), both up. Needs root (to
 * unshare and configure the namespace) and iproute2's ip. Call it before
 * the process starts threads or children: what it starts afterwards
 * shares the namespace, and the namespace with its interfaces vanishes
 * with the last process in it, on every exit path. Returns 0, or -1 with
 * the reason in why[cap]. */
int gt_private_netns(char *why, size_t cap);

/* A TCP port on 127.0.0.1 that nobody listens on now (-1 if none could
 * be had), for a rank 0 that hosts the store at MASTER_PORT. */
int gt_free_port(void);

/* Seconds on the monotonic clock, for timing in tests. */
double gt_now_s(void);
/* How many times a timing test's upper bounds stretch: 1, or
 * GANG_TEST_TIME_SLACK where a build runs the test beside others (its
 * lower bounds, such as a deadline not firing early, never stretch). */
double gt_time_slack(void);
/* Sleeps `ms` milliseconds (a pause, never a synchronisation). */
void gt_nap_ms(int ms);

/* A memfd for capturing output, opened for appending: processes that
 * share it (a launcher and its workers, a rank and its children) each add
 * whole writes. The descriptor memfd_create returns does not serialise
 * the file position between processes, and two writes at once then land
 * at the same offset: one line overwrote another in test_gangrun's
 * replica groups. Close-on-exec; read it with pread. */
int gt_out_fd(const char *name);

/* In a child just forked by the test's main thread: the child is killed
 * when the test process ends, whatever ends it (a sanitizer's halt, a
 * crash, the watchdog), so that no server or tool outlives its test and
 * holds the runner's output open until its timeout. */
void gt_die_with_parent(void);

int gt_count_fds(void);
/* Mappings of a shared-memory arena (memfd "gang-shm") in this process. */
int gt_count_shm_maps(void);
int gt_count_threads(void);
/* gt_count_threads once it is at most `want`, or after a second: a joined
 * thread may stay listed in /proc a moment after pthread_join returns. */
int gt_count_threads_settled(int want);
/* Child processes of this process, running or unreaped. */
int gt_count_children(void);
/* Child processes of this process named `comm` (NULL: any), running or
 * unreaped: their pids in out[0..cap), and how many there are (-1 when
 * /proc cannot be read). */
int gt_children(const char *comm, pid_t *out, int cap);

/* cmocka setup/teardown that fail the test on leaked fds, threads or
 * unreaped children. */
int gt_leak_setup(void **state);
int gt_leak_teardown(void **state);
#define GT_TEST(fn)                                                            \
  cmocka_unit_test_setup_teardown(fn, gt_leak_setup, gt_leak_teardown)

/* RCHECK and RCHECK_OK end a failing child with status 1 and no leak
 * check (see gt_child_exit). */
#define RCHECK(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      fflush(stderr);                                                          \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

#define RCHECK_OK(expr)                                                        \
  do {                                                                         \
    int rc_ = (int)(expr);                                                     \
    if (rc_ != 0) {                                                            \
      fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__,       \
              #expr, rc_, gang_last_error());                                  \
      fflush(stderr);                                                          \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

/* cmocka assertion that a gang call succeeded, showing the detail. */
#define assert_gang_ok(expr)                                                   \
  do {                                                                         \
    int st_ = (int)(expr);                                                     \
    if (st_ != 0)                                                              \
      fail_msg("%s returned %d: %s", #expr, st_, gang_last_error());           \
  } while (0)

#endif
