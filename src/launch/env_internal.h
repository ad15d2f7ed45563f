/* Internal entry points of env.c that read variables from a given array
 * instead of the process environment, so tests can drive every source
 * without touching environ, and gangrun can describe a worker's world. */
#ifndef GANG_LAUNCH_ENV_INTERNAL_H
#define GANG_LAUNCH_ENV_INTERNAL_H

#include "gang/env.h"

/* Base of the port derived from SLURM_JOB_ID when MASTER_PORT is unset:
 * port = GANG__SLURM_PORT_BASE + SLURM_JOB_ID % GANG__SLURM_PORT_SPAN, i.e.
 * 12000..31999: unprivileged and below Linux's default ephemeral range
 * (32768..60999), so an outgoing connection never holds it by chance. */
#define GANG__SLURM_PORT_BASE 12000
#define GANG__SLURM_PORT_SPAN 20000

/* As gang_world_info_from_env / _from_init_method, reading variables from
 * envp ("NAME=value" strings, NULL-terminated); envp == NULL reads the
 * process environment. */
gang_status gang__world_info_from_envp(const char *const *envp,
                                       gang_world_info *info);
gang_status gang__world_info_from_init_method_envp(const char *const *envp,
                                                   const char *init_method,
                                                   int rank, int world_size,
                                                   gang_world_info *info);

#endif
