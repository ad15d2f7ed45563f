/* The handlers of each path by collective and algorithm (run.h). */
#include "run.h"

#include "algo.h"
#include "core/error.h"
#include "shm_algo.h"

typedef gang_status (*shm_handler)(gang__shm_chan *c, const algo_call *k);
typedef gang_status (*tcp_handler)(algo_ctx *a, const algo_call *k);

static const shm_handler shm_handlers[ALGO_COLL_COUNT][ALGO_COUNT] = {
    [ALGO_BARRIER] =
        {
            [ALGO_SHM_FLAGGED] = gang__shm_barrier_flagged,
            [ALGO_SHM_LINES] = gang__shm_barrier_lines,
        },
    [ALGO_ALL_REDUCE] =
        {
            [ALGO_SHM_FLAGGED] = gang__shm_allreduce_flagged,
            [ALGO_SHM_SMALL] = gang__shm_allreduce_small,
            [ALGO_SHM_ALLREAD] = gang__shm_allreduce_allread,
            [ALGO_SHM_STAGED] = gang__shm_allreduce_staged,
            [ALGO_SHM_SINGLE_COPY] = gang__shm_allreduce_single_copy,
            [ALGO_SHM_MEASURED] = gang__shm_allreduce_measured,
        },
    [ALGO_BROADCAST] =
        {
            [ALGO_SHM_SMALL] = gang__shm_bcast_small,
            [ALGO_SHM_STAGED] = gang__shm_bcast_staged,
            [ALGO_SHM_SINGLE_COPY] = gang__shm_bcast_single_copy,
            [ALGO_SHM_TWO_ENDS] = gang__shm_bcast_two_ends,
            [ALGO_SHM_MEASURED] = gang__shm_bcast_measured,
        },
    [ALGO_ALL_GATHER] =
        {
            [ALGO_SHM_SMALL] = gang__shm_allgather_small,
            [ALGO_SHM_STAGED] = gang__shm_allgather_staged,
            [ALGO_SHM_SINGLE_COPY] = gang__shm_allgather_single_copy,
            [ALGO_SHM_MEASURED] = gang__shm_allgather_measured,
        },
    [ALGO_REDUCE_SCATTER] =
        {
            [ALGO_SHM_STAGED] = gang__shm_reduce_scatter_staged,
            [ALGO_SHM_SINGLE_COPY] = gang__shm_reduce_scatter_single_copy,
            [ALGO_SHM_MEASURED] = gang__shm_reduce_scatter_measured,
        },
    [ALGO_ALL_TO_ALL] =
        {
            [ALGO_SHM_STAGED] = gang__shm_alltoall_staged,
            [ALGO_SHM_SINGLE_COPY] = gang__shm_alltoall_single_copy,
            [ALGO_SHM_MEASURED] = gang__shm_alltoall_measured,
        },
    [ALGO_ALL_TO_ALL_V] =
        {
            [ALGO_SHM_SINGLE_COPY] = gang__shm_alltoallv_single_copy,
        },
};

static const tcp_handler tcp_handlers[ALGO_COLL_COUNT][ALGO_COUNT] = {
    [ALGO_BARRIER] = {[ALGO_TCP_DISSEMINATION] =
                          gang__algo_barrier_dissemination},
    [ALGO_ALL_REDUCE] =
        {
            [ALGO_TCP_RD] = gang__algo_allreduce_rd,
            [ALGO_TCP_RING] = gang__algo_allreduce_ring,
            [ALGO_TCP_HD] = gang__algo_allreduce_hd,
            [ALGO_TCP_MEASURED] = gang__algo_allreduce_measured,
        },
    [ALGO_BROADCAST] = {[ALGO_TCP_BINOMIAL] = gang__algo_bcast_binomial,
                        [ALGO_TCP_SAG] = gang__algo_bcast_sag},
    [ALGO_ALL_GATHER] =
        {
            [ALGO_TCP_RING] = gang__algo_allgather_ring,
            [ALGO_TCP_BRUCK] = gang__algo_allgather_bruck,
        },
    [ALGO_REDUCE_SCATTER] = {[ALGO_TCP_RING] = gang__algo_reduce_scatter_ring,
                             [ALGO_TCP_HALVING] =
                                 gang__algo_reduce_scatter_halving},
    [ALGO_ALL_TO_ALL] = {[ALGO_TCP_PAIRWISE] = gang__algo_alltoall_pairwise},
    [ALGO_ALL_TO_ALL_V] = {[ALGO_TCP_PAIRWISE] = gang__algo_alltoallv_pairwise},
};

static gang_status no_handler(algo_coll coll, algo_id algo, const char *path) {
  return gang__error(GANG_INTERNAL, "%s over %s: no algorithm '%s'",
                     gang__algo_coll_name(coll), path, gang__algo_name(algo));
}

gang_status gang__algo_run_shm(gang__shm_chan *c, algo_coll coll, algo_id algo,
                               const algo_call *k) {
  shm_handler h =
      (unsigned)coll < ALGO_COLL_COUNT && (unsigned)algo < ALGO_COUNT
          ? shm_handlers[coll][algo]
          : NULL;
  return h != NULL ? h(c, k) : no_handler(coll, algo, "shared memory");
}

gang_status gang__algo_run_tcp(algo_ctx *a, algo_coll coll, algo_id algo,
                               const algo_call *k) {
  tcp_handler h =
      (unsigned)coll < ALGO_COLL_COUNT && (unsigned)algo < ALGO_COUNT
          ? tcp_handlers[coll][algo]
          : NULL;
  return h != NULL ? h(a, k) : no_handler(coll, algo, "TCP");
}

bool gang__algo_runs(algo_coll coll, algo_id algo) {
  return (unsigned)coll < ALGO_COLL_COUNT && (unsigned)algo < ALGO_COUNT &&
         (shm_handlers[coll][algo] != NULL || tcp_handlers[coll][algo] != NULL);
}
