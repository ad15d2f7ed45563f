/* What test_gangrun and test_gangrun_flags share (gangrun_test.h): the
 * launcher's path, running it, reading what its workers left behind and
 * the checks on its output. */
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
#include "gangrun_test.h"
#include "gang/status.h"

char *gangrun_path;

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A fresh directory for pid files. */
char *make_dir(void) {
  char *d = strdup("/tmp/gangrun-test-XXXXXX");
  assert_non_null(mkdtemp(d));
  return d;
}

void remove_dir(char *d) {
  DIR *dir = opendir(d);
  struct dirent *e;
  while (dir && (e = readdir(dir)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", d, e->d_name);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
      remove_dir(strdup(p));
    else
      unlink(p);
  }
  if (dir)
    closedir(dir);
  rmdir(d);
  free(d);
}

int read_int_file(const char *dir, const char *what, int rank) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s.%d", dir, what, rank);
  FILE *f = fopen(p, "r");
  if (f == NULL)
    return -1;
  int v = -1;
  if (fscanf(f, "%d", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

/* True once pid is gone (or a zombie nobody of ours will reap). */
bool pid_gone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return true;
  char p[64], buf[512];
  snprintf(p, sizeof p, "/proc/%d/stat", pid);
  FILE *f = fopen(p, "r");
  if (f == NULL)
    return true;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *rp = strrchr(buf, ')');
  return rp != NULL && rp[1] == ' ' && rp[2] == 'Z';
}

/* Every recorded worker pid disappears within 5 s. */
void assert_workers_gone(const char *dir, int n) {
  for (int r = 0; r < n; r++) {
    int pid = read_int_file(dir, "pid", r);
    if (pid <= 0)
      continue;
    int64_t deadline = now_ms() + 5000;
    while (!pid_gone(pid) && now_ms() < deadline) {
      struct timespec ts = {0, 5 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    if (!pid_gone(pid))
      fail_msg("worker rank %d (pid %d) outlived gangrun", r, pid);
  }
}

int count_pid_files(const char *dir, int n) {
  int c = 0;
  for (int r = 0; r < n; r++)
    c += read_int_file(dir, "pid", r) > 0;
  return c;
}

/* Runs gangrun with args (NULL-terminated) and extra env; returns the wait
 * status, output in *out. */
/* argv[0] = gangrun, then `flag` 0 when flag is not NULL (--node-rank 0),
 * then the arguments of ap up to their NULL. */
void gangrun_argv(char *argv[64], const char *flag, va_list ap) {
  int n = 0;
  argv[n++] = gangrun_path;
  if (flag != NULL) {
    argv[n++] = (char *)flag;
    argv[n++] = "0";
  }
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 62)
    argv[n++] = (char *)a;
  argv[n] = NULL;
}

int run(char **out, const char *const *env, ...) {
  char *argv[64];
  va_list ap;
  va_start(ap, env);
  gangrun_argv(argv, NULL, ap);
  va_end(ap);
  int st = gt_run_cmd(argv, (char *const *)env, out, TIMEOUT_MS);
  if (st == -1)
    fail_msg("gangrun timed out; output:\n%s", *out ? *out : "");
  return st;
}

int exit_code(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

void must_contain(const char *out, const char *what) {
  if (strstr(out, what) == NULL)
    fail_msg("output lacks '%s'; output:\n%s", what, out);
}

void must_not_contain(const char *out, const char *what) {
  if (strstr(out, what) != NULL)
    fail_msg("output has '%s'; output:\n%s", what, out);
}

/* The value of "ENV NAME=" in the lines prefixed `who` ("rank0",
 * "g1/rank0"). */
char *env_at(const char *out, const char *who, const char *name) {
  char pat[128];
  snprintf(pat, sizeof pat, "[%s]:ENV %s=", who, name);
  const char *p = strstr(out, pat);
  if (p == NULL)
    fail_msg("no %s for %s in:\n%s", name, who, out);
  p += strlen(pat);
  return strndup(p, strcspn(p, "\n"));
}

/* The value of "ENV NAME=" in rank r's lines. */
char *env_of(const char *out, int rank, const char *name) {
  char who[32];
  snprintf(who, sizeof who, "rank%d", rank);
  return env_at(out, who, name);
}

/* Whether `port` on 127.0.0.1 can be bound now. */
bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  if (fd >= 0)
    close(fd);
  return ok;
}

/* A master port P with P + 1 (the store's, with several nodes) free too,
 * below the kernel's ephemeral range, so that no connection of a test
 * running beside this one takes P + 1 meanwhile. */
int free_port_pair(void) {
  for (int i = 0; i < 1000; i++) {
    int p = 20000 + (int)(((unsigned)getpid() * 7919u + (unsigned)i * 104729u) %
                          12000u);
    if (port_free(p) && port_free(p + 1))
      return p;
  }
  fail_msg("no two free ports in a row below 32000");
  return -1;
}

/* gangrun as node 0 (--node-rank 0 prepended), in the background, with
 * the extra environment entries `env`, its output dropped; waited for
 * with gt_wait_child. */
pid_t spawn_node0(const char *const *env, ...) {
  char *argv[64];
  va_list ap;
  va_start(ap, env);
  gangrun_argv(argv, "--node-rank", ap);
  va_end(ap);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    for (int i = 0; env != NULL && env[i] != NULL; i++)
      putenv((char *)env[i]); /* on top of ours, as gt_run_cmd does */
    execv(gangrun_path, argv);
    _exit(127);
  }
  return pid;
}

/* Hermetic: nothing of an enclosing launcher or job script leaks in. */
void gr_hermetic(void) {
  static const char *clear[] = {
      "GANG_STORE_SECRET",       "GANG_NPROC_PER_NODE", "GANG_NNODES",
      "GANG_NODE_RANK",          "GANG_MASTER_ADDR",    "GANG_MASTER_PORT",
      "GANG_STANDALONE",         "GANG_RDZV_ENDPOINT",  "GANG_RDZV_ID",
      "GANG_MAX_RESTARTS",       "GANG_LOG_DIR",        "GANG_TEE",
      "GANG_LOCAL_RANKS_FILTER", "GANG_TERM_GRACE",     "GANG_NO_STORE",
      "OMP_NUM_THREADS",         "GANG_DEBUG",          "GANG_REPLICA_GROUPS",
      "GANG_REPLICA_GROUP",      "GANG_LIGHTHOUSE",     "GANG_SECRET_FILE"};
  for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++)
    unsetenv(clear[i]);
}
