/* What every way of running a call of a process-group gang needs:
 * names for errors, a shared-memory channel prepared for the call, the
 * algorithms' view of it over TCP, the table's facts of a TCP call, and
 * the flight records' dump when the world fails. pg.c, pg_queue.c,
 * pg_exec.c, pg_hier.c and pg_p2p.c use it; it uses none of them. */
#include <string.h>

#include "algo/algo.h"
#include "pg_internal.h"

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

void gang__pg_name_call(char *out, size_t cap, gang__coll_kind kind,
                        uint64_t seq, int rank, int size, const char *tail) {
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

void gang__pg_name_p2p(char *out, size_t cap, bool send, int peer, int tag) {
  namebuf b = {out, cap, 0};
  nb_str(&b, send ? "send to rank " : "recv from rank ");
  nb_int(&b, peer);
  nb_str(&b, " tag ");
  nb_int(&b, tag);
}

/* ---- Preparing a call ------------------------------------------------------
 */

/* The facts of a call over `size` members without shared memory, with
 * the world's link model. */
algo_facts gang__pg_tcp_facts(const pg_world *w, const gang__coll *c, int size,
                              bool spread) {
  return (algo_facts){.bytes = c->count * gang_dtype_size(c->dtype),
                      .count = c->count,
                      .size = size,
                      .alpha_ns = w->net_alpha_ns,
                      .beta_ns = w->net_beta_ns,
                      .beta_one_ns = w->net_beta_one_ns,
                      .spread = spread};
}

void gang__pg_chan_start(gang__shm_chan *ch, gang_t *g, const gang_work *w) {
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

algo_ctx gang__pg_tcp_ctx(gang__pg *p, const gang_work *w, int rank, int size,
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
      .stage = &p->scratch[1],
      .stage_cap = &p->scratch_cap[1],
  };
}

algo_call gang__pg_algo_call(const gang__coll *c) {
  return (algo_call){.out = c->out,
                     .in = c->in,
                     .count = c->count,
                     .dtype = c->dtype,
                     .op = c->op,
                     .root = c->root,
                     .out_counts = c->out_counts,
                     .in_counts = c->in_counts};
}

/* ---- The world failed ------------------------------------------------ */

void gang__pg_flight_failed(gang_t *g, const char *why) {
  gang__pg *p = g->impl;
  if (p->flight == NULL || atomic_exchange(&p->w->flight_dumped, true))
    return;
  gang__flight_dump_world(p->w, why);
}
