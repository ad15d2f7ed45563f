/* One attempt of a worker group: spawn, relay output, stop, reap.
 *
 * Each worker runs in its own process group (so a terminal's Ctrl-C reaches
 * only gangrun, which decides what the workers get, and so a signal sent to
 * the group also reaches whatever the worker started) with
 * PR_SET_PDEATHSIG=SIGKILL (so a gangrun killed with SIGKILL does not leave
 * workers behind). Its stdout and stderr are pipes; gangrun polls them
 * together with a signalfd for SIGCHLD/SIGINT/SIGTERM/SIGHUP/SIGUSR1, so one
 * thread sees output, exits and signals in order and never races a handler.
 *
 * Output is relayed a whole line at a time with one write() per line, each
 * prefixed "[rankN]:", so lines of different ranks never mix; a line longer
 * than LINE_CAP is cut into LINE_CAP pieces, and a last line without a
 * newline gets one at EOF. With --log-dir the raw bytes also go to per-rank
 * files.
 *
 * The first worker to fail (non-zero exit or a signal) is the root cause;
 * the others then get SIGTERM and, after the grace period, SIGKILL. When all
 * workers are reaped, anything left in their process groups is killed, so
 * nothing holds the pipes open or outlives the attempt. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "gangrun.h"

#define LINE_CAP (64 * 1024)
#define PREFIX_CAP 24
/* After the last worker is reaped, how long to wait for its pipes to close
 * (something it started may still hold them until killed). */
#define DRAIN_MS 2000

typedef struct stream {
  int fd;      /* read end; -1 once closed */
  int console; /* 1, 2, or -1 when not shown */
  int log;     /* log file, -1 when none */
  char *buf;   /* prefix, then the pending line */
  size_t plen, len;
} stream;

typedef struct worker {
  int local_rank, rank;
  pid_t pid;
  bool alive;
  stream s[2]; /* stdout, stderr */
} worker;

const char *gr_signal_name(int sig) {
  static char buf[32];
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev == NULL)
    snprintf(buf, sizeof buf, "signal %d", sig);
  else
    snprintf(buf, sizeof buf, "SIG%s", abbrev);
  return buf;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return; /* console gone (EPIPE): nothing useful to do */
    }
    p += w;
    n -= (size_t)w;
  }
}

/* Writes the pending line with its prefix in one write. */
static void emit(stream *s) {
  size_t n = s->plen + s->len;
  if (s->len == 0 || s->buf[n - 1] != '\n')
    s->buf[n++] = '\n';
  write_all(s->console, s->buf, n);
  s->len = 0;
}

static void relay(stream *s, const char *p, size_t n) {
  if (s->log >= 0)
    write_all(s->log, p, n);
  if (s->console < 0)
    return;
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t)(nl - p) + 1 : n;
    if (s->len + take > LINE_CAP) {
      size_t room = LINE_CAP - s->len;
      memcpy(s->buf + s->plen + s->len, p, room);
      s->len += room;
      emit(s);
      p += room;
      n -= room;
      continue;
    }
    memcpy(s->buf + s->plen + s->len, p, take);
    s->len += take;
    p += take;
    n -= take;
    if (nl != NULL)
      emit(s);
  }
}

static void stream_close(stream *s) {
  if (s->fd >= 0) {
    if (s->len > 0)
      emit(s);
    close(s->fd);
    s->fd = -1;
  }
}

static void stream_free(stream *s) {
  stream_close(s);
  if (s->log >= 0)
    close(s->log);
  s->log = -1;
  free(s->buf);
  s->buf = NULL;
}

/* Reads what is there; closes the stream at EOF. */
static void stream_read(stream *s) {
  char tmp[16384];
  ssize_t n = read(s->fd, tmp, sizeof tmp);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0) {
    stream_close(s);
    return;
  }
  relay(s, tmp, (size_t)n);
}

static int open_log(const gr_options *o, int attempt, int rank,
                    const char *what) {
  char path[4096];
  snprintf(path, sizeof path, "%s/attempt_%d/rank%d.%s.log", o->log_dir,
           attempt, rank, what);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fprintf(stderr, "gangrun: cannot write %s: %s\n", path, strerror(errno));
  return fd;
}

static int make_log_dirs(const gr_options *o, int attempt) {
  char path[4096];
  if (mkdir(o->log_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "gangrun: --log-dir %s: %s\n", o->log_dir, strerror(errno));
    return -1;
  }
  snprintf(path, sizeof path, "%s/attempt_%d", o->log_dir, attempt);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "gangrun: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* In the child between fork and exec: only async-signal-safe calls (the
 * store server thread may hold locks in the parent). */
static void child(const worker *w, int out, int err, pid_t parent,
                  const char *path, char **argv, char **env) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) /* gangrun died before prctl */
    _exit(1);
  dup2(out, 1);
  dup2(err, 2);
  /* Nothing of gangrun's (store sockets, other workers' pipes, fds it
   * inherited) leaks into the worker. */
  syscall(SYS_close_range, 3U, ~0U, 0U);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(path, argv, env);
  /* strerror may take a lock (gettext); strerrordesc_np reads a table. */
  int e = errno;
  const char *desc = strerrordesc_np(e);
  const char *m1 = "gangrun: cannot run '";
  const char *m2 = "': ";
  ssize_t ignored = write(2, m1, strlen(m1));
  ignored = write(2, path, strlen(path));
  ignored = write(2, m2, strlen(m2));
  ignored = write(2, desc != NULL ? desc : "unknown error",
                  strlen(desc != NULL ? desc : "unknown error"));
  ignored = write(2, "\n", 1);
  (void)ignored;
  (void)w;
  _exit(e == ENOENT || e == ENOTDIR ? 127 : 126); /* as a shell does */
}

static void signal_alive(worker *ws, int n, int sig) {
  for (int i = 0; i < n; i++)
    if (ws[i].alive)
      kill(-ws[i].pid, sig);
}

static void record(gr_group_result *res, const worker *w, int status) {
  gr_exit e = {w->local_rank, w->rank, w->pid, status, {0, 0}};
  clock_gettime(CLOCK_REALTIME, &e.at);
  if (res->nfailed == 0)
    res->first = e;
  else if (res->nfailed - 1 < (int)(sizeof res->others / sizeof e))
    res->others[res->nfailed - 1] = e;
  res->nfailed++;
}

int gr_run_group(const gr_options *o, int attempt, const char *path,
                 char **const envs[], int sigfd, gr_group_result *res) {
  memset(res, 0, sizeof *res);
  int n = o->nproc, rc = 0;
  worker *ws = calloc((size_t)n, sizeof *ws);
  struct pollfd *pfd = calloc((size_t)(2 * n + 1), sizeof *pfd);
  if (ws == NULL || pfd == NULL) {
    fprintf(stderr, "gangrun: out of memory\n");
    free(ws);
    free(pfd);
    return -1;
  }
  if (o->log_dir != NULL && make_log_dirs(o, attempt) != 0) {
    free(ws);
    free(pfd);
    return -1;
  }

  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++)
      ws[i].s[k].fd = ws[i].s[k].log = ws[i].s[k].console = -1;
  int spawned = 0;
  pid_t self = getpid();
  for (int i = 0; i < n; i++) {
    worker *w = &ws[i];
    w->local_rank = i;
    w->rank = o->node_rank * o->nproc + i;
    int p[2][2];
    for (int k = 0; k < 2; k++) {
      stream *s = &w->s[k];
      s->console = o->show[i] && (o->tee & (1 << k)) ? k + 1 : -1;
      s->buf = malloc(PREFIX_CAP + LINE_CAP + 1);
      if (s->buf != NULL)
        s->plen =
            o->replica_group >= 0
                ? (size_t)snprintf(s->buf, PREFIX_CAP,
                                   "[g%d/rank%d]:", o->replica_group, w->rank)
                : (size_t)snprintf(s->buf, PREFIX_CAP, "[rank%d]:", w->rank);
      if (o->log_dir != NULL)
        s->log = open_log(o, attempt, w->rank, k == 0 ? "stdout" : "stderr");
    }
    if (ws[i].s[0].buf == NULL || ws[i].s[1].buf == NULL ||
        pipe2(p[0], O_CLOEXEC) != 0) {
      fprintf(stderr, "gangrun: cannot set up worker %d: %s\n", i,
              strerror(errno));
      rc = -1;
      break;
    }
    if (pipe2(p[1], O_CLOEXEC) != 0) {
      fprintf(stderr, "gangrun: pipe: %s\n", strerror(errno));
      close(p[0][0]), close(p[0][1]);
      rc = -1;
      break;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
      child(w, p[0][1], p[1][1], self, path, o->argv, envs[i]);
    close(p[0][1]);
    close(p[1][1]);
    w->s[0].fd = p[0][0];
    w->s[1].fd = p[1][0];
    if (pid < 0) {
      fprintf(stderr, "gangrun: fork: %s\n", strerror(errno));
      rc = -1;
      break;
    }
    setpgid(pid, pid); /* also here: no window where a signal misses it */
    w->pid = pid;
    w->alive = true;
    spawned++;
  }

  bool stopping = rc != 0, killed = false, groups_killed = false;
  int64_t kill_at = GANG_DEADLINE_NONE, drain_until = GANG_DEADLINE_NONE;
  if (rc != 0) {
    signal_alive(ws, n, SIGTERM);
    kill_at = gang__deadline_in_ms(o->term_grace_ms);
  }
  for (;;) {
    int alive = 0, open = 0;
    for (int i = 0; i < n; i++) {
      alive += ws[i].alive;
      open += (ws[i].s[0].fd >= 0) + (ws[i].s[1].fd >= 0);
    }
    if (alive == 0 && !groups_killed) {
      /* Whatever the workers started dies with the attempt. */
      for (int i = 0; i < spawned; i++)
        kill(-ws[i].pid, SIGKILL);
      groups_killed = true;
      drain_until = gang__deadline_in_ms(DRAIN_MS);
    }
    if (alive == 0 && (open == 0 || gang__deadline_passed(drain_until)))
      break;
    if (stopping && !killed && gang__deadline_passed(kill_at)) {
      signal_alive(ws, n, SIGKILL);
      killed = true;
    }

    int np = 0;
    pfd[np++] = (struct pollfd){sigfd, POLLIN, 0};
    for (int i = 0; i < n; i++)
      for (int k = 0; k < 2; k++)
        if (ws[i].s[k].fd >= 0)
          pfd[np++] = (struct pollfd){ws[i].s[k].fd, POLLIN, 0};
    int64_t until = killed || !stopping ? GANG_DEADLINE_NONE : kill_at;
    if (alive == 0)
      until = drain_until;
    int r = poll(pfd, (nfds_t)np, gang__deadline_poll_ms(until));
    if (r < 0 && errno != EINTR) {
      fprintf(stderr, "gangrun: poll: %s\n", strerror(errno));
      signal_alive(ws, n, SIGKILL);
      killed = stopping = true;
      rc = -1;
    }
    if (r <= 0)
      continue;

    /* Output first, so a worker's last words precede the summary. */
    for (int j = 1; j < np; j++) {
      if (!(pfd[j].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++)
          if (ws[i].s[k].fd == pfd[j].fd)
            stream_read(&ws[i].s[k]);
    }
    if (!(pfd[0].revents & POLLIN))
      continue;
    struct signalfd_siginfo si;
    bool reap = false;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
      int sig = (int)si.ssi_signo;
      if (sig == SIGCHLD) {
        reap = true;
      } else if (sig == SIGUSR1) {
        /* Asks each worker for its flight record (GANG_FLIGHT); the
         * workers go on. */
        fprintf(stderr, "gangrun: got SIGUSR1, passing it on to the workers "
                        "(flight recorder dumps)\n");
        signal_alive(ws, n, SIGUSR1);
      } else if (res->signal == 0) {
        res->signal = sig;
        fprintf(stderr,
                "gangrun: got %s, forwarding it to the workers (again to "
                "kill them)\n",
                gr_signal_name(sig));
        signal_alive(ws, n, sig);
        if (!stopping) {
          stopping = true;
          kill_at = gang__deadline_in_ms(o->term_grace_ms);
        }
      } else if (!killed) {
        signal_alive(ws, n, SIGKILL);
        killed = stopping = true;
      }
    }
    if (!reap)
      continue;
    bool failed_now = false;
    for (int i = 0; i < n; i++) {
      worker *w = &ws[i];
      int st;
      if (!w->alive || waitpid(w->pid, &st, WNOHANG) != w->pid)
        continue;
      w->alive = false;
      bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      /* Exits after the group was told to stop are consequences. */
      if (!ok && !stopping) {
        record(res, w, st);
        failed_now = true;
      }
    }
    if (failed_now) {
      stopping = true;
      signal_alive(ws, n, SIGTERM);
      kill_at = gang__deadline_in_ms(o->term_grace_ms);
    }
  }

  for (int i = 0; i < n; i++) {
    stream_free(&ws[i].s[0]);
    stream_free(&ws[i].s[1]);
  }
  free(ws);
  free(pfd);
  return rc;
}
