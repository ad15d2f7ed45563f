/* After a collective timed out: which ranks of the gang reached it, told
 * through the store (pg_internal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "pg_internal.h"

/* The diagnosis comes after the timeout has passed, so it is the part of
 * the error path the timeout does not bound: a tenth of the timeout,
 * between 100 ms and 500 ms, keeps the whole path within the timeout +
 * 1 s. It is also the store handle's deadline after setup (pg_world.c),
 * so a store that does not answer, as when the rank hosting it is stopped,
 * costs the diagnosis no more than this either. */
int64_t gang__pg_diag_budget_ms(int64_t timeout_ms) {
  if (timeout_ms < 0)
    return 500;
  int64_t b = timeout_ms / 10;
  return b < 100 ? 100 : b > 500 ? 500 : b;
}

/* The store failed the diagnosis: the error says so, with the store's
 * failure, and names the rank whose process hosts the store, if one does:
 * a store that does not answer means that rank does not either. */
static void no_diagnosis(pg *p, const char *detail, const gang_work *w) {
  char host[96] = "";
  if (p->w->store_host >= 0)
    snprintf(host, sizeof host, "; world rank %d hosts the store%s",
             p->w->store_host,
             gang_last_status() == GANG_TIMEOUT ? " and does not answer either"
                                                : "");
  gang__error(GANG_TIMEOUT,
              "%s [no diagnosis of who reached %s #%" PRIu64 ": %s%s]", detail,
              gang__coll_name(w->coll.kind), w->seq, gang_last_error(), host);
}

/* After a collective timed out (here or on a peer that told us), find out
 * which ranks of the gang reached it: each rank that gets the timeout marks
 * "diag/<ctx>/<seq>/<rank>" in the store, waits up to the budget for the
 * others' marks, and adds to the error who reached the collective and who
 * did not answer (a hung or stopped rank never marks). A store that fails
 * on the way (it does not answer in time, or its host left) ends the
 * diagnosis: the error says so instead (no_diagnosis). */
void gang__pg_diagnose_timeout(gang_t *g, const gang_work *w) {
  pg *p = g->impl;
  gang_store *st = p->w->store;
  if (st == NULL)
    return;
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", gang_last_error());
  int64_t budget = gang__pg_diag_budget_ms(g->timeout_ms);
  char mine[96];
  snprintf(mine, sizeof mine, "diag/%" PRIx64 "/%" PRIu64 "/%d", p->ctx, w->seq,
           g->rank);
  if (gang_store_set(st, mine, "1", 1) != GANG_OK) {
    no_diagnosis(p, detail, w);
    return;
  }
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
    bool answered = true;
    for (int r = 0; answered && r < g->size; r++) {
      bool there = false;
      const char *k = keys[r];
      answered = gang_store_check(st, &k, 1, &there) == GANG_OK;
      char *buf = there ? reached : missing;
      size_t *o = there ? &ro : &mo;
      if (answered && *o + 16 < sizeof reached)
        *o += (size_t)snprintf(buf + *o, sizeof reached - *o, "%s%d",
                               *o ? "," : "", r);
    }
    if (answered)
      gang__error(GANG_TIMEOUT,
                  "%s [gang ranks that reached %s #%" PRIu64 ": %s; that did "
                  "not answer within %lld ms: %s]",
                  detail, gang__coll_name(w->coll.kind), w->seq,
                  ro ? reached : "none", (long long)budget,
                  mo ? missing : "none");
    else
      no_diagnosis(p, detail, w);
  } else {
    gang__error(GANG_TIMEOUT, "%s", detail);
  }
  for (int r = 0; keys != NULL && r < g->size; r++)
    free(keys[r]);
  free(keys);
}
