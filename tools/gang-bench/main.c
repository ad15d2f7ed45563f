/* gang-bench: nccl-tests for gang. Every rank runs this program; they join
 * the world gang from the environment, run one collective over a range of
 * sizes, and rank 0 prints a table (or JSON Lines) of time, algorithm
 * bandwidth and bus bandwidth, out of place and in place, with the number
 * of wrong elements found by checking every result.
 *
 * The measurement itself (command line, sizes, values and checks, timing,
 * output) is bench/lib's, shared with the peer programs bench/compare runs
 * for Open MPI, MPICH and Gloo; this file is the gang backend: the calls.
 *
 * GANG_BENCH_MEM=1 takes the buffers from gang_mem_alloc.
 *
 * gang's all_reduce and broadcast work in place only, and its all_to_all
 * only out of place; the missing placement is measured the way a caller
 * would get it: a copy plus the call (docs/benchmarking.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gang/env.h>
#include <gang/gang.h>
#include <gang/version.h>

#include "bench.h"

static const bench_program program = {
    .name = "gang-bench",
    .about = "Measures one gang collective over a range of sizes, nccl-tests "
             "style.\n"
             "Run one process per rank (gangrun, torchrun, srun, mpirun, or "
             "by hand\n"
             "with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0 "
             "prints.\n",
    .dtypes = BENCH_ALL_DTYPES,
    .ops = BENCH_ALL_OPS,
};

/* bench_dtype and bench_op in gang's terms (bench.h's order). */
static const gang_dtype dtypes[BENCH_NDTYPE] = {
    GANG_FLOAT32, GANG_FLOAT64, GANG_FLOAT16, GANG_BFLOAT16,
    GANG_INT8,    GANG_UINT8,   GANG_INT16,   GANG_INT32,
    GANG_UINT32,  GANG_INT64,   GANG_UINT64};
static const gang_reduce_op ops[BENCH_NOP] = {GANG_SUM, GANG_PRODUCT, GANG_MIN,
                                              GANG_MAX, GANG_MEAN};

static int fail(gang_t *g, const char *what, gang_status st) {
  fprintf(stderr, "gang-bench rank %d: %s failed: %s: %s\n", gang_rank(g), what,
          gang_status_name(st), gang_last_error());
  return 1;
}

/* One call of the collective in the given placement. */
static gang_status call(gang_t *g, const bench_call *c) {
  gang_dtype dt = dtypes[c->dtype];
  gang_reduce_op op = ops[c->op];
  size_t es = gang_dtype_size(dt), mine = (size_t)gang_rank(g) * c->s.per * es;
  switch (c->coll) {
  case BENCH_ALL_REDUCE:
    if (!c->inplace)
      memcpy(c->recv, c->send, c->s.bytes);
    return gang_all_reduce(g, c->recv, c->s.count, dt, op);
  case BENCH_BROADCAST:
    if (!c->inplace && gang_rank(g) == c->root)
      memcpy(c->recv, c->send, c->s.bytes);
    return gang_broadcast(g, c->recv, c->s.count, dt, c->root);
  case BENCH_ALL_GATHER:
    return gang_all_gather(g, c->recv, c->inplace ? c->recv + mine : c->send,
                           c->s.per, dt);
  case BENCH_REDUCE_SCATTER:
    return c->inplace
               ? gang_reduce_scatter(g, c->recv + mine, c->recv, c->s.per, dt,
                                     op)
               : gang_reduce_scatter(g, c->recv, c->send, c->s.per, dt, op);
  case BENCH_ALL_TO_ALL:
    if (!c->inplace)
      return gang_all_to_all(g, c->recv, c->send, c->s.per, dt);
    memcpy(c->stage, c->recv, c->s.bytes);
    return gang_all_to_all(g, c->recv, c->stage, c->s.per, dt);
  case BENCH_BARRIER:
    return gang_barrier(g);
  default:
    return GANG_INVALID_ARGUMENT;
  }
}

static int run(void *ctx, const bench_call *c) {
  gang_status st = call(ctx, c);
  return st == GANG_OK ? 0 : fail(ctx, bench_coll_name(c->coll), st);
}

static int reduce(gang_t *g, void *v, size_t n, gang_dtype dt,
                  gang_reduce_op op) {
  gang_status st = gang_all_reduce(g, v, n, dt, op);
  return st == GANG_OK ? 0 : fail(g, "gang_all_reduce (timings, counts)", st);
}

static int max_f64(void *ctx, double *v, size_t n) {
  return reduce(ctx, v, n, GANG_FLOAT64, GANG_MAX);
}

static int sum_i64(void *ctx, int64_t *v, size_t n) {
  return reduce(ctx, v, n, GANG_INT64, GANG_SUM);
}

static int min_i64(void *ctx, int64_t *v, size_t n) {
  return reduce(ctx, v, n, GANG_INT64, GANG_MIN);
}

static int barrier(void *ctx) {
  gang_status st = gang_barrier(ctx);
  return st == GANG_OK ? 0 : fail(ctx, "gang_barrier", st);
}

static int gather_ids(void *ctx, const bench_rank_id *mine,
                      bench_rank_id *all) {
  gang_status st = gang_all_gather(ctx, all, mine, sizeof *mine, GANG_UINT8);
  return st == GANG_OK ? 0 : fail(ctx, "gang_all_gather (ranks' hosts)", st);
}

static const char *chosen(void *ctx) { return gang_last_algorithm(ctx); }

static const char *placement_note(bench_coll c) {
  switch (c) {
  case BENCH_ALL_REDUCE:
    return "# all_reduce works in place: out-of-place = copy to the output "
           "buffer + in-place call\n";
  case BENCH_BROADCAST:
    return "# broadcast works in place: out-of-place = copy to the output "
           "buffer + in-place call\n";
  case BENCH_ALL_TO_ALL:
    return "# all_to_all needs distinct buffers: in-place = copy to a "
           "staging buffer + call\n";
  default:
    return NULL;
  }
}

/* GANG_BENCH_MEM=1: the send, receive and stage buffers from
 * gang_mem_alloc, which other ranks of the host read directly. */
static void *mem[3];

static unsigned char *mem_buffer(void *ctx, int which, size_t bytes) {
  (void)ctx;
  if (gang_mem_alloc(bytes, &mem[which]) != GANG_OK) {
    fprintf(stderr, "gang-bench: GANG_BENCH_MEM: %s\n", gang_last_error());
    return NULL; /* the driver's own buffer then */
  }
  memset(mem[which], 0, bytes); /* its pages faulted in before the timing */
  return mem[which];
}

int main(int argc, char **argv) {
  bench_args a;
  int rc = bench_parse_args(argc, argv, &program, &a);
  if (rc != 0)
    return rc < 0 ? 0 : rc;
  gang_t *g = NULL;
  gang_status st = gang_create_default(NULL, &g);
  if (st != GANG_OK) {
    fprintf(stderr, "gang-bench: cannot join the gang: %s: %s\n",
            gang_status_name(st), gang_last_error());
    return 1;
  }
  char library[32];
  snprintf(library, sizeof library, "gang %s", gang_version_string());
  const char *corrupt = getenv("GANG_BENCH_CORRUPT");
  bench_backend b = {.program = program.name,
                     .library = library,
                     .gang_version = gang_version_string(),
                     .rank = gang_rank(g),
                     .size = gang_size(g),
                     .ctx = g,
                     .corrupt = corrupt != NULL && strcmp(corrupt, "1") == 0,
                     .run = run,
                     .max_f64 = max_f64,
                     .sum_i64 = sum_i64,
                     .min_i64 = min_i64,
                     .barrier = barrier,
                     .gather_ids = gather_ids,
                     .chosen = chosen,
                     .placement_note = placement_note};
  const char *m = getenv("GANG_BENCH_MEM");
  if (m != NULL && strcmp(m, "1") == 0)
    b.buffer = mem_buffer;
  rc = bench_run(&b, &a);
  gang_destroy(g);
  for (int k = 0; k < 3; k++)
    gang_mem_free(mem[k]);
  return rc;
}
