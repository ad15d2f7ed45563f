/* The process-group gang's parts, shared by its files:
 *
 *   pg_world.c  creating a world (store, fabric, shared memory) and its
 *               first gang
 *   pg.c        the backend: a gang's state, sub-gangs, abort, destroy;
 *               the world's end with its last gang
 *   pg_queue.c  posting, running and waiting for collectives (the queue
 *               and its worker thread)
 *   pg_p2p.c    send and receive
 *   pg_exec.c   executing one collective on the chosen path and algorithm
 *   pg_hier.c   gangs over several hosts: shared memory inside, TCP between
 *   pg_diag.c   after a timeout: which ranks reached the collective
 *   pg_call.c   what those share: names of calls, a channel prepared for a
 *               call, the algorithms' view of a TCP call
 *   pg_addr.c   the address this rank listens on
 *   pg_exit.c   the process's exit with worlds open: their ranks leave
 *
 * Calls go one way (test_call_circles keeps it so): pg_world -> pg ->
 * pg_queue -> pg_p2p; pg -> pg_p2p, pg_hier, pg_diag, pg_exit; pg_queue ->
 * pg_exec -> pg_hier; pg_queue -> pg_diag; pg_world -> pg_addr, pg_exit,
 * pg_diag; pg_exit -> pg_diag; pg, pg_queue, pg_p2p, pg_exec, pg_hier ->
 * pg_call.
 * None of this is thread-safe unless said. */
#ifndef GANG_GANG_PG_INTERNAL_H
#define GANG_GANG_PG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "algo/algo.h"
#include "algo/run.h"
#include "algo/select.h"
#include "flight.h"
#include "gang_impl.h"
#include "gang/store.h"
#include "transport/fabric.h"
#include "transport/shm.h"

/* Context ids of point-to-point traffic have the top bit set; collective
 * contexts never do. */
#define PG_P2P_CTX_BIT (1ull << 63)

/* What a world's gangs share: the store connection, the store server when
 * rank 0 hosts it, the fabric and this host's shared-memory arena. Freed
 * when the last gang of the world is destroyed. */
typedef struct pg_world {
  pthread_mutex_t mu;
  int refs;
  gang_store *store;
  gang_store_server *server; /* when rank 0 hosts the store itself */
  int store_host;            /* world rank hosting the store, -1: none */
  int64_t diag_budget_ms;    /* gang__pg_diag_budget_ms of its timeout */
  int size;                  /* ranks in the world */
  atomic_bool diag_marked;   /* this rank's presence is in the store */
  atomic_bool diag_done;     /* ... and it is done with the store */
  atomic_bool flight_dumped; /* its gangs' flight records were dumped */
  gang__fabric *fabric;
  gang__shm *shm; /* this host's arena; NULL: no local peer or shm off */
  int *hosts; /* world rank -> its host's lowest world rank (NULL: a world of
                one) */
  bool shm_everywhere; /* every host's ranks share memory (or are alone) */
  algo_choice choice;  /* GANG_ALGO's overrides */
  double net_alpha_ns, net_beta_ns; /* the link model (rank 0's settings) */
  double net_beta_one_ns; /* beta of one flow alone (0: net_beta_ns) */
  char name[256];         /* the store address: the world's name */
  /* The process's exit with the world open (pg_exit.c). */
  pid_t pid;                  /* the process that made it */
  int64_t linger_ms;          /* GANG_STORE_LINGER, for the store's host */
  bool listed;                /* on pg_exit.c's list (under its lock) */
  TAILQ_ENTRY(pg_world) live; /* ... there */
} pg_world;

/* A gang over several hosts, some with several of its members: all_reduce,
 * broadcast and barrier run inside each host over shared memory and
 * between hosts over TCP, among one leader per host (its lowest gang
 * rank). */
typedef struct pg_hier {
  gang__shm_chan *local; /* this host's members (NULL when alone here) */
  int *leaders;          /* world ranks of the leaders, by host index */
  int *senders; /* a broadcast's: the leaders, its root for the root's host */
  int nhosts, my_host; /* host index: order of first gang rank */
  int per_host;        /* the most members on any host */
  bool leader;
  int *host_of;  /* gang rank -> host index */
  int *local_of; /* gang rank -> index among its host's members */
  uint64_t ctx;  /* the leaders' context id */
  /* Every host has the same number of members, and they are consecutive
   * gang ranks (host index * members + local index), as launchers number
   * ranks node by node: all_gather and reduce_scatter run in two levels. */
  bool blocks;
  /* Where every host has the same number of members (NULL otherwise):
   * this member's rail, the members of every host with its local index
   * (world ranks, by host index), and the rail's context id. */
  int *rail;
  uint64_t rail_ctx;
} pg_hier;

typedef TAILQ_HEAD(pg_works, gang_work) pg_works;

typedef struct gang__pg {
  pg_world *w;
  int *map; /* gang rank -> world rank */
  uint64_t ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Collectives posted. Only the posting thread (one at a time, gang.h)
   * advances it, so it needs no read-modify-write. */
  _Atomic uint64_t seq;
  uint64_t subgangs; /* sub-gangs created (a collective counter) */
  pg_works queue;    /* collectives posted, not yet running (under mu) */
  atomic_int queued; /* works in the queue (mirrors it, read without mu) */
  pg_works p2p;      /* point-to-point works not yet completed (under mu) */
  /* A collective is executing. Claimed by compare-and-swap, so a blocking
   * call with nothing queued runs without taking mu (pg_queue.c). */
  atomic_bool running;
  bool has_thread, stop;
  pthread_t thread;
  void *scratch[2];
  size_t scratch_cap[2];
  /* Two members' measured all_reduce over TCP (algo_ctx.way): what this
   * member has timed with its partner on the flat path, among two hosts'
   * leaders and along a rail of two hosts. */
  gang__way_book way_flat, way_leaders, way_rail;
  /* Close calls over TCP (algo_ctx.timed), on the same three paths. */
  algo_timed timed_flat, timed_leaders, timed_rail;
  /* The two paths' close calls (pg_exec.c): way 0 the two-level form,
   * way 1 flat TCP; pair[.][.][0] the form (id + 1). */
  algo_timed timed_paths;
  gang__shm_chan *chan;  /* every member on this host: collectives over shm */
  pg_hier *hier;         /* members on several hosts, some sharing one */
  bool spread;           /* members on several hosts */
  _Atomic int last_algo; /* the algorithm of the last collective, -1: none
                            yet (gang_last_algorithm) */
  /* Per collective, the algorithms it has run (a bit per algo_id; touched
   * by execution only): the log says the first run of each (GANG_DEBUG=
   * INFO, subsystem COLL). */
  uint32_t logged_algos[ALGO_COLL_COUNT];
  gang__flight *flight; /* its recent calls (NULL: GANG_FLIGHT=0) */
} gang__pg;

/* ---- pg.c ---- */

/* Creates the gang of world ranks map[0..size) in which this process is
 * `rank`, with context id `ctx`; takes a reference to w. */
gang_status gang__pg_new(pg_world *w, const int *map, int size, int rank,
                         uint64_t ctx, gang_device device, int64_t timeout_ms,
                         gang_t **out);

/* Drops a reference to w; the last one frees it. */
void gang__pg_world_release(pg_world *w);

/* ---- pg_exit.c ---- */

/* Puts w on the process's list of live worlds, whose ranks leave when
 * the process exits with them open (the exit handler, installed on the
 * first call). */
void gang__pg_exit_add(pg_world *w);
/* Takes w off that list (before it is freed); waits for an exit handler
 * that is making it leave. */
void gang__pg_exit_remove(pg_world *w);

/* ---- pg_addr.c ---- */

/* The local address peers can reach this rank at (see pg_addr.c): `want`
 * when given, else the one toward the store's host, narrowed by
 * GANG_SOCKET_IFNAME. */
gang_status gang__pg_listen_addr(const char *store_addr, const char *want,
                                 char *out, size_t cap);

/* ---- pg_queue.c ---- */

gang_status gang__pg_post(gang_t *g, const gang__coll *c, gang_work *w);
gang_status gang__pg_wait(gang_work *w, int64_t deadline);
void gang__pg_test(gang_work *w);
/* Stops the worker thread and fails the collectives still queued. */
void gang__pg_queue_stop(gang_t *g);

/* ---- pg_p2p.c ---- */

gang_status gang__pg_post_p2p(gang_t *g, const gang__coll *c, gang_work *w);
gang_status gang__pg_wait_p2p(gang_work *w, int64_t deadline);
void gang__pg_test_p2p(gang_work *w);
/* Withdraws the point-to-point works not yet completed (destroy). */
void gang__pg_p2p_cancel_all(gang_t *g);

/* ---- pg_exec.c ---- */

/* Executes w's collective: shared memory, hierarchical or TCP, with the
 * algorithm the selection table (src/algo/select.c) names. */
gang_status gang__pg_execute(gang_t *g, gang_work *w);

/* ---- pg_call.c ---- */

/* g's world failed (`why`): dumps the flight records of the world's gangs,
 * the first time only; nothing when g records nothing. */
void gang__pg_flight_failed(gang_t *g, const char *why);

/* "<kind> #<seq> (gang rank <rank>/<size><tail>)", for errors. */
void gang__pg_name_call(char *out, size_t cap, gang__coll_kind kind,
                        uint64_t seq, int rank, int size, const char *tail);
void gang__pg_name_p2p(char *out, size_t cap, bool send, int peer, int tag);

/* Prepares channel ch for w's collective (names, signature, deadline). */
void gang__pg_chan_start(gang__shm_chan *ch, gang_t *g, const gang_work *w);

/* The table's facts of call c over `size` members without shared memory,
 * on two hosts or more if spread. */
algo_facts gang__pg_tcp_facts(const pg_world *w, const gang__coll *c, int size,
                              bool spread);

/* ---- pg_probe.c ---- */

/* The world's link model (net_alpha_ns, net_beta_ns): the settings', or
 * over several hosts measured between rank 0 and another host's first
 * rank; rank 0's in every rank. Unless set, alpha is scaled by `crowd`,
 * rank 0's machine's ranks of the world per CPU where above 1: there
 * every step of an algorithm waits for its peers to be scheduled.
 * Collective over the world's ranks. */
gang_status gang__pg_net_model(pg_world *w, int rank, int size, double crowd,
                               int64_t deadline);

/* The algorithms' view of w's collective over the fabric ranks
 * world[0..size), in which this rank is `rank`. */
algo_ctx gang__pg_tcp_ctx(gang__pg *p, const gang_work *w, int rank, int size,
                          const int *world, uint64_t ctx, int64_t deadline,
                          const char *what);

/* Call c as the algorithms' handlers take it (algo/run.h). */
algo_call gang__pg_algo_call(const gang__coll *c);

/* ---- pg_hier.c ---- */

/* Plans the hierarchy of a gang over several hosts; *out stays NULL when
 * it would not help. */
gang_status gang__pg_hier_new(pg_world *w, const int *map, int size, int rank,
                              uint64_t ctx, pg_hier **out);
void gang__pg_hier_free(pg_hier *h);
/* Runs w's collective hierarchically with two-level form `algo` (ALGO_HIER,
 * or ALGO_HIER_RAILS for an all_reduce); false when this kind runs flat. */
bool gang__pg_execute_hier(gang_t *g, gang_work *w, algo_id algo,
                           gang_status *st);
/* Whether the hierarchical path has a form of collective `kind` for this
 * gang (all_reduce, broadcast, barrier; all_gather on a block layout). */
bool gang__pg_hier_has(const pg_hier *h, gang__coll_kind kind);

/* ---- pg_diag.c ---- */

/* How long the diagnosis after a timeout of a gang with `timeout_ms` may
 * take (-1: none): 100-500 ms. */
int64_t gang__pg_diag_budget_ms(int64_t timeout_ms);
/* After a timeout of a collective that did not run (it started on a failed
 * world): says in the store that this rank was waiting in the world, as a
 * diagnosis does, once per world. */
void gang__pg_diag_mark_present(gang_t *g);
/* On the rank hosting the store, before it stops it: waits until every
 * rank that counted itself present in a diagnosis is done with the store,
 * for at most two diagnosis budgets. */
void gang__pg_diag_linger(pg_world *w);
/* Adds to this thread's timeout error which ranks reached w's collective
 * and which did not answer, and which other ranks of the world were in no
 * diagnosis. Within gang__pg_diag_budget_ms of the gang's
 * timeout, unless the store stops answering in the middle of it (then a
 * waiting call's reply grace, 1 s, more). */
void gang__pg_diagnose_timeout(gang_t *g, const gang_work *w);

#endif
