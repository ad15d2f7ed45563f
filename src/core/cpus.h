/* The CPUs this process may run on: spinning and oversubscription
 * decisions (shared memory's waits, the store's spins) ask it. */
#ifndef GANG_CORE_CPUS_H
#define GANG_CORE_CPUS_H

/* CPUs in this process's affinity mask (sched_getaffinity), else the
 * online CPUs; at least 1. */
int gang__cpus_available(void);

#endif
