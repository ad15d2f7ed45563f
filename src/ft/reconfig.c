/* The reconfigurable gang (gang/ft.h; torchft's ProcessGroup.configure):
 * a gang_t whose communicator, a process-group gang, is replaced by every
 * gang_ft_configure. Collectives forward to the current incarnation; a
 * configure aborts the previous one, so its in-flight works end with
 * GANG_ABORTED, and frees it once no work of it is left (a thread may still
 * be waiting on one when the configure comes).
 *
 * Also here: gang_ft_configure's dispatch (through gang__ops.ft) and the
 * claim that keeps every incarnation on a store prefix of its own. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/options.h"
#include "ft_impl.h"
#include "gang/pg.h"
#include "gang/store.h"

/* One incarnation: its gang and the works of it not yet collected. */
typedef struct incarnation {
  gang_t *g;
  int works;
  bool retired; /* replaced: free when works reaches 0 */
  struct incarnation *next;
} incarnation;

typedef struct ft_gang {
  pthread_mutex_t mu;
  incarnation *current; /* NULL: unconfigured */
  incarnation *retired; /* replaced ones with works outstanding */
  gang_options opts;
  char host[256];
  /* A configure in progress, which gang_abort stops (under mu). */
  gang__setup_cancel *configuring;
} ft_gang;

/* What an outer work holds: the incarnation it runs on, its work there. */
typedef struct ft_work {
  incarnation *inc;
  gang_work *inner;
} ft_work;

_Static_assert(sizeof(ft_work) <= sizeof(((gang_work *)0)->inline_state),
               "the inner work fits in the outer one");

static const gang__ops ft_ops;

/* ---- Claiming a prefix ----------------------------------------------------
 */

gang_status gang__ft_claim_prefix(const char *store_addr, int size,
                                  int64_t timeout_ms) {
  const char *slash = strchr(store_addr, '/');
  if (slash == NULL || slash[1] == '\0')
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_ft_configure: store_addr '%s' has no prefix "
                       "(host:port/prefix): every incarnation needs a prefix "
                       "of its own",
                       store_addr);
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = timeout_ms;
  gang_store *st = NULL;
  GANG_CHECK(gang_store_connect(store_addr, &so, &st));
  int64_t claims = 0;
  gang_status rc = gang_store_add(st, "gang_ft/claims", 1, &claims);
  gang_store_close(st);
  GANG_CHECK(rc);
  if (claims > size)
    return gang__error(
        GANG_INVALID_USAGE,
        "gang_ft_configure: prefix of '%s' was used before (%" PRId64
        " claims for %d ranks): give every configure a fresh "
        "prefix, as torchft does with the quorum id",
        store_addr, claims, size);
  return GANG_OK;
}

void gang__ft_reset(gang_t *g, int rank, int size) {
  pthread_mutex_lock(&g->mu);
  g->rank = rank;
  g->size = size;
  g->ncoll = 0;
  g->error[0] = '\0';
  atomic_store(&g->broken, GANG_OK);
  pthread_mutex_unlock(&g->mu);
}

/* ---- Dispatch ---------------------------------------------------------------
 */

gang_status gang_ft_configure(gang_t *g, const char *store_addr, int rank,
                              int size, int64_t timeout_ms) {
  const char *fn = "gang_ft_configure";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(g->ops->ft != NULL, fn,
                 "a %s gang cannot be configured (gang_ft_create, "
                 "gang_baby_create or a wrapper of one can)",
                 g->ops->name);
  GANG_ARG_CHECK(store_addr != NULL && *store_addr, fn, "store_addr is empty");
  GANG_ARG_CHECK(size >= 1, fn, "size must be at least 1, but is %d", size);
  GANG_ARG_CHECK(rank >= 0 && rank < size, fn,
                 "rank must be in [0, %d), but is %d", size, rank);
  return g->ops->ft->configure(g, store_addr, rank, size, timeout_ms);
}

bool gang_ft_configured(const gang_t *g) {
  return g != NULL && g->ops->ft != NULL && g->ops->ft->configured(g);
}

/* ---- The reconfigurable gang --------------------------------------------- */

gang_status gang_ft_create(const gang_options *opts, gang_t **out) {
  GANG_ARG_CHECK(out != NULL, "gang_ft_create", "out is NULL");
  ft_gang *f = calloc(1, sizeof *f);
  if (f == NULL)
    return gang__error(GANG_NO_MEMORY, "gang_ft_create: out of memory");
  gang_options o = GANG_OPTIONS_INIT;
  o.device = GANG__OPTS_GET(gang_options, opts, device, o.device);
  o.timeout_ms = GANG__OPTS_GET(gang_options, opts, timeout_ms, 0);
  o.check = GANG__OPTS_GET(gang_options, opts, check, 0);
  const char *host = GANG__OPTS_GET(gang_options, opts, host, NULL);
  if (host != NULL) {
    snprintf(f->host, sizeof f->host, "%s", host);
    o.host = f->host;
  }
  f->opts = o;
  pthread_mutex_init(&f->mu, NULL);
  gang_status st = gang__new(&ft_ops, f, -1, 0, o.device, o.timeout_ms, out);
  if (st != GANG_OK) {
    pthread_mutex_destroy(&f->mu);
    free(f);
  }
  return st;
}

/* Frees an incarnation no work refers to. Called with f->mu held. */
static void drop_if_idle(ft_gang *f, incarnation *inc) {
  if (!inc->retired || inc->works > 0)
    return;
  for (incarnation **pp = &f->retired; *pp; pp = &(*pp)->next)
    if (*pp == inc) {
      *pp = inc->next;
      break;
    }
  gang_destroy(inc->g);
  free(inc);
}

/* Retires the current incarnation: freed when its last work has been
 * collected, and aborted now if it has works in flight. An idle one is not
 * aborted: the abort would reach peers still finishing their part of its
 * last collective (a rank that has returned may be ahead of one still
 * reading its data), where a destroy only says goodbye. Called with f->mu
 * held. */
static void retire(ft_gang *f) {
  incarnation *inc = f->current;
  if (inc == NULL)
    return;
  f->current = NULL;
  if (inc->works > 0)
    gang_abort(inc->g);
  inc->retired = true;
  inc->next = f->retired;
  f->retired = inc;
  drop_if_idle(f, inc);
}

static gang_status ft_configure(gang_t *g, const char *store_addr, int rank,
                                int size, int64_t timeout_ms) {
  ft_gang *f = g->impl;
  pthread_mutex_lock(&f->mu);
  retire(f);
  pthread_mutex_unlock(&f->mu);
  gang_options o = f->opts;
  if (timeout_ms >= 0)
    o.timeout_ms = timeout_ms == 0 ? -1 : timeout_ms;
  int64_t claim_ms = timeout_ms > 0 ? timeout_ms : 60000;
  GANG_CHECK(gang__ft_claim_prefix(store_addr, size, claim_ms));
  incarnation *inc = calloc(1, sizeof *inc);
  if (inc == NULL)
    return gang__error(GANG_NO_MEMORY, "gang_ft_configure: out of memory");
  /* gang_abort from another thread stops the rendezvous, as it stops a
   * collective: a peer of the new quorum that died is not waited for
   * until the deadline. */
  gang__setup_cancel cancel;
  gang__setup_cancel_init(&cancel);
  pthread_mutex_lock(&f->mu);
  f->configuring = &cancel;
  pthread_mutex_unlock(&f->mu);
  gang_status st = gang__create_with_store_cancel(&o, store_addr, rank, size,
                                                  &cancel, &inc->g);
  pthread_mutex_lock(&f->mu);
  f->configuring = NULL;
  pthread_mutex_unlock(&f->mu);
  if (st == GANG_OK && atomic_load(&cancel.fired)) {
    /* Aborted after its last wait: the caller asked for no gang. */
    gang_destroy(inc->g);
    st = gang__error(GANG_ABORTED, "gang creation aborted: %s", cancel.why);
  }
  gang__setup_cancel_fini(&cancel);
  if (st != GANG_OK) {
    free(inc);
    return gang__error_wrap(st, "gang_ft_configure as rank %d of %d at '%s'",
                            rank, size, store_addr);
  }
  /* Later collectives keep the caller's deadline: the incarnation's own
   * default is the one the options gave. */
  pthread_mutex_lock(&f->mu);
  f->current = inc;
  gang__ft_reset(g, rank, size);
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

int gang__ft_lost_ranks(gang_t *g, int *out, int cap) {
  if (g == NULL || g->ops != &ft_ops)
    return 0;
  ft_gang *f = g->impl;
  pthread_mutex_lock(&f->mu);
  int n = f->current != NULL ? gang__pg_lost_ranks(f->current->g, out, cap) : 0;
  pthread_mutex_unlock(&f->mu);
  return n;
}

gang_status gang__ft_poke(gang_t *g) {
  if (g == NULL || g->ops != &ft_ops)
    return GANG_OK;
  ft_gang *f = g->impl;
  pthread_mutex_lock(&f->mu);
  gang_status st = f->current != NULL ? gang__pg_poke(f->current->g) : GANG_OK;
  pthread_mutex_unlock(&f->mu);
  return st;
}

static bool ft_configured(const gang_t *g) {
  ft_gang *f = g->impl;
  pthread_mutex_lock(&f->mu);
  bool yes = f->current != NULL;
  pthread_mutex_unlock(&f->mu);
  return yes;
}

static const gang__ft_ops ft_ft_ops = {.configure = ft_configure,
                                       .configured = ft_configured};

/* ---- Forwarding ------------------------------------------------------------
 */

static gang_status ft_post(gang_t *g, const gang__coll *c, gang_work *w) {
  ft_gang *f = g->impl;
  ft_work *x = (ft_work *)(void *)w->inline_state;
  pthread_mutex_lock(&f->mu);
  incarnation *inc = f->current;
  if (inc != NULL)
    inc->works++;
  pthread_mutex_unlock(&f->mu);
  if (inc == NULL) {
    /* Not a failure of the gang: configuring makes it usable. */
    gang__error(GANG_INVALID_USAGE,
                "%s on a reconfigurable gang that is not configured (call "
                "gang_ft_configure first)",
                gang__coll_name(c->kind));
    gang__work_reject(w, GANG_INVALID_USAGE);
    return GANG_OK;
  }
  x->inc = inc;
  x->inner = NULL;
  w->impl = x;
  gang_status st = gang__post_coll(inc->g, c, &x->inner);
  if (st != GANG_OK) {
    pthread_mutex_lock(&f->mu);
    inc->works--;
    drop_if_idle(f, inc);
    pthread_mutex_unlock(&f->mu);
    w->impl = NULL;
    gang__work_complete(w, st);
  }
  return GANG_OK;
}

/* The inner work is done: collect it and complete the outer one. */
static void collect(gang_t *g, gang_work *w, gang_status st) {
  ft_gang *f = g->impl;
  ft_work *x = w->impl;
  gang_work_free(x->inner);
  pthread_mutex_lock(&f->mu);
  /* A work of a replaced incarnation fails alone: the gang it would
   * break is already the next one. */
  bool old = x->inc->retired;
  x->inc->works--;
  drop_if_idle(f, x->inc);
  pthread_mutex_unlock(&f->mu);
  w->impl = NULL;
  if (old)
    gang__work_reject(w, st);
  else
    gang__work_complete(w, st);
}

bool gang__ft_inner_wait(gang_work *inner, int64_t deadline, gang_status *st) {
  int64_t ms =
      deadline == GANG_DEADLINE_NONE ? -1 : gang__deadline_poll_ms(deadline);
  *st = gang_work_wait(inner, ms);
  int done = 0;
  (void)gang_work_test(inner, &done);
  return done != 0;
}

static gang_status ft_wait(gang_work *w, int64_t deadline) {
  ft_work *x = w->impl;
  if (x == NULL)
    return w->status;
  gang_status st;
  if (gang__ft_inner_wait(x->inner, deadline, &st))
    collect(w->g, w, st);
  return st; /* not done: the inner gang failed with the timeout */
}

static void ft_test(gang_work *w) {
  ft_work *x = w->impl;
  if (x == NULL)
    return;
  int done = 0;
  gang_status st = gang_work_test(x->inner, &done);
  if (done)
    collect(w->g, w, st);
}

static gang_status ft_subgang(gang_t *g, const int *ranks, int n, int index,
                              gang_t **out) {
  ft_gang *f = g->impl;
  pthread_mutex_lock(&f->mu);
  incarnation *inc = f->current;
  pthread_mutex_unlock(&f->mu);
  if (inc == NULL)
    return gang__error(GANG_INVALID_USAGE,
                       "sub-gang of a reconfigurable gang that is not "
                       "configured");
  /* A sub-gang of this incarnation: plain, and broken by the next
   * configure's abort. */
  return inc->g->ops->subgang(inc->g, ranks, n, index, out);
}

static void ft_abort(gang_t *g) {
  ft_gang *f = g->impl;
  pthread_mutex_lock(&f->mu);
  if (f->current != NULL)
    gang_abort(f->current->g);
  if (f->configuring != NULL) {
    const char *why = gang_get_last_error(g);
    gang__setup_cancel_fire(
        f->configuring,
        why != NULL && *why != '\0' ? why : "gang_abort during configure");
  }
  pthread_mutex_unlock(&f->mu);
}

static void ft_destroy(gang_t *g) {
  ft_gang *f = g->impl;
  if (f == NULL)
    return;
  pthread_mutex_lock(&f->mu);
  if (f->current != NULL) {
    gang_destroy(f->current->g);
    free(f->current);
  }
  /* Works of retired incarnations can no longer be waited for. */
  for (incarnation *inc = f->retired, *next; inc; inc = next) {
    next = inc->next;
    gang_destroy(inc->g);
    free(inc);
  }
  pthread_mutex_unlock(&f->mu);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

static const gang__ops ft_ops = {
    .name = "reconfigurable",
    .simulated = false,
    .post = ft_post,
    .wait = ft_wait,
    .test = ft_test,
    .subgang = ft_subgang,
    .abort = ft_abort,
    .destroy = ft_destroy,
    .ft = &ft_ft_ops,
};
