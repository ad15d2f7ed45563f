/* The manager's parts (gang/ft.h):
 *
 *   manager.c       creation, the heartbeat and notice threads, errors,
 *                   registered state, readers
 *   manager_step.c  the step: the quorum worker (lighthouse, shared with
 *                   the group, the replica gang rebuilt, healing),
 *                   all_reduce, should_commit
 *   managed.c       the managed gang (size = participants; all_reduce
 *                   through the manager)
 *   manager_errors.c  the step's error and the group's failure
 *
 * Calls go one way (test_call_circles): manager.c -> managed.c ->
 * manager_step.c -> manager_errors.c; manager.c -> manager_step.c,
 * manager_errors.c. */
#ifndef GANG_FT_MANAGER_IMPL_H
#define GANG_FT_MANAGER_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gang/ft.h"
#include "lighthouse.h"

typedef struct mgr_state {
  char name[64];
  void *buf; /* the caller's */
  size_t len;
  void *staged; /* a healing replica receives here (NULL until it does) */
} mgr_state;

/* Where the quorum worker is (notices are taken from CONFIGURING on: the
 * quorum they concern is m->q by then). */
typedef enum mgr_phase {
  MGR_IDLE,
  MGR_ASKING,      /* the lighthouse, and sharing its answer */
  MGR_CONFIGURING, /* the replica gang rebuilt */
  MGR_HEALING,     /* the state sent or received */
  MGR_AGREEING,    /* the group agrees on the outcome */
} mgr_phase;

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
  /* The notice watcher's client while it waits (under mu): stopping
   * interrupts its wait, which may be long (GANG__LH_NOTICE_WAIT_MS). */
  gang__lh_client *lh_notice;
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
  /* Healing, torchft's pending state: the state of the up-to-date
   * replicas at heal_step lies in the states' `staged` buffers, received
   * and agreed on by the whole group; should_commit moves it into the
   * caller's buffers (never while the caller may be reading them). */
  bool heal_pending;
  int64_t heal_step, heal_qid;
  uint64_t heal_inc;
  bool healing; /* this step's replica heals: it sends zeros */
  bool voting;  /* should_commit began: notices no longer spoil the step */
  char reported[GANG_LH_ID_MAX]; /* the last replica told the lighthouse of */
  int participant_rank;          /* among the participants, -1: not one */
  /* The group's own gang failed (a vote or a share of the quorum did not
   * complete): the group must restart. Sticky; every call returns it. */
  gang_status fatal;
  char fatal_text[512];
  /* The quorum worker (under mu). */
  mgr_phase phase;
  bool quorum_requested, quorum_running;
  bool allow_heal, shrink_only;
  gang_status quorum_status; /* GANG_TIMEOUT if the last quorum timed out */
  int64_t quorum_rounds;     /* quorums finished (for waiters) */
  mgr_state *states;
  int nstates;
};

/* ---- manager_errors.c ---- */

/* Records an error of this step (the first wins). Any thread. */
void gang__mgr_record(gang_manager *m, gang_status st, const char *detail);
/* The same for an error of the replica gang: the detail then says which
 * replica group each of its ranks is. */
void gang__mgr_record_replica(gang_manager *m, gang_status st,
                              const char *detail);

/* The group's gang failed under `what`: the manager becomes unusable
 * (m->fatal), stops heartbeating so the lighthouse drops the group, and
 * every later call fails with GANG_ABORTED saying the group must
 * restart. Returns that status. Any thread. */
gang_status gang__mgr_fatal(gang_manager *m, const char *what);

/* ---- manager_step.c: the quorum worker ---- */
gang_status gang__mgr_worker_start(gang_manager *m);
void gang__mgr_worker_stop(gang_manager *m);

/* ---- managed.c ---- */

/* The managed gang of m; its shape follows the quorum's participants. */
gang_status gang__mgr_managed_create(gang_manager *m, gang_t **out);

#endif
