/* Which algorithm runs a collective: one table for every collective and
 * every path (shared memory inside a host, hierarchical across hosts with
 * shared memory on each, flat TCP), chosen by size and by what the host's
 * arena agreed (single copy allowed, oversubscribed). GANG_ALGO forces an
 * algorithm per collective; gang-info prints the table.
 *
 * Every member of a gang must choose alike: the inputs are the call (kind,
 * bytes, count), the gang's shape and the arena's agreed facts, which are
 * the same on every member, and the world agrees on GANG_ALGO when it is
 * created (src/gang/pg_world.c). */
#ifndef GANG_ALGO_SELECT_H
#define GANG_ALGO_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gang/status.h"

typedef enum algo_coll {
  ALGO_BARRIER,
  ALGO_ALL_REDUCE,
  ALGO_BROADCAST,
  ALGO_ALL_GATHER,
  ALGO_REDUCE_SCATTER,
  ALGO_ALL_TO_ALL,
  ALGO_ALL_TO_ALL_V,
  ALGO_COLL_COUNT
} algo_coll;

typedef enum algo_path {
  ALGO_PATH_SHM,  /* every member on this host, one arena */
  ALGO_PATH_HIER, /* several hosts, each with shared memory */
  ALGO_PATH_TCP,  /* the fabric alone */
  ALGO_PATH_COUNT
} algo_path;

#define ALGO_LIST(X)                                                           \
  X(AUTO, "auto", "chosen by the table")                                       \
  X(SHM_FLAGGED, "flagged", "data and a flag per cache line, polled at once")  \
  X(SHM_LINES, "lines", "one step on the step lines")                          \
  X(SHM_SMALL, "small", "each member's small slot of one step")                \
  X(SHM_ALLREAD, "allread", "stage, then reduce every member's copy")          \
  X(SHM_STAGED, "staged", "chunks through the staging buffers")                \
  X(SHM_MEASURED, "staged_or_single_copy",                                     \
    "staged or single copy, whichever the members measured faster")            \
  X(SHM_SINGLE_COPY, "single_copy",                                            \
    "process_vm_readv from the peers' buffers")                                \
  X(SHM_TWO_ENDS, "two_ends",                                                  \
    "two members: the root pushes one half, the other pulls the rest")         \
  X(HIER, "hierarchical", "shared memory in each host, TCP among leaders")     \
  X(HIER_RAILS, "hierarchical_rails",                                          \
    "reduce_scatter in each host, all_reduce of each part along its rail "     \
    "(one member per host), all_gather in each host")                          \
  X(TCP_RD, "recursive_doubling", "recursive doubling over TCP")               \
  X(TCP_RING, "ring", "ring over TCP")                                         \
  X(TCP_BINOMIAL, "binomial", "binomial tree over TCP")                        \
  X(TCP_DISSEMINATION, "dissemination", "dissemination over TCP")              \
  X(TCP_PAIRWISE, "pairwise", "pairwise exchange over TCP")                    \
  X(TCP_BRUCK, "bruck", "Bruck's doubling concatenation over TCP")             \
  X(TCP_HD, "halving_doubling",                                                \
    "recursive halving reduce_scatter, then doubling all_gather, over TCP")    \
  X(TCP_SAG, "scatter_allgather",                                              \
    "binomial scatter, then ring all_gather, over TCP")                        \
  X(TCP_HALVING, "recursive_halving", "recursive halving over TCP")            \
  X(TCP_MEASURED, "doubling_or_halving",                                       \
    "two members: recursive doubling or halving-doubling, whichever the two "  \
    "measured faster, over TCP")

typedef enum algo_id {
#define ALGO_ENUM(id, name, doc) ALGO_##id,
  ALGO_LIST(ALGO_ENUM)
#undef ALGO_ENUM
      ALGO_COUNT
} algo_id;

/* What the choice depends on besides the collective and the path. */
typedef struct algo_facts {
  size_t bytes;        /* all_reduce, broadcast: the buffer; all_gather,
                          reduce_scatter, all_to_all: one member's block */
  size_t count;        /* elements (all_reduce: of the buffer) */
  int size;            /* members taking part on this path */
  bool cma;            /* single copy allowed (the arena's probe) */
  bool oversubscribed; /* more local ranks than CPUs */
  bool crowded;        /* more than two local ranks per CPU */
  bool cma_forced;     /* GANG_SHM_CMA=1: single copy even oversubscribed */
  /* The links' model for TCP (docs/algorithms.md): a message of m bytes
   * costs alpha_ns + m * beta_ns. Zero: no model (the rules' order).
   * beta_ns holds while every host sends at once; beta_one_ns, where
   * less, is one flow's alone (a switch shared by fewer flows gives each
   * more): a tree's steps with fewer senders are priced between the two.
   * 0: beta_ns throughout. */
  double alpha_ns, beta_ns, beta_one_ns;
  /* A gang over several hosts with shared memory on each (0 otherwise):
   * its hosts and the most members any has. The two-level form is priced
   * with them, and flat TCP with a host's link shared by its members in
   * the algorithms whose steps cross hosts from every member at once. */
  int hosts, per_host;
  /* Every host holds per_host members: each local index has a rail, one
   * member per host (the rails' two-level all_reduce can run). */
  bool rails;
  /* The members on this path are on two hosts or more (a flat gang
   * across hosts, the leaders of a two-level form, a rail): algorithms
   * that only pay off across a network may run. */
  bool spread;
} algo_facts;

/* GANG_ALGO: a forced algorithm per collective, ALGO_AUTO where none. */
typedef struct algo_choice {
  algo_id forced[ALGO_COLL_COUNT];
} algo_choice;

/* Parses GANG_ALGO's syntax ("all_reduce=ring,broadcast=staged"; empty for
 * none). Errors name the item and list what is allowed. */
gang_status gang__algo_choice_parse(const char *text, algo_choice *out);

/* The algorithm for coll on path: the forced one when it can run there
 * (its hard limits hold: a flagged step's size, single copy allowed, two
 * members), else the table's first rule that fits. Never ALGO_AUTO. */
algo_id gang__algo_select(const algo_choice *choice, algo_coll coll,
                          algo_path path, const algo_facts *facts);

/* The modeled time (ns) of TCP algorithm a for coll under facts' link
 * model, or of a two-level form (ALGO_HIER, ALGO_HIER_RAILS, with facts'
 * hosts and per_host): its local steps at shared memory's price and the
 * table's TCP algorithm among one member per host (docs/algorithms.md gives
 * each formula); 0 for an algorithm the model does not cover. */
double gang__algo_cost(algo_coll coll, algo_id a, const algo_facts *facts);

/* The modeled time (ns) of what the table runs for coll on path (the
 * algorithm it would choose, unforced); 0 where the model has no price. */
double gang__algo_cost_path(algo_coll coll, algo_path path,
                            const algo_facts *facts);

/* Prints the link model and where it puts the TCP choices for 4, 8, 16
 * and 64 members (gang-info). */
void gang__algo_model_print(FILE *f, double alpha_ns, double beta_ns);

/* A call's bytes as the contests count them: the buffer for all_reduce
 * and broadcast, every member's block for all_gather and reduce_scatter
 * (what a call moves grows with the members, not with one block). */
size_t gang__algo_moved(algo_coll coll, const algo_facts *facts);

/* Contests over TCP (src/algo/tcp_timed.c): from GANG__ALGO_TIMED_FROM
 * bytes (gang__algo_moved), among three members or more, coll not forced by
 * GANG_ALGO, where the table chose `chosen` by the link model: the cheapest
 * other algorithm the model compares (ALGO_AUTO: none, or no contest), and
 * *close where the model prices it within GANG__ALGO_CLOSE times chosen's
 * price. A close call is timed from its first calls; another, once the
 * chosen algorithm took more than GANG__ALGO_HOLDS times its price. */
#define GANG__ALGO_TIMED_FROM ((size_t)64 << 10)
#define GANG__ALGO_CLOSE 2.0
/* The model's choice holds its trial where its slowest member's median
 * is within this of its price (the model's own aim). */
#define GANG__ALGO_HOLDS 1.25
algo_id gang__algo_rival(const algo_choice *choice, algo_coll coll,
                         const algo_facts *facts, algo_id chosen, bool *close);

/* The same for the two paths of a gang over several hosts with shared
 * memory on each (facts' hosts and per_host): the two-level form the
 * table would take were it not priced against flat TCP, where the two
 * can contest (ALGO_AUTO: no contest), and *close where the model prices
 * them within GANG__ALGO_CLOSE of each other (pg_exec.c). */
algo_id gang__algo_two_level(const algo_choice *choice, algo_coll coll,
                             const algo_facts *facts, bool *close);

/* Whether the table has a rule naming algorithm a for coll. */
bool gang__algo_in_table(algo_coll coll, algo_id a);

/* Names, for errors and gang-info. */
const char *gang__algo_name(algo_id a);
const char *gang__algo_coll_name(algo_coll c);

/* Prints the table (and the forced algorithms, if any) to f. */
void gang__algo_table_print(FILE *f, const algo_choice *choice);

#endif
