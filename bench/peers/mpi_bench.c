/* gang-bench's measurement for MPI (Open MPI and MPICH: this one source is
 * compiled with each library's mpicc), for bench/compare. The driver,
 * values, checks and output are bench/lib's; here are only the calls.
 *
 * Placements use MPI's own forms: MPI_IN_PLACE for all_reduce, all_gather
 * (the input is this rank's block of the output), reduce_scatter (the
 * result lands at the start of the buffer, as MPI defines it) and
 * all_to_all; out of place, distinct buffers. MPI_Bcast has one buffer, so
 * out-of-place broadcast is the root's copy plus the call, as gang-bench
 * measures gang's. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* The types and operations MPI has natively: gang-bench's half, bfloat16
 * and int16 are left out, and avg (gang's MEAN), which MPI does not have. */
static const bench_program program = {
    .name = "mpi_bench",
    .about = "gang-bench's measurement of one collective for MPI (Open MPI "
             "or MPICH);\nstart one process per rank with the library's "
             "mpirun.\n",
    .dtypes = 1u << BENCH_FLOAT | 1u << BENCH_DOUBLE | 1u << BENCH_INT8 |
              1u << BENCH_UINT8 | 1u << BENCH_INT32 | 1u << BENCH_UINT32 |
              1u << BENCH_INT64 | 1u << BENCH_UINT64,
    .ops =
        1u << BENCH_SUM | 1u << BENCH_PROD | 1u << BENCH_MIN | 1u << BENCH_MAX,
    .algos = 1,
};

static MPI_Datatype mpi_type(bench_dtype t) {
  switch (t) {
  case BENCH_FLOAT:
    return MPI_FLOAT;
  case BENCH_DOUBLE:
    return MPI_DOUBLE;
  case BENCH_INT8:
    return MPI_INT8_T;
  case BENCH_UINT8:
    return MPI_UINT8_T;
  case BENCH_INT32:
    return MPI_INT32_T;
  case BENCH_UINT32:
    return MPI_UINT32_T;
  case BENCH_INT64:
    return MPI_INT64_T;
  default:
    return MPI_UINT64_T;
  }
}

static MPI_Op mpi_op(bench_op op) {
  switch (op) {
  case BENCH_PROD:
    return MPI_PROD;
  case BENCH_MIN:
    return MPI_MIN;
  case BENCH_MAX:
    return MPI_MAX;
  default:
    return MPI_SUM;
  }
}

static int check(int err, const char *what) {
  if (err == MPI_SUCCESS)
    return 0;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, msg, &len);
  fprintf(stderr, "mpi_bench: %s failed: %s\n", what, msg);
  return 1;
}

/* The counts are below 2^31 for every size the driver accepts on the
 * 2-core machines this runs on; larger ones would need MPI-4's _c calls. */
static int mpi_run(void *ctx, const bench_call *c) {
  (void)ctx;
  MPI_Comm w = MPI_COMM_WORLD;
  MPI_Datatype t = mpi_type(c->dtype);
  int count = (int)c->s.count, per = (int)c->s.per;
  switch (c->coll) {
  case BENCH_ALL_REDUCE:
    return check(MPI_Allreduce(c->inplace ? MPI_IN_PLACE : c->send, c->recv,
                               count, t, mpi_op(c->op), w),
                 "MPI_Allreduce");
  case BENCH_ALL_GATHER:
    return check(MPI_Allgather(c->inplace ? MPI_IN_PLACE : c->send, per, t,
                               c->recv, per, t, w),
                 "MPI_Allgather");
  case BENCH_REDUCE_SCATTER:
    return check(MPI_Reduce_scatter_block(c->inplace ? MPI_IN_PLACE : c->send,
                                          c->recv, per, t, mpi_op(c->op), w),
                 "MPI_Reduce_scatter_block");
  case BENCH_BROADCAST: {
    int rank;
    MPI_Comm_rank(w, &rank);
    if (!c->inplace && rank == c->root)
      memcpy(c->recv, c->send, c->s.bytes);
    return check(MPI_Bcast(c->recv, count, t, c->root, w), "MPI_Bcast");
  }
  case BENCH_ALL_TO_ALL:
    return check(MPI_Alltoall(c->inplace ? MPI_IN_PLACE : c->send, per, t,
                              c->recv, per, t, w),
                 "MPI_Alltoall");
  case BENCH_BARRIER:
    return check(MPI_Barrier(w), "MPI_Barrier");
  default:
    return 1;
  }
}

static int mpi_max_f64(void *ctx, double *v, size_t n) {
  (void)ctx;
  return check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_MAX,
                             MPI_COMM_WORLD),
               "MPI_Allreduce (timings)");
}

static int mpi_sum_i64(void *ctx, int64_t *v, size_t n) {
  (void)ctx;
  return check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_INT64_T, MPI_SUM,
                             MPI_COMM_WORLD),
               "MPI_Allreduce (counts)");
}

static int mpi_min_i64(void *ctx, int64_t *v, size_t n) {
  (void)ctx;
  return check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_INT64_T, MPI_MIN,
                             MPI_COMM_WORLD),
               "MPI_Allreduce (flags)");
}

static int mpi_barrier(void *ctx) {
  (void)ctx;
  return check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

/* "Open MPI 4.1.4" or "MPICH 4.0.2": the first words of the library's
 * version string, which differ in form between the two. */
static void library_name(char *out, size_t cap) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  unsigned maj = 0, min = 0, pat = 0;
  const char *p;
  if ((p = strstr(v, "Open MPI v")) != NULL &&
      sscanf(p, "Open MPI v%u.%u.%u", &maj, &min, &pat) == 3)
    snprintf(out, cap, "Open MPI %u.%u.%u", maj, min, pat);
  else if ((p = strstr(v, "MPICH Version:")) != NULL &&
           sscanf(p, "MPICH Version: %u.%u.%u", &maj, &min, &pat) >= 2)
    snprintf(out, cap, "MPICH %u.%u.%u", maj, min, pat);
  else {
    snprintf(out, cap, "%.40s", v);
    for (char *q = out; *q; q++)
      if (*q == '"' || *q == '\\' || *q == '\n' || *q == '\t')
        *q = ' ';
  }
}

int main(int argc, char **argv) {
  /* Flags first, before MPI_Init, so that a bad flag exits 2 on every rank
   * without the launcher's abort noise. */
  bench_args a;
  int rc = bench_parse_args(argc, argv, &program, &a);
  if (rc != 0)
    return rc < 0 ? 0 : rc;
  if (a.nalgos > 0) {
    fprintf(stderr, "mpi_bench: -A: MPI picks its own algorithms (set them "
                    "with the library's parameters)\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  /* Errors come back as codes, so a failed call is reported, not fatal. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  char lib[64];
  library_name(lib, sizeof lib);
  bench_backend b = {.program = program.name,
                     .library = lib,
                     .reduce_scatter_inplace_at_start = 1,
                     .run = mpi_run,
                     .max_f64 = mpi_max_f64,
                     .sum_i64 = mpi_sum_i64,
                     .min_i64 = mpi_min_i64,
                     .barrier = mpi_barrier};
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  rc = bench_run(&b, &a);
  /* One rank's failure must not leave the others in a collective. */
  if (rc == 1)
    MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  return rc;
}
