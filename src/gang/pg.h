/* What of the process-group gang is visible outside src/gang (tests). */
#ifndef GANG_GANG_PG_H
#define GANG_GANG_PG_H

#include "gang/gang.h"

struct gang__fabric;

/* The fabric under a process-group gang, NULL for other kinds of gang.
 * Borrowed: it lives as long as the gang. */
struct gang__fabric *gang__pg_fabric(gang_t *g);

/* The name of the algorithm (src/algo/select.h) that ran the gang's last
 * collective, "auto" before the first; NULL for other kinds of gang. */
const char *gang__pg_last_algo(gang_t *g);

#endif
