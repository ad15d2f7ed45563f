/* gang/env.h: the world (rank, size, locality, rendezvous address) as the
 * launcher describes it in the environment.
 *
 * A process started by torchrun or gangrun, by Slurm's srun, by Open MPI's
 * mpirun or by MPICH's Hydra finds out who it is from variables the launcher
 * set. gang_world_info_from_env reads them in a fixed order of precedence
 * (docs/launcher.md has the full table):
 *
 *   1. torchrun / gangrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 *      GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
 *   2. Slurm: SLURM_PROCID, SLURM_(STEP_NUM_TASKS|NTASKS), SLURM_LOCALID,
 *      SLURM_NODEID, SLURM_(STEP_NUM_NODES|NNODES),
 *      SLURM_(STEP_TASKS_PER_NODE|TASKS_PER_NODE),
 *      SLURM_(STEP_NODELIST|JOB_NODELIST), SLURM_JOB_ID;
 *   3. Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
 *   4. MPICH / Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS;
 *   5. nothing: a single process, rank 0 of 1.
 *
 * MASTER_ADDR / MASTER_PORT, when set, give the rendezvous address for every
 * source; GANG_STORE_ADDR (exported by gangrun) overrides where the store
 * is. */
#ifndef GANG_ENV_H
#define GANG_ENV_H

#include <stddef.h>

#include "gang/export.h"
#include "gang/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a gang_world_info came from. Values are stable (ABI). */
typedef enum gang_world_source {
  GANG_WORLD_SOURCE_SINGLE = 0,      /* no launcher: rank 0 of 1 */
  GANG_WORLD_SOURCE_TORCHRUN = 1,    /* torchrun or gangrun variables */
  GANG_WORLD_SOURCE_SLURM = 2,       /* srun */
  GANG_WORLD_SOURCE_OPENMPI = 3,     /* Open MPI mpirun / prterun */
  GANG_WORLD_SOURCE_MPICH = 4,       /* MPICH Hydra (PMI) */
  GANG_WORLD_SOURCE_INIT_METHOD = 5, /* tcp:// or file:// given explicitly */
} gang_world_source;

#define GANG_WORLD_ADDR_MAX 256
#define GANG_WORLD_URL_MAX 4352

/* The world as one process sees it. Plain data; the caller owns it.
 * Set `size` (GANG_WORLD_INFO_INIT does) before passing it in: fields are
 * only ever appended, and a call fills at most `size` bytes. */
typedef struct gang_world_info {
  size_t size; /* sizeof(gang_world_info) */
  gang_world_source source;
  int rank;             /* 0 <= rank < world_size */
  int world_size;       /* >= 1 */
  int local_rank;       /* rank among the processes on this node */
  int local_world_size; /* processes on this node (1 when unknown) */
  int node_rank;        /* index of this node, -1 when unknown */
  int num_nodes;        /* number of nodes, -1 when unknown */
  /* Host of the rendezvous (the "master"), without brackets for IPv6.
   * Empty when the source does not name one (MPI without MASTER_ADDR). */
  char master_addr[GANG_WORLD_ADDR_MAX];
  /* 1..65535, or 0: "not known / pick one" (see docs/launcher.md). */
  int master_port;
  /* Where this process should rendezvous, in the form gang_store_connect
   * takes: "host:port" ("[v6]:port"), "file:///path", or "" when unknown
   * (a single process needs no rendezvous). GANG_STORE_ADDR if set, else
   * from the init method or master_addr:master_port. */
  char store_addr[GANG_WORLD_URL_MAX];
  /* The init method this was derived from: "env://" for the environment,
   * else the "tcp://..." or "file://..." text given. */
  char init_method[GANG_WORLD_URL_MAX];
  /* GANG_RUN_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID; "" when none. */
  char run_id[128];
  /* GANG_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT; 0 when unset. */
  int restart_count;
} gang_world_info;

#define GANG_WORLD_INFO_INIT                                                   \
  {                                                                            \
    sizeof(gang_world_info), GANG_WORLD_SOURCE_SINGLE, 0, 1, 0, 1, 0, 1, "",   \
        0, "", "", "", 0                                                       \
  }

/* Fills *info from the process environment, trying the sources in the order
 * above; info->size must be set. A malformed, out-of-range, missing (one of
 * a pair set without the other) or contradictory variable is
 * GANG_INVALID_ARGUMENT with a detail naming the variable and its value; on
 * error *info is left unchanged. Reads the environment: not thread-safe with
 * concurrent setenv (as getenv). */
GANG_API gang_status gang_world_info_from_env(gang_world_info *info);

/* Like torch.distributed.init_process_group(init_method, world_size, rank):
 *   - NULL, "" or "env://": the environment, as gang_world_info_from_env;
 *     rank / world_size, when >= 0, override what the environment says;
 *   - "tcp://host:port" ("tcp://[v6]:port"): rendezvous at that address;
 *   - "file:///abs/path": rendezvous through a file store at that path.
 * For tcp:// and file://, rank and world_size come from the arguments, or
 * from "?rank=R&world_size=N" query parameters as torch accepts them; one of
 * the two must give each. Pass -1 for "not given". Local and node fields are
 * unknown for tcp:// and file:// (local 0 of 1, node -1) unless the
 * environment's launcher describes the same rank and world size, in which
 * case they come from there. Errors: GANG_INVALID_ARGUMENT naming the part
 * of the init method or the argument that is wrong. */
GANG_API gang_status gang_world_info_from_init_method(const char *init_method,
                                                      int rank, int world_size,
                                                      gang_world_info *info);

/* "single", "torchrun", "slurm", "openmpi", "mpich", "init_method", or
 * "unknown". Static storage; cannot fail. */
GANG_API const char *gang_world_source_name(gang_world_source source);

#ifdef __cplusplus
}
#endif
#endif
