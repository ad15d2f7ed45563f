/* The error-swallowing wrapper (gang/ft.h; torchft's
 * ErrorSwallowingProcessGroupWrapper). It guards all_reduce only, as
 * torchft does: a training step's gradient all_reduce must not throw past
 * the step, because the manager's should_commit decides what a failure
 * means. After the first error every all_reduce completes at once, moving
 * nothing; other collectives pass the inner gang's result through. The
 * error is kept (status and text) until gang_ft_configure on the wrapper,
 * which configures the inner gang and forgets it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ft_impl.h"

typedef struct swallow {
  gang_t *inner; /* owned */
  pthread_mutex_t mu;
  gang_status error; /* the first recorded, GANG_OK when none */
  char detail[1024];
} swallow;

static const gang__ops swallow_ops;
static void finish(gang_work *w, gang_status st);

static void record(swallow *s, gang_status st, const char *detail) {
  pthread_mutex_lock(&s->mu);
  if (s->error == GANG_OK && st != GANG_OK) {
    s->error = st;
    snprintf(s->detail, sizeof s->detail, "%s", detail);
  }
  pthread_mutex_unlock(&s->mu);
}

static gang_status recorded(swallow *s) {
  pthread_mutex_lock(&s->mu);
  gang_status st = s->error;
  pthread_mutex_unlock(&s->mu);
  return st;
}

static gang_status swallow_post(gang_t *g, const gang__coll *c, gang_work *w) {
  swallow *s = g->impl;
  bool guarded = c->kind == GANG_COLL_ALL_REDUCE;
  if (guarded && recorded(s) != GANG_OK) {
    gang__work_complete(w, GANG_OK); /* a no-op: the buffer stays */
    return GANG_OK;
  }
  gang_work *inner = NULL;
  gang_status st = gang__post_coll(s->inner, c, &inner);
  if (st != GANG_OK) {
    finish(w, st);
    return GANG_OK;
  }
  w->impl = inner;
  return GANG_OK;
}

/* Completes the outer work with the inner result `st`. The wrapper itself
 * never turns broken: its all_reduce must keep answering, and the inner
 * gang keeps its own sticky error, which a guarded call meets and swallows
 * (other calls fail with it). */
static void finish(gang_work *w, gang_status st) {
  swallow *s = w->g->impl;
  if (w->coll.kind == GANG_COLL_ALL_REDUCE && st != GANG_OK) {
    record(s, st, gang_last_error());
    st = GANG_OK;
  }
  if (st == GANG_OK)
    gang__work_complete(w, GANG_OK);
  else
    gang__work_reject(w, st);
}

/* The inner work is done with `st`: collect it and complete the outer. */
static void collect(gang_work *w, gang_status st) {
  gang_work_free(w->impl);
  w->impl = NULL;
  finish(w, st);
}

static gang_status swallow_wait(gang_work *w, int64_t deadline) {
  if (w->impl == NULL)
    return w->status;
  gang_status st;
  if (gang__ft_inner_wait(w->impl, deadline, &st)) {
    collect(w, st);
    return w->status;
  }
  /* Timed out with the inner work still running: the inner gang is
   * failed; a guarded call records it and reports success. */
  gang_work_free(w->impl); /* aborts the inner gang and waits it out */
  w->impl = NULL;
  finish(w, st);
  return w->status;
}

static void swallow_test(gang_work *w) {
  gang_work *inner = w->impl;
  if (inner == NULL)
    return;
  int done = 0;
  gang_status st = gang_work_test(inner, &done);
  if (done)
    collect(w, st);
}

static gang_status swallow_subgang(gang_t *g, const int *ranks, int n,
                                   int index, gang_t **out) {
  swallow *s = g->impl;
  return s->inner->ops->subgang(s->inner, ranks, n, index, out);
}

static void swallow_abort(gang_t *g) {
  swallow *s = g->impl;
  gang_abort(s->inner);
}

static void swallow_destroy(gang_t *g) {
  swallow *s = g->impl;
  if (s == NULL)
    return;
  gang_destroy(s->inner);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static gang_status swallow_configure(gang_t *g, const char *store_addr,
                                     int rank, int size, int64_t timeout_ms) {
  swallow *s = g->impl;
  GANG_CHECK(gang_ft_configure(s->inner, store_addr, rank, size, timeout_ms));
  pthread_mutex_lock(&s->mu);
  s->error = GANG_OK;
  s->detail[0] = '\0';
  pthread_mutex_unlock(&s->mu);
  gang__ft_reset(g, rank, size);
  return GANG_OK;
}

static bool swallow_configured(const gang_t *g) {
  const swallow *s = g->impl;
  return gang_ft_configured(s->inner);
}

static const gang__ft_ops swallow_ft_ops = {.configure = swallow_configure,
                                            .configured = swallow_configured};

static const gang__ops swallow_ops = {
    .name = "error-swallowing",
    .simulated = false,
    .post = swallow_post,
    .wait = swallow_wait,
    .test = swallow_test,
    .subgang = swallow_subgang,
    .abort = swallow_abort,
    .destroy = swallow_destroy,
    .ft = &swallow_ft_ops,
};

gang_status gang_error_swallowing_wrap(gang_t *inner, gang_t **out) {
  const char *fn = "gang_error_swallowing_wrap";
  GANG_ARG_CHECK(inner != NULL, fn, "inner is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  swallow *s = calloc(1, sizeof *s);
  if (s == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  s->inner = inner;
  pthread_mutex_init(&s->mu, NULL);
  gang_status st =
      gang__new(&swallow_ops, s, gang_rank(inner), gang_size(inner),
                gang_get_device(inner), inner->timeout_ms, out);
  if (st != GANG_OK) {
    pthread_mutex_destroy(&s->mu);
    free(s);
  }
  return st;
}

static swallow *as_swallow(const gang_t *g) {
  return g != NULL && g->ops == &swallow_ops ? g->impl : NULL;
}

gang_status gang_error_swallowing_error(const gang_t *g, char *detail,
                                        size_t cap) {
  swallow *s = as_swallow(g);
  if (s == NULL)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_error_swallowing_error: not an error-swallowing "
                       "gang");
  pthread_mutex_lock(&s->mu);
  gang_status st = s->error;
  if (detail != NULL && cap > 0)
    snprintf(detail, cap, "%s", s->detail);
  pthread_mutex_unlock(&s->mu);
  return st;
}

void gang_error_swallowing_report(gang_t *g, gang_status st,
                                  const char *detail) {
  swallow *s = as_swallow(g);
  if (s == NULL || st == GANG_OK)
    return;
  record(s, st, detail != NULL ? detail : "reported by the caller");
}
