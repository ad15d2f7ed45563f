/* A lighthouse in a process of its own, for tests (lh_proc.h). */
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"
#include "lh_proc.h"

#include "gang/ft.h"

lh_proc lh_start(const lh_cfg *cfg) {
  int fds[2];
  lh_proc lp = {-1, 0};
  if (pipe(fds) != 0)
    return lp;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
    o.host = "127.0.0.1";
    o.port = cfg->port;
    o.min_replicas = cfg->min_replicas;
    o.join_timeout_ms = cfg->join_timeout_ms;
    o.heartbeat_timeout_ms = cfg->heartbeat_timeout_ms;
    o.quorum_tick_ms = 10;
    o.http_port = -1;
    gang_lighthouse *lh = NULL;
    int port = -1;
    /* A port just left by a killed lighthouse may take a moment. */
    for (int i = 0; i < 50 && lh == NULL; i++)
      if (gang_lighthouse_start(&o, &lh) != GANG_OK) {
        fprintf(stderr, "lighthouse: %s\n", gang_last_error());
        gt_nap_ms(100);
      }
    if (lh != NULL)
      port = gang_lighthouse_port(lh);
    if (write(fds[1], &port, sizeof port) != sizeof port)
      _exit(1);
    close(fds[1]);
    if (lh == NULL)
      _exit(1);
    pause(); /* until killed */
    _exit(0);
  }
  close(fds[1]);
  int port = -1;
  if (pid > 0 && read(fds[0], &port, sizeof port) == sizeof port && port > 0) {
    lp.pid = pid;
    lp.port = port;
  } else if (pid > 0) {
    gt_wait_child(pid, 5000);
  }
  close(fds[0]);
  return lp;
}

void lh_kill(lh_proc *lp) {
  if (lp->pid > 0) {
    kill(lp->pid, SIGKILL);
    gt_wait_child(lp->pid, 5000);
  }
  lp->pid = -1;
}
