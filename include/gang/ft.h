/* gang/ft.h: fault tolerance, after torchft. A job is R replica groups,
 * each holding a full copy of the model (inside a group it may use tp, pp
 * or fsdp gangs); a failure anywhere in a group drops that whole group, and
 * rank r of every group joins one replica gang across the groups, which is
 * rebuilt whenever the membership changes. docs/fault-tolerance.md maps
 * every name here to torchft's.
 *
 * Pieces, from the bottom:
 *   - gang implementations usable wherever a gang_t is: the reconfigurable
 *     gang (gang_ft_create + gang_ft_configure), the error-swallowing
 *     wrapper, the dummy gang, the subprocess ("baby") gang and the managed
 *     gang of a manager;
 *   - the lighthouse, the quorum service (the gang-lighthouse tool, or
 *     embedded with gang_lighthouse_start);
 *   - the manager, one per rank: the per-step protocol (start_quorum,
 *     all_reduce, should_commit) and healing a replica that is behind from
 *     one that is not.
 *
 * Unless said otherwise, functions return GANG_OK or an error with the
 * detail in gang_last_error(), never block without a deadline, and are not
 * thread-safe on one handle (one thread at a time). */
#ifndef GANG_FT_H
#define GANG_FT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/export.h"
#include "gang/gang.h"
#include "gang/status.h"
#include "gang/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Reconfigurable gang (torchft's ProcessGroup.configure) -------------- */

/* Creates a reconfigurable gang, unconfigured: every collective fails with
 * GANG_INVALID_USAGE ("not configured") until gang_ft_configure. opts (may
 * be NULL) are those of every incarnation (timeout, host, check); its
 * store_addr is ignored. rank and size read -1 and 0 until configured. */
GANG_API gang_status gang_ft_create(const gang_options *opts, gang_t **out);

/* Makes g a new incarnation: aborts the previous one (its in-flight works
 * end with GANG_ABORTED), frees it, then rendezvous with `size` processes
 * through the store at `store_addr` ("host:port/prefix") as `rank`, and
 * returns once the new gang is ready or timeout_ms passed (< 0: the gang's
 * default). Every incarnation needs a prefix of its own: one used before
 * (by any process, through this store) is refused with
 * GANG_INVALID_USAGE. Clears the sticky error. Works on a reconfigurable
 * gang, on a subprocess gang and on an error-swallowing wrapper of either
 * (which also forgets its recorded error). Must not run while another
 * thread posts to g. */
GANG_API gang_status gang_ft_configure(gang_t *g, const char *store_addr,
                                       int rank, int size, int64_t timeout_ms);

/* Whether g is configured (a reconfigurable or subprocess gang, or a
 * wrapper of one). */
GANG_API bool gang_ft_configured(const gang_t *g);

/* ---- Error-swallowing wrapper (torchft's ErrorSwallowingProcessGroup) ---- */

/* Wraps `inner` (takes ownership: destroying the wrapper destroys it).
 * all_reduce through the wrapper never fails: after the first error (the
 * inner gang's, or one given to gang_error_swallowing_report) every
 * all_reduce returns GANG_OK at once and leaves its buffer unchanged, and
 * the call that met the error returns GANG_OK with its buffer's contents
 * unspecified. Other collectives pass the inner gang's result through.
 * Only gang_ft_configure on the wrapper clears the recorded error. */
GANG_API gang_status gang_error_swallowing_wrap(gang_t *inner, gang_t **out);

/* The first error the wrapper recorded (GANG_OK when none); its detail is
 * copied to detail[0..cap) when detail is not NULL. */
GANG_API gang_status gang_error_swallowing_error(const gang_t *g, char *detail,
                                                 size_t cap);

/* Records an error by hand (torchft's report_error): poisons the wrapper as
 * if the inner gang had failed with st and `detail`. Any thread. */
GANG_API void gang_error_swallowing_report(gang_t *g, gang_status st,
                                           const char *detail);

/* ---- Dummy gang (torchft's ProcessGroupDummy) ---------------------------- */

/* A gang of any rank and size whose collectives move nothing: out-of-place
 * ones copy the input to this rank's place in the output, in-place ones
 * leave the buffer as it is; send and recv are GANG_NOT_SUPPORTED. */
GANG_API gang_status gang_create_dummy(int rank, int size, gang_t **out);

/* ---- Subprocess gang (torchft's ProcessGroupBaby) ------------------------ */

/* A reconfigurable gang whose communicator lives in a child process: every
 * gang_ft_configure starts a new child (killing the previous one), buffers
 * cross through shared memory, and the parent never blocks without a
 * deadline. A child that hangs is killed at the deadline or at the next
 * configure; a child that dies gives the parent's calls an error
 * (GANG_PEER_LOST), never a dead parent. Unconfigured until
 * gang_ft_configure. The child is the gang-baby program: GANG_BABY_PATH,
 * else the one installed beside the library. */
GANG_API gang_status gang_baby_create(const gang_options *opts, gang_t **out);

/* ---- Lighthouse (torchft's Lighthouse) ----------------------------------- */

typedef struct gang_lighthouse gang_lighthouse;

typedef struct gang_lighthouse_options {
  size_t size;                  /* sizeof(gang_lighthouse_options) */
  const char *host;             /* address to listen on (NULL: 0.0.0.0) */
  int port;                     /* 0: any free port (gang_lighthouse_port) */
  int min_replicas;             /* fewest replica groups in a quorum (1) */
  int64_t join_timeout_ms;      /* wait for stragglers (60000) */
  int64_t quorum_tick_ms;       /* how often quorums are computed (100) */
  int64_t heartbeat_timeout_ms; /* a silent replica is dead after (5000) */
  const char *http_host;        /* status page (NULL: host) */
  int http_port;                /* 0: any free port; -1: no status page */
  const char *secret;           /* HMAC secret of the store it speaks through
                                   (NULL: GANG_STORE_SECRET) */
  bool allow_kill; /* the status page may kill a replica group (POST
                      /kill?replica=ID), for drills (false) */
} gang_lighthouse_options;

#define GANG_LIGHTHOUSE_OPTIONS_INIT                                           \
  {                                                                            \
    sizeof(gang_lighthouse_options), NULL, 0, 1, 60000, 100, 5000, NULL, 0,    \
        NULL, false                                                            \
  }

/* Starts a lighthouse in this process (threads of its own): a store server
 * that replicas speak through, the quorum computation and the HTTP status
 * page (/status as JSON, / as HTML). */
GANG_API gang_status gang_lighthouse_start(const gang_lighthouse_options *opts,
                                           gang_lighthouse **out);
GANG_API int gang_lighthouse_port(const gang_lighthouse *lh);
GANG_API int gang_lighthouse_http_port(const gang_lighthouse *lh);
/* Stops it and frees it (NULL is fine). Replicas waiting on it get an
 * error within their deadline. */
GANG_API void gang_lighthouse_stop(gang_lighthouse *lh);

/* ---- Manager (torchft's Manager) ----------------------------------------- */

typedef struct gang_manager gang_manager;

typedef struct gang_manager_options {
  size_t size;               /* sizeof(gang_manager_options) */
  const char *lighthouse;    /* "host:port" of the lighthouse (NULL:
                                GANG_LIGHTHOUSE, which gangrun
                                --replica-groups sets) */
  const char *name;          /* replica group name (NULL: GANG_RUN_ID, else
                                "replica"); the replica id is this plus a
                                random suffix, new for every process */
  gang_t *group;             /* this replica group's gang (borrowed; NULL: a
                                group of one): the manager makes a sub-gang of
                                it for its own votes, collective over it */
  int min_replica_size;      /* fewest replica groups to commit a step (1) */
  int64_t timeout_ms;        /* collectives, votes, healing (60000) */
  int64_t quorum_timeout_ms; /* a quorum (60000) */
  int64_t heartbeat_ms;      /* heartbeat interval of group rank 0 (100) */
  int max_retries;           /* consecutive failed commits before
                                should_commit fails (-1: no limit) */
  bool init_sync;            /* at step 0 every replica heals from the
                                primary, so all start alike (true) */
  gang_options replica_opts; /* options of the replica gang's incarnations
                                (size 0: defaults) */
} gang_manager_options;

#define GANG_MANAGER_OPTIONS_INIT                                              \
  {                                                                            \
    sizeof(gang_manager_options), NULL, NULL, NULL, 1, 60000, 60000, 100, -1,  \
        true, {                                                                \
      0                                                                        \
    }                                                                          \
  }

/* Creates the manager of this rank, collective over opts->group. Group rank
 * 0 speaks to the lighthouse for its group and heartbeats every
 * heartbeat_ms. */
GANG_API gang_status gang_manager_create(const gang_manager_options *opts,
                                         gang_manager **out);
/* Stops the heartbeat, leaves the quorum (the lighthouse counts the group
 * gone at once, not after its heartbeat timeout) and frees everything
 * (NULL is fine). */
GANG_API void gang_manager_destroy(gang_manager *m);

/* Registers `len` bytes at `buf` (borrowed for the manager's life) as part
 * of the replica's state under `name`: a replica that is behind receives
 * every registered buffer from an up-to-date one. Every rank of every
 * group registers the same names with the same sizes, in the same order,
 * before its first start_quorum (later: GANG_INVALID_USAGE).
 *
 * The manager reads these buffers (to send them) between start_quorum and
 * should_commit, from its own thread, and writes them only inside
 * should_commit, on the caller's thread: the caller may read them meanwhile
 * (its forward and backward passes) but must not write them until
 * should_commit has returned (its optimizer step comes after). A replica
 * that heals receives the state into buffers of the manager's own (as much
 * memory again as the registered state, while it heals). */
GANG_API gang_status gang_manager_register_state(gang_manager *m,
                                                 const char *name, void *buf,
                                                 size_t len);

/* Starts the next step's quorum in the background (torchft's
 * start_quorum): returns at once, and the caller computes its step
 * meanwhile (forward, backward). allow_heal: this replica may receive the
 * state if it is behind (every replica of a job passes the same);
 * shrink_only: the quorum may only lose members. A replica that heals in
 * this step takes part in its all_reduce with zeros and is not counted:
 * it computed from a state it did not have yet. GANG_ABORTED when the
 * group's gang failed (see should_commit). */
GANG_API gang_status gang_manager_start_quorum(gang_manager *m, bool allow_heal,
                                               bool shrink_only);

/* Waits for the quorum started last (and any healing) to finish. Errors
 * are recorded for should_commit rather than returned, except a quorum
 * that timed out (GANG_TIMEOUT), which is returned, alike on every rank of
 * the group, and a failed group (GANG_ABORTED, see should_commit). The
 * healed state is not in the registered buffers yet: should_commit puts
 * it there. */
GANG_API gang_status gang_manager_wait_quorum(gang_manager *m);

/* all_reduce over the replica gang of the current quorum, in place.
 * GANG_MEAN divides by the participants: the replicas at the job's step
 * (healing: those not healing). A replica that does not take part (it is
 * behind, or heals this step) sends zeros and receives the result. Fails
 * only when the group's gang failed (GANG_ABORTED): any other error is
 * recorded, the buffer is left unspecified, and should_commit votes no. */
GANG_API gang_status gang_manager_all_reduce(gang_manager *m, void *buf,
                                             size_t count, gang_dtype dtype,
                                             gang_reduce_op op);

/* Whether this step commits: an AND of every rank of the group (no error
 * recorded, enough participants), with the manager's timeout. A replica
 * that healed this step has the received state put into its registered
 * buffers first (at the step it was received at), so its optimizer step
 * then matches the others'. On commit the step advances. *commit receives
 * the decision. Fails (GANG_ABORTED) once more than max_retries steps in a
 * row did not commit, and when the group's own gang failed (a vote, or
 * the sharing of a quorum, over the group did not complete, as when one
 * of its ranks was stopped past the timeout): the manager then leaves the
 * lighthouse and every later call fails the same way; the group must
 * exit and be restarted (its launcher's --max-restarts). */
GANG_API gang_status gang_manager_should_commit(gang_manager *m, bool *commit);

/* Records an error: this step will not commit. Any thread. */
GANG_API void gang_manager_report_error(gang_manager *m, gang_status st,
                                        const char *detail);

/* The recorded error of this step (GANG_OK when none). */
GANG_API gang_status gang_manager_errored(const gang_manager *m, char *detail,
                                          size_t cap);

/* Committed steps so far (-1 for a NULL manager). */
GANG_API int64_t gang_manager_step(const gang_manager *m);
/* Resumes at `step` (>= 0), as a job restored from a checkpoint does
 * (torchft's Manager.load_state_dict): before the first start_quorum only,
 * on every rank of the group. The lighthouse then sees this group at that
 * step; one behind the others heals from them as any other. */
GANG_API gang_status gang_manager_set_step(gang_manager *m, int64_t step);
/* The current quorum: its id, the replica groups taking part in this step's
 * all_reduce, this group's rank among the replicas: 0, 0 and -1 before the
 * first quorum; -1, 0 and -1 for a NULL manager. */
GANG_API int64_t gang_manager_quorum_id(const gang_manager *m);
GANG_API int gang_manager_participants(const gang_manager *m);
GANG_API int gang_manager_replica_rank(const gang_manager *m);
/* The replica id of this group ("name:suffix"). */
GANG_API const char *gang_manager_replica_id(const gang_manager *m);

/* A gang whose size is the number of participants and whose all_reduce
 * goes through the manager (torchft's ManagedProcessGroup); its other
 * collectives go to the replica gang. Owned by the manager. */
GANG_API gang_t *gang_manager_gang(gang_manager *m);

/* What the last quorum cost (torchft's per-step timings), for logs and
 * dashboards. Times in ms, 0 for a phase that did not happen. */
typedef struct gang_manager_timings {
  double quorum_ms;    /* the lighthouse's answer, shared with the group */
  double configure_ms; /* the replica gang rebuilt (a changed quorum) */
  double heal_ms;      /* the state sent or received */
  int64_t heal_bytes;  /* bytes of state received (> 0) or sent (< 0) */
  int64_t error_ns;    /* CLOCK_MONOTONIC when this step's first error was
                          recorded (0: none) */
} gang_manager_timings;

GANG_API void gang_manager_last_timings(const gang_manager *m,
                                        gang_manager_timings *out);

#ifdef __cplusplus
}
#endif

#endif
