/* bench/chaos.h: what chaos_bench's parent (chaos_bench.c) and its rank
 * processes (chaos_rank.c) share: a trial's plan, drawn alike by every
 * process from the seed, and the records ranks leave in shared memory. */
#ifndef GANG_BENCH_CHAOS_H
#define GANG_BENCH_CHAOS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gang/gang.h"

#define MAX_RANKS 8
#define MAX_STEPS 12
#define MAX_BATCH 3
#define MAX_SHM_PATHS 8
#define KILL_ABORT_LIMIT_S 2.0 /* the bound for kill and abort */
#define HANG_EXTRA_S 8.0       /* a survivor this late is hung */

enum { MODE_SHM, MODE_TCP, MODE_MIXED, MODE_N };
enum { FAULT_KILL, FAULT_STOP, FAULT_ABORT, FAULT_N };
enum {
  OP_BARRIER,
  OP_ALL_REDUCE,
  OP_BROADCAST,
  OP_ALL_GATHER,
  OP_REDUCE_SCATTER,
  OP_ALL_TO_ALL,
  OP_N
};
extern const char *const chaos_mode_names[MODE_N];
extern const char *const chaos_fault_names[FAULT_N];
extern const char *const chaos_op_names[OP_N];

typedef struct config {
  int trials;
  int only; /* run this trial alone, -1: all */
  uint64_t seed;
  int64_t timeout_ms; /* stop trials */
  int min_ranks, max_ranks;
  size_t max_bytes; /* per rank block of a collective */
  bool modes[MODE_N];
  bool faults[FAULT_N];
  const char *json;
  const char *commit;
  int verbose; /* 1: a line per trial; 2: and every survivor's error */
} config;

typedef struct step {
  int op;
  bool on_sub; /* the rank's sub-gang (a non-member skips the step) */
  int batch;   /* 0: blocking; 1-3: that many posted works, then waits */
  size_t count;
  gang_dtype dtype;
  int root; /* broadcast: taken modulo the gang's size */
} step;

typedef struct plan {
  int n, mode, fault, victim;
  bool rank0_store;     /* rank 0 hosts the store (gang_create_default) */
  int sub_kind;         /* 0 none, 1 gang_split, 2 gang_create_subgang */
  int color[MAX_RANKS]; /* split: colour per rank */
  int members[MAX_RANKS], nmembers; /* create_subgang: the list */
  bool abort_sub;                   /* abort: the victim aborts its sub-gang */
  int delay_ms;                     /* from all ranks running to the fault */
  int nsteps;
  step steps[MAX_STEPS];
  int64_t timeout_ms;
} plan;

/* What a rank tells the parent, in memory they share. */
enum { R_START, R_RUNNING, R_ERRORED, R_DONE };

typedef struct rank_rec {
  atomic_int state;
  int status;   /* of the call that failed */
  int step, op; /* which */
  bool on_sub, posted;
  int64_t t_call; /* start of the failing call (its wait, when posted) */
  int64_t t_err;
  int64_t destroy_ns; /* gang_destroy of its gangs after the error */
  int leak_fds, leak_threads, leak_children, leak_memfds;
  int memfds; /* memfds open or mapped while running: shared memory used */
  int nshm;
  char shm[MAX_SHM_PATHS][512]; /* /dev/shm entries open or mapped */
  char err[1200];
} rank_rec;

typedef struct trial_shared {
  atomic_llong t_fault;
  rank_rec r[MAX_RANKS];
} trial_shared;

/* The plan of trial `trial`: the same in every process. */
plan chaos_make_plan(const config *cfg, int trial);

int64_t chaos_now_ns(void);
void chaos_nap_ms(int ms);
/* Processes whose parent is `pid` (up to cap of them in out); returns how
 * many there are. */
int chaos_children_of(pid_t pid, pid_t *out, int cap);

/* A rank of trial `trial`: store_port is chaos_bench's store, or, when
 * rank 0 hosts one, the free port it listens on. Reads its fault's word
 * from abort_fd. Exits. */
_Noreturn void chaos_rank_main(const plan *p, int rank, int store_port,
                               int trial, int abort_fd, trial_shared *sh);
/* A rank of the fresh gang after trial `trial`; exits 0 when it worked. */
_Noreturn void chaos_fresh_rank(const plan *p, int rank, int port, int trial);

#endif
