/* gangrun --replica-groups R: the replica-group model of fault tolerance
 * (gang/ft.h, docs/fault-tolerance.md) on one node. gangrun hosts a
 * lighthouse, unless GANG_LIGHTHOUSE names one, and runs R copies of itself,
 * one per group, with GANG_REPLICA_GROUP=k and GANG_LIGHTHOUSE set: each
 * hosts its group's store and restarts its group on its own
 * (--max-restarts), so a dead group comes back while the others train on.
 * The copies are exec'd, not forked: this process runs the lighthouse's
 * threads. It waits for every group, passes SIGINT, SIGTERM, SIGHUP (and
 * SIGUSR1, the flight recorder's dump) on to them, and exits 0 when every group
 * did, else with the first failing group's status. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/hostport.h"
#include "gang/ft.h"
#include "gang/status.h"
#include "gangrun.h"

extern char **environ;

/* environ with GANG_REPLICA_GROUP and GANG_LIGHTHOUSE replaced. */
static char **group_env(int k, const char *lighthouse) {
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **env = calloc(n + 3, sizeof *env);
  if (env == NULL)
    return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "GANG_REPLICA_GROUP=", 19) != 0 &&
        strncmp(environ[i], "GANG_LIGHTHOUSE=", 16) != 0)
      env[j++] = environ[i];
  char *a = NULL, *b = NULL;
  if (asprintf(&a, "GANG_REPLICA_GROUP=%d", k) < 0)
    a = NULL;
  if (asprintf(&b, "GANG_LIGHTHOUSE=%s", lighthouse) < 0)
    b = NULL;
  if (a == NULL || b == NULL) {
    free(a);
    free(b);
    free(env);
    return NULL;
  }
  env[j++] = a;
  env[j++] = b;
  return env;
}

static void free_group_env(char **env) {
  if (env == NULL)
    return;
  size_t n = 0;
  while (env[n] != NULL)
    n++;
  free(env[n - 1]); /* the two added last */
  free(env[n - 2]);
  free(env);
}

int gr_run_replica_groups(const gr_options *o, char **argv, int sigfd) {
  int R = o->replica_groups;
  gang_lighthouse *lh = NULL;
  char addr[300];
  const char *given = getenv("GANG_LIGHTHOUSE");
  if (given != NULL && given[0] != '\0') {
    snprintf(addr, sizeof addr, "%s", given);
  } else {
    gang_lighthouse_options lo = GANG_LIGHTHOUSE_OPTIONS_INIT;
    lo.host = o->master_addr;
    lo.port = 0;
    if (gang_lighthouse_start(&lo, &lh) != GANG_OK) {
      fprintf(stderr, "gangrun: cannot host a lighthouse on %s: %s\n",
              o->master_addr, gang_last_error());
      return 1;
    }
    if (gang__hostport_format(addr, sizeof addr, o->master_addr,
                              gang_lighthouse_port(lh)) < 0) {
      fprintf(stderr, "gangrun: master address too long\n");
      gang_lighthouse_stop(lh);
      return 1;
    }
    fprintf(stderr, "gangrun: lighthouse at %s, status page http://%s:%d/\n",
            addr, o->master_addr, gang_lighthouse_http_port(lh));
  }
  pid_t *pids = calloc((size_t)R, sizeof *pids);
  int *status = calloc((size_t)R, sizeof *status);
  int code = 1, running = 0;
  if (pids == NULL || status == NULL) {
    fprintf(stderr, "gangrun: out of memory\n");
    goto out;
  }
  sigset_t none;
  sigemptyset(&none);
  for (int k = 0; k < R; k++) {
    char **env = group_env(k, addr);
    if (env == NULL) {
      fprintf(stderr, "gangrun: out of memory\n");
      break;
    }
    pid_t pid = fork();
    if (pid == 0) {
      /* Between fork and exec: async-signal-safe calls only. */
      sigprocmask(SIG_SETMASK, &none, NULL);
      execve("/proc/self/exe", argv, env);
      _exit(127);
    }
    free_group_env(env);
    if (pid < 0) {
      fprintf(stderr, "gangrun: cannot start replica group %d: %s\n", k,
              strerror(errno));
      break;
    }
    pids[k] = pid;
    running++;
  }
  bool started_all = running == R;
  if (!started_all) /* stop what started */
    for (int k = 0; k < R; k++)
      if (pids[k] > 0)
        kill(pids[k], SIGTERM);
  int first_bad = -1, got_signal = 0;
  while (running > 0) {
    struct signalfd_siginfo si;
    struct pollfd pfd = {sigfd, POLLIN, 0};
    if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
      break;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
      if (si.ssi_signo == SIGCHLD)
        continue;
      if (si.ssi_signo != SIGUSR1) /* that one only asks for dumps */
        got_signal = (int)si.ssi_signo;
      for (int k = 0; k < R; k++)
        if (pids[k] > 0)
          kill(pids[k], (int)si.ssi_signo);
    }
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
      for (int k = 0; k < R; k++)
        if (pids[k] == pid) {
          pids[k] = 0;
          status[k] = st;
          running--;
          if (first_bad < 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
            first_bad = k;
          fprintf(stderr, "gangrun: replica group %d ended (%s %d)\n", k,
                  WIFEXITED(st) ? "status" : "signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        }
  }
  if (got_signal != 0)
    code = 128 + got_signal;
  else if (first_bad >= 0)
    code = WIFEXITED(status[first_bad]) ? WEXITSTATUS(status[first_bad])
                                        : 128 + WTERMSIG(status[first_bad]);
  else if (running == 0 && started_all)
    code = 0;
out:
  free(pids);
  free(status);
  gang_lighthouse_stop(lh);
  return code;
}
