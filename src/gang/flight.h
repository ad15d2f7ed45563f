/* The flight recorder: each process-group gang keeps its last N calls
 * (GANG_FLIGHT = N; 0, the default, keeps none and costs a load and a
 * branch per call). A call is recorded when posted, when it starts and
 * when it ends, without a lock: a ring of fixed entries whose fields are
 * relaxed atomics, each entry guarded by its record number (0 while it is
 * being rewritten), so a dump taken from another thread reads whole
 * entries or skips them.
 *
 * Dumps are text lines beginning "gang-flight " (docs/flight-recorder.md
 * gives the format), written to GANG_FLIGHT_DUMP<world rank> when that
 * prefix is set, else to the log (stderr or GANG_DEBUG_FILE) whatever its
 * level. A dump is taken when a world first fails (a timeout, an abort, a
 * lost peer: every gang of that world), on SIGUSR1 (every gang of the
 * process; the handler is installed only while a recorder exists and only
 * where SIGUSR1 has its default action) and on gang_flight_dump. The tool
 * gang-flight reads the dumps of every rank side by side. */
#ifndef GANG_GANG_FLIGHT_H
#define GANG_GANG_FLIGHT_H

#include <stdint.h>

#include "gang_impl.h"

typedef struct gang__flight gang__flight;

/* The recorder of a gang of the world named `world` (its store address,
 * the same on every rank; `world_key` tells this process's worlds apart)
 * with context id ctx, in which this process is gang rank `rank` of `size`
 * with world ranks map[0..size), or *out = NULL when GANG_FLIGHT is 0.
 * GANG_FLIGHT is read here: a malformed value is an error. */
gang_status gang__flight_new(const char *world, const void *world_key,
                             int world_rank, uint64_t ctx, int rank, int size,
                             const int *map, gang__flight **out);
void gang__flight_free(gang__flight *f);

/* States of a recorded call. */
enum { GANG__FLIGHT_POSTED = 1, GANG__FLIGHT_RUNNING, GANG__FLIGHT_DONE };

/* Records call c (collective number seq, 0 for a send or receive) as
 * posted, or as running when `running`; returns its record number. */
uint64_t gang__flight_post(gang__flight *f, const gang__coll *c, uint64_t seq,
                           int state);
/* The call of record `id` started. */
void gang__flight_start(gang__flight *f, uint64_t id);
/* The call of record `id` ended with st, run by algorithm `algo` (an
 * algo_id, -1: none). */
void gang__flight_end(gang__flight *f, uint64_t id, gang_status st, int algo);

/* Dumps every recorder of the world `world_key`, with `reason`. */
void gang__flight_dump_world(const void *world_key, const char *reason);

#endif
