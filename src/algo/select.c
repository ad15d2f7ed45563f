/* The algorithm table (select.h). Each rule names an algorithm for a
 * collective on a path, with two kinds of conditions: limits the algorithm
 * cannot run without (a flagged step holds 504 bytes, a small slot 1 KiB,
 * single copy needs the arena's permission, two ends need two members),
 * which also bind GANG_ALGO's forced choices, and the range where the table
 * prefers it, measured on the machine of docs/performance.md (the reasons
 * are in docs/algorithms.md and in each algorithm's file). */
#include "select.h"

#include <stdint.h>
#include <string.h>

#include "core/error.h"

/* Hard limits. */
#define NEED_CMA 1u      /* single copy allowed by the arena's probe */
#define NEED_TWO 2u      /* exactly two members */
#define NEED_COUNT 4u    /* at least one element per member */
#define NEED_RAILS 2048u /* equal hosts, and a whole part per local index */
/* Preferences. Single copy only where every member has a CPU (unless
 * GANG_SHM_CMA=1 forces it): it costs two rounds in which every member
 * must run (publish the addresses, report the reads done), each a round of
 * context switches when ranks outnumber CPUs, where staged chunks let a
 * member run one chunk ahead; with 4, 8 and 16 ranks on 2 cores staging
 * measured 1.2-2.3x faster for broadcast, all_reduce, all_gather and
 * reduce_scatter from 256 KiB to 16 MiB (docs/algorithms.md). */
#define WHEN_ROOMY 8u       /* not oversubscribed, or single copy forced */
#define WHEN_NOT_OVER 16u   /* not oversubscribed */
#define WHEN_THREE_UP 32u   /* three members or more */
#define WHEN_TWO 64u        /* two members */
#define WHEN_FEW_ELEMS 128u /* fewer elements than members */
/* The cheapest, by the link model, of the collective's rules on the path
 * that carry this flag and can run (ties: the first). */
#define WHEN_CHEAPEST 256u
/* Only where the members are on two hosts or more (algo_facts.spread):
 * an algorithm that measured slower over one host's loopback than the
 * one the table takes there (docs/algorithms.md). */
#define WHEN_SPREAD 512u
/* The two-level form where the link model prices it at most flat TCP's
 * time for the same gang (or where there is no model). */
#define WHEN_BEATS_FLAT 1024u
/* At most two local ranks per CPU: a step at which every member must run
 * costs a round of context switches that grows with the ranks per CPU
 * (the measured ways agree in one before each call). */
#define WHEN_NOT_CROWDED 4096u

#define ANY SIZE_MAX
#define KIB ((size_t)1024)
#define MIB ((size_t)1024 * 1024)

typedef struct algo_rule {
  algo_coll coll;
  algo_path path;
  algo_id algo;
  size_t hard_max;             /* largest size it can run at */
  size_t min_bytes, max_bytes; /* preferred range */
  unsigned flags;
} algo_rule;

/* Rules in order of preference per collective and path. */
static const algo_rule rules[] = {
    /* ---- shared memory ---- */
    {ALGO_BARRIER, ALGO_PATH_SHM, ALGO_SHM_FLAGGED, ANY, 0, ANY, WHEN_NOT_OVER},
    {ALGO_BARRIER, ALGO_PATH_SHM, ALGO_SHM_LINES, ANY, 0, ANY, 0},
    {ALGO_ALL_REDUCE, ALGO_PATH_SHM, ALGO_SHM_FLAGGED, 504, 0, 504, 0},
    {ALGO_ALL_REDUCE, ALGO_PATH_SHM, ALGO_SHM_SMALL, KIB, 0, KIB, 0},
    {ALGO_ALL_REDUCE, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, MIB, ANY,
     NEED_CMA | NEED_COUNT | WHEN_ROOMY | WHEN_THREE_UP},
    {ALGO_ALL_REDUCE, ALGO_PATH_SHM, ALGO_SHM_ALLREAD, ANY, 0, 16 * KIB, 0},
    {ALGO_ALL_REDUCE, ALGO_PATH_SHM, ALGO_SHM_MEASURED, ANY, 16 * MIB, ANY,
     NEED_CMA | NEED_COUNT | WHEN_ROOMY},
    {ALGO_ALL_REDUCE, ALGO_PATH_SHM, ALGO_SHM_STAGED, ANY, 0, ANY, 0},
    {ALGO_BROADCAST, ALGO_PATH_SHM, ALGO_SHM_SMALL, KIB, 0, KIB, 0},
    {ALGO_BROADCAST, ALGO_PATH_SHM, ALGO_SHM_TWO_ENDS, ANY, 64 * KIB, ANY,
     NEED_CMA | NEED_TWO | WHEN_ROOMY},
    {ALGO_BROADCAST, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, 64 * KIB, ANY,
     NEED_CMA | WHEN_ROOMY},
    /* Two members below that: staging measured faster on the AMD machine
     * (32 KiB: 2.7-4.5 us against Open MPI's 4.3-5.0), two ends 2-3x
     * faster on the Intel one (32 KiB: 1.7-2.3 against 5.5-6.5), so they
     * measure both (shm_way.c). Below 32 KiB a slotted step, whose root
     * runs ahead, is the faster on the Intel one too (back to back, 8-16
     * KiB: 1.0-1.3 us against two ends' 1.5-1.7; 32 KiB 2.3 against
     * 1.8-1.9). */
    {ALGO_BROADCAST, ALGO_PATH_SHM, ALGO_SHM_MEASURED, ANY, 32 * KIB, ANY,
     NEED_CMA | NEED_TWO | WHEN_ROOMY},
    {ALGO_BROADCAST, ALGO_PATH_SHM, ALGO_SHM_STAGED, ANY, 0, ANY, 0},
    /* Two members, and members that outnumber the CPUs up to two per CPU:
     * which is faster depends on the machine and its memory state (2 MiB
     * blocks in place on the AMD machine: staging 1.1-1.6x faster in one
     * state, 4-5x slower in another; below 128 KiB blocks staging was
     * faster there in every state, and with 4-16 ranks on its 2 cores
     * 1.2-2.3x; on the Intel one single copy 1.5-2.4x faster from 8 KiB at
     * 2 ranks, and at 4 ranks on 2 cores 1.5-2x from 256 KiB blocks), so
     * they measure both (shm_way.c). With 8 ranks on 2 cores the step that
     * agrees on the way cost more than the choice saved (16 KiB-256 KiB
     * blocks 1.1-1.7x slower than staging alone). */
    {ALGO_ALL_GATHER, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, 32 * KIB, ANY,
     NEED_CMA | WHEN_ROOMY | WHEN_THREE_UP},
    {ALGO_ALL_GATHER, ALGO_PATH_SHM, ALGO_SHM_MEASURED, ANY, 16 * KIB, ANY,
     NEED_CMA | WHEN_NOT_CROWDED},
    {ALGO_ALL_GATHER, ALGO_PATH_SHM, ALGO_SHM_SMALL, KIB, 0, KIB, 0},
    {ALGO_ALL_GATHER, ALGO_PATH_SHM, ALGO_SHM_STAGED, ANY, 0, ANY, 0},
    /* Two members, and members that outnumber the CPUs up to two per CPU:
     * on the AMD machine staging is 2-4.5x faster at every size (a pull of
     * 64 KiB pieces moves under 3 GB/s there), on the Intel one single
     * copy 1.3-2x faster from 8 KiB blocks at 2 ranks and 1.2-1.9x from 64
     * KiB at 4 on 2 cores: they measure both (shm_way.c). */
    {ALGO_REDUCE_SCATTER, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, 256 * KIB,
     ANY, NEED_CMA | WHEN_ROOMY | WHEN_THREE_UP},
    {ALGO_REDUCE_SCATTER, ALGO_PATH_SHM, ALGO_SHM_MEASURED, ANY, 16 * KIB, ANY,
     NEED_CMA | WHEN_NOT_CROWDED},
    {ALGO_REDUCE_SCATTER, ALGO_PATH_SHM, ALGO_SHM_STAGED, ANY, 0, ANY, 0},
    {ALGO_ALL_TO_ALL, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, 16 * KIB, ANY,
     NEED_CMA | WHEN_ROOMY},
    /* Oversubscribed, single copy still wins blocks from 256 KiB (16 ranks
     * on 2 cores, 256 KiB and 1 MiB blocks: 1.2x). Below, on the AMD
     * machine staging was as fast or up to 3x faster; on the Intel one
     * single copy 1.4-1.8x faster from 16-32 KiB blocks at 8 and 16 ranks
     * on 2 cores (8 KiB blocks 1.1x slower, 4 ranks level): they measure
     * both, agreeing only when a choice is due (shm_way.c). */
    {ALGO_ALL_TO_ALL, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, 256 * KIB, ANY,
     NEED_CMA},
    {ALGO_ALL_TO_ALL, ALGO_PATH_SHM, ALGO_SHM_MEASURED, ANY, 16 * KIB, ANY,
     NEED_CMA},
    {ALGO_ALL_TO_ALL, ALGO_PATH_SHM, ALGO_SHM_STAGED, ANY, 0, ANY, 0},
    /* Variable blocks have no staged form: without single copy they go
     * over TCP. */
    {ALGO_ALL_TO_ALL_V, ALGO_PATH_SHM, ALGO_SHM_SINGLE_COPY, ANY, 0, ANY,
     NEED_CMA},
    /* ---- several hosts ---- */
    {ALGO_BARRIER, ALGO_PATH_HIER, ALGO_HIER, ANY, 0, ANY, WHEN_BEATS_FLAT},
    /* Through one leader per host, or along every rail at once: the
     * cheaper by the link model. Below 1 MiB the rails' form measured
     * slower on the box's 4 hosts of 2 ranks (every rank's TCP steps on
     * the machine's 2 CPUs: 256 KiB 1.0 against 0.74 ms) and no faster
     * across 1 Gbit/s links, where at 2 MiB it was 9 % faster
     * (docs/algorithms.md). */
    {ALGO_ALL_REDUCE, ALGO_PATH_HIER, ALGO_HIER, ANY, 0, ANY,
     WHEN_BEATS_FLAT | WHEN_CHEAPEST},
    {ALGO_ALL_REDUCE, ALGO_PATH_HIER, ALGO_HIER_RAILS, ANY, MIB, ANY,
     NEED_RAILS | WHEN_BEATS_FLAT | WHEN_CHEAPEST},
    {ALGO_BROADCAST, ALGO_PATH_HIER, ALGO_HIER, ANY, 0, ANY, WHEN_BEATS_FLAT},
    /* Where hosts hold equal blocks of consecutive ranks (pg_hier.c). */
    {ALGO_ALL_GATHER, ALGO_PATH_HIER, ALGO_HIER, ANY, 0, ANY, WHEN_BEATS_FLAT},
    /* reduce_scatter in two levels where the link model prices it at
     * most flat TCP: with blocks of 128 KiB to 8 MiB it measured 0.55-0.98x
     * the flat ring's time on the box's 4 hosts of 2 ranks, and with 256
     * KiB to 16 MiB 0.75-1.08x on 2 hosts of 2 (docs/shm.md). */
    {ALGO_REDUCE_SCATTER, ALGO_PATH_HIER, ALGO_HIER, ANY, 0, ANY,
     WHEN_BEATS_FLAT},
    /* ---- TCP ---- */
    {ALGO_BARRIER, ALGO_PATH_TCP, ALGO_TCP_DISSEMINATION, ANY, 0, ANY, 0},
    /* Two ranks: recursive doubling below 64 KiB (one exchange), from
     * there whichever of it and halving-doubling the two measure faster
     * (both move n bytes each way; which wins is the machine's:
     * allreduce_measured.c, docs/algorithms.md). Otherwise the cheapest by
     * the link model. */
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_RD, ANY, 0, 64 * KIB - 1,
     WHEN_TWO},
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_MEASURED, ANY, 64 * KIB, ANY,
     NEED_TWO},
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_RD, ANY, 0, ANY, WHEN_FEW_ELEMS},
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_RD, ANY, 0, ANY, WHEN_CHEAPEST},
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_RING, ANY, 0, ANY,
     NEED_COUNT | WHEN_CHEAPEST},
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_HD, ANY, 0, ANY,
     NEED_COUNT | WHEN_CHEAPEST},
    {ALGO_ALL_REDUCE, ALGO_PATH_TCP, ALGO_TCP_RD, ANY, 0, ANY, 0},
    /* The binomial tree, or across hosts scatter-allgather (each link
     * carries about 2 n where the tree's root sends n lg p times), by the
     * link model. On one host's loopback scatter-allgather measured 3-8x
     * slower to 256 KiB and no faster to 16 MiB at 4 and 8 ranks, where a
     * send is a copy; across 4 hosts at 1 Gbit/s it took a 256 KiB
     * broadcast in 3.9 ms against the tree's 7.9 (docs/algorithms.md). */
    {ALGO_BROADCAST, ALGO_PATH_TCP, ALGO_TCP_BINOMIAL, ANY, 0, ANY,
     WHEN_CHEAPEST},
    {ALGO_BROADCAST, ALGO_PATH_TCP, ALGO_TCP_SAG, ANY, 0, ANY,
     NEED_COUNT | WHEN_SPREAD | WHEN_CHEAPEST},
    {ALGO_BROADCAST, ALGO_PATH_TCP, ALGO_TCP_BINOMIAL, ANY, 0, ANY, 0},
    /* Bruck's lg p steps for small blocks, the ring's p - 1 (each a
     * block, no copy after) for large, by the link model. */
    {ALGO_ALL_GATHER, ALGO_PATH_TCP, ALGO_TCP_BRUCK, ANY, 0, ANY,
     WHEN_CHEAPEST},
    {ALGO_ALL_GATHER, ALGO_PATH_TCP, ALGO_TCP_RING, ANY, 0, ANY, WHEN_CHEAPEST},
    /* Recursive halving's lg p steps or the ring's p - 1, by the link
     * model. */
    {ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, ALGO_TCP_HALVING, ANY, 0, ANY,
     WHEN_CHEAPEST},
    {ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, ALGO_TCP_RING, ANY, 0, ANY,
     WHEN_CHEAPEST},
    {ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, ALGO_TCP_RING, ANY, 0, ANY, 0},
    {ALGO_ALL_TO_ALL, ALGO_PATH_TCP, ALGO_TCP_PAIRWISE, ANY, 0, ANY, 0},
    {ALGO_ALL_TO_ALL_V, ALGO_PATH_TCP, ALGO_TCP_PAIRWISE, ANY, 0, ANY, 0},
};

#define NRULES (sizeof rules / sizeof rules[0])

static const char *const algo_names[] = {
#define ALGO_NAME(id, name, doc) name,
    ALGO_LIST(ALGO_NAME)
#undef ALGO_NAME
};

static const char *const algo_docs[] = {
#define ALGO_DOC(id, name, doc) doc,
    ALGO_LIST(ALGO_DOC)
#undef ALGO_DOC
};

static const char *const coll_names[ALGO_COLL_COUNT] = {
    "barrier",        "all_reduce", "broadcast",   "all_gather",
    "reduce_scatter", "all_to_all", "all_to_all_v"};

static const char *const path_names[ALGO_PATH_COUNT] = {"shared memory",
                                                        "several hosts", "TCP"};

const char *gang__algo_name(algo_id a) {
  return (unsigned)a < ALGO_COUNT ? algo_names[a] : "?";
}

const char *gang__algo_coll_name(algo_coll c) {
  return (unsigned)c < ALGO_COLL_COUNT ? coll_names[c] : "?";
}

/* The rails' form splits the buffer into per_host equal parts (count
 * SIZE_MAX: not known, as gang-info's prices). */
static bool rails_fit(const algo_facts *f) {
  size_t l = f->per_host > 0 ? (size_t)f->per_host : 0;
  return f->rails && l > 1 &&
         (f->count == SIZE_MAX || (f->count >= l && f->count % l == 0));
}

static bool can_run(const algo_rule *r, const algo_facts *f) {
  return f->bytes <= r->hard_max && (!(r->flags & NEED_CMA) || f->cma) &&
         (!(r->flags & NEED_TWO) || f->size == 2) &&
         (!(r->flags & NEED_COUNT) || f->count >= (size_t)f->size) &&
         (!(r->flags & NEED_RAILS) || rails_fit(f));
}

/* A copy in memory, ns per byte: 10 GB/s, what one core of the machine of
 * docs/performance.md copies beyond its caches. */
#define COPY_NS_PER_BYTE 0.1
/* A reduce of two operands into a third, ns per byte of the result (the
 * same 10 GB/s: the vector kernels run at memory speed). */
#define REDUCE_NS_PER_BYTE 0.1

/* A step of shared memory in the two-level forms: one member's hand-over
 * to the others (a cache line crossing and a poll, about a microsecond
 * with every member on a CPU). */
#define SHM_STEP_NS 1000.0

static int ceil_lg(int p) {
  int k = 0;
  while ((1 << k) < p)
    k++;
  return k;
}

/* Whether a's steps cross hosts from every member of a host at once over
 * flat TCP: recursive doubling, halving and Bruck pair each member with
 * one 2^k ranks away, so with consecutive ranks on a host the first steps
 * put per_host messages on each host's link together. The ring's
 * neighbours are on the same host but at its ends; a binomial tree's
 * senders, and scatter-allgather's in its scatter (a binomial tree of
 * halving parts), are on distinct hosts at each crossing step; a
 * barrier's messages are empty. */
static bool shares_link(algo_id a) {
  return a == ALGO_TCP_RD || a == ALGO_TCP_HD || a == ALGO_TCP_MEASURED ||
         a == ALGO_TCP_HALVING || a == ALGO_TCP_BRUCK;
}

static double hier_cost(algo_coll coll, algo_id a, const algo_facts *f);

/* Beta of a step where 2^k of the links (a host's each) carry a flow: a
 * switch whose whole capacity gives every one of the links' flows
 * beta_ns gives 2^k of them beta_ns 2^k / links each, but none faster
 * than one flow alone (beta_one_ns). */
static double step_beta(const algo_facts *f, int k) {
  double be = f->beta_ns, one = f->beta_one_ns;
  if (one <= 0 || one >= be)
    return be;
  int links = f->hosts > 1 ? f->hosts : f->size;
  double shared = be * (double)(1 << k) / links;
  if (shared > be)
    shared = be;
  return shared > one ? shared : one;
}

double gang__algo_cost(algo_coll coll, algo_id a, const algo_facts *f) {
  /* Nothing to move: every algorithm returns at once (a barrier's
   * messages are empty, and it is priced below). */
  if (f->bytes == 0 && coll != ALGO_BARRIER)
    return 0;
  if (a == ALGO_HIER || a == ALGO_HIER_RAILS)
    return hier_cost(coll, a, f);
  double p = f->size, n = (double)f->bytes, al = f->alpha_ns, be = f->beta_ns;
  if (f->per_host > 1 && shares_link(a))
    be *= f->per_host;
  int lg = ceil_lg(f->size);
  int p2 = 1 << (lg > 0 && (1 << lg) > f->size ? lg - 1 : lg);
  switch (coll) {
  case ALGO_BARRIER:
    return a == ALGO_TCP_DISSEMINATION ? lg * al : 0;
  case ALGO_ALL_REDUCE:
    if (a == ALGO_TCP_RD) /* the ranks past p2 fold in and out: 2 more */
      return (ceil_lg(p2) + (p2 < f->size ? 2 : 0)) * (al + n * be);
    if (a == ALGO_TCP_RING)
      return 2 * (p - 1) * al + 2 * (p - 1) / p * n * be;
    if (a == ALGO_TCP_MEASURED) { /* two members: the faster of the two */
      double rd = gang__algo_cost(coll, ALGO_TCP_RD, f),
             hd = gang__algo_cost(coll, ALGO_TCP_HD, f);
      return rd < hd ? rd : hd;
    }
    /* The fold in and out as RD's, and the halving's reduces on the
     * critical path, where the pipelined ring hides its own. */
    if (a == ALGO_TCP_HD)
      return (2 * ceil_lg(p2) + (p2 < f->size ? 2 : 0)) * al +
             (2.0 * (p2 - 1) / p2 + (p2 < f->size ? 2 : 0)) * n * be +
             (double)(p2 - 1) / p2 * n * REDUCE_NS_PER_BYTE;
    return 0;
  case ALGO_BROADCAST:
    if (a == ALGO_TCP_BINOMIAL) { /* step k: 2^k senders */
      double t = 0;
      for (int k = 0; k < lg; k++)
        t += al + n * step_beta(f, k);
      return t;
    }
    if (a == ALGO_TCP_SAG)
      return (lg + p - 1) * al + 2 * (p - 1) / p * n * be;
    return 0;
  case ALGO_REDUCE_SCATTER: /* n: one member's block; both reduce as
                                they receive, nothing overlapped; the
                                ring reads its input in place, the
                                halving copies it in (and its block out) */
    if (a == ALGO_TCP_RING)
      return (p - 1) * (al + n * be + n * REDUCE_NS_PER_BYTE);
    if (a == ALGO_TCP_HALVING) {
      double big = p * n, fold = p2 < f->size ? 1 : 0;
      return (ceil_lg(p2) + 2 * fold) * al +
             ((double)(p2 - 1) / p2 * big + fold * (big + n)) * be +
             ((double)(p2 - 1) / p2 * big + fold * big) * REDUCE_NS_PER_BYTE +
             (big + n) * COPY_NS_PER_BYTE;
    }
    return 0;
  case ALGO_ALL_GATHER: /* n: one member's block */
    if (a == ALGO_TCP_RING)
      return (p - 1) * (al + n * be);
    /* and one copy of the whole result into place */
    if (a == ALGO_TCP_BRUCK)
      return lg * al + (p - 1) * n * be + p * n * COPY_NS_PER_BYTE;
    return 0;
  default:
    return 0;
  }
}

/* The rails' all_reduce of pg_hier.c: a reduce_scatter in the host (each
 * member stages its whole input and reduces its part from every member's
 * copy), an all_reduce of each part along its rail, the rails at once, so
 * a host's link carries per_host flows of a part each, and an all_gather
 * in the host (each member copies its part in and the others' out). */
static double rails_cost(const algo_facts *f) {
  int l = f->per_host;
  double n = (double)f->bytes;
  algo_facts along = *f;
  along.size = f->hosts;
  along.hosts = along.per_host = 0;
  along.rails = false;
  along.spread = true; /* one member per host */
  along.bytes = f->bytes / (size_t)l;
  along.count = f->count == SIZE_MAX ? SIZE_MAX : f->count / (size_t)l;
  along.beta_ns = f->beta_ns * l;
  along.beta_one_ns = 0; /* every rail sends at once */
  return SHM_STEP_NS + n * COPY_NS_PER_BYTE +
         (l - 1.0) / l * n * REDUCE_NS_PER_BYTE +
         gang__algo_cost_path(ALGO_ALL_REDUCE, ALGO_PATH_TCP, &along) +
         SHM_STEP_NS + n * COPY_NS_PER_BYTE;
}

/* The two-level forms of pg_hier.c, step by step: the local steps among a
 * host's l members (none where l is 1) as SHM_STEP_NS each and their
 * copies and reduces at memory speed (a local broadcast one copy: the
 * members copy a chunk out while the root copies the next in), the TCP
 * part as the table's algorithm among the h leaders (or along a rail)
 * with a link each. */
static double hier_cost(algo_coll coll, algo_id a, const algo_facts *f) {
  if (f->hosts < 2 || f->per_host < 1 || f->alpha_ns <= 0)
    return 0;
  if (a == ALGO_HIER_RAILS)
    return coll == ALGO_ALL_REDUCE ? rails_cost(f) : 0;
  int h = f->hosts, l = f->per_host;
  double n = (double)f->bytes, p = f->size;
  double s = l > 1 ? SHM_STEP_NS : 0, c = l > 1 ? COPY_NS_PER_BYTE : 0;
  double r = l > 1 ? REDUCE_NS_PER_BYTE : 0;
  algo_facts among = *f;
  among.size = h;
  among.hosts = among.per_host = 0;
  among.spread = true; /* one leader per host */
  switch (coll) {
  case ALGO_BARRIER: /* the host's, the leaders', the host's again */
    return 2 * s + gang__algo_cost_path(coll, ALGO_PATH_TCP, &among);
  case ALGO_ALL_REDUCE: /* staged in, each member's part reduced, copied
                           out; among the leaders; the leader's result
                           broadcast */
    return 2 * s + n * (2 * c + (l - 1.0) / l * r) +
           gang__algo_cost_path(coll, ALGO_PATH_TCP, &among) + s + n * c;
  case ALGO_BROADCAST: /* among the root and the leaders, then each host */
    return gang__algo_cost_path(coll, ALGO_PATH_TCP, &among) + s + n * c;
  case ALGO_ALL_GATHER: /* the host's blocks, the hosts' parts, the whole
                           result to the host */
    among.bytes = f->bytes * (size_t)l;
    among.count = f->count == SIZE_MAX ? SIZE_MAX : f->count * (size_t)l;
    return s + (1 + l) * n * c +
           gang__algo_cost_path(coll, ALGO_PATH_TCP, &among) + s + p * n * c;
  case ALGO_REDUCE_SCATTER: /* the input packed by local index, reduced
                               in the host, then along the rail, every
                               rail at once: a host's link carries l
                               flows (priced without them, 4 hosts x 2 at
                               500 us one way took 2 MiB in 2.33x its
                               price) */
    among.beta_ns = f->beta_ns * l;
    among.beta_one_ns = 0;
    return p * n * COPY_NS_PER_BYTE + s + p * n * (c + r) +
           gang__algo_cost_path(coll, ALGO_PATH_TCP, &among);
  default:
    return 0;
  }
}

double gang__algo_cost_path(algo_coll coll, algo_path path,
                            const algo_facts *f) {
  if (path == ALGO_PATH_HIER) { /* the form the table would take there */
    algo_id a = gang__algo_select(NULL, coll, path, f);
    return gang__algo_cost(coll, a == ALGO_AUTO ? ALGO_HIER : a, f);
  }
  algo_id a = gang__algo_select(NULL, coll, path, f);
  return a == ALGO_AUTO ? 0 : gang__algo_cost(coll, a, f);
}

/* Whether the two-level form costs at most flat TCP for f's gang: always
 * where the model prices either at nothing. */
static bool beats_flat(algo_coll coll, algo_id a, const algo_facts *f) {
  double two = gang__algo_cost(coll, a, f);
  double flat = gang__algo_cost_path(coll, ALGO_PATH_TCP, f);
  return two <= 0 || flat <= 0 || two <= flat;
}

/* Whether no other WHEN_CHEAPEST rule of r's collective and path that can
 * run, and whose range holds the size, costs less (an earlier one that
 * costs the same wins). */
static bool cheapest(const algo_rule *r, const algo_facts *f);

static bool preferred(const algo_rule *r, const algo_facts *f) {
  unsigned fl = r->flags;
  return (!(fl & WHEN_SPREAD) || f->spread) && f->bytes >= r->min_bytes &&
         f->bytes <= r->max_bytes &&
         (!(fl & WHEN_CHEAPEST) || cheapest(r, f)) &&
         (!(fl & WHEN_BEATS_FLAT) || beats_flat(r->coll, r->algo, f)) &&
         (!(fl & WHEN_ROOMY) || !f->oversubscribed || f->cma_forced) &&
         (!(fl & WHEN_NOT_OVER) || !f->oversubscribed) &&
         (!(fl & WHEN_NOT_CROWDED) || !f->crowded) &&
         (!(fl & WHEN_THREE_UP) || f->size >= 3) &&
         (!(fl & WHEN_TWO) || f->size == 2) &&
         (!(fl & WHEN_FEW_ELEMS) || f->count < (size_t)f->size);
}

static bool cheapest(const algo_rule *r, const algo_facts *f) {
  double mine = gang__algo_cost(r->coll, r->algo, f);
  for (size_t i = 0; i < NRULES; i++) {
    const algo_rule *o = &rules[i];
    if (o == r || o->coll != r->coll || o->path != r->path ||
        !(o->flags & WHEN_CHEAPEST) || !can_run(o, f) ||
        f->bytes < o->min_bytes || f->bytes > o->max_bytes)
      continue;
    double theirs = gang__algo_cost(o->coll, o->algo, f);
    if (theirs < mine || (theirs == mine && o < r))
      return false;
  }
  return true;
}

/* The path an algorithm belongs to (ALGO_PATH_COUNT for auto). */
static algo_path path_of(algo_id a) {
  for (size_t i = 0; i < NRULES; i++)
    if (rules[i].algo == a)
      return rules[i].path;
  return ALGO_PATH_COUNT;
}

algo_id gang__algo_select(const algo_choice *choice, algo_coll coll,
                          algo_path path, const algo_facts *facts) {
  algo_id forced = choice != NULL ? choice->forced[coll] : ALGO_AUTO;
  if (forced != ALGO_AUTO && path_of(forced) != path) {
    /* Forced onto another path: leave this one, unless this is TCP,
     * where everything can run. */
    if (path != ALGO_PATH_TCP)
      return ALGO_AUTO;
    forced = ALGO_AUTO;
  }
  for (size_t i = 0; forced != ALGO_AUTO && i < NRULES; i++) {
    const algo_rule *r = &rules[i];
    if (r->coll == coll && r->path == path && r->algo == forced &&
        can_run(r, facts))
      return forced;
  }
  for (size_t i = 0; i < NRULES; i++) {
    const algo_rule *r = &rules[i];
    if (r->coll == coll && r->path == path && can_run(r, facts) &&
        preferred(r, facts))
      return r->algo;
  }
  return ALGO_AUTO;
}

size_t gang__algo_moved(algo_coll coll, const algo_facts *f) {
  bool blocks = coll == ALGO_ALL_GATHER || coll == ALGO_REDUCE_SCATTER;
  size_t n = blocks && f->size > 0 ? (size_t)f->size : 1;
  return f->bytes > SIZE_MAX / n ? SIZE_MAX : f->bytes * n;
}

algo_id gang__algo_rival(const algo_choice *choice, algo_coll coll,
                         const algo_facts *f, algo_id chosen, bool *close) {
  *close = false;
  if ((choice != NULL && choice->forced[coll] != ALGO_AUTO) ||
      f->alpha_ns <= 0 || gang__algo_moved(coll, f) < GANG__ALGO_TIMED_FROM ||
      f->size < 3)
    return ALGO_AUTO;
  /* The rules the model compares, but for the comparison itself. */
  const algo_rule *mine = NULL;
  algo_id best = ALGO_AUTO;
  double priced = 0;
  for (size_t i = 0; i < NRULES; i++) {
    const algo_rule *r = &rules[i];
    algo_rule open = *r;
    open.flags &= ~WHEN_CHEAPEST;
    if (r->coll != coll || r->path != ALGO_PATH_TCP ||
        !(r->flags & WHEN_CHEAPEST) || !can_run(r, f) || !preferred(&open, f))
      continue;
    if (r->algo == chosen) {
      mine = r;
      continue;
    }
    double c = gang__algo_cost(coll, r->algo, f);
    if (c > 0 && (best == ALGO_AUTO || c < priced)) {
      best = r->algo;
      priced = c;
    }
  }
  double own = mine != NULL ? gang__algo_cost(coll, chosen, f) : 0;
  if (own <= 0 || best == ALGO_AUTO)
    return ALGO_AUTO;
  *close = priced <= GANG__ALGO_CLOSE * own;
  return best;
}

algo_id gang__algo_two_level(const algo_choice *choice, algo_coll coll,
                             const algo_facts *f, bool *close) {
  *close = false;
  if ((choice != NULL && choice->forced[coll] != ALGO_AUTO) ||
      f->alpha_ns <= 0 || gang__algo_moved(coll, f) < GANG__ALGO_TIMED_FROM ||
      f->size < 3)
    return ALGO_AUTO;
  algo_id form = ALGO_AUTO;
  for (size_t i = 0; i < NRULES && form == ALGO_AUTO; i++) {
    const algo_rule *r = &rules[i];
    algo_rule open = *r;
    open.flags &= ~WHEN_BEATS_FLAT;
    if (r->coll == coll && r->path == ALGO_PATH_HIER && can_run(r, f) &&
        preferred(&open, f))
      form = r->algo;
  }
  double two = form != ALGO_AUTO ? gang__algo_cost(coll, form, f) : 0;
  double flat = gang__algo_cost_path(coll, ALGO_PATH_TCP, f);
  if (two <= 0 || flat <= 0)
    return ALGO_AUTO;
  *close = two <= GANG__ALGO_CLOSE * flat && flat <= GANG__ALGO_CLOSE * two;
  return form;
}

bool gang__algo_in_table(algo_coll coll, algo_id a) {
  for (size_t i = 0; i < NRULES; i++)
    if (rules[i].coll == coll && rules[i].algo == a)
      return true;
  return false;
}

static void list_algos(algo_coll coll, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (int a = 0; a < ALGO_COUNT; a++)
    if (a == ALGO_AUTO || gang__algo_in_table(coll, (algo_id)a))
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s",
                            n ? ", " : "", algo_names[a]);
}

gang_status gang__algo_choice_parse(const char *text, algo_choice *out) {
  algo_choice c;
  for (int i = 0; i < ALGO_COLL_COUNT; i++)
    c.forced[i] = ALGO_AUTO;
  char buf[512];
  if (strlen(text) >= sizeof buf)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "GANG_ALGO: longer than %zu characters", sizeof buf - 1);
  snprintf(buf, sizeof buf, "%s", text);
  char *save = NULL;
  for (char *item = strtok_r(buf, ", ", &save); item;
       item = strtok_r(NULL, ", ", &save)) {
    char *eq = strchr(item, '=');
    if (eq == NULL)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO: '%s' is not collective=algorithm (e.g. "
                         "all_reduce=ring)",
                         item);
    *eq = '\0';
    int coll = -1;
    for (int i = 0; i < ALGO_COLL_COUNT; i++)
      if (strcmp(item, coll_names[i]) == 0)
        coll = i;
    if (coll < 0)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO: '%s' is not a collective (barrier, "
                         "all_reduce, broadcast, all_gather, reduce_scatter, "
                         "all_to_all, all_to_all_v)",
                         item);
    int algo = -1;
    for (int a = 0; a < ALGO_COUNT; a++)
      if (strcmp(eq + 1, algo_names[a]) == 0 &&
          (a == ALGO_AUTO || gang__algo_in_table((algo_coll)coll, (algo_id)a)))
        algo = a;
    if (algo < 0) {
      char list[256];
      list_algos((algo_coll)coll, list, sizeof list);
      return gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO: %s has no algorithm '%s' (%s)", item,
                         eq + 1, list);
    }
    c.forced[coll] = (algo_id)algo;
  }
  *out = c;
  return GANG_OK;
}

static int size_text(char *buf, size_t cap, size_t v) {
  if (v >= MIB && v % MIB == 0)
    return snprintf(buf, cap, "%zu MiB", v / MIB);
  if (v >= KIB && v % KIB == 0)
    return snprintf(buf, cap, "%zu KiB", v / KIB);
  return snprintf(buf, cap, "%zu B", v);
}

/* "from 1 MiB; single copy allowed; ..." or "always". */
static void rule_text(const algo_rule *r, char *buf, size_t cap) {
  size_t n = 0;
  char a[32], b[32];
  buf[0] = '\0';
#define ADD(...)                                                               \
  n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s", n ? "; " : ""),  \
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__)
  size_text(a, sizeof a, r->min_bytes);
  size_text(b, sizeof b, r->max_bytes);
  if (r->min_bytes > 0 && r->max_bytes != ANY)
    ADD("%s to %s", a, b);
  else if (r->min_bytes > 0)
    ADD("from %s", a);
  else if (r->max_bytes != ANY)
    ADD("up to %s", b);
  unsigned fl = r->flags;
  if (fl & NEED_CMA)
    ADD("single copy allowed");
  if ((fl & NEED_TWO) || (fl & WHEN_TWO))
    ADD("two members");
  if (fl & WHEN_THREE_UP)
    ADD("three members or more");
  if (fl & NEED_COUNT)
    ADD("an element per member");
  if (fl & WHEN_FEW_ELEMS)
    ADD("fewer elements than members");
  if (fl & NEED_RAILS)
    ADD("hosts of equal members, the count a multiple of them");
  if (fl & WHEN_ROOMY)
    ADD("a CPU per member (or GANG_SHM_CMA=1)");
  if (fl & WHEN_NOT_OVER)
    ADD("a CPU per member");
  if (fl & WHEN_NOT_CROWDED)
    ADD("at most two members per CPU");
  if (fl & WHEN_SPREAD)
    ADD("members on several hosts");
  if (fl & WHEN_CHEAPEST)
    ADD("the cheapest by the link model");
  if (fl & WHEN_BEATS_FLAT)
    ADD("as cheap as flat TCP by the link model");
#undef ADD
  if (n == 0)
    snprintf(buf, cap, "otherwise");
}

void gang__algo_table_print(FILE *f, const algo_choice *choice) {
  fprintf(f, "algorithms: the first rule that fits, per collective and path "
             "(sizes: the buffer for all_reduce and broadcast, one member's "
             "block otherwise):\n");
  for (int c = 0; c < ALGO_COLL_COUNT; c++) {
    fprintf(f, "  %s", coll_names[c]);
    if (choice != NULL && choice->forced[c] != ALGO_AUTO)
      fprintf(f, " (GANG_ALGO forces %s where it can run)",
              algo_names[choice->forced[c]]);
    fprintf(f, "\n");
    for (size_t i = 0; i < NRULES; i++) {
      const algo_rule *r = &rules[i];
      if ((int)r->coll != c)
        continue;
      char when[256];
      rule_text(r, when, sizeof when);
      fprintf(f, "    %-14s %-22s %s\n", path_names[r->path],
              algo_names[r->algo], when);
    }
  }
  fprintf(f, "  where:\n");
  for (int a = 1; a < ALGO_COUNT; a++)
    fprintf(f, "    %-22s %s\n", algo_names[a], algo_docs[a]);
}

/* The size where the cost of a (bytes -> cost) crosses b's, found by
 * doubling then bisection; 0 when a is cheaper or as cheap everywhere up to
 * 1 GiB, SIZE_MAX when b is from the start. */
static size_t crossover(algo_coll coll, algo_id a, algo_id b, algo_facts f) {
  size_t lo = 0, hi = 1;
  f.bytes = 0;
  if (gang__algo_cost(coll, b, &f) < gang__algo_cost(coll, a, &f))
    return SIZE_MAX;
  while (hi <= ((size_t)1 << 30)) {
    f.bytes = hi;
    if (gang__algo_cost(coll, b, &f) < gang__algo_cost(coll, a, &f))
      break;
    lo = hi;
    hi *= 2;
  }
  if (hi > ((size_t)1 << 30))
    return 0;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    f.bytes = mid;
    if (gang__algo_cost(coll, b, &f) < gang__algo_cost(coll, a, &f))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

void gang__algo_model_print(FILE *f, double alpha_ns, double beta_ns) {
  fprintf(f,
          "link model (TCP): a message of m bytes costs alpha + m beta, "
          "alpha %.1f us, 1/beta %.3g GB/s (GANG_NET_LATENCY_US, "
          "GANG_NET_BANDWIDTH; a world over several hosts measures its own at "
          "creation unless they are set, GANG_NET_PROBE)\n",
          alpha_ns / 1000, beta_ns > 0 ? 1 / beta_ns : 0);
  static const struct {
    algo_coll coll;
    algo_id small, large;
  } pairs[] = {{ALGO_ALL_REDUCE, ALGO_TCP_RD, ALGO_TCP_HD},
               {ALGO_ALL_REDUCE, ALGO_TCP_HD, ALGO_TCP_RING},
               {ALGO_REDUCE_SCATTER, ALGO_TCP_HALVING, ALGO_TCP_RING},
               {ALGO_ALL_GATHER, ALGO_TCP_BRUCK, ALGO_TCP_RING}};
  int sizes[] = {4, 8, 16, 64};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    fprintf(f, "  %s: %s below, %s from:", coll_names[pairs[i].coll],
            algo_names[pairs[i].small], algo_names[pairs[i].large]);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      int p = sizes[k];
      algo_facts fa = {.size = p,
                       .count = SIZE_MAX,
                       .alpha_ns = alpha_ns,
                       .beta_ns = beta_ns};
      size_t x = crossover(pairs[i].coll, pairs[i].small, pairs[i].large, fa);
      char t[32];
      if (x == 0)
        snprintf(t, sizeof t, "never");
      else if (x == SIZE_MAX)
        snprintf(t, sizeof t, "always");
      else if (x < KIB)
        snprintf(t, sizeof t, "%zu B", x);
      else if (x < MIB)
        snprintf(t, sizeof t, "%.0f KiB", (double)x / KIB);
      else
        snprintf(t, sizeof t, "%.1f MiB", (double)x / MIB);
      fprintf(f, " %d members %s%s", p, t,
              k + 1 < sizeof sizes / sizeof sizes[0] ? "," : "");
    }
    fprintf(f, "\n");
  }
}
