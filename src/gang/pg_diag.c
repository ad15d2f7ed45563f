/* After a collective timed out: which ranks of the gang reached it, and
 * which ranks of the world were not waiting in any of its collectives,
 * told through the store (pg_internal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
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
static void no_diagnosis(gang__pg *p, const char *detail, const gang_work *w) {
  char host[600] = "", left[400];
  if (p->w->store_host >= 0 &&
      gang__fabric_peer_left(p->w->fabric, p->w->store_host, left, sizeof left))
    snprintf(host, sizeof host,
             "; the store's host %s and the store went with it", left);
  else if (p->w->store_host >= 0)
    snprintf(host, sizeof host, "; world rank %d hosts the store%s",
             p->w->store_host,
             gang_last_status() == GANG_TIMEOUT ? " and does not answer either"
                                                : "");
  gang__error(GANG_TIMEOUT,
              "%s [no diagnosis of who reached %s #%" PRIu64 ": %s%s]", detail,
              gang__coll_name(w->coll.kind), w->seq, gang_last_error(), host);
}

/* Says, once per world, that this rank was waiting in a collective of the
 * world when it timed out: "diag/world/<world rank>", and counts itself in
 * "diag/present" (the store's host waits for those to be done, below). */
static gang_status mark_present(gang__pg *p, int world_rank) {
  if (atomic_exchange(&p->w->diag_marked, true))
    return GANG_OK;
  char key[64];
  snprintf(key, sizeof key, "diag/world/%d", world_rank);
  GANG_CHECK(gang_store_set(p->w->store, key, "1", 1));
  return gang_store_add(p->w->store, "diag/present", 1, NULL);
}

/* Counts this rank in "diag/done" once it no longer needs the store. */
static void mark_done(gang__pg *p) {
  if (!atomic_exchange(&p->w->diag_done, true))
    (void)gang_store_add(p->w->store, "diag/done", 1, NULL);
}

void gang__pg_diag_mark_present(gang_t *g) {
  gang__pg *p = g->impl;
  if (p->w->store != NULL && mark_present(p, p->map[g->rank]) == GANG_OK)
    mark_done(p);
}

void gang__pg_diag_linger(pg_world *w) {
  if (w->store == NULL)
    return;
  int64_t limit = gang__deadline_in_ms(2 * w->diag_budget_ms);
  while (!gang__deadline_passed(limit)) {
    int64_t present = 0, done = 0;
    if (gang_store_add(w->store, "diag/present", 0, &present) != GANG_OK ||
        gang_store_add(w->store, "diag/done", 0, &done) != GANG_OK ||
        done >= present)
      return;
    /* The peers tell nobody when they are done but the store: look again
     * every few milliseconds, until they are or the limit. */
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Writes to buf the world ranks that marked no presence, but for the
 * gang's ranks that did not answer (`missing`, a flag per gang rank): the
 * collective that timed out may have waited only for ranks that waited in
 * turn for one in another gang, a stopped rank that nothing else names.
 * False when the store failed. */
static bool absent_elsewhere(gang_t *g, const bool *missing, char *buf,
                             size_t cap) {
  gang__pg *p = g->impl;
  size_t o = 0;
  buf[0] = '\0';
  for (int r = 0; r < p->w->size; r++) {
    bool named = false;
    for (int i = 0; i < g->size && !named; i++)
      named = missing[i] && p->map[i] == r;
    if (named)
      continue;
    char key[64];
    snprintf(key, sizeof key, "diag/world/%d", r);
    const char *k = key;
    bool there = false;
    if (gang_store_check(p->w->store, &k, 1, &there) != GANG_OK)
      return false;
    bool left = !there && gang__fabric_peer_left(p->w->fabric, r, NULL, 0);
    if (!there && o + 24 < cap)
      o += (size_t)snprintf(buf + o, cap - o, "%s%d%s", o ? "," : "", r,
                            left ? " (left)" : "");
  }
  return true;
}

/* Of the gang's ranks that marked nothing for call `seq`, the ones that
 * timed out in another call of the gang (one that went on to the next call
 * before a peer stopped answering, or one still in the previous): written
 * to buf as "2 (#2911, 1 ahead),3 (...)" and no longer counted in `missing`.
 * False when the store failed. */
static bool in_other_call(gang_t *g, uint64_t seq, bool *missing, char *buf,
                          size_t cap) {
  gang__pg *p = g->impl;
  size_t o = 0;
  buf[0] = '\0';
  for (int r = 0; r < g->size; r++) {
    if (!missing[r])
      continue;
    char key[96];
    snprintf(key, sizeof key, "diag/%" PRIx64 "/at/%d", p->ctx, r);
    int64_t at = 0; /* adding 0 reads it; a missing key reads as 0 */
    if (gang_store_add(p->w->store, key, 0, &at) != GANG_OK)
      return false;
    if (at <= 0 || (uint64_t)at == seq)
      continue;
    missing[r] = false;
    uint64_t d = (uint64_t)at > seq ? (uint64_t)at - seq : seq - (uint64_t)at;
    if (o + 48 < cap)
      o += (size_t)snprintf(buf + o, cap - o,
                            "%s%d (#%" PRId64 ", %" PRIu64 " %s)", o ? "," : "",
                            r, at, d, (uint64_t)at > seq ? "ahead" : "behind");
  }
  return true;
}

/* After a collective timed out (here or on a peer that told us), find out
 * which ranks of the gang reached it: each rank that gets the timeout marks
 * "diag/<ctx>/<seq>/<rank>" in the store (and its presence in the world,
 * mark_present), waits up to the budget for the others' marks, and adds to
 * the error who reached the collective and who did not answer (a hung or
 * stopped rank never marks), and which other world ranks were in no
 * diagnosis. A store that fails on the way (it does not answer in time, or
 * its host left) ends the diagnosis: the error says so instead
 * (no_diagnosis). */
void gang__pg_diagnose_timeout(gang_t *g, const gang_work *w) {
  gang__pg *p = g->impl;
  gang_store *st = p->w->store;
  if (st == NULL)
    return;
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", gang_last_error());
  int64_t budget = gang__pg_diag_budget_ms(g->timeout_ms);
  char mine[96];
  snprintf(mine, sizeof mine, "diag/%" PRIx64 "/%" PRIu64 "/%d", p->ctx, w->seq,
           g->rank);
  /* Which call this rank timed out in, for the peers that timed out in
   * another one (in_other_call). */
  char at_key[96], at[24];
  snprintf(at_key, sizeof at_key, "diag/%" PRIx64 "/at/%d", p->ctx, g->rank);
  int at_len = snprintf(at, sizeof at, "%" PRIu64, w->seq);
  if (gang_store_set(st, mine, "1", 1) != GANG_OK ||
      gang_store_set(st, at_key, at, (size_t)at_len) != GANG_OK ||
      mark_present(p, p->map[g->rank]) != GANG_OK) {
    no_diagnosis(p, detail, w);
    return;
  }
  char **keys = calloc((size_t)g->size, sizeof *keys);
  bool *missed = calloc((size_t)g->size, sizeof *missed);
  for (int r = 0; keys != NULL && r < g->size; r++) {
    keys[r] = malloc(96);
    if (keys[r] != NULL)
      snprintf(keys[r], 96, "diag/%" PRIx64 "/%" PRIu64 "/%d", p->ctx, w->seq,
               r);
  }
  bool all_ok = keys != NULL && missed != NULL;
  for (int r = 0; all_ok && r < g->size; r++)
    all_ok = keys[r] != NULL;
  if (all_ok) {
    /* Whether or not everyone answers in time, then look at each. */
    (void)gang_store_wait(st, (const char *const *)keys, (size_t)g->size,
                          budget);
    char reached[256] = "", missing[256] = "", absent[256] = "";
    char other[256] = "";
    size_t ro = 0, mo = 0;
    bool answered = true;
    for (int r = 0; answered && r < g->size; r++) {
      bool there = false;
      const char *k = keys[r];
      answered = gang_store_check(st, &k, 1, &there) == GANG_OK;
      missed[r] = answered && !there;
      if (answered && there && ro + 16 < sizeof reached)
        ro += (size_t)snprintf(reached + ro, sizeof reached - ro, "%s%d",
                               ro ? "," : "", r);
    }
    if (answered)
      answered = in_other_call(g, w->seq, missed, other, sizeof other) &&
                 absent_elsewhere(g, missed, absent, sizeof absent);
    for (int r = 0; answered && r < g->size; r++)
      if (missed[r] && mo + 16 < sizeof missing)
        mo += (size_t)snprintf(missing + mo, sizeof missing - mo, "%s%d",
                               mo ? "," : "", r);
    if (answered)
      gang__error(
          GANG_TIMEOUT,
          "%s [gang ranks that reached %s #%" PRIu64 ": %s;%s%s%s that did "
          "not answer within %lld ms: %s%s%s]",
          detail, gang__coll_name(w->coll.kind), w->seq, ro ? reached : "none",
          other[0] ? " that timed out in another call: " : "", other,
          other[0] ? ";" : "", (long long)budget, mo ? missing : "none",
          absent[0] ? "; other world ranks in no diagnosis: " : "", absent);
    else
      no_diagnosis(p, detail, w);
  } else {
    gang__error(GANG_TIMEOUT, "%s", detail);
  }
  for (int r = 0; keys != NULL && r < g->size; r++)
    free(keys[r]);
  free(keys);
  free(missed);
  mark_done(p);
}
