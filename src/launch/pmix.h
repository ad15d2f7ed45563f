/* Rendezvous through the launcher's PMIx server (mpirun of Open MPI,
 * srun --mpi=pmix, prrte): how a gang program started by an engine that
 * says rank and size but no MASTER_ADDR finds the store.
 *
 * Rank 0 publishes one string (its store's address and a fresh secret)
 * under a key of the job, every rank joins a PMIx fence that collects the
 * published data, and the others read rank 0's string. PMIx's client
 * library is opened at run time (libpmix.so.2): libgang never requires it,
 * and a build without its headers (GANG_PMIX=OFF) says so when asked. The
 * client is finalized before the call returns. Not thread-safe against
 * other PMIx use in the process during the call. */
#ifndef GANG_LAUNCH_PMIX_H
#define GANG_LAUNCH_PMIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"

/* Whether this process was started by a PMIx server: PMIX_NAMESPACE and
 * PMIX_RANK are set. */
bool gang__pmix_offered(void);

/* The exchange. `rank` is this process's rank as the environment said it
 * (it must be the PMIx rank: GANG_INVALID_ARGUMENT otherwise); rank 0
 * passes `publish` (a NUL-terminated string), the others NULL. Every rank
 * gets rank 0's string in out[cap]. Waits at most timeout_ms for every
 * rank to join (GANG_TIMEOUT). GANG_NOT_SUPPORTED naming what is missing
 * when the build has no PMIx or the library cannot be opened; the PMIx
 * server's refusals as GANG_SYSTEM with its words. */
gang_status gang__pmix_exchange(int rank, const char *publish, char *out,
                                size_t cap, int64_t timeout_ms);

#endif
