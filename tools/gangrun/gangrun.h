/* gangrun: a torchrun-compatible launcher. Shared declarations of its
 * parts: options.c (flags and GANG_<FLAG> variables), workers.c (spawning,
 * output, signals, stopping a group), main.c (the store and the restart
 * loop). docs/launcher.md describes the behaviour. */
#ifndef GANGRUN_H
#define GANGRUN_H

#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define GR_MAX_NPROC 1024
#define GR_EXIT_USAGE 2
#define GR_MAX_GROUPS 256

typedef struct gr_options {
  int nproc;
  int nnodes;
  int node_rank;
  char master_addr[256];
  int master_port; /* 0 = pick a free one (node 0 only) */
  bool standalone;
  int max_restarts;
  const char *log_dir;     /* NULL = none */
  const char *secret_file; /* --secret-file (NULL = none) */
  int tee;                 /* bit 1 stdout, bit 2 stderr */
  bool *show;              /* [nproc]: local rank shown on the console */
  int64_t term_grace_ms;
  int64_t join_timeout_ms; /* --join-timeout: every node here by then */
  char run_id[128];
  bool no_store;
  int replica_groups; /* --replica-groups (0: one ordinary group) */
  int replica_group;  /* this group's index when a parent gangrun runs
                         several (GANG_REPLICA_GROUP), else -1 */
  char **argv;        /* program and its arguments */
} gr_options;

/* Parses argv and GANG_<FLAG> variables. Returns 0, or GR_EXIT_USAGE after
 * printing a message naming the flag (or variable), or -1 after printing
 * the help (exit 0). */
int gr_parse_options(int argc, char **argv, gr_options *o);
void gr_free_options(gr_options *o);
void gr_usage(FILE *f);

/* How one worker ended. */
typedef struct gr_exit {
  int local_rank, rank;
  pid_t pid;
  int status;         /* wait status */
  struct timespec at; /* wall-clock time it was seen */
} gr_exit;

/* The result of running one worker group to its end. */
typedef struct gr_group_result {
  int signal;        /* a signal gangrun received (0 = none) */
  int nfailed;       /* workers that failed on their own */
  gr_exit first;     /* root cause: first failure by time */
  gr_exit others[8]; /* a few more for the summary */
} gr_group_result;

/* Runs one attempt: spawns nproc workers with envs[i] (NULL-terminated
 * "NAME=value" arrays) running `path` with argv, relays their output,
 * stops the group on the first failure or on a signal, and reaps
 * everything. `sigfd` is a signalfd for SIGCHLD, SIGINT, SIGTERM, SIGHUP
 * (blocked in the caller). Returns 0 with *res filled, or -1 on an internal
 * error (message printed; every worker stopped). */
int gr_run_group(const gr_options *o, int attempt, const char *path,
                 char **const envs[], int sigfd, gr_group_result *res);

/* Runs o->replica_groups copies of this gangrun, one per replica group,
 * under a lighthouse it hosts (unless GANG_LIGHTHOUSE names one), and waits
 * for them all (groups.c). Returns the exit status. */
int gr_run_replica_groups(const gr_options *o, char **argv, int sigfd);

/* "SIGTERM"-style name. */
const char *gr_signal_name(int sig);

#endif
