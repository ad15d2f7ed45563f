/* Collectives over a shared-memory channel (transport/shm.h), one file
 * each. Every algorithm is a sequence of steps that keeps the channel's
 * two rules (write a buffer of parity t&1 only after everyone published
 * t-1; finish reading step t before publishing t+1), and every member
 * publishes the same number of steps for the same call, whatever its rank.
 *
 * Two ways to move bytes:
 *   - staged: the writer copies into its staging buffer of the step's
 *     parity, readers copy (or reduce) out of it; chunks of the channel's
 *     staging size, so the working set stays in cache and a writer is at
 *     most one step ahead of its slowest reader;
 *   - single copy: a member publishes its buffer's address and readers
 *     pull from it with process_vm_readv (when the arena's probe allowed
 *     it), then everyone waits until all reads are done before returning.
 * Costs are in docs/algorithms.md. */
#ifndef GANG_ALGO_SHM_ALGO_H
#define GANG_ALGO_SHM_ALGO_H

#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "core/mix.h"
#include "core/reduce.h"
#include "gang/types.h"
#include "run.h"
#include "select.h"
#include "transport/shm.h"

/* The handlers of run.c, one per algorithm of each collective (call k as
 * run.h describes it; every member runs the same one). all_reduce is in
 * place and leaves MEAN as a SUM (the caller finishes it); all_gather's
 * `in` may alias the caller's own slot of out; reduce_scatter's out
 * receives this member's block reduced over all members (MEAN left as
 * SUM); all_to_all(_v) sends block q of in to member q. */
gang_status gang__shm_barrier_flagged(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_barrier_lines(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allreduce_flagged(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allreduce_small(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allreduce_allread(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allreduce_staged(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allreduce_single_copy(gang__shm_chan *c,
                                            const algo_call *k);
gang_status gang__shm_allreduce_measured(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_bcast_small(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_bcast_staged(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_bcast_single_copy(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_bcast_two_ends(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allgather_small(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allgather_staged(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_allgather_single_copy(gang__shm_chan *c,
                                            const algo_call *k);
gang_status gang__shm_reduce_scatter_staged(gang__shm_chan *c,
                                            const algo_call *k);
gang_status gang__shm_reduce_scatter_single_copy(gang__shm_chan *c,
                                                 const algo_call *k);
gang_status gang__shm_alltoall_staged(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_alltoall_single_copy(gang__shm_chan *c,
                                           const algo_call *k);
gang_status gang__shm_alltoallv_single_copy(gang__shm_chan *c,
                                            const algo_call *k);

gang_status gang__shm_allgather_measured(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_reduce_scatter_measured(gang__shm_chan *c,
                                              const algo_call *k);
gang_status gang__shm_bcast_measured(gang__shm_chan *c, const algo_call *k);
gang_status gang__shm_alltoall_measured(gang__shm_chan *c, const algo_call *k);

/* Measured ways (shm_way.c): where two members choose per call between
 * staged chunks and single copy by timing both. gang__shm_way_agree is
 * one flagged step in which the members agree on the way for a call of
 * `bytes` of this kind (and starts its clock), `direct` saying whether
 * this member's buffer would go direct in the staged way (shm.h, "Direct
 * steps"); gang__shm_way_learn, once the call is done, keeps its time
 * for the next agreeing step of the kind, where every member keeps the
 * slowest member's. */
typedef enum gang__shm_way_kind {
  GANG__SHM_WAY_ALL_REDUCE,
  GANG__SHM_WAY_ALL_GATHER_IN, /* in place */
  GANG__SHM_WAY_ALL_GATHER_OUT,
  GANG__SHM_WAY_REDUCE_SCATTER,
  GANG__SHM_WAY_BROADCAST,
  GANG__SHM_WAY_ALL_TO_ALL,
} gang__shm_way_kind;
/* DIRECT: staged, every member's buffer from gang_mem_alloc, so nothing
 * is staged and there is nothing to measure (no copy is cheaper). */
enum {
  GANG__SHM_WAY_STAGED = 0,
  GANG__SHM_WAY_SINGLE_COPY = 1,
  GANG__SHM_WAY_DIRECT = 2
};
_Static_assert(GANG__SHM_WAY_ALL_TO_ALL < GANG__SHM_WAY_KINDS,
               "shm.h keeps times for every kind");
gang_status gang__shm_way_agree(gang__shm_chan *c, gang__shm_way_kind kind,
                                size_t bytes, bool direct, int *way);
void gang__shm_way_learn(gang__shm_chan *c, gang__shm_way_kind kind, int way,
                         size_t bytes);
/* As gang__shm_way_agree without `direct`, for calls too short to pay for
 * that step each time: it runs only when a choice is due (the first after
 * the trials, then once every GANG__WAY_RETRY calls of the size class), and
 * the other calls take the trial's way, the retry's or the last agreed,
 * which follow from the calls every member has made alike. */
gang_status gang__shm_way_sparse(gang__shm_chan *c, gang__shm_way_kind kind,
                                 size_t bytes, int *way);

/* What the table needs to know of a channel for a call of `bytes` (see
 * select.h for what bytes means per collective) and `count` elements. */
static inline algo_facts shm_facts(const gang__shm_chan *c, size_t bytes,
                                   size_t count) {
  return (algo_facts){.bytes = bytes,
                      .count = count,
                      .size = c->size,
                      .cma = c->cma,
                      .oversubscribed = c->oversubscribed,
                      .crowded = c->crowded,
                      .cma_forced = c->cma_oversubscribed};
}

/* Flagged lines (shm_ll.c): a member's small slot of a step written as
 * cache lines of SHM_LL_DATA bytes of data and a flag stored after them
 * (release). The flag names the step and the call's signature. */
typedef struct shm_ll_line {
  unsigned char data[56];
  _Atomic uint64_t flag;
} shm_ll_line;

_Static_assert(sizeof(shm_ll_line) == 64, "a flagged line is a cache line");

#define SHM_LL_DATA sizeof(((shm_ll_line *)0)->data)
/* Most bytes one flagged step carries. */
#define SHM_LL_MAX (GANG_SHM_SMALL / sizeof(shm_ll_line) * SHM_LL_DATA)

/* Step t and signature sig as one word: t xor a mix of sig (a bijection),
 * so two calls that disagree differ in the high bits whatever their
 * steps, and a line left from an earlier step never matches. */
static inline uint64_t shm_ll_flag(uint64_t t, uint64_t sig) {
  return t ^ gang__mix64(sig);
}

static inline shm_ll_line *shm_ll_slot(gang__shm_chan *c, int member,
                                       uint64_t t) {
  return (shm_ll_line *)(void *)c->ctl[member]->small[GANG_SHM_LINE(t)];
}

/* One flagged step: writes `bytes` (1 to SHM_LL_MAX) from src into this
 * member's lines, publishes, and returns once every member's lines of the step
 * are complete (*step: the step, for gang__shm_ll_gather). Polls the lines
 * first, then waits on the step lines, which sleeps, keeps the deadline and
 * reports a member running another call as GANG_MISMATCH. */
gang_status gang__shm_ll_step(gang__shm_chan *c, const void *src, size_t bytes,
                              uint64_t *step);
/* Copies member's `bytes` of step t out of its flagged lines. */
void gang__shm_ll_gather(void *dst, gang__shm_chan *c, int member, uint64_t t,
                         size_t bytes);

/* Staged steps carry at most this many bytes for one destination when a
 * step serves every member (all_to_all, reduce_scatter): the staging
 * buffer split in size parts, whole elements. */
static inline size_t shm_part(const gang__shm_chan *c, size_t es) {
  size_t p = c->chunk / (size_t)c->size / es * es;
  return p ? p : es;
}

/* dst = s[0] op s[1] op ... op s[n-1], in rank order, count elements
 * (so every member that reduces the same data gets the same bits). dst
 * may be s[0] or s[1] (not a later one: it is written before those are
 * read); with one member it is a copy. */
static inline void shm_reduce_members(void *dst, unsigned char *const *s, int n,
                                      size_t count, gang_dtype dt,
                                      gang_reduce_op op) {
  if (n == 1) {
    if (dst != s[0])
      memcpy(dst, s[0], count * gang_dtype_size(dt));
    return;
  }
  gang__reduce3(dst, s[0], s[1], count, dt, op);
  for (int j = 2; j < n; j++)
    gang__reduce(dst, s[j], count, dt, op);
}

#endif
