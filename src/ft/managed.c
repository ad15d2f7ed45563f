/* The managed gang (gang/ft.h; torchft's ManagedProcessGroup): its size
 * is the number of replicas taking part in the current step, its rank this
 * group's rank among them, its all_reduce goes through the manager (MEAN over
 * the participants, errors recorded for should_commit, never thrown); the
 * other collectives go to the replica gang as they are. Training code
 * that takes a gang_t for its data-parallel dimension runs on it
 * unchanged. */
#include <stdlib.h>

#include "core/error.h"
#include "ft_impl.h"
#include "manager_impl.h"

static gang_status managed_post(gang_t *g, const gang__coll *c, gang_work *w) {
  gang_manager *m = g->impl;
  if (c->kind == GANG_COLL_ALL_REDUCE) {
    gang_status st =
        gang_manager_all_reduce(m, c->out, c->count, c->dtype, c->op);
    gang__work_complete(w, st);
    return GANG_OK;
  }
  gang_work *inner = NULL;
  gang_status st = gang__post_coll(m->replica, c, &inner);
  if (st != GANG_OK) {
    gang__work_reject(w, st);
    return GANG_OK;
  }
  w->impl = inner;
  return GANG_OK;
}

/* Other collectives fail alone: the manager's quorum decides what a
 * failure of the replica gang means, and the next one rebuilds it. */
static void collect(gang_work *w, gang_status st) {
  gang_work_free(w->impl);
  w->impl = NULL;
  if (st == GANG_OK)
    gang__work_complete(w, GANG_OK);
  else
    gang__work_reject(w, st);
}

static gang_status managed_wait(gang_work *w, int64_t deadline) {
  if (w->impl == NULL)
    return w->status;
  gang_status st;
  if (!gang__ft_inner_wait(w->impl, deadline, &st))
    return st;
  collect(w, st);
  return w->status;
}

static void managed_test(gang_work *w) {
  gang_work *inner = w->impl;
  if (inner == NULL)
    return;
  int done = 0;
  gang_status st = gang_work_test(inner, &done);
  if (done)
    collect(w, st);
}

static gang_status managed_subgang(gang_t *g, const int *ranks, int n,
                                   int index, gang_t **out) {
  (void)g, (void)ranks, (void)n, (void)index, (void)out;
  return gang__error(GANG_NOT_SUPPORTED,
                     "a managed gang has no sub-gangs: its members change "
                     "with every quorum");
}

static void managed_abort(gang_t *g) {
  gang_manager *m = g->impl;
  gang_abort(m->replica);
}

static void managed_destroy(gang_t *g) { (void)g; /* the manager owns it */ }

static const gang__ops managed_ops = {
    .name = "managed",
    .simulated = false,
    .post = managed_post,
    .wait = managed_wait,
    .test = managed_test,
    .subgang = managed_subgang,
    .abort = managed_abort,
    .destroy = managed_destroy,
};

gang_status gang__mgr_managed_create(gang_manager *m, gang_t **out) {
  gang_device cpu = {GANG_DEVICE_CPU, 0};
  return gang__new(&managed_ops, m, -1, 0, cpu, m->timeout_ms, out);
}
