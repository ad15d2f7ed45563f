/* A lighthouse in a process of its own (forked, so that tests can kill it
 * and start it again on its port), for the manager's tests. */
#ifndef GANG_TESTS_FT_LH_PROC_H
#define GANG_TESTS_FT_LH_PROC_H

#include <stdint.h>
#include <sys/types.h>

typedef struct lh_proc {
  pid_t pid; /* -1: not running */
  int port;
} lh_proc;

typedef struct lh_cfg {
  int port; /* 0: any */
  int min_replicas;
  int64_t join_timeout_ms, heartbeat_timeout_ms;
} lh_cfg;

/* Starts it (tick 10 ms, no status page); pid -1 if it could not. */
lh_proc lh_start(const lh_cfg *cfg);
/* SIGKILL and reap. */
void lh_kill(lh_proc *lp);

#endif
