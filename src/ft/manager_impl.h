/* The manager's parts (gang/ft.h):
 *
 *   manager.c       creation, the heartbeat and notice threads, errors,
 *                   registered state, readers
 *   manager_step.c  the step: the quorum worker (lighthouse, shared with
 *                   the group, the replica gang rebuilt, healing),
 *                   all_reduce, should_commit
 *   managed.c       the managed gang (size = participants; all_reduce
 *                   through the manager)
 *
 * manager.c starts the worker of manager_step.c and the gang of managed.c;
 * those call back only gang__mgr_record. */
#ifndef GANG_FT_MANAGER_IMPL_H
#define GANG_FT_MANAGER_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gang/ft.h"
#include "lighthouse.h"

typedef struct mgr_state {
  char name[64];
  void *buf;
  size_t len;
} mgr_state;

struct gang_manager {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char lighthouse[256];
  char replica_id[GANG_LH_ID_MAX];
  gang_t *group; /* borrowed */
  gang_t *vote;  /* sub-gang of the group: quorum sharing and commit votes */
  int group_rank, group_size;
  int min_replica_size, max_retries;
  int64_t timeout_ms, quorum_timeout_ms, heartbeat_ms;
  bool init_sync;
  gang_t *replica; /* reconfigurable: rank r of every group */
  gang_t *managed;
  gang__lh_client *lh_quorum; /* group rank 0's, used by the worker */
  pthread_t beat_thread, notice_thread, worker;
  bool beat_started, notice_started, worker_started, stopping;
  /* The step (under mu). */
  int64_t step;            /* committed steps */
  int64_t commit_failures; /* consecutive */
  /* The quorum the last step was committed (or healed) in: the join's
   * commit_quorum (lighthouse.h). */
  int64_t commit_qid;
  uint64_t commit_inc;
  gang_status error; /* recorded this step */
  char error_text[1024];
  gang_manager_timings timings; /* of the last quorum; error_ns this step */
  /* The current quorum and this replica's place in it (under mu). */
  gang__lh_quorum q;
  int replica_rank, participants;
  bool participating; /* this replica takes part in this step's all_reduce */
  /* The quorum worker (under mu). */
  bool quorum_requested, quorum_running;
  bool allow_heal, shrink_only;
  gang_status quorum_status; /* GANG_TIMEOUT if the last quorum timed out */
  int64_t quorum_rounds;     /* quorums finished (for waiters) */
  mgr_state *states;
  int nstates;
};

/* Records an error of this step (the first wins). Any thread. */
void gang__mgr_record(gang_manager *m, gang_status st, const char *detail);

/* The quorum worker (manager_step.c). */
gang_status gang__mgr_worker_start(gang_manager *m);
void gang__mgr_worker_stop(gang_manager *m);

/* The managed gang (managed.c). */
gang_status gang__mgr_managed_create(gang_manager *m, gang_t **out);
/* A quorum changed the participants: the managed gang's size follows. */
void gang__mgr_managed_resize(gang_manager *m);

#endif
