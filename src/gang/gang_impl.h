/* The gang's backend interface. Every gang_t is a const table of operations
 * plus the common state below; gang.c validates arguments at the API
 * boundary, keeps errors sticky, turns blocking calls into post + wait and
 * builds the derived operations (split, variable-size payloads) on top of the
 * backend's collectives. Backends see valid arguments only. */
#ifndef GANG_GANG_IMPL_H
#define GANG_GANG_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/queue.h>

#include "gang/gang.h"

typedef enum gang__coll_kind {
  GANG_COLL_BARRIER,
  GANG_COLL_ALL_REDUCE,
  GANG_COLL_BROADCAST,
  GANG_COLL_ALL_GATHER,
  GANG_COLL_ALL_GATHER_LIST,
  GANG_COLL_REDUCE_SCATTER,
  GANG_COLL_ALL_TO_ALL,
  GANG_COLL_ALL_TO_ALL_V,
  GANG_COLL_SEND,
  GANG_COLL_RECV,
  GANG_COLL_KIND_COUNT
} gang__coll_kind;

/* One collective call, as the caller made it. */
typedef struct gang__coll {
  gang__coll_kind kind;
  void *out;         /* all_reduce/broadcast buf, all_gather/RS/A2A out, recv */
  const void *in;    /* all_gather/RS/A2A in, send buf */
  void *const *outs; /* all_gather_to_list */
  const size_t *out_counts; /* all_to_all_v: elements from each rank */
  const size_t *in_counts;  /* all_to_all_v: elements to each rank */
  size_t count;     /* elements (per rank for AG/RS/A2A); bytes for send/recv */
  gang_dtype dtype; /* GANG_UINT8 for send/recv */
  gang_reduce_op op;
  int root; /* broadcast source */
  int peer; /* send/recv */
  int tag;  /* send/recv */
} gang__coll;

/* Name of a collective kind ("all_reduce"), for error details. */
const char *gang__coll_name(gang__coll_kind kind);

typedef struct gang__ops {
  const char *name; /* "fake", "pg": used in error details */
  /* The gang simulates its peers (fake gang): data that only a peer could
   * supply does not exist. */
  bool simulated;
  /* Starts `c` and records its progress in `w` (memory owned by the
   * caller, initialised by gang.c). A backend that finishes at once calls
   * gang__work_complete before returning. */
  gang_status (*post)(gang_t *g, const gang__coll *c, gang_work *w);
  /* Waits for an incomplete `w` until `deadline` (gang__now_ns time). NULL
   * when every operation completes inside post. */
  gang_status (*wait)(gang_work *w, int64_t deadline);
  /* Advances `w` without blocking. NULL like wait. */
  void (*test)(gang_work *w);
  /* Creates the member gang of the parent ranks `ranks` (validated), in
   * which the caller is at `index` (-1: not a member, *out stays NULL).
   * Collective over g. */
  gang_status (*subgang)(gang_t *g, const int *ranks, int n, int index,
                         gang_t **out);
  /* Unblocks in-flight operations (they fail with GANG_ABORTED). Any thread. */
  void (*abort)(gang_t *g);
  /* Frees the backend's state; gang.c frees the handle. */
  void (*destroy)(gang_t *g);
  /* Configurable gangs (src/ft/ft_impl.h); NULL for others. */
  const struct gang__ft_ops *ft;
  /* The algorithm of the latest collective (gang_last_algorithm), NULL
   * before the first; NULL for backends that do not choose. */
  const char *(*last_algo)(const gang_t *g);
} gang__ops;

struct gang {
  const gang__ops *ops;
  int rank;
  int size;
  gang_device device;
  int64_t timeout_ms; /* default deadline of blocking calls; < 0 = none */
  bool check;         /* signature check before every collective */
  uint64_t ncoll;     /* collectives posted (the signature's sequence) */
  atomic_int broken;  /* GANG_OK until the first failure (sticky) */
  pthread_mutex_t mu; /* guards error */
  char error[1024];   /* detail of the failure that broke the gang */
  void *impl;         /* backend state */
};

struct gang_work {
  gang_t *g;
  atomic_int done;
  gang_status status;
  bool heap; /* allocated by a _post call (gang_work_free frees it) */
  /* Waited for with a deadline before the gang's own: the backend must not
   * run it on the waiting thread, where it would keep the gang's deadline. */
  atomic_bool short_wait;
  gang__coll coll;             /* what was posted */
  char detail[512];            /* what went wrong, when status != GANG_OK */
  void *impl;                  /* backend state */
  uint64_t seq;                /* backend: the collective's sequence number */
  uint64_t flight;             /* backend: its flight recorder entry */
  TAILQ_ENTRY(gang_work) link; /* backend: queue link (sys/queue.h) */
  /* backend: room for per-operation state, so blocking calls (whose work
   * lives on the stack) allocate nothing */
  _Alignas(16) unsigned char inline_state[192];
};

/* Allocates the common part of a gang for a backend; the default timeout
 * comes from `timeout_ms` (0 = GANG_TIMEOUT). */
gang_status gang__new(const gang__ops *ops, void *impl, int rank, int size,
                      gang_device device, int64_t timeout_ms, gang_t **out);
/* INVALID_ARGUMENT naming fn and `what` unless r is a rank of g. */
gang_status gang__check_rank_arg(const char *fn, const char *what, int r,
                                 const gang_t *g);
/* A backend whose members change (a managed gang, whose size is a
 * quorum's participants) sets the rank and size its callers read. Any
 * thread. */
void gang__set_shape(gang_t *g, int rank, int size);

/* Marks `w` complete with `st`, keeping this thread's error detail; a
 * failure also breaks the gang. */
void gang__work_complete(gang_work *w, gang_status st);

/* Completes `w` with a failure that leaves the gang usable (an operation
 * the backend does not support). */
void gang__work_reject(gang_work *w, gang_status st);

/* Posts collective c on g as the public _post calls do (checked, counted,
 * signature-checked when g checks): *out is a work the caller waits for
 * and frees with the public gang_work calls. For gangs that wrap another
 * (src/ft/). */
gang_status gang__post_coll(gang_t *g, const gang__coll *c, gang_work **out);

/* Breaks the gang with `st` and the current thread's error detail, unless
 * it is already broken. Returns the gang's (first) failure status. */
gang_status gang__fail(gang_t *g, gang_status st);

/* A gang creation that another thread may stop: gang_ft_configure's, so
 * that gang_abort of a reconfigurable gang also ends a configure that
 * waits for a peer that will never come (pg_world.c). */
struct gang_store;
typedef struct gang__setup_cancel {
  pthread_mutex_t mu;
  atomic_bool fired;
  char why[256];
  struct gang_store *store; /* the creation's store client while it waits */
} gang__setup_cancel;

void gang__setup_cancel_init(gang__setup_cancel *c);
void gang__setup_cancel_fini(gang__setup_cancel *c);
/* Stops the creation in progress on c, or the next one: its store waits
 * fail at once and its fabric stops waiting for connections, with
 * GANG_ABORTED quoting `why`. Any thread; does not wait. */
void gang__setup_cancel_fire(gang__setup_cancel *c, const char *why);
/* gang_create_with_store, stoppable through `cancel` (may be NULL). */
gang_status gang__create_with_store_cancel(const gang_options *opts,
                                           const char *store_addr, int rank,
                                           int size, gang__setup_cancel *cancel,
                                           gang_t **out);

#endif
