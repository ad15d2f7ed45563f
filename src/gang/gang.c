/* The public gang API: argument checks at the boundary, sticky errors,
 * blocking calls as post + wait on a work that lives on the caller's stack
 * (so a blocking collective allocates nothing), and split, built on the
 * backend's collectives. Variable-size payloads are bytes.c's. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/reduce.h"
#include "gang_impl.h"

static const char *const coll_names[GANG_COLL_KIND_COUNT] = {
    [GANG_COLL_BARRIER] = "barrier",
    [GANG_COLL_ALL_REDUCE] = "all_reduce",
    [GANG_COLL_BROADCAST] = "broadcast",
    [GANG_COLL_ALL_GATHER] = "all_gather",
    [GANG_COLL_ALL_GATHER_LIST] = "all_gather_to_list",
    [GANG_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [GANG_COLL_ALL_TO_ALL] = "all_to_all",
    [GANG_COLL_ALL_TO_ALL_V] = "all_to_all_v",
    [GANG_COLL_SEND] = "send",
    [GANG_COLL_RECV] = "recv"};

const char *gang__coll_name(gang__coll_kind kind) {
  return (unsigned)kind < GANG_COLL_KIND_COUNT ? coll_names[kind] : "invalid";
}

gang_status gang__new(const gang__ops *ops, void *impl, int rank, int size,
                      gang_device device, int64_t timeout_ms, gang_t **out) {
  if (timeout_ms == 0)
    GANG_CHECK(gang__setting_int(GANG_SETTING_TIMEOUT, &timeout_ms));
  gang_t *g = calloc(1, sizeof *g);
  if (g == NULL)
    return gang__error(GANG_NO_MEMORY, "gang: cannot allocate a handle");
  g->ops = ops;
  g->impl = impl;
  g->rank = rank;
  g->size = size;
  g->device = device;
  g->timeout_ms = timeout_ms;
  int64_t check = 0;
  if (gang__setting_int(GANG_SETTING_CHECK, &check) != GANG_OK) {
    free(g);
    return gang_last_status();
  }
  g->check = check != 0;
  atomic_init(&g->broken, GANG_OK);
  pthread_mutex_init(&g->mu, NULL);
  *out = g;
  return GANG_OK;
}

void gang__set_shape(gang_t *g, int rank, int size) {
  pthread_mutex_lock(&g->mu);
  g->rank = rank;
  g->size = size;
  pthread_mutex_unlock(&g->mu);
}

gang_status gang__fail(gang_t *g, gang_status st) {
  int expected = GANG_OK;
  pthread_mutex_lock(&g->mu);
  if (atomic_compare_exchange_strong(&g->broken, &expected, (int)st))
    snprintf(g->error, sizeof g->error, "%s", gang_last_error());
  pthread_mutex_unlock(&g->mu);
  return (gang_status)atomic_load(&g->broken);
}

static void finish(gang_work *w, gang_status st) {
  if (st != GANG_OK)
    snprintf(w->detail, sizeof w->detail, "%s", gang_last_error());
  w->status = st;
  atomic_store_explicit(&w->done, 1, memory_order_release);
}

void gang__work_reject(gang_work *w, gang_status st) { finish(w, st); }

void gang__work_complete(gang_work *w, gang_status st) {
  if (st != GANG_OK)
    gang__fail(w->g, st);
  finish(w, st);
}

/* Breaks g and tells the peers, with this thread's last error as the
 * reason. */
static void abort_with_last_error(gang_t *g) {
  gang__fail(g, GANG_ABORTED);
  if (g->ops->abort != NULL)
    g->ops->abort(g);
}

void gang_abort(gang_t *g) {
  if (g == NULL)
    return;
  gang__error(GANG_ABORTED, "gang rank %d/%d: aborted by gang_abort", g->rank,
              g->size);
  abort_with_last_error(g);
}

void gang_destroy(gang_t *g) {
  if (g == NULL)
    return;
  if (g->ops != NULL && g->ops->destroy != NULL)
    g->ops->destroy(g);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

int gang_rank(const gang_t *g) { return g ? g->rank : -1; }
int gang_size(const gang_t *g) { return g ? g->size : 0; }

gang_device gang_get_device(const gang_t *g) {
  gang_device none = {GANG_DEVICE_CPU, -1};
  return g ? g->device : none;
}

const char *gang_get_last_error(const gang_t *g) {
  if (g == NULL || atomic_load(&g->broken) == GANG_OK)
    return "";
  return g->error;
}

const char *gang_last_algorithm(const gang_t *g) {
  return g != NULL && g->ops->last_algo != NULL ? g->ops->last_algo(g) : NULL;
}

/* ---- Validation ---------------------------------------------------------- */

static gang_status check_broken(gang_t *g, const char *fn) {
  int st = atomic_load_explicit(&g->broken, memory_order_acquire);
  if (st == GANG_OK)
    return GANG_OK;
  /* Copy under the lock: another thread may be writing the first error. */
  char detail[sizeof g->error];
  pthread_mutex_lock(&g->mu);
  memcpy(detail, g->error, sizeof detail);
  pthread_mutex_unlock(&g->mu);
  return gang__error((gang_status)st, "%s: the gang failed earlier: %s", fn,
                     detail);
}

/* Bytes of `count` elements of `dtype` times `mult`, or an error naming fn
 * when that does not fit in size_t. */
static gang_status checked_bytes(const char *fn, size_t count, gang_dtype dtype,
                                 size_t mult, size_t *bytes) {
  size_t es = gang_dtype_size(dtype);
  if (es == 0)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: dtype %d is not a gang_dtype", fn, (int)dtype);
  /* Multiplications that report overflow, not the divisions a bound would
   * take: this runs on every call. */
  size_t per;
  if (__builtin_mul_overflow(count, es, &per) ||
      __builtin_mul_overflow(per, mult, bytes))
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: count %zu x %zu ranks overflows the address space",
                       fn, count, mult);
  return GANG_OK;
}

gang_status gang__check_rank_arg(const char *fn, const char *what, int r,
                                 const gang_t *g) {
  if (r < 0 || r >= g->size)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: %s %d is not a rank of this gang (size %d)", fn,
                       what, r, g->size);
  return GANG_OK;
}

static gang_status validate(gang_t *g, const gang__coll *c, const char *fn) {
  size_t bytes = 0;
  size_t n = (size_t)g->size;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
    return GANG_OK;
  case GANG_COLL_ALL_REDUCE:
    GANG_CHECK(checked_bytes(fn, c->count, c->dtype, 1, &bytes));
    GANG_CHECK(gang__reduce_check(c->dtype, c->op));
    GANG_ARG_CHECK(c->out != NULL || bytes == 0, fn,
                   "buf is NULL with count %zu", c->count);
    return GANG_OK;
  case GANG_COLL_BROADCAST:
    GANG_CHECK(checked_bytes(fn, c->count, c->dtype, 1, &bytes));
    GANG_ARG_CHECK(c->out != NULL || bytes == 0, fn,
                   "buf is NULL with count %zu", c->count);
    return gang__check_rank_arg(fn, "source_rank", c->root, g);
  case GANG_COLL_ALL_GATHER:
    GANG_CHECK(checked_bytes(fn, c->count, c->dtype, n, &bytes));
    GANG_ARG_CHECK((c->out != NULL && c->in != NULL) || bytes == 0, fn,
                   "out or in is NULL with count %zu", c->count);
    return GANG_OK;
  case GANG_COLL_ALL_GATHER_LIST:
    GANG_CHECK(checked_bytes(fn, c->count, c->dtype, 1, &bytes));
    GANG_ARG_CHECK(c->outs != NULL, fn, "outs is NULL");
    for (int i = 0; i < g->size && bytes != 0; i++)
      GANG_ARG_CHECK(c->outs[i] != NULL, fn, "outs[%d] is NULL", i);
    GANG_ARG_CHECK(c->in != NULL || bytes == 0, fn, "in is NULL with count %zu",
                   c->count);
    return GANG_OK;
  case GANG_COLL_REDUCE_SCATTER:
    GANG_CHECK(checked_bytes(fn, c->count, c->dtype, n, &bytes));
    GANG_CHECK(gang__reduce_check(c->dtype, c->op));
    GANG_ARG_CHECK((c->out != NULL && c->in != NULL) || bytes == 0, fn,
                   "out or in is NULL with count_per_rank %zu", c->count);
    return GANG_OK;
  case GANG_COLL_ALL_TO_ALL:
    GANG_CHECK(checked_bytes(fn, c->count, c->dtype, n, &bytes));
    GANG_ARG_CHECK((c->out != NULL && c->in != NULL) || bytes == 0, fn,
                   "out or in is NULL with count_per_rank %zu", c->count);
    GANG_ARG_CHECK(c->out != c->in || bytes == 0, fn,
                   "out and in must not be the same buffer");
    return GANG_OK;
  case GANG_COLL_ALL_TO_ALL_V: {
    GANG_CHECK(checked_bytes(fn, 1, c->dtype, 1, &bytes));
    GANG_ARG_CHECK(c->in_counts != NULL && c->out_counts != NULL, fn,
                   "in_counts or out_counts is NULL");
    size_t tin = 0, tout = 0;
    for (int i = 0; i < g->size; i++) {
      GANG_ARG_CHECK(c->in_counts[i] <= SIZE_MAX / bytes - tin &&
                         c->out_counts[i] <= SIZE_MAX / bytes - tout,
                     fn, "counts overflow the address space at rank %d", i);
      tin += c->in_counts[i];
      tout += c->out_counts[i];
    }
    GANG_ARG_CHECK(c->in != NULL || tin == 0, fn,
                   "in is NULL with %zu elements to send", tin);
    GANG_ARG_CHECK(c->out != NULL || tout == 0, fn,
                   "out is NULL with %zu elements to receive", tout);
    GANG_ARG_CHECK(c->out != c->in || tin + tout == 0, fn,
                   "out and in must not be the same buffer");
    return GANG_OK;
  }
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
    GANG_ARG_CHECK(c->out != NULL || c->in != NULL || c->count == 0, fn,
                   "buf is NULL with %zu bytes", c->count);
    GANG_ARG_CHECK(c->tag >= 0, fn, "tag %d is negative", c->tag);
    GANG_CHECK(gang__check_rank_arg(fn, "peer", c->peer, g));
    GANG_ARG_CHECK(c->peer != g->rank, fn, "peer %d is this rank", c->peer);
    return GANG_OK;
  case GANG_COLL_KIND_COUNT:
    break;
  }
  return gang__error(GANG_INTERNAL, "%s: unknown collective kind %d", fn,
                     (int)c->kind);
}

/* ---- Post, wait, test ---------------------------------------------------- */

static gang_status post_ex(gang_t *g, const gang__coll *c, gang_work *w,
                           bool heap, bool check, const char *fn);
static gang_status wait_work(gang_work *w, int64_t timeout_ms);

/* The signature of a collective: what every rank must agree on. */
enum { SIG_KIND, SIG_COUNT, SIG_DTYPE, SIG_OP, SIG_ROOT, SIG_SEQ, SIG_N };

static void describe_sig(const uint64_t *s, char *buf, size_t cap) {
  int n =
      snprintf(buf, cap, "%s #%llu count %llu %s",
               gang__coll_name((gang__coll_kind)s[SIG_KIND]),
               (unsigned long long)s[SIG_SEQ], (unsigned long long)s[SIG_COUNT],
               gang_dtype_name((gang_dtype)s[SIG_DTYPE]));
  if (n < 0 || (size_t)n >= cap)
    return;
  if (s[SIG_KIND] == GANG_COLL_ALL_REDUCE ||
      s[SIG_KIND] == GANG_COLL_REDUCE_SCATTER)
    snprintf(buf + n, cap - (size_t)n, " %s",
             gang_reduce_op_name((gang_reduce_op)s[SIG_OP]));
  else if (s[SIG_KIND] == GANG_COLL_BROADCAST)
    snprintf(buf + n, cap - (size_t)n, " root %llu",
             (unsigned long long)s[SIG_ROOT]);
}

/* With the check on, ranks all_gather the signature of the collective they
 * are about to run and compare: a disagreement becomes GANG_MISMATCH that
 * names the ranks and both signatures, instead of a hang or a size error
 * deep in an algorithm. */
static gang_status check_signature(gang_t *g, const gang__coll *c,
                                   const char *fn) {
  uint64_t mine[SIG_N] = {
      (uint64_t)c->kind,
      c->count,
      (uint64_t)c->dtype,
      (c->kind == GANG_COLL_ALL_REDUCE || c->kind == GANG_COLL_REDUCE_SCATTER)
          ? (uint64_t)c->op
          : 0,
      c->kind == GANG_COLL_BROADCAST ? (uint64_t)c->root : 0,
      g->ncoll};
  size_t n = (size_t)g->size;
  uint64_t *all = malloc(n * sizeof mine);
  if (all == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: signature check: out of memory",
                       fn);
  gang__coll ag = {.kind = GANG_COLL_ALL_GATHER,
                   .out = all,
                   .in = mine,
                   .count = SIG_N,
                   .dtype = GANG_UINT64};
  gang_work w;
  /* The check's own all_gather is not checked. */
  gang_status st = post_ex(g, &ag, &w, false, false, fn);
  if (st == GANG_OK)
    st = wait_work(&w, -1);
  if (st != GANG_OK) {
    free(all);
    return st;
  }
  for (size_t r = 0; r < n; r++) {
    if (memcmp(all + r * SIG_N, mine, sizeof mine) == 0)
      continue;
    char a[160], b[160];
    describe_sig(mine, a, sizeof a);
    describe_sig(all + r * SIG_N, b, sizeof b);
    st = gang__error(GANG_MISMATCH,
                     "%s: ranks disagree on the collective: rank %d calls %s, "
                     "rank %zu calls %s",
                     fn, g->rank, a, r, b);
    free(all);
    return gang__fail(g, st);
  }
  free(all);
  return GANG_OK;
}

static gang_status post_ex(gang_t *g, const gang__coll *c, gang_work *w,
                           bool heap, bool check, const char *fn) {
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_CHECK(check_broken(g, fn));
  GANG_CHECK(validate(g, c, fn));
  if (c->kind != GANG_COLL_SEND && c->kind != GANG_COLL_RECV) {
    if (check)
      GANG_CHECK(check_signature(g, c, fn));
    g->ncoll++;
  }
  /* Every field but the detail text, which only a failure writes, one by
   * one: a memset of the head measured 0.01 us slower per small call. */
  w->g = g;
  atomic_init(&w->done, 0);
  w->status = GANG_OK;
  w->heap = heap;
  atomic_init(&w->short_wait, false);
  w->coll = *c;
  w->detail[0] = '\0';
  w->impl = NULL;
  w->seq = 0;
  w->link.tqe_next = NULL;
  w->link.tqe_prev = NULL;
  gang_status st = g->ops->post(g, c, w);
  if (st != GANG_OK)
    return gang__fail(g, st);
  return GANG_OK;
}

static gang_status post(gang_t *g, const gang__coll *c, gang_work *w, bool heap,
                        const char *fn) {
  return post_ex(g, c, w, heap, g != NULL && g->check, fn);
}

static gang_status wait_work(gang_work *w, int64_t timeout_ms) {
  gang_t *g = w->g;
  if (!atomic_load_explicit(&w->done, memory_order_acquire)) {
    int64_t deadline =
        gang__deadline_in_ms(timeout_ms < 0 ? g->timeout_ms : timeout_ms);
    atomic_store_explicit(&w->short_wait,
                          timeout_ms >= 0 && timeout_ms < g->timeout_ms,
                          memory_order_relaxed);
    gang_status st = g->ops->wait ? g->ops->wait(w, deadline)
                                  : gang__error(GANG_INTERNAL,
                                                "%s gang left work incomplete",
                                                g->ops->name);
    if (st != GANG_OK && !atomic_load(&w->done)) {
      /* A timed-out collective leaves buffers the peers may still write:
       * the gang cannot be trusted any more. */
      gang__fail(g, st);
      return st;
    }
  }
  if (w->status != GANG_OK)
    return gang__error(w->status, "%s", w->detail);
  return GANG_OK;
}

static gang_status run(gang_t *g, const gang__coll *c, const char *fn) {
  gang_work w;
  GANG_CHECK(post(g, c, &w, false, fn));
  return wait_work(&w, -1);
}

static gang_status post_heap(gang_t *g, const gang__coll *c, gang_work **out,
                             const char *fn) {
  GANG_ARG_CHECK(out != NULL, fn, "w is NULL");
  gang_work *w = malloc(sizeof *w);
  if (w == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: cannot allocate a work", fn);
  gang_status st = post(g, c, w, true, fn);
  if (st != GANG_OK) {
    free(w);
    return st;
  }
  *out = w;
  return GANG_OK;
}

gang_status gang__post_coll(gang_t *g, const gang__coll *c, gang_work **out) {
  return post_heap(g, c, out, gang__coll_name(c->kind));
}

gang_status gang_work_wait(gang_work *w, int64_t timeout_ms) {
  GANG_ARG_CHECK(w != NULL, "gang_work_wait", "w is NULL");
  return wait_work(w, timeout_ms);
}

gang_status gang_work_test(gang_work *w, int *done) {
  GANG_ARG_CHECK(w != NULL && done != NULL, "gang_work_test",
                 "w or done is NULL");
  if (!atomic_load_explicit(&w->done, memory_order_acquire) &&
      w->g->ops->test != NULL)
    w->g->ops->test(w);
  *done = atomic_load_explicit(&w->done, memory_order_acquire);
  if (*done && w->status != GANG_OK)
    return gang__error(w->status, "%s", w->detail);
  return GANG_OK;
}

void gang_work_free(gang_work *w) {
  if (w == NULL)
    return;
  if (!atomic_load(&w->done)) {
    /* Its buffers would be written after the caller stopped caring. */
    gang__error(GANG_ABORTED,
                "gang rank %d/%d: %s #%" PRIu64 " freed before it completed",
                w->g->rank, w->g->size, gang__coll_name(w->coll.kind), w->seq);
    abort_with_last_error(w->g);
    if (w->g->ops->wait != NULL)
      w->g->ops->wait(w, GANG_DEADLINE_NONE);
  }
  if (w->heap)
    free(w);
}

/* ---- Collectives -----------------------------------------------------------
 */

#define COLL(...) ((gang__coll){__VA_ARGS__})

gang_status gang_barrier(gang_t *g) {
  return run(g, &COLL(.kind = GANG_COLL_BARRIER), "gang_barrier");
}
gang_status gang_barrier_post(gang_t *g, gang_work **w) {
  return post_heap(g, &COLL(.kind = GANG_COLL_BARRIER), w, "gang_barrier_post");
}

#define AR(b_, n_, t_, o_)                                                     \
  COLL(.kind = GANG_COLL_ALL_REDUCE, .out = (b_), .count = (n_),               \
       .dtype = (t_), .op = (o_))
gang_status gang_all_reduce(gang_t *g, void *buf, size_t count,
                            gang_dtype dtype, gang_reduce_op op) {
  return run(g, &AR(buf, count, dtype, op), "gang_all_reduce");
}
gang_status gang_all_reduce_post(gang_t *g, void *buf, size_t count,
                                 gang_dtype dtype, gang_reduce_op op,
                                 gang_work **w) {
  return post_heap(g, &AR(buf, count, dtype, op), w, "gang_all_reduce_post");
}

#define BC(b_, n_, t_, r_)                                                     \
  COLL(.kind = GANG_COLL_BROADCAST, .out = (b_), .count = (n_), .dtype = (t_), \
       .root = (r_))
gang_status gang_broadcast(gang_t *g, void *buf, size_t count, gang_dtype dtype,
                           int source_rank) {
  return run(g, &BC(buf, count, dtype, source_rank), "gang_broadcast");
}
gang_status gang_broadcast_post(gang_t *g, void *buf, size_t count,
                                gang_dtype dtype, int source_rank,
                                gang_work **w) {
  return post_heap(g, &BC(buf, count, dtype, source_rank), w,
                   "gang_broadcast_post");
}

#define AG(o_, i_, n_, t_)                                                     \
  COLL(.kind = GANG_COLL_ALL_GATHER, .out = (o_), .in = (i_), .count = (n_),   \
       .dtype = (t_))
gang_status gang_all_gather(gang_t *g, void *out, const void *in, size_t count,
                            gang_dtype dtype) {
  return run(g, &AG(out, in, count, dtype), "gang_all_gather");
}
gang_status gang_all_gather_post(gang_t *g, void *out, const void *in,
                                 size_t count, gang_dtype dtype,
                                 gang_work **w) {
  return post_heap(g, &AG(out, in, count, dtype), w, "gang_all_gather_post");
}

#define AGL(o_, i_, n_, t_)                                                    \
  COLL(.kind = GANG_COLL_ALL_GATHER_LIST, .outs = (o_), .in = (i_),            \
       .count = (n_), .dtype = (t_))
gang_status gang_all_gather_to_list(gang_t *g, void *const *outs,
                                    const void *in, size_t count,
                                    gang_dtype dtype) {
  return run(g, &AGL(outs, in, count, dtype), "gang_all_gather_to_list");
}
gang_status gang_all_gather_to_list_post(gang_t *g, void *const *outs,
                                         const void *in, size_t count,
                                         gang_dtype dtype, gang_work **w) {
  return post_heap(g, &AGL(outs, in, count, dtype), w,
                   "gang_all_gather_to_list_post");
}

#define RS(o_, i_, n_, t_, op_)                                                \
  COLL(.kind = GANG_COLL_REDUCE_SCATTER, .out = (o_), .in = (i_),              \
       .count = (n_), .dtype = (t_), .op = (op_))
gang_status gang_reduce_scatter(gang_t *g, void *out, const void *in,
                                size_t count_per_rank, gang_dtype dtype,
                                gang_reduce_op op) {
  return run(g, &RS(out, in, count_per_rank, dtype, op), "gang_reduce_scatter");
}
gang_status gang_reduce_scatter_post(gang_t *g, void *out, const void *in,
                                     size_t count_per_rank, gang_dtype dtype,
                                     gang_reduce_op op, gang_work **w) {
  return post_heap(g, &RS(out, in, count_per_rank, dtype, op), w,
                   "gang_reduce_scatter_post");
}

#define A2A(o_, i_, n_, t_)                                                    \
  COLL(.kind = GANG_COLL_ALL_TO_ALL, .out = (o_), .in = (i_), .count = (n_),   \
       .dtype = (t_))
gang_status gang_all_to_all(gang_t *g, void *out, const void *in,
                            size_t count_per_rank, gang_dtype dtype) {
  return run(g, &A2A(out, in, count_per_rank, dtype), "gang_all_to_all");
}
gang_status gang_all_to_all_post(gang_t *g, void *out, const void *in,
                                 size_t count_per_rank, gang_dtype dtype,
                                 gang_work **w) {
  return post_heap(g, &A2A(out, in, count_per_rank, dtype), w,
                   "gang_all_to_all_post");
}

#define A2AV(o_, oc_, i_, ic_, t_)                                             \
  COLL(.kind = GANG_COLL_ALL_TO_ALL_V, .out = (o_), .out_counts = (oc_),       \
       .in = (i_), .in_counts = (ic_), .dtype = (t_))
gang_status gang_all_to_all_v(gang_t *g, void *out, const size_t *out_counts,
                              const void *in, const size_t *in_counts,
                              gang_dtype dtype) {
  return run(g, &A2AV(out, out_counts, in, in_counts, dtype),
             "gang_all_to_all_v");
}
gang_status gang_all_to_all_v_post(gang_t *g, void *out,
                                   const size_t *out_counts, const void *in,
                                   const size_t *in_counts, gang_dtype dtype,
                                   gang_work **w) {
  return post_heap(g, &A2AV(out, out_counts, in, in_counts, dtype), w,
                   "gang_all_to_all_v_post");
}

#define SEND(b_, n_, p_, t_)                                                   \
  COLL(.kind = GANG_COLL_SEND, .in = (b_), .count = (n_), .dtype = GANG_UINT8, \
       .peer = (p_), .tag = (t_))
#define RECV(b_, n_, p_, t_)                                                   \
  COLL(.kind = GANG_COLL_RECV, .out = (b_), .count = (n_),                     \
       .dtype = GANG_UINT8, .peer = (p_), .tag = (t_))
gang_status gang_send(gang_t *g, const void *buf, size_t bytes, int peer,
                      int tag) {
  return run(g, &SEND(buf, bytes, peer, tag), "gang_send");
}
gang_status gang_send_post(gang_t *g, const void *buf, size_t bytes, int peer,
                           int tag, gang_work **w) {
  return post_heap(g, &SEND(buf, bytes, peer, tag), w, "gang_send_post");
}
gang_status gang_recv(gang_t *g, void *buf, size_t bytes, int peer, int tag) {
  return run(g, &RECV(buf, bytes, peer, tag), "gang_recv");
}
gang_status gang_recv_post(gang_t *g, void *buf, size_t bytes, int peer,
                           int tag, gang_work **w) {
  return post_heap(g, &RECV(buf, bytes, peer, tag), w, "gang_recv_post");
}

/* ---- Sub-gangs ----------------------------------------------------------- */

gang_status gang_create_subgang(gang_t *g, const int *ranks, int n,
                                gang_t **out) {
  const char *fn = "gang_create_subgang";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(ranks != NULL && n > 0, fn, "ranks is empty (n = %d)", n);
  GANG_ARG_CHECK(n <= g->size, fn, "%d ranks listed but the gang has %d", n,
                 g->size);
  GANG_CHECK(check_broken(g, fn));
  int index = -1;
  for (int i = 0; i < n; i++) {
    /* fairseq2 accepts ranks[i] == size (an off-by-one); we do not. */
    if (ranks[i] < 0 || ranks[i] >= g->size)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s: ranks[%d] = %d is not in [0, %d)", fn, i,
                         ranks[i], g->size);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return gang__error(GANG_INVALID_ARGUMENT,
                           "%s: rank %d is listed twice (at %d and %d)", fn,
                           ranks[i], j, i);
    if (ranks[i] == g->rank)
      index = i;
  }
  gang_t *sub = NULL;
  gang_status st = g->ops->subgang(g, ranks, n, index, &sub);
  if (st != GANG_OK)
    return gang__fail(g, st);
  *out = sub;
  return GANG_OK;
}

typedef struct split_entry {
  int32_t color, key, rank;
} split_entry;

static int split_cmp(const void *a, const void *b) {
  const split_entry *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

gang_status gang_split(gang_t *g, int color, int key, gang_t **out) {
  const char *fn = "gang_split";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(color >= 0 || color == GANG_SPLIT_NOCOLOR, fn,
                 "color %d is negative (use GANG_SPLIT_NOCOLOR)", color);
  /* Everyone learns everyone's (color, key); members of a colour then form
   * the gang of their colour ordered by (key, parent rank). Each colour's
   * gang is created by one create_subgang-style call per colour, in colour
   * order, so every rank makes the same sequence of collective calls. */
  int n = g->size;
  split_entry *all = calloc((size_t)n, sizeof *all);
  int *ranks = calloc((size_t)n, sizeof *ranks);
  if (all == NULL || ranks == NULL) {
    free(all);
    free(ranks);
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  }
  /* Gather (color, key); a slot's position is its rank. (On a fake gang
   * every slot holds this rank's pair, which is the fake model.) */
  int32_t mine[2] = {color, key};
  int32_t *pairs = calloc((size_t)n, sizeof mine);
  gang_status st = pairs ? gang_all_gather(g, pairs, mine, 2, GANG_INT32)
                         : gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  for (int i = 0; st == GANG_OK && i < n; i++)
    all[i] = (split_entry){pairs[2 * i], pairs[2 * i + 1], i};
  free(pairs);
  gang_t *result = NULL;
  while (st == GANG_OK) {
    /* The smallest colour not yet handled. */
    int64_t next = INT64_MAX; /* INT32_MAX is a valid colour */
    for (int i = 0; i < n; i++)
      if (all[i].color >= 0 && all[i].color < next)
        next = all[i].color;
    if (next == INT64_MAX)
      break;
    split_entry *members = calloc((size_t)n, sizeof *members);
    if (members == NULL) {
      st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
      break;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
      if (all[i].color == next) {
        members[m++] = all[i];
        all[i].color = -1; /* handled */
      }
    qsort(members, (size_t)m, sizeof *members, split_cmp);
    int index = -1;
    for (int i = 0; i < m; i++) {
      ranks[i] = members[i].rank;
      if (members[i].rank == g->rank)
        index = i;
    }
    free(members);
    gang_t *sub = NULL;
    st = g->ops->subgang(g, ranks, m, index, &sub);
    if (st != GANG_OK) {
      gang__fail(g, st);
      break;
    }
    if (sub != NULL)
      result = sub;
  }
  free(all);
  free(ranks);
  if (st != GANG_OK) {
    gang_destroy(result);
    return st;
  }
  *out = result;
  return GANG_OK;
}
