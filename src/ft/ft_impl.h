/* What the fault-tolerance gangs (src/ft/) share with each other.
 *
 * A gang that can be configured again and again (the reconfigurable gang,
 * the subprocess gang, and wrappers of either) points its gang__ops.ft at
 * a table of these; gang_ft_configure and gang_ft_configured dispatch
 * through it (reconfig.c). Wrappers forward to the gang they wrap. */
#ifndef GANG_FT_FT_IMPL_H
#define GANG_FT_FT_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "gang/ft.h"
#include "gang/gang_impl.h"

typedef struct gang__ft_ops {
  /* gang_ft_configure's work, arguments checked. */
  gang_status (*configure)(gang_t *g, const char *store_addr, int rank,
                           int size, int64_t timeout_ms);
  bool (*configured)(const gang_t *g);
} gang__ft_ops;

/* Claims `store_addr`'s prefix for one incarnation: an atomic add on a key
 * under it in that store; a prefix claimed before (by anyone) is refused
 * with GANG_INVALID_USAGE naming it. Every rank of the incarnation claims
 * the same prefix: the key counts them, and more than `size` claims is a
 * reuse too. */
gang_status gang__ft_claim_prefix(const char *store_addr, int size,
                                  int64_t timeout_ms);

/* Waits until `deadline` for `inner`, the work of an inner gang that a
 * wrapper's work forwards to (reconfig.c, managed.c, swallow.c): true when
 * it completed, with its status in *st; false when the wait ended first
 * (*st: the wait's status; the inner gang failed with it). */
bool gang__ft_inner_wait(gang_work *inner, int64_t deadline, gang_status *st);

/* Sets g's rank and size (a new incarnation) and clears its sticky error. */
void gang__ft_reset(gang_t *g, int rank, int size);

/* The ranks of the current incarnation of reconfigurable gang g that it
 * saw die (their connections ended without a goodbye), the first first: at
 * most cap into out; how many (0 for another kind of gang). */
int gang__ft_lost_ranks(gang_t *g, int *out, int cap);

/* Reads the current incarnation's connections without waiting (a peer
 * that died while it was idle is then noticed: gang__ft_lost_ranks);
 * returns its world's status. GANG_OK for another kind of gang. */
gang_status gang__ft_poke(gang_t *g);

#endif
