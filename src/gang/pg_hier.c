/* Gangs over several hosts whose ranks share memory on each: all_reduce,
 * broadcast and barrier run inside each host over shared memory and
 * between hosts over TCP among one leader per host (its lowest gang rank),
 * and so does all_gather where the hosts hold equal blocks of consecutive
 * ranks; reduce_scatter on such layouts goes between hosts along rails
 * (the members with one local index). The other collectives run flat over
 * TCP (pg_exec.c). Costs in docs/algorithms.md, "Gangs over several
 * hosts". */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/shm_algo.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/mix.h"
#include "pg_internal.h"

static const char *kind_name(int kind) {
  return gang__coll_name((gang__coll_kind)kind);
}

void gang__pg_hier_free(pg_hier *h) {
  if (h == NULL)
    return;
  gang__shm_chan_detach(h->local);
  free(h->leaders);
  free(h->senders);
  free(h->host_of);
  free(h->local_of);
  free(h->rail);
  free(h);
}

/* Local: every member computes the same plan from the world's host
 * table. */
gang_status gang__pg_hier_new(pg_world *w, const int *map, int size, int rank,
                              uint64_t ctx, pg_hier **out) {
  *out = NULL;
  if (!w->shm_everywhere || w->hosts == NULL || size < 3)
    return GANG_OK;
  pg_hier *h = calloc(1, sizeof *h);
  int *hid = malloc(sizeof *hid * (size_t)size); /* world host of index */
  int *local = malloc(sizeof *local * (size_t)size);
  if (h == NULL || hid == NULL || local == NULL)
    goto oom;
  h->leaders = malloc(sizeof *h->leaders * (size_t)size);
  h->senders = malloc(sizeof *h->senders * (size_t)size);
  h->host_of = malloc(sizeof *h->host_of * (size_t)size);
  h->local_of = calloc((size_t)size, sizeof *h->local_of);
  if (h->leaders == NULL || h->senders == NULL || h->host_of == NULL ||
      h->local_of == NULL)
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
    gang__pg_hier_free(h);
    return GANG_OK;
  }
  for (int k = 0; k < h->nhosts; k++)
    if (count[k] > h->per_host)
      h->per_host = count[k];
  h->my_host = h->host_of[rank];
  h->leader = h->local_of[rank] == 0;
  bool even = size % h->nhosts == 0;
  for (int k = 0; k < h->nhosts && even; k++)
    even = count[k] == size / h->nhosts;
  h->blocks = even;
  for (int i = 0; i < size && h->blocks; i++)
    h->blocks = h->host_of[i] == i / (size / h->nhosts) &&
                h->local_of[i] == i % (size / h->nhosts);
  int n = 0;
  for (int i = 0; i < size; i++)
    if (h->host_of[i] == h->my_host)
      local[n++] = map[i];
  h->ctx = gang__mix64(ctx ^ 0x6869657261726368ull) & ~PG_P2P_CTX_BIT;
  if (even) {
    int l = h->local_of[rank];
    h->rail = malloc(sizeof *h->rail * (size_t)h->nhosts);
    if (h->rail == NULL)
      goto oom;
    for (int i = 0; i < size; i++)
      if (h->local_of[i] == l)
        h->rail[h->host_of[i]] = map[i];
    h->rail_ctx = gang__mix64(ctx ^ 0x7261696c00000000ull ^ (uint64_t)l) &
                  ~PG_P2P_CTX_BIT;
  }
  if (n > 1) {
    gang_status st = gang__shm_chan_attach(w->shm, h->ctx, local, n,
                                           h->local_of[rank], &h->local);
    if (st != GANG_OK) {
      free(hid);
      free(local);
      gang__pg_hier_free(h);
      return st;
    }
    h->local->kind_name = kind_name;
    h->local->host_part = true;
  }
  free(hid);
  free(local);
  GANG_INFO(SHM,
            "gang of %d ranks over %d hosts: hierarchical all_reduce%s, "
            "broadcast, barrier%s (%d members here%s)",
            size, h->nhosts, even ? " (leaders or rails)" : "",
            h->blocks ? ", all_gather and reduce_scatter" : "", n,
            h->leader ? ", leader" : "");
  *out = h;
  return GANG_OK;
oom:
  free(hid);
  free(local);
  gang__pg_hier_free(h);
  return gang__error(GANG_NO_MEMORY, "gang: out of memory");
}

/* The shared-memory algorithm for one local part of a hierarchical call:
 * as a channel of its own would choose; a forced algorithm of another path
 * leaves it the table's choice. */
static algo_id local_algo(gang__pg *p, algo_coll coll, size_t bytes,
                          size_t count) {
  algo_facts f = shm_facts(p->hier->local, bytes, count);
  algo_id a = gang__algo_select(&p->w->choice, coll, ALGO_PATH_SHM, &f);
  return a != ALGO_AUTO ? a : gang__algo_select(NULL, coll, ALGO_PATH_SHM, &f);
}

/* The TCP algorithm among the leaders: the table's for nhosts members (a
 * forced one when it can run there). */
static algo_id leaders_algo(gang__pg *p, algo_coll coll, const gang__coll *c) {
  algo_facts f = gang__pg_tcp_facts(p->w, c, p->hier->nhosts, true);
  return gang__algo_select(&p->w->choice, coll, ALGO_PATH_TCP, &f);
}

/* Runs k over TCP on ctx a with the table's algorithm for facts f (or
 * the faster of a close call's two, where a keeps a record). */
static gang_status run_tcp(gang__pg *p, algo_ctx *a, algo_coll coll,
                           const algo_facts *f, const algo_call *k) {
  algo_id first = gang__algo_select(&p->w->choice, coll, ALGO_PATH_TCP, f), ran;
  return gang__algo_run_tcp_timed(a, &p->w->choice, coll, f, first, k, &ran);
}

bool gang__pg_hier_has(const pg_hier *h, gang__coll_kind kind) {
  return kind == GANG_COLL_ALL_REDUCE || kind == GANG_COLL_BROADCAST ||
         kind == GANG_COLL_BARRIER ||
         ((kind == GANG_COLL_ALL_GATHER || kind == GANG_COLL_REDUCE_SCATTER) &&
          h->blocks);
}

/* The rails' all_reduce (equal hosts of per members, count a multiple of
 * per): a reduce_scatter in the host leaves local member l the host's sum
 * of part l of the buffer, in place; an all_reduce along rail l, every
 * rail at once, makes it the total; an all_gather in the host gives every
 * member every part. A host's link carries per flows of a part each, as
 * many bytes as the leader's one flow of the whole, but the local steps
 * copy the buffer once fewer and the TCP steps' reduces are shared. */
static gang_status rails_all_reduce(gang_t *g, gang_work *w, algo_ctx *r,
                                    const algo_call *k) {
  gang__pg *p = g->impl;
  pg_hier *h = p->hier;
  int per = g->size / h->nhosts;
  size_t part = k->count / (size_t)per;
  size_t es = gang_dtype_size(k->dtype);
  char *mine = (char *)k->out + (size_t)h->local_of[g->rank] * part * es;
  algo_call in_host = *k, along = *k, back = *k;
  in_host.in = k->out;
  in_host.out = mine;
  in_host.count = part;
  GANG_CHECK(gang__algo_run_shm(
      h->local, ALGO_REDUCE_SCATTER,
      local_algo(p, ALGO_REDUCE_SCATTER, part * es, part), &in_host));
  along.out = mine;
  along.in = mine;
  along.count = part;
  algo_facts f = gang__pg_tcp_facts(p->w, &w->coll, h->nhosts, true);
  f.bytes = part * es;
  f.count = part;
  f.beta_ns *= per; /* every rail sends at once */
  f.beta_one_ns = 0;
  GANG_CHECK(run_tcp(p, r, ALGO_ALL_REDUCE, &f, &along));
  back.in = mine;
  back.count = part;
  return gang__algo_run_shm(h->local, ALGO_ALL_GATHER,
                            local_algo(p, ALGO_ALL_GATHER, part * es, part),
                            &back);
}

bool gang__pg_execute_hier(gang_t *g, gang_work *w, algo_id algo,
                           gang_status *st) {
  gang__pg *p = g->impl;
  pg_hier *h = p->hier;
  const gang__coll *c = &w->coll;
  if (!gang__pg_hier_has(h, c->kind))
    return false;
  algo_coll coll = c->kind == GANG_COLL_ALL_REDUCE   ? ALGO_ALL_REDUCE
                   : c->kind == GANG_COLL_BROADCAST  ? ALGO_BROADCAST
                   : c->kind == GANG_COLL_BARRIER    ? ALGO_BARRIER
                   : c->kind == GANG_COLL_ALL_GATHER ? ALGO_ALL_GATHER
                                                     : ALGO_REDUCE_SCATTER;
  gang__shm_chan *ch = h->local;
  size_t bytes = c->count * gang_dtype_size(c->dtype);
  int64_t deadline = gang__deadline_in_ms(g->timeout_ms);
  if (ch != NULL) {
    gang__pg_chan_start(ch, g, w);
    ch->deadline = deadline; /* one clock for the local and TCP parts */
  }
  char what[64];
  gang__pg_name_call(what, sizeof what, c->kind, w->seq, g->rank, g->size,
                     ", hosts");
  algo_ctx a = gang__pg_tcp_ctx(p, w, h->my_host, h->nhosts, h->leaders, h->ctx,
                                deadline, what);
  a.way = &p->way_leaders;
  a.timed = &p->timed_leaders;
  algo_call k = gang__pg_algo_call(c);
  algo_id ta = leaders_algo(p, coll, c);
  *st = GANG_OK;
  switch (coll) {
  case ALGO_BARRIER: {
    algo_id la = ch != NULL ? local_algo(p, ALGO_BARRIER, 0, 0) : ALGO_AUTO;
    if (ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_BARRIER, la, &k);
    if (*st == GANG_OK && h->leader)
      *st = gang__algo_run_tcp(&a, ALGO_BARRIER, ta, &k);
    if (*st == GANG_OK && ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_BARRIER, la, &k);
    return true;
  }
  case ALGO_ALL_REDUCE: {
    if (algo == ALGO_HIER_RAILS) {
      algo_ctx r = gang__pg_tcp_ctx(p, w, h->my_host, h->nhosts, h->rail,
                                    h->rail_ctx, deadline, what);
      r.way = &p->way_rail;
      r.timed = &p->timed_rail;
      *st = rails_all_reduce(g, w, &r, &k);
      return true;
    }
    /* Reduced in the host, among the leaders, then the host's leader
     * (local member 0) broadcasts the result. */
    algo_call from_leader = k;
    from_leader.root = 0;
    if (ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_ALL_REDUCE,
                               local_algo(p, ALGO_ALL_REDUCE, bytes, c->count),
                               &k);
    if (*st == GANG_OK && h->leader) {
      algo_facts f = gang__pg_tcp_facts(p->w, c, h->nhosts, true);
      *st = run_tcp(p, &a, ALGO_ALL_REDUCE, &f, &k);
    }
    if (*st == GANG_OK && ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_BROADCAST,
                               local_algo(p, ALGO_BROADCAST, bytes, c->count),
                               &from_leader);
    return true;
  }
  case ALGO_BROADCAST: {
    /* Between hosts the root stands for its host (it has the data) and
     * the leaders for theirs; then every host broadcasts from the one that
     * took part, all at once: one network step and one shared-memory step
     * on the way to any member. */
    int root_host = h->host_of[c->root];
    bool mine = h->my_host == root_host;
    algo_call among = k, in_host = k;
    among.root = root_host;
    in_host.root = mine ? h->local_of[c->root] : 0;
    if (mine ? g->rank == c->root : h->leader) {
      memcpy(h->senders, h->leaders, sizeof *h->senders * (size_t)h->nhosts);
      h->senders[root_host] = p->map[c->root];
      algo_ctx s = gang__pg_tcp_ctx(p, w, h->my_host, h->nhosts, h->senders,
                                    h->ctx, deadline, what);
      *st = gang__algo_run_tcp(&s, ALGO_BROADCAST, ta, &among);
    }
    if (*st == GANG_OK && ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_BROADCAST,
                               local_algo(p, ALGO_BROADCAST, bytes, c->count),
                               &in_host);
    return true;
  }
  case ALGO_ALL_GATHER: {
    /* Blocks of consecutive ranks per host: the host's members gather
     * their blocks into the host's part of out, the leaders gather the
     * hosts' parts in place, and each leader gives its host the whole. */
    int per = g->size / h->nhosts;
    size_t part = bytes * (size_t)per;
    char *out = c->out;
    algo_call in_host = k, among = k, from_leader = k;
    in_host.out = out + (size_t)h->my_host * part;
    among.in = in_host.out;
    among.count = c->count * (size_t)per;
    from_leader.root = 0;
    from_leader.count = c->count * (size_t)g->size;
    if (ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_ALL_GATHER,
                               local_algo(p, ALGO_ALL_GATHER, bytes, c->count),
                               &in_host);
    else if (in_host.out != (char *)c->in && bytes)
      memmove(in_host.out, c->in, bytes); /* alone on its host */
    if (*st == GANG_OK && h->leader) {
      algo_facts f = gang__pg_tcp_facts(p->w, c, h->nhosts, true);
      f.bytes = part;
      f.count = among.count;
      *st = run_tcp(p, &a, ALGO_ALL_GATHER, &f, &among);
    }
    if (*st == GANG_OK && ch != NULL)
      *st = gang__algo_run_shm(ch, ALGO_BROADCAST,
                               local_algo(p, ALGO_BROADCAST,
                                          part * (size_t)h->nhosts,
                                          from_leader.count),
                               &from_leader);
    return true;
  }
  case ALGO_REDUCE_SCATTER: {
    /* Blocks of consecutive ranks per host (per members each). The input's
     * blocks are packed by local index, so that a reduce_scatter inside
     * the host leaves member l the host's sums of the blocks of every
     * host's member l; a reduce_scatter along the rail (member l of every
     * host) then leaves each member its own block's total. */
    int per = g->size / h->nhosts;
    size_t chunk = bytes * (size_t)h->nhosts;
    char *stage;
    *st =
        gang__algo_stage(&a, (size_t)g->size * bytes + chunk, (void **)&stage);
    if (*st != GANG_OK)
      return true;
    char *mine = stage + (size_t)g->size * bytes;
    const char *in = c->in;
    for (int hp = 0; hp < h->nhosts && bytes; hp++) /* in may be NULL at 0 */
      for (int lp = 0; lp < per; lp++)
        memcpy(stage + ((size_t)lp * (size_t)h->nhosts + (size_t)hp) * bytes,
               in + ((size_t)hp * (size_t)per + (size_t)lp) * bytes, bytes);
    algo_call in_host = k, along = k;
    in_host.in = stage;
    in_host.out = mine;
    in_host.count = c->count * (size_t)h->nhosts;
    along.in = mine;
    if (ch != NULL)
      *st = gang__algo_run_shm(
          ch, ALGO_REDUCE_SCATTER,
          local_algo(p, ALGO_REDUCE_SCATTER, chunk, in_host.count), &in_host);
    else
      along.in = stage; /* alone on its host: its packed input is its part */
    if (*st == GANG_OK) {
      algo_ctx r = gang__pg_tcp_ctx(p, w, h->my_host, h->nhosts, h->rail,
                                    h->rail_ctx, deadline, what);
      r.timed = &p->timed_rail;
      algo_facts f = gang__pg_tcp_facts(p->w, c, h->nhosts, true);
      f.beta_ns *= per; /* every rail sends at once, as select.c prices */
      f.beta_one_ns = 0;
      *st = run_tcp(p, &r, ALGO_REDUCE_SCATTER, &f, &along);
    }
    return true;
  }
  default:
    return false;
  }
}
