/* The process-group gang: collectives over the world's fabric.
 *
 * A world (store connection, optional embedded store server, fabric) is
 * shared by the world gang and every sub-gang made from it, and freed when
 * the last of them is destroyed. Each gang has a context id (sub-gangs
 * derive theirs from the parent's id and a counter that every parent rank
 * advances in the same order, so no communication is needed to agree on
 * it) and a sequence number per collective.
 *
 * Collectives of one gang run one at a time in posting order: a blocking
 * call runs its collective on the calling thread (no hand-off, so no
 * wake-up latency); _post calls queue it for the gang's worker thread,
 * started on first use, so it progresses while the caller computes. A wait
 * on queued work may also run it itself. Point-to-point operations are not
 * queued: they register with the fabric at post time (so a posted receive
 * and a posted send to the same peer cannot deadlock each other) and
 * progress whenever any thread waits on the fabric. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stddef.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/shm_algo.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/reduce.h"
#include "core/sock.h"
#include "gang/env.h"
#include "gang_impl.h"
#include "transport/fabric.h"
#include "transport/shm.h"
#include "transport/ifname.h"

#define P2P_CTX_BIT (1ull << 63)
/* Up to this many bytes all_reduce uses recursive doubling; between two
 * ranks always (it moves the same bytes as the ring in one exchange, which
 * the fabric paces: docs/algorithms.md). */
#define ALLREDUCE_RD_MAX (64 * 1024)

/* Algorithm choices that GANG_ALGO can force. */
typedef enum { AR_AUTO, AR_RING, AR_RD } ar_algo;

typedef struct world {
  pthread_mutex_t mu;
  int refs;
  gang_store *store;
  gang_store_server *server; /* when rank 0 hosts the store itself */
  gang__fabric *fabric;
  gang__shm *shm;      /* this host's arena; NULL: no local peer or shm off */
  int *hosts;          /* world rank -> host index (NULL for a world of one) */
  bool shm_everywhere; /* every host's ranks share memory (or are alone) */
  ar_algo allreduce;   /* from GANG_ALGO */
} world;

typedef struct pg {
  world *w;
  int *map; /* gang rank -> world rank */
  uint64_t ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Collectives posted. Only the posting thread (one at a time, gang.h)
   * advances it, so it needs no read-modify-write. */
  _Atomic uint64_t seq;
  uint64_t subgangs; /* sub-gangs created (a collective counter) */
  gang_work *q_head, *q_tail;
  atomic_int queued; /* works in the queue (mirrors it, read without mu) */
  gang_work *p2p;    /* registered point-to-point works not yet completed */
  /* A collective is executing. Claimed by compare-and-swap, so a blocking
   * call with nothing queued runs without taking mu (pg_post). */
  atomic_bool running;
  bool has_thread, stop;
  pthread_t thread;
  void *scratch[2];
  size_t scratch_cap[2];
  gang__shm_chan *chan; /* every member on this host: collectives over shm */
  struct hier *hier;    /* members on several hosts, some sharing one */
} pg;

/* A gang over several hosts, some with several of its members: all_reduce,
 * broadcast and barrier run inside each host over shared memory and
 * between hosts over TCP, among one leader per host (its lowest gang
 * rank). */
typedef struct hier {
  gang__shm_chan *local; /* this host's members (NULL when alone here) */
  int *leaders;          /* world ranks of the leaders, by host index */
  int nhosts, my_host;   /* host index: order of first gang rank */
  bool leader;
  int *host_of;  /* gang rank -> host index */
  int *local_of; /* gang rank -> index among its host's members */
  uint64_t ctx;  /* the leaders' context id */
} hier;

static void world_release(world *w) {
  if (w == NULL)
    return;
  pthread_mutex_lock(&w->mu);
  int left = --w->refs;
  pthread_mutex_unlock(&w->mu);
  if (left > 0)
    return;
  gang__shm_destroy(w->shm);
  free(w->hosts);
  gang__fabric_destroy(w->fabric);
  gang_store_close(w->store);
  gang_store_server_stop(w->server);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* ---- Executing one collective ----------------------------------------------
 */

/* Runs w's collective over the gang's shared-memory channel. False when
 * this collective takes the TCP path instead (every member decides alike:
 * the choice depends only on the call and on what the arena agreed). */
/* Prepares channel `ch` for w's collective: its name, sequence number and
 * signature for errors and mismatch checks, and a deadline computed only
 * if a wait has to sleep. */
static void chan_start(gang__shm_chan *ch, gang_t *g, const gang_work *w) {
  const gang__coll *c = &w->coll;
  bool varying = c->kind == GANG_COLL_ALL_TO_ALL_V;
  bool reduces =
      c->kind == GANG_COLL_ALL_REDUCE || c->kind == GANG_COLL_REDUCE_SCATTER;
  ch->op = gang__coll_name(c->kind);
  ch->opseq = w->seq;
  ch->sig = gang__shm_sig((int)c->kind, (int)c->dtype, reduces ? (int)c->op : 0,
                          c->kind == GANG_COLL_BROADCAST ? c->root : 0,
                          varying ? 0 : c->count * gang_dtype_size(c->dtype));
  ch->timeout_ms = g->timeout_ms;
  ch->deadline = 0;
}

static bool execute_shm(gang_t *g, gang_work *w, gang_status *st) {
  pg *p = g->impl;
  gang__shm_chan *ch = p->chan;
  const gang__coll *c = &w->coll;
  size_t es = gang_dtype_size(c->dtype);
  size_t bytes = c->count * es;
  chan_start(ch, g, w);
  switch (c->kind) {
  case GANG_COLL_BARRIER:
    *st = shm_barrier(ch);
    return true;
  case GANG_COLL_ALL_REDUCE:
    *st = shm_allreduce(ch, c->out, c->count, c->dtype, c->op);
    return true;
  case GANG_COLL_BROADCAST:
    *st = shm_bcast(ch, c->out, bytes, c->root);
    return true;
  case GANG_COLL_ALL_GATHER:
    *st = shm_allgather(ch, c->out, c->in, bytes);
    return true;
  case GANG_COLL_ALL_GATHER_LIST: {
    void *stage;
    size_t total = bytes * (size_t)g->size;
    *st = gang__shm_scratch(ch, total + 1, &stage);
    if (*st == GANG_OK)
      *st = shm_allgather(ch, stage, c->in, bytes);
    for (int i = 0; *st == GANG_OK && i < g->size && bytes; i++)
      memcpy(c->outs[i], (char *)stage + (size_t)i * bytes, bytes);
    return true;
  }
  case GANG_COLL_REDUCE_SCATTER:
    *st = shm_reduce_scatter(ch, c->out, c->in, c->count, c->dtype, c->op);
    return true;
  case GANG_COLL_ALL_TO_ALL:
    *st = shm_alltoall(ch, c->out, c->in, bytes);
    return true;
  case GANG_COLL_ALL_TO_ALL_V:
    if (!ch->cma)
      return false;
    *st = shm_alltoallv(ch, c->out, c->out_counts, c->in, c->in_counts, es);
    return true;
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return false;
}

/* ---- Names of calls, for error messages ------------------------------- */

/* Every collective over TCP and every send or receive names itself before
 * it starts ("all_reduce #12 (gang rank 0/2)"), for errors only. snprintf
 * took 0.1-0.6 us of an 8-9 us small all_reduce over TCP (A/B
 * alternated), so the names are put together by hand. */
typedef struct namebuf {
  char *s;
  size_t cap, len; /* cap >= 1; s[len] is always '\0' */
} namebuf;

static void nb_str(namebuf *b, const char *t) {
  while (*t != '\0' && b->len + 1 < b->cap)
    b->s[b->len++] = *t++;
  b->s[b->len] = '\0';
}

static void nb_u64(namebuf *b, uint64_t v) {
  char d[20];
  int n = 0;
  do
    d[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0 && b->len + 1 < b->cap)
    b->s[b->len++] = d[--n];
  b->s[b->len] = '\0';
}

static void nb_int(namebuf *b, int v) {
  if (v < 0)
    nb_str(b, "-");
  nb_u64(b, v < 0 ? (uint64_t)0 - (uint64_t)(int64_t)v : (uint64_t)v);
}

/* "<kind> #<seq> (gang rank <rank>/<size><tail>)" */
static void name_call(char *out, size_t cap, gang__coll_kind kind, uint64_t seq,
                      int rank, int size, const char *tail) {
  namebuf b = {out, cap, 0};
  nb_str(&b, gang__coll_name(kind));
  nb_str(&b, " #");
  nb_u64(&b, seq);
  nb_str(&b, " (gang rank ");
  nb_int(&b, rank);
  nb_str(&b, "/");
  nb_int(&b, size);
  nb_str(&b, tail);
  nb_str(&b, ")");
}

/* The algorithms' view of w's collective over the fabric ranks
 * world[0..size), in which this rank is `rank`. */
static algo_ctx tcp_ctx(pg *p, const gang_work *w, int rank, int size,
                        const int *world, uint64_t ctx, int64_t deadline,
                        const char *what) {
  return (algo_ctx){
      .f = p->w->fabric,
      .rank = rank,
      .size = size,
      .world = world,
      .ctx = ctx,
      .seq = w->seq,
      .deadline = deadline,
      .what = what,
      .scratch = &p->scratch[0],
      .scratch_cap = &p->scratch_cap[0],
  };
}

/* all_reduce over TCP: recursive doubling for small messages (or fewer
 * elements than ranks), the ring above, unless GANG_ALGO forced one. */
static gang_status tcp_allreduce(algo_ctx *a, const gang__coll *c,
                                 ar_algo choice) {
  size_t bytes = c->count * gang_dtype_size(c->dtype);
  if (choice == AR_RD ||
      (choice == AR_AUTO && (bytes <= ALLREDUCE_RD_MAX || a->size == 2 ||
                             c->count < (size_t)a->size)))
    return algo_allreduce_rd(a, c->out, c->count, c->dtype, c->op);
  return algo_allreduce_ring(a, c->out, c->count, c->dtype, c->op);
}

/* all_reduce, broadcast or barrier of a gang over several hosts: inside
 * each host over shared memory, between hosts among the leaders over TCP.
 * False for the other collectives (they run flat over TCP). */
static bool execute_hier(gang_t *g, gang_work *w, gang_status *st) {
  pg *p = g->impl;
  hier *h = p->hier;
  const gang__coll *c = &w->coll;
  if (c->kind != GANG_COLL_ALL_REDUCE && c->kind != GANG_COLL_BROADCAST &&
      c->kind != GANG_COLL_BARRIER)
    return false;
  gang__shm_chan *ch = h->local;
  size_t bytes = c->count * gang_dtype_size(c->dtype);
  int64_t deadline = gang__deadline_in_ms(g->timeout_ms);
  if (ch != NULL) {
    chan_start(ch, g, w);
    ch->deadline = deadline; /* one clock for the local and TCP parts */
  }
  char what[64];
  name_call(what, sizeof what, c->kind, w->seq, g->rank, g->size, ", hosts");
  algo_ctx a =
      tcp_ctx(p, w, h->my_host, h->nhosts, h->leaders, h->ctx, deadline, what);
  *st = GANG_OK;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
    if (ch != NULL)
      *st = shm_barrier(ch);
    if (*st == GANG_OK && h->leader)
      *st = algo_barrier_dissemination(&a);
    if (*st == GANG_OK && ch != NULL)
      *st = shm_barrier(ch);
    return true;
  case GANG_COLL_ALL_REDUCE:
    if (ch != NULL)
      *st = shm_allreduce(ch, c->out, c->count, c->dtype, c->op);
    if (*st == GANG_OK && h->leader)
      *st = tcp_allreduce(&a, c, AR_AUTO);
    if (*st == GANG_OK && ch != NULL)
      *st = shm_bcast(ch, c->out, bytes, 0);
    return true;
  case GANG_COLL_BROADCAST: {
    int root_host = h->host_of[c->root];
    /* The root's host first, so its leader has the data. */
    if (ch != NULL && h->my_host == root_host)
      *st = shm_bcast(ch, c->out, bytes, h->local_of[c->root]);
    if (*st == GANG_OK && h->leader)
      *st = algo_bcast_binomial(&a, c->out, bytes, root_host);
    if (*st == GANG_OK && ch != NULL && h->my_host != root_host)
      *st = shm_bcast(ch, c->out, bytes, 0);
    return true;
  }
  default:
    return false;
  }
}

static gang_status execute(gang_t *g, gang_work *w) {
  pg *p = g->impl;
  gang_status shm_st;
  if (p->chan != NULL && execute_shm(g, w, &shm_st))
    return shm_st;
  if (p->hier != NULL && execute_hier(g, w, &shm_st))
    return shm_st;
  const gang__coll *c = &w->coll;
  char what[64];
  name_call(what, sizeof what, c->kind, w->seq, g->rank, g->size, "");
  algo_ctx a = tcp_ctx(p, w, g->rank, g->size, p->map, p->ctx,
                       gang__deadline_in_ms(g->timeout_ms), what);
  size_t es = gang_dtype_size(c->dtype);
  size_t bytes = c->count * es;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
    return algo_barrier_dissemination(&a);
  case GANG_COLL_ALL_REDUCE:
    return tcp_allreduce(&a, c, p->w->allreduce);
  case GANG_COLL_BROADCAST:
    return algo_bcast_binomial(&a, c->out, bytes, c->root);
  case GANG_COLL_ALL_GATHER: {
    char *slot = (char *)c->out + (size_t)g->rank * bytes;
    if (slot != c->in && bytes)
      memmove(slot, c->in, bytes);
    return algo_allgather_ring(&a, c->out, bytes);
  }
  case GANG_COLL_ALL_GATHER_LIST: {
    /* Gather into one contiguous staging buffer, then scatter the slots. */
    algo_ctx s = a;
    s.scratch = &p->scratch[1];
    s.scratch_cap = &p->scratch_cap[1];
    void *stage;
    GANG_CHECK(algo_scratch(&s, bytes * (size_t)g->size + 1, &stage));
    if (bytes)
      memcpy((char *)stage + (size_t)g->rank * bytes, c->in, bytes);
    GANG_CHECK(algo_allgather_ring(&a, stage, bytes));
    for (int i = 0; i < g->size && bytes; i++)
      if (c->outs[i] != (char *)stage + (size_t)i * bytes)
        memcpy(c->outs[i], (char *)stage + (size_t)i * bytes, bytes);
    return GANG_OK;
  }
  case GANG_COLL_REDUCE_SCATTER: {
    algo_ctx s = a;
    s.scratch = &p->scratch[1];
    s.scratch_cap = &p->scratch_cap[1];
    void *stage;
    size_t total = c->count * (size_t)g->size;
    GANG_CHECK(algo_scratch(&s, total * es + 1, &stage));
    if (bytes)
      memcpy(stage, c->in, total * es);
    GANG_CHECK(
        algo_reduce_scatter_ring_inplace(&a, stage, total, c->dtype, c->op, 0));
    if (bytes)
      memcpy(c->out, (char *)stage + (size_t)g->rank * bytes, bytes);
    return GANG_OK;
  }
  case GANG_COLL_ALL_TO_ALL:
    return algo_alltoall_pairwise(&a, c->out, c->in, bytes);
  case GANG_COLL_ALL_TO_ALL_V:
    return algo_alltoallv_pairwise(&a, c->out, c->out_counts, c->in,
                                   c->in_counts, es);
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return gang__error(GANG_INTERNAL, "%s: not a queued collective", what);
}

/* After a collective timed out (here or on a peer that told us), find out
 * which ranks of the gang reached it: each rank that gets the timeout marks
 * "diag/<ctx>/<seq>/<rank>" in the store, waits a short while for the
 * others' marks, and adds to the error who reached the collective and who
 * did not answer (a hung or stopped rank never marks). The wait is a tenth
 * of the gang's timeout, between 100 ms and 1 s. */
static void diagnose_timeout(gang_t *g, const gang_work *w) {
  pg *p = g->impl;
  gang_store *st = p->w->store;
  if (st == NULL)
    return;
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", gang_last_error());
  int64_t budget = g->timeout_ms / 10;
  budget = budget < 100 ? 100 : budget > 1000 ? 1000 : budget;
  char mine[96];
  snprintf(mine, sizeof mine, "diag/%" PRIx64 "/%" PRIu64 "/%d", p->ctx, w->seq,
           g->rank);
  if (gang_store_set(st, mine, "1", 1) != GANG_OK)
    goto done;
  char **keys = calloc((size_t)g->size, sizeof *keys);
  for (int r = 0; keys != NULL && r < g->size; r++) {
    keys[r] = malloc(96);
    if (keys[r] != NULL)
      snprintf(keys[r], 96, "diag/%" PRIx64 "/%" PRIu64 "/%d", p->ctx, w->seq,
               r);
  }
  bool all_ok = keys != NULL;
  for (int r = 0; all_ok && r < g->size; r++)
    all_ok = keys[r] != NULL;
  if (all_ok) {
    /* Whether or not everyone answers in time, then look at each. */
    (void)gang_store_wait(st, (const char *const *)keys, (size_t)g->size,
                          budget);
    char reached[256] = "", missing[256] = "";
    size_t ro = 0, mo = 0;
    for (int r = 0; r < g->size; r++) {
      bool there = false;
      const char *k = keys[r];
      if (gang_store_check(st, &k, 1, &there) != GANG_OK)
        break;
      char *buf = there ? reached : missing;
      size_t *o = there ? &ro : &mo;
      if (*o + 16 < sizeof reached)
        *o += (size_t)snprintf(buf + *o, sizeof reached - *o, "%s%d",
                               *o ? "," : "", r);
    }
    gang__error(GANG_TIMEOUT,
                "%s [gang ranks that reached %s #%" PRIu64 ": %s; that did "
                "not answer within %lld ms: %s]",
                detail, gang__coll_name(w->coll.kind), w->seq,
                ro ? reached : "none", (long long)budget,
                mo ? missing : "none");
  }
  for (int r = 0; keys != NULL && r < g->size; r++)
    free(keys[r]);
  free(keys);
  return;
done:
  gang__error(GANG_TIMEOUT, "%s", detail);
}

/* Executes one collective and completes its work, telling the peers of a
 * failure. Called without p->mu. */
static void run_one(gang_t *g, gang_work *w) {
  pg *p = g->impl;
  const gang__coll *c = &w->coll;
  gang_status st = execute(g, w);
  /* Every path reduces MEAN as a SUM; the division happens once, here. */
  if (st == GANG_OK && c->op == GANG_MEAN &&
      (c->kind == GANG_COLL_ALL_REDUCE || c->kind == GANG_COLL_REDUCE_SCATTER))
    gang__reduce_mean_finish(c->out, c->count, c->dtype, g->size);
  if (st == GANG_TIMEOUT)
    diagnose_timeout(g, w);
  /* A failure found before any byte moved (a bad split, no memory) must
   * still reach the peers, or they wait for this rank until their
   * deadline. */
  if (st != GANG_OK && gang__fabric_status(p->w->fabric, NULL, 0) == GANG_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", gang_last_error());
    gang__fabric_fail(p->w->fabric, st, why);
  }
  gang__work_complete(w, st);
}

/* Claims the right to execute a collective. */
static bool claim_running(pg *p) {
  bool idle = false;
  return atomic_compare_exchange_strong(&p->running, &idle, true);
}

/* Runs queued collectives in order until `until` is done (or, with NULL,
 * while the queue has work). Called with p->mu held; returns with it held.
 * False if it ran nothing (another thread is executing one: it broadcasts
 * p->cv when done). */
static bool drain(gang_t *g, gang_work *until) {
  pg *p = g->impl;
  bool ran = false;
  /* The claim comes before the dequeue: a blocking call that finds the
   * queue empty then finds running set until the dequeued work is done,
   * so it cannot overtake it. */
  while (p->q_head != NULL && !p->stop &&
         (until == NULL || !atomic_load(&until->done)) && claim_running(p)) {
    gang_work *w = p->q_head;
    p->q_head = w->next;
    if (p->q_head == NULL)
      p->q_tail = NULL;
    atomic_fetch_sub(&p->queued, 1);
    pthread_mutex_unlock(&p->mu);
    run_one(g, w);
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->running, false);
    pthread_cond_broadcast(&p->cv);
    ran = true;
  }
  return ran;
}

static void *worker_main(void *arg) {
  gang_t *g = arg;
  pg *p = g->impl;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    if (p->q_head != NULL && !atomic_load(&p->running) && drain(g, NULL))
      continue;
    pthread_cond_wait(&p->cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- Point-to-point -------------------------------------------------------
 */

typedef struct p2p_state {
  gang__xgroup grp;
  gang__xfer x;
  char what[48];
} p2p_state;

_Static_assert(sizeof(p2p_state) <= sizeof(((gang_work *)0)->inline_state),
               "p2p state must fit in the work");

static gang_status post_p2p(gang_t *g, const gang__coll *c, gang_work *w) {
  pg *p = g->impl;
  p2p_state *s = (p2p_state *)w->inline_state;
  bool send = c->kind == GANG_COLL_SEND;
  namebuf b = {s->what, sizeof s->what, 0};
  nb_str(&b, send ? "send to rank " : "recv from rank ");
  nb_int(&b, c->peer);
  nb_str(&b, " tag ");
  nb_int(&b, c->tag);
  s->x = (gang__xfer){.peer = p->map[c->peer],
                      .send = send,
                      .tag = (uint32_t)c->tag,
                      .ctx = p->ctx | P2P_CTX_BIT,
                      .seq = 0,
                      .buf = send ? (void *)c->in : c->out,
                      .len = c->count,
                      .owns_buf = !send};
  w->impl = s;
  GANG_CHECK(gang__fabric_start(p->w->fabric, &s->x, 1, &s->grp, s->what));
  pthread_mutex_lock(&p->mu);
  w->next = p->p2p;
  p->p2p = w;
  pthread_mutex_unlock(&p->mu);
  return GANG_OK;
}

/* A point-to-point work is done: forget it. */
static void p2p_done(pg *p, gang_work *w, gang_status st) {
  pthread_mutex_lock(&p->mu);
  for (gang_work **pp = &p->p2p; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  pthread_mutex_unlock(&p->mu);
  gang__work_complete(w, st);
}

/* ---- Backend operations ---------------------------------------------------
 */

/* The next collective's sequence number. */
static uint64_t next_seq(pg *p) {
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed) + 1;
  atomic_store_explicit(&p->seq, s, memory_order_relaxed);
  return s;
}

static gang_status pg_post(gang_t *g, const gang__coll *c, gang_work *w) {
  pg *p = g->impl;
  if (c->kind == GANG_COLL_SEND || c->kind == GANG_COLL_RECV)
    return post_p2p(g, c, w);
  w->impl = NULL;
  w->next = NULL;
  if (!w->heap && atomic_load(&p->queued) == 0 && claim_running(p)) {
    /* A blocking call with nothing queued or running runs here and now,
     * without the lock: its wait then finds it done (no deadline to
     * compute), which is most of a small collective's cost. */
    w->seq = next_seq(p);
    run_one(g, w);
    /* Sequentially consistent with the queuing side (queued, then
     * running): either a work queued meanwhile is seen here and its
     * waiters are woken, or they see running clear and run it. */
    atomic_store(&p->running, false);
    if (atomic_load(&p->queued) > 0) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->cv);
      pthread_mutex_unlock(&p->mu);
    }
    return GANG_OK;
  }
  pthread_mutex_lock(&p->mu);
  if (w->heap && !p->has_thread) {
    /* Start the worker before queuing: a work that fails to post must not
     * stay in the queue. */
    if (pthread_create(&p->thread, NULL, worker_main, g) != 0) {
      pthread_mutex_unlock(&p->mu);
      return gang__error(GANG_SYSTEM, "gang: cannot start its worker thread");
    }
    p->has_thread = true;
  }
  atomic_fetch_add(&p->queued, 1);
  w->seq = next_seq(p);
  if (p->q_tail)
    p->q_tail->next = w;
  else
    p->q_head = w;
  p->q_tail = w;
  if (w->heap)
    pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return GANG_OK;
}

static gang_status pg_wait(gang_work *w, int64_t deadline) {
  gang_t *g = w->g;
  pg *p = g->impl;
  if (w->impl != NULL) { /* point-to-point */
    p2p_state *s = w->impl;
    gang_status st =
        gang__fabric_wait(p->w->fabric, &s->grp, &s->x, 1, deadline, s->what);
    p2p_done(p, w, st);
    return st;
  }
  pthread_mutex_lock(&p->mu);
  while (!atomic_load(&w->done)) {
    if (!atomic_load(&p->running) && p->q_head != NULL && drain(g, w))
      continue;
    if (gang__deadline_passed(deadline)) {
      /* Make the running collective give up, then wait for it to say so:
       * until then it may still write into its buffers. */
      pthread_mutex_unlock(&p->mu);
      char why[160];
      snprintf(why, sizeof why,
               "%s #%" PRIu64 " on gang rank %d: the caller's deadline passed",
               gang__coll_name(w->coll.kind), w->seq, g->rank);
      gang__fabric_fail(p->w->fabric, GANG_TIMEOUT, why);
      pthread_mutex_lock(&p->mu);
      deadline = GANG_DEADLINE_NONE;
      continue;
    }
    gang__cond_wait_slice(&p->cv, &p->mu, deadline, 50000000);
  }
  pthread_mutex_unlock(&p->mu);
  return w->status;
}

static void pg_test(gang_work *w) {
  gang_t *g = w->g;
  pg *p = g->impl;
  if (w->impl != NULL) {
    p2p_state *s = w->impl;
    bool done = false;
    gang_status st = gang__fabric_test(p->w->fabric, &s->grp, s->what, &done);
    if (st != GANG_OK || done)
      p2p_done(p, w, st);
  }
  /* Queued collectives progress on the worker thread. */
}

static void pg_abort(gang_t *g) {
  pg *p = g->impl;
  char why[128];
  snprintf(why, sizeof why, "gang_abort on gang rank %d/%d", g->rank, g->size);
  gang__fabric_fail(p->w->fabric, GANG_ABORTED, why);
}

static const gang__ops pg_ops;

static const char *kind_name(int kind) {
  return gang__coll_name((gang__coll_kind)kind);
}

static uint64_t mix64(uint64_t x);

static void hier_free(hier *h) {
  if (h == NULL)
    return;
  gang__shm_chan_detach(h->local);
  free(h->leaders);
  free(h->host_of);
  free(h->local_of);
  free(h);
}

/* Plans the hierarchy of a gang whose members (world ranks map[0..size))
 * span hosts; *out stays NULL when it would not help (every member alone
 * on its host, or some host without shared memory). Local: every member
 * computes the same plan from the world's host table. */
static gang_status hier_new(world *w, const int *map, int size, int rank,
                            uint64_t ctx, hier **out) {
  *out = NULL;
  if (!w->shm_everywhere || w->hosts == NULL || size < 3)
    return GANG_OK;
  hier *h = calloc(1, sizeof *h);
  int *hid = malloc(sizeof *hid * (size_t)size); /* world host of index */
  int *local = malloc(sizeof *local * (size_t)size);
  if (h == NULL || hid == NULL || local == NULL)
    goto oom;
  h->leaders = malloc(sizeof *h->leaders * (size_t)size);
  h->host_of = malloc(sizeof *h->host_of * (size_t)size);
  h->local_of = calloc((size_t)size, sizeof *h->local_of);
  if (h->leaders == NULL || h->host_of == NULL || h->local_of == NULL)
    goto oom;
  int *count = local; /* members per host index, reused below */
  for (int i = 0; i < size; i++) {
    int wh = w->hosts[map[i]], k = 0;
    while (k < h->nhosts && hid[k] != wh)
      k++;
    if (k == h->nhosts) {
      hid[h->nhosts] = wh;
      h->leaders[h->nhosts] = map[i];
      count[h->nhosts++] = 0;
    }
    h->host_of[i] = k;
    h->local_of[i] = count[k]++;
  }
  if (h->nhosts == size || h->nhosts == 1) {
    free(hid);
    free(local);
    hier_free(h);
    return GANG_OK;
  }
  h->my_host = h->host_of[rank];
  h->leader = h->local_of[rank] == 0;
  int n = 0;
  for (int i = 0; i < size; i++)
    if (h->host_of[i] == h->my_host)
      local[n++] = map[i];
  h->ctx = mix64(ctx ^ 0x6869657261726368ull) & ~P2P_CTX_BIT;
  if (n > 1) {
    gang_status st = gang__shm_chan_attach(w->shm, h->ctx, local, n,
                                           h->local_of[rank], &h->local);
    if (st != GANG_OK) {
      free(hid);
      free(local);
      hier_free(h);
      return st;
    }
    h->local->kind_name = kind_name;
  }
  free(hid);
  free(local);
  GANG_INFO(SHM,
            "gang of %d ranks over %d hosts: hierarchical all_reduce, "
            "broadcast and barrier (%d members here%s)",
            size, h->nhosts, n, h->leader ? ", leader" : "");
  *out = h;
  return GANG_OK;
oom:
  free(hid);
  free(local);
  hier_free(h);
  return gang__error(GANG_NO_MEMORY, "gang: out of memory");
}

static gang_status pg_new(world *w, const int *map, int size, int rank,
                          uint64_t ctx, gang_device device, int64_t timeout_ms,
                          gang_t **out) {
  pg *p = calloc(1, sizeof *p);
  int *m = calloc((size_t)size, sizeof *m);
  if (p == NULL || m == NULL) {
    free(p);
    free(m);
    return gang__error(GANG_NO_MEMORY, "gang: out of memory");
  }
  memcpy(m, map, sizeof *m * (size_t)size);
  bool local = w->shm != NULL && size > 1;
  for (int i = 0; local && i < size; i++)
    local = gang__shm_local_index(w->shm, map[i]) >= 0;
  if (local) {
    gang_status st =
        gang__shm_chan_attach(w->shm, ctx, map, size, rank, &p->chan);
    if (st != GANG_OK) {
      free(p);
      free(m);
      return st;
    }
    p->chan->kind_name = kind_name;
  } else if (size > 1) {
    gang_status st = hier_new(w, map, size, rank, ctx, &p->hier);
    if (st != GANG_OK) {
      free(p);
      free(m);
      return st;
    }
  }
  p->w = w;
  p->map = m;
  p->ctx = ctx;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  gang_status st = gang__new(&pg_ops, p, rank, size, device, timeout_ms, out);
  if (st != GANG_OK) {
    gang__shm_chan_detach(p->chan);
    hier_free(p->hier);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(m);
    free(p);
    return st;
  }
  pthread_mutex_lock(&w->mu);
  w->refs++;
  pthread_mutex_unlock(&w->mu);
  return GANG_OK;
}

/* A 64-bit mix (splitmix64's finaliser) for deriving context ids. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static gang_status pg_subgang(gang_t *g, const int *ranks, int n, int index,
                              gang_t **out) {
  pg *p = g->impl;
  pthread_mutex_lock(&p->mu);
  uint64_t k = ++p->subgangs;
  pthread_mutex_unlock(&p->mu);
  if (index < 0) {
    *out = NULL;
    return GANG_OK;
  }
  int *map = malloc(sizeof *map * (size_t)n);
  if (map == NULL)
    return gang__error(GANG_NO_MEMORY, "gang: out of memory");
  for (int i = 0; i < n; i++)
    map[i] = p->map[ranks[i]];
  uint64_t ctx = mix64(p->ctx ^ mix64(k)) & ~P2P_CTX_BIT;
  gang_status st =
      pg_new(p->w, map, n, index, ctx, g->device, g->timeout_ms, out);
  free(map);
  if (st == GANG_OK)
    (*out)->check = g->check;
  return st;
}

static void pg_destroy(gang_t *g) {
  pg *p = g->impl;
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  bool joined = p->has_thread;
  pthread_mutex_unlock(&p->mu);
  if (joined)
    pthread_join(p->thread, NULL);
  /* Collectives nobody waited for fail: their buffers are the caller's. */
  for (gang_work *w = p->q_head, *next; w; w = next) {
    next = w->next;
    gang__error(GANG_ABORTED, "gang destroyed before its %s ran",
                gang__coll_name(w->coll.kind));
    gang__work_complete(w, GANG_ABORTED);
  }
  /* Point-to-point works are withdrawn from the fabric, which outlives
   * this gang when siblings share the world. */
  for (gang_work *w = p->p2p, *next; w; w = next) {
    next = w->next;
    p2p_state *s = w->impl;
    gang__error(GANG_ABORTED, "gang destroyed before its %s completed",
                s->what);
    gang__fabric_cancel(p->w->fabric, &s->x, 1, gang_last_error());
    gang__work_complete(w, GANG_ABORTED);
  }
  gang__shm_chan_detach(p->chan);
  hier_free(p->hier);
  world_release(p->w);
  free(p->scratch[0]);
  free(p->scratch[1]);
  free(p->map);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static const gang__ops pg_ops = {
    .name = "pg",
    .simulated = false,
    .post = pg_post,
    .wait = pg_wait,
    .test = pg_test,
    .subgang = pg_subgang,
    .abort = pg_abort,
    .destroy = pg_destroy,
};

struct gang__fabric *gang__pg_fabric(gang_t *g) {
  if (g == NULL || g->ops != &pg_ops)
    return NULL;
  return ((pg *)g->impl)->w->fabric;
}

/* ---- Creation
 * ---------------------------------------------------------------- */

/* A field of the caller's options, or `def` when the caller's struct is
 * too old (smaller) to have it or there are no options. */
#define OPT(o, field, def)                                                     \
  ((o) != NULL &&                                                              \
           (o)->size >= offsetof(gang_options, field) + sizeof((o)->field)     \
       ? (o)->field                                                            \
       : (def))

/* The local address peers can reach this rank at: the one the kernel would
 * use to reach the store's host (a UDP "connect" sends nothing). Loopback
 * stays loopback. */
static void local_addr_toward(const char *store_addr, char *out, size_t cap) {
  snprintf(out, cap, "127.0.0.1");
  char host[256];
  const char *p = store_addr;
  if (strncmp(p, "tcp://", 6) == 0)
    p += 6;
  const char *end = *p == '[' ? strchr(p, ']') : strrchr(p, ':');
  if (end == NULL || (size_t)(end - p) >= sizeof host)
    return;
  if (*p == '[')
    p++;
  memcpy(host, p, (size_t)(end - p));
  host[end - p] = '\0';
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
  if (getaddrinfo(host, "9", &hints, &res) != 0 || res == NULL)
    return;
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    const void *a =
        ss.ss_family == AF_INET
            ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
            : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    char buf[INET6_ADDRSTRLEN];
    if (inet_ntop(ss.ss_family, a, buf, sizeof buf) != NULL)
      snprintf(out, cap, "%s", buf);
  }
  if (fd >= 0)
    close(fd);
  freeaddrinfo(res);
}

/* Parses GANG_ALGO ("all_reduce=ring,..."). */
static gang_status parse_algo(world *w) {
  const char *text = gang__setting_str(GANG_SETTING_ALGO);
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  char *save = NULL;
  for (char *item = strtok_r(buf, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    if (eq == NULL)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO: '%s' is not op=algorithm", item);
    *eq = '\0';
    const char *algo = eq + 1;
    if (strcmp(item, "all_reduce") != 0)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO: no algorithm choice for '%s' (only "
                         "all_reduce has one)",
                         item);
    if (strcmp(algo, "ring") == 0)
      w->allreduce = AR_RING;
    else if (strcmp(algo, "recursive_doubling") == 0)
      w->allreduce = AR_RD;
    else if (strcmp(algo, "auto") == 0)
      w->allreduce = AR_AUTO;
    else
      return gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO: all_reduce has no algorithm '%s' (ring, "
                         "recursive_doubling, auto)",
                         algo);
  }
  return GANG_OK;
}

static gang_status create(const gang_options *opts, const char *store_addr,
                          int rank, int size, gang_store_server *server,
                          gang_t **out) {
  gang_device cpu = {GANG_DEVICE_CPU, 0};
  gang_device dev = OPT(opts, device, cpu);
  if (dev.type != GANG_DEVICE_CPU) {
    gang_store_server_stop(server);
    return gang__error(GANG_NOT_SUPPORTED,
                       "gang: only CPU gangs move data (device type %d)",
                       (int)dev.type);
  }
  int64_t timeout_ms = OPT(opts, timeout_ms, 0);
  if (timeout_ms == 0) {
    gang_status st = gang__setting_int(GANG_SETTING_TIMEOUT, &timeout_ms);
    if (st != GANG_OK) {
      gang_store_server_stop(server);
      return st;
    }
  }
  world *w = calloc(1, sizeof *w);
  if (w == NULL) {
    gang_store_server_stop(server);
    return gang__error(GANG_NO_MEMORY, "gang: out of memory");
  }
  pthread_mutex_init(&w->mu, NULL);
  w->refs = 1; /* the creation's own reference, dropped below */
  w->server = server;
  gang_status st;
  GANG_CHECK_GOTO(parse_algo(w), st, fail);
  char host[INET6_ADDRSTRLEN] = "127.0.0.1";
  if (size > 1) {
    gang_store_options so = GANG_STORE_OPTIONS_INIT;
    so.timeout_ms = timeout_ms;
    GANG_CHECK_GOTO(gang_store_connect(store_addr, &so, &w->store), st, fail);
    const char *want = OPT(opts, host, NULL);
    if (want != NULL)
      snprintf(host, sizeof host, "%s", want);
    else
      local_addr_toward(store_addr, host, sizeof host);
    /* GANG_SOCKET_IFNAME narrows the choice to named interfaces; the
     * default route's address still wins when it is on one of them. */
    const char *ifspec = gang__setting_str(GANG_SETTING_SOCKET_IFNAME);
    if (want == NULL && *ifspec != '\0') {
      char route[sizeof host];
      snprintf(route, sizeof route, "%s", host);
      GANG_CHECK_GOTO(
          gang__ifname_addr(ifspec, route, host, sizeof host, NULL, 0), st,
          fail);
    }
  }
  gang__fabric_config cfg = {rank, size, w->store, host,
                             gang__deadline_in_ms(timeout_ms)};
  GANG_CHECK_GOTO(gang__fabric_create(&cfg, &w->fabric), st, fail);
  if (size > 1) {
    w->hosts = malloc(sizeof *w->hosts * (size_t)size);
    if (w->hosts == NULL) {
      st = gang__error(GANG_NO_MEMORY, "gang: out of memory");
      goto fail;
    }
    GANG_CHECK_GOTO(gang__shm_create(w->store, rank, size, w->fabric,
                                     cfg.deadline, w->hosts, &w->shm,
                                     &w->shm_everywhere),
                    st, fail);
    int local = 0;
    for (int i = 0; i < size; i++)
      local += w->hosts[i] == w->hosts[rank];
    if (local > gang__cpus_available())
      gang__fabric_set_oversubscribed(w->fabric);
  }
  /* After setup the store only serves timeout diagnoses, which must not
   * wait longer than their own budget (at most 1 s) on a lost store. */
  if (w->store != NULL)
    gang_store_set_timeout(w->store, 2000);
  int *map = malloc(sizeof *map * (size_t)size);
  if (map == NULL) {
    st = gang__error(GANG_NO_MEMORY, "gang: out of memory");
    goto fail;
  }
  for (int i = 0; i < size; i++)
    map[i] = i;
  st = pg_new(w, map, size, rank, 1, dev, timeout_ms, out);
  free(map);
  if (st != GANG_OK)
    goto fail;
  if (OPT(opts, check, 0) != 0)
    (*out)->check = OPT(opts, check, 0) > 0;
  gang__log_set_rank(rank);
  GANG_INFO(INIT, "gang rank %d/%d ready (store %s, listening on %s)", rank,
            size, size > 1 ? store_addr : "none", host);
  world_release(w); /* the gang holds its own reference now */
  return GANG_OK;
fail:
  world_release(w);
  return st;
}

gang_status gang_create_with_store(const gang_options *opts,
                                   const char *store_addr, int rank, int size,
                                   gang_t **out) {
  const char *fn = "gang_create_with_store";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(store_addr != NULL && *store_addr, fn, "store_addr is empty");
  GANG_ARG_CHECK(size >= 1, fn, "size must be at least 1, but is %d", size);
  GANG_ARG_CHECK(rank >= 0 && rank < size, fn,
                 "rank must be in [0, %d), but is %d", size, rank);
  return create(opts, store_addr, rank, size, NULL, out);
}

/* Without a launcher that hosts the store (gangrun sets GANG_STORE_ADDR),
 * rank 0 hosts it at master_addr:master_port, as torch's rank 0 does. */
static gang_status host_store(const gang_world_info *info,
                              gang_store_server **out) {
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  so.host = info->master_addr[0] ? info->master_addr : "127.0.0.1";
  so.port = info->master_port;
  gang_status st = gang_store_server_start(&so, out);
  if (st != GANG_OK)
    return gang__error_wrap(st,
                            "rank 0 hosting the store at %s:%d (run under "
                            "gangrun, or set GANG_STORE_ADDR to a running "
                            "gang-store)",
                            so.host, so.port);
  return GANG_OK;
}

gang_status gang_create_default(const gang_options *opts, gang_t **out) {
  const char *fn = "gang_create_default";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  gang_world_info info = GANG_WORLD_INFO_INIT;
  GANG_CHECK(gang_world_info_from_env(&info));
  const char *given = OPT(opts, store_addr, NULL);
  const char *base = given ? given : info.store_addr;
  if (info.world_size > 1 && base[0] == '\0')
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: world of %d ranks (from %s) but no rendezvous "
                       "address: set MASTER_ADDR and MASTER_PORT or "
                       "GANG_STORE_ADDR",
                       fn, info.world_size,
                       gang_world_source_name(info.source));
  gang_store_server *server = NULL;
  if (info.world_size > 1 && info.rank == 0 &&
      getenv("GANG_STORE_ADDR") == NULL && given == NULL &&
      strncmp(base, "file://", 7) != 0) {
    if (info.master_port == 0)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s: rank 0 must host the store but MASTER_PORT is "
                         "not set",
                         fn);
    GANG_CHECK(host_store(&info, &server));
  }
  /* Each run and each restart of it gets its own namespace, so keys of an
   * earlier attempt cannot satisfy this one's waits. */
  char addr[GANG_WORLD_URL_MAX + 200];
  snprintf(addr, sizeof addr, "%s/gang/%s/%d", base,
           info.run_id[0] ? info.run_id : "run", info.restart_count);
  return create(opts, addr, info.rank, info.world_size, server, out);
}
