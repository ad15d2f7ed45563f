/* After a collective timed out: which ranks of the gang reached it, told
 * through the store (pg_internal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "pg_internal.h"

/* After a collective timed out (here or on a peer that told us), find out
 * which ranks of the gang reached it: each rank that gets the timeout marks
 * "diag/<ctx>/<seq>/<rank>" in the store, waits a short while for the
 * others' marks, and adds to the error who reached the collective and who
 * did not answer (a hung or stopped rank never marks). The wait is a tenth
 * of the gang's timeout, between 100 ms and 1 s. */
void gang__pg_diagnose_timeout(gang_t *g, const gang_work *w) {
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
