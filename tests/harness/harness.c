/* See harness.h. */
#include "harness/harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <pthread.h>

#include "gang/gang.h"
#include "gang/status.h"
#include "gang/store.h"
#include "procfs.h" /* bench/lib */

/* gcc says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer). */
#if defined(__SANITIZE_ADDRESS__)
#define GT_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define GT_HAVE_LSAN 1
#endif
#endif
#ifdef GT_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

int gt_leak_check(void) {
#ifdef GT_HAVE_LSAN
  /* Honours ASAN_OPTIONS=detect_leaks (0: returns 0 without looking). */
  return __lsan_do_recoverable_leak_check();
#else
  return 0;
#endif
}

void gt_child_exit(int code) {
  fflush(stdout);
  fflush(stderr);
  if (code == 0 && gt_leak_check() != 0) {
    fprintf(stderr,
            "leak check: LeakSanitizer found leaks in child %d "
            "(report above)\n",
            (int)getpid());
    code = GT_EXIT_LEAK;
  }
  fflush(stderr);
  _exit(code);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int gt_out_fd(const char *name) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0)
    return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int out = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
  close(fd);
  return out;
}

double gt_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double gt_time_slack(void) {
  const char *e = getenv("GANG_TEST_TIME_SLACK");
  double k = e != NULL ? strtod(e, NULL) : 1.0;
  return k >= 1.0 ? k : 1.0;
}

void gt_nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int gt_count_fds(void) { return procfs_count("/proc/self/fd") - 1; }

int gt_count_shm_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL)
    return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL)
    n += strstr(line, "gang-shm") != NULL;
  fclose(f);
  return n;
}

int gt_children(const char *comm, pid_t *out, int cap) {
  return procfs_children(getpid(), comm, out, cap);
}

int gt_count_children(void) { return gt_children(NULL, NULL, 0); }

int gt_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

int gt_count_threads(void) { return procfs_count("/proc/self/task"); }

int gt_count_threads_settled(int want) {
  int n = gt_count_threads();
  for (int i = 0; i < 200 && n > want; i++) {
    gt_nap_ms(5);
    n = gt_count_threads();
  }
  return n;
}

static char *slurp_fd(int fd) {
  struct stat st;
  size_t n = 0;
  if (fstat(fd, &st) == 0 && st.st_size > 0)
    n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (buf == NULL)
    return NULL;
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  buf[got] = '\0';
  return buf;
}

/* Waits for `pid` until `deadline` (ms); on expiry kills it with SIGKILL.
 * Returns the wait status or -1 when it was killed by the watchdog. */
static int wait_with_deadline(pid_t pid, int64_t deadline) {
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return status;
    if (r < 0 && errno != EINTR)
      return -1;
    if (now_ms() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    /* A child exit is what we wait for; there is no fd to poll for it
     * without a signal handler, so check at a short interval. */
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int gt_wait_child(pid_t pid, int timeout_ms) {
  return wait_with_deadline(pid, now_ms() + timeout_ms);
}

static void print_status(const char *who, int status) {
  if (status == -1)
    fprintf(stderr, "%s: killed by the watchdog (timeout)\n", who);
  else if (WIFEXITED(status) && WEXITSTATUS(status) == GT_EXIT_LEAK)
    fprintf(stderr, "%s: exited with status %d (leaks found)\n", who,
            GT_EXIT_LEAK);
  else if (WIFEXITED(status))
    fprintf(stderr, "%s: exited with status %d\n", who, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    fprintf(stderr, "%s: killed by signal %d (%s)\n", who, WTERMSIG(status),
            strsignal(WTERMSIG(status)));
}

int gt_run_ranks(int size, gt_rank_fn fn, void *arg, int timeout_ms) {
  pid_t *pids = calloc((size_t)size, sizeof *pids);
  int *fds = calloc((size_t)size, sizeof *fds);
  int *sts = calloc((size_t)size, sizeof *sts);
  if (!pids || !fds || !sts) {
    free(pids), free(fds), free(sts);
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < size; r++) {
    fds[r] = gt_out_fd("gt-rank-out");
    pids[r] = fork();
    if (pids[r] == 0) {
      dup2(fds[r], 1);
      dup2(fds[r], 2);
      setvbuf(stdout, NULL, _IONBF, 0);
      int rc = fn(r, size, arg);
      gt_child_exit(rc == 0 ? 0 : 1);
    }
  }
  int64_t deadline = now_ms() + timeout_ms;
  int failed = 0;
  for (int r = 0; r < size; r++) {
    if (pids[r] < 0) {
      failed = 1;
      sts[r] = -1;
      continue;
    }
    sts[r] = wait_with_deadline(pids[r], deadline);
    if (sts[r] == -1) {
      /* Once one child hung, the rest get no more time either. */
      deadline = now_ms();
    }
    if (!(sts[r] != -1 && WIFEXITED(sts[r]) && WEXITSTATUS(sts[r]) == 0))
      failed = 1;
  }
  if (failed) {
    for (int r = 0; r < size; r++) {
      char who[32];
      snprintf(who, sizeof who, "rank %d/%d", r, size);
      print_status(who, sts[r]);
      char *out = slurp_fd(fds[r]);
      if (out != NULL && out[0] != '\0') {
        char *save = NULL;
        for (char *line = strtok_r(out, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
          fprintf(stderr, "  [rank%d] %s\n", r, line);
      }
      free(out);
    }
  }
  for (int r = 0; r < size; r++)
    close(fds[r]);
  free(pids), free(fds), free(sts);
  return failed ? -1 : 0;
}

int gt_run_cmd(char *const argv[], char *const envp[], char **output,
               int timeout_ms) {
  int fd = gt_out_fd("gt-cmd-out");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    /* Its own process group, so the watchdog can kill what it started. */
    setpgid(0, 0);
    for (int i = 0; envp && envp[i]; i++)
      putenv(envp[i]);
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status = wait_with_deadline(pid, now_ms() + timeout_ms);
  if (status == -1)
    kill(-pid, SIGKILL);
  if (output != NULL)
    *output = slurp_fd(fd);
  close(fd);
  return status;
}

bool gt_required(const char *var, const char *item) {
  const char *v = getenv(var);
  if (v == NULL || *v == '\0')
    return false;
  if (strcmp(v, "1") == 0)
    return true;
  size_t n = strlen(item);
  for (const char *p = v; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, item, n) == 0)
      return true;
    p += len;
    if (*p == ',')
      p++;
  }
  return false;
}

int gt_cannot_run(bool required, const char *var, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (required)
    printf("FAIL (%s=%s): %s\n", var, getenv(var), why);
  else
    printf("SKIP: %s\n", why);
  fflush(stdout);
  return required ? 1 : 77;
}

/* Runs `ip` with the given arguments; on failure says what it printed. */
static int run_ip(const char *ip, const char *args, char *why, size_t cap) {
  char buf[256], *argv[16];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", args);
  argv[n++] = (char *)ip;
  for (char *save = NULL, *t = strtok_r(buf, " ", &save); t != NULL && n < 15;
       t = strtok_r(NULL, " ", &save))
    argv[n++] = t;
  argv[n] = NULL;
  char *out = NULL;
  int st = gt_run_cmd(argv, NULL, &out, 10000);
  if (st != 0)
    snprintf(why, cap, "ip %s: status %d: %s", args, st, out ? out : "");
  free(out);
  return st == 0 ? 0 : -1;
}

int gt_private_netns(char *why, size_t cap) {
  static const char *const where[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip",
                                      "/bin/ip"};
  const char *ip = NULL;
  for (size_t i = 0; i < sizeof where / sizeof where[0] && ip == NULL; i++)
    if (access(where[i], X_OK) == 0)
      ip = where[i];
  if (ip == NULL) {
    snprintf(why, cap, "no ip command (iproute2)");
    return -1;
  }
  if (unshare(CLONE_NEWNET) != 0) {
    snprintf(why, cap, "cannot make a network namespace: unshare: %s",
             strerror(errno));
    return -1;
  }
  static const char *const steps[] = {
      "link set lo up",
      "link add gangt0 type veth peer name gangt1",
      "addr add 198.18.0.1/24 dev gangt0",
      "addr add 198.18.1.1/24 dev gangt1",
      "link set gangt0 up",
      "link set gangt1 up",
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (run_ip(ip, steps[i], why, cap) != 0)
      return -1;
  return 0;
}

char *gt_tool_path(const char *name) {
  size_t n = strlen(GT_BUILD_DIR) + 2 * strlen(name) + 16;
  char *p = malloc(n);
  if (p != NULL)
    snprintf(p, n, "%s/tools/%s/%s", GT_BUILD_DIR, name, name);
  return p;
}

gt_store_proc gt_store_proc_start(const char *secret) {
  int to[2], from[2];
  gt_store_proc sp = {-1, -1, -1};
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0)
    fail_msg("pipe: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  sp.pid = fork();
  if (sp.pid < 0)
    fail_msg("fork: %s", strerror(errno));
  if (sp.pid == 0) {
    close(to[1]);
    close(from[0]);
    gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
    o.secret = secret ? secret : "";
    gang_store_server *srv = NULL;
    int port = -1;
    if (gang_store_server_start(&o, &srv) == GANG_OK)
      port = gang_store_server_port(srv);
    else
      fprintf(stderr, "store server: %s\n", gang_last_error());
    if (write(from[1], &port, sizeof port) != sizeof port || port < 0)
      _exit(1);
    char c;
    while (read(to[0], &c, 1) > 0)
      ;
    gang_store_server_stop(srv);
    gt_child_exit(0);
  }
  close(to[0]);
  close(from[1]);
  if (read(from[0], &sp.port, sizeof sp.port) != sizeof sp.port)
    sp.port = -1;
  close(from[0]);
  sp.ctl = to[1];
  if (sp.port <= 0)
    fail_msg("the store server process did not start");
  return sp;
}

void gt_store_proc_stop(gt_store_proc *sp) {
  if (sp->pid <= 0)
    return;
  close(sp->ctl);
  int status = 0;
  pid_t r = waitpid(sp->pid, &status, 0);
  sp->pid = -1;
  if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the store server process did not exit cleanly (%s %d)",
             r < 0                                 ? "waitpid failed, errno"
             : !WIFEXITED(status)                  ? "killed by signal"
             : WEXITSTATUS(status) == GT_EXIT_LEAK ? "leaks found, status"
                                                   : "exit status",
             r < 0                ? errno
             : !WIFEXITED(status) ? WTERMSIG(status)
                                  : WEXITSTATUS(status));
}

static gt_store_proc group_store;

int gt_store_group_setup(void **state) {
  (void)state;
  group_store = gt_store_proc_start(NULL);
  return group_store.port > 0 ? 0 : -1;
}

int gt_store_group_teardown(void **state) {
  (void)state;
  gt_store_proc_stop(&group_store);
  return 0;
}

int gt_store_port(void) { return group_store.port; }

gang_store *gt_store_at(const char *ns) {
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/%s", group_store.port, ns);
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = 60000;
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(addr, &so, &st));
  return st;
}

void gt_wait_key(gang_store *st, const char *key) {
  void *v = NULL;
  size_t n = 0;
  RCHECK_OK(gang_store_get(st, key, &v, &n));
  gang_store_free(v);
}

gang_t *gt_join(const char *ns, int round, int rank, int size,
                int64_t timeout_ms, int check) {
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/%s%d", group_store.port, ns, round);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  o.check = check;
  gang_t *g = NULL;
  RCHECK_OK(gang_create_with_store(&o, addr, rank, size, &g));
  return g;
}

typedef struct {
  int fds;
  int threads;
  int children;
} leak_state;

#if defined(__SANITIZE_THREAD__)
static void *noop_thread(void *arg) { return arg; }
#endif

int gt_leak_setup(void **state) {
  leak_state *s = malloc(sizeof *s);
  if (s == NULL)
    return -1;
  gang_clear_error();
#if defined(__SANITIZE_THREAD__)
  /* ThreadSanitizer starts a helper thread of its own with the first
   * pthread_create; make it exist before counting. */
  static int warmed;
  if (!warmed) {
    pthread_t t;
    if (pthread_create(&t, NULL, noop_thread, NULL) == 0)
      pthread_join(t, NULL);
    warmed = 1;
  }
#endif
  s->fds = gt_count_fds();
  s->threads = gt_count_threads();
  s->children = gt_count_children();
  *state = s;
  return 0;
}

int gt_leak_teardown(void **state) {
  leak_state *s = *state;
  int fds = gt_count_fds();
  int threads = gt_count_threads_settled(s->threads);
  int children = gt_count_children();
  int ok = 1;
  if (fds != s->fds) {
    fprintf(stderr, "leak check: %d file descriptors before, %d after\n",
            s->fds, fds);
    ok = 0;
  }
  if (threads != s->threads) {
    fprintf(stderr, "leak check: %d threads before, %d after\n", s->threads,
            threads);
    ok = 0;
  }
  if (children != s->children) {
    fprintf(stderr,
            "leak check: %d child processes before, %d after (a "
            "child left running or unreaped)\n",
            s->children, children);
    ok = 0;
  }
  free(s);
  return ok ? 0 : -1;
}

bool gt_ran(struct gang *g, const char *algo, const char *what) {
  const char *ran = gang_last_algorithm(g);
  if (ran != NULL && strcmp(ran, algo) == 0)
    return true;
  fprintf(stderr, "%s: ran %s, not %s\n", what, ran ? ran : "(none)", algo);
  fflush(stderr);
  return false;
}

void gt_die_with_parent(void) {
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) /* it ended before the line above */
    _exit(1);
}
