/* What of the process-group gang is visible outside src/gang (tests, and
 * the fault-tolerance manager's report of a dead peer). */
#ifndef GANG_GANG_PG_H
#define GANG_GANG_PG_H

#include <stdatomic.h>
#include <stdint.h>

#include "gang/gang.h"

struct gang__fabric;

/* The fabric under a process-group gang, NULL for other kinds of gang.
 * Borrowed: it lives as long as the gang. */
struct gang__fabric *gang__pg_fabric(gang_t *g);

/* The name of the algorithm (src/algo/select.h) that ran the gang's last
 * collective, NULL before the first and for other kinds of gang
 * (gang_last_algorithm). */
const char *gang__pg_last_algo(const gang_t *g);

/* Calls whose two paths were timed (pg_exec.c) that ran the two-level
 * form, then flat TCP (tests). */
extern _Atomic uint64_t gang__paths_timed_taken[2];

/* The world ranks of the peers a process-group gang's world saw die
 * (gang__fabric_lost_peers): at most cap into out; how many (0 for other
 * kinds of gang). */
int gang__pg_lost_ranks(gang_t *g, int *out, int cap);

/* Reads what the gang's world's connections hold without waiting, so that
 * a peer that died while the gang was idle is noticed; then
 * gang__pg_lost_ranks says which. GANG_OK or the world's failure. */
gang_status gang__pg_poke(gang_t *g);

#endif
