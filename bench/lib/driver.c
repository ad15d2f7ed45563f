/* bench_run(): the measurement, the same for every library (bench.h).
 *
 * Timing, for each row and placement: inputs written, barrier, -w untimed
 * calls, then -n calls back to back, each timed on each rank with
 * CLOCK_MONOTONIC into an array; after the loop one MAX reduction gives
 * every iteration's slowest rank (a row's iteration takes as long as its
 * slowest rank), and the row reports the median over iterations (one
 * descheduled iteration on a shared 2-core machine does not move it).
 * Only the collective runs inside the loop. With -c 1 the inputs are
 * written again, the output poisoned and guarded, the collective run once
 * more and every element compared with its exact value (data.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arrival.h"
#include "bench.h"
#include "output.h"
#include "timing.h"

/* nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md there). */
double bench_bus_factor(bench_coll c, int n) {
  switch (c) {
  case BENCH_ALL_REDUCE:
    return 2.0 * (n - 1) / n;
  case BENCH_ALL_GATHER:
  case BENCH_REDUCE_SCATTER:
  case BENCH_ALL_TO_ALL:
    return (double)(n - 1) / n;
  case BENCH_BROADCAST:
    return 1.0;
  default:
    return 0.0;
  }
}

bench_shape bench_shape_of(bench_coll c, size_t bytes, size_t elem_size,
                           int n) {
  bench_shape s = {0};
  if (c == BENCH_ALL_REDUCE || c == BENCH_BROADCAST) {
    s.count = s.per = bytes / elem_size;
  } else if (c != BENCH_BARRIER) {
    s.per = bytes / elem_size / (size_t)n;
    s.count = s.per * (size_t)n;
  }
  s.bytes = s.count * elem_size;
  s.out_inplace = s.out_outplace = s.bytes;
  if (c == BENCH_REDUCE_SCATTER)
    s.out_outplace = s.per * elem_size;
  return s;
}

size_t bench_next_size(const bench_args *a, size_t size) {
  if (a->step_factor <= 0)
    return size + a->step_bytes;
  double next = floor((double)size * a->step_factor);
  return next > (double)size ? (size_t)next : size + 1;
}

/* One rank's state for the whole run. */
typedef struct run_state {
  const bench_backend *b;
  const bench_args *a;
  double *times, *sorted; /* a->iters per-iteration times, us */
  double *arrival;        /* --arrival: 4 * a->iters (arrival.h) */
  unsigned char *send, *recv, *stage;
  /* Totals over the run, valid on every rank (reduced as rows go). */
  double bw_sum;
  int bw_count;
  int64_t wrong, oob;
} run_state;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* This rank's inputs for one placement; for a check, the output poisoned
 * and its guard armed. */
static void prepare(const run_state *st, const bench_call *c, int check) {
  size_t es = bench_dtype_size(c->dtype);
  int r = st->b->rank, n = st->b->size;
  unsigned char *in = c->inplace ? c->recv : c->send;
  if (!c->inplace)
    memset(c->recv, BENCH_GUARD_BYTE, c->s.out_outplace);
  switch (c->coll) {
  case BENCH_ALL_REDUCE:
  case BENCH_REDUCE_SCATTER:
    bench_fill(in, c->s.count, c->dtype, c->op, r, n, 0);
    break;
  case BENCH_BROADCAST:
    /* Non-roots start from their own (different) values in place. */
    if (r == c->root || c->inplace)
      bench_fill(in, c->s.count, c->dtype, BENCH_SUM, r, n, 0);
    break;
  case BENCH_ALL_GATHER:
    bench_fill(c->inplace ? in + (size_t)r * c->s.per * es : in, c->s.per,
               c->dtype, BENCH_SUM, r, n, (size_t)r * c->s.per);
    break;
  case BENCH_ALL_TO_ALL:
    bench_fill(in, c->s.count, c->dtype, BENCH_SUM, r, n, 0);
    break;
  default:
    break;
  }
  if (check)
    bench_guard_set(c->recv, c->inplace ? c->s.out_inplace : c->s.out_outplace);
}

/* Wrong elements of this rank's result. */
static size_t verify(const run_state *st, const bench_call *c) {
  size_t es = bench_dtype_size(c->dtype), wrong = 0, per = c->s.per;
  int r = st->b->rank, n = st->b->size;
  const unsigned char *out = c->recv;
  switch (c->coll) {
  case BENCH_ALL_REDUCE:
    return bench_count_wrong(out, c->s.count, c->dtype, c->op, n, 1, 0, 0);
  case BENCH_REDUCE_SCATTER:
    if (c->inplace && !st->b->reduce_scatter_inplace_at_start)
      out += (size_t)r * per * es;
    return bench_count_wrong(out, per, c->dtype, c->op, n, 1, 0,
                             (size_t)r * per);
  case BENCH_BROADCAST:
    return bench_count_wrong(out, c->s.count, c->dtype, BENCH_SUM, n, 0,
                             c->root, 0);
  case BENCH_ALL_GATHER:
    for (int src = 0; src < n; src++)
      wrong += bench_count_wrong(out + (size_t)src * per * es, per, c->dtype,
                                 BENCH_SUM, n, 0, src, (size_t)src * per);
    return wrong;
  case BENCH_ALL_TO_ALL:
    /* Block src of my output is what src sent to me: its block r. */
    for (int src = 0; src < n; src++)
      wrong += bench_count_wrong(out + (size_t)src * per * es, per, c->dtype,
                                 BENCH_SUM, n, 0, src, (size_t)r * per);
    return wrong;
  default:
    return 0;
  }
}

/* Times and checks one placement of one row. */
static int measure(run_state *st, const bench_call *c, bench_result *res) {
  const bench_backend *b = st->b;
  const bench_args *a = st->a;
  size_t n = (size_t)a->iters;
  int rc = 0;
  prepare(st, c, 0);
  if (b->setup != NULL && (rc = b->setup(b->ctx, c)) != 0)
    return rc;
  if ((rc = b->barrier(b->ctx)) != 0)
    goto out;
  for (int i = 0; i < a->warmup; i++)
    if ((rc = b->run(b->ctx, c)) != 0)
      goto out;
  double cpu0 = bench_cpu_us(), wall0 = now_us();
  for (size_t i = 0; i < n; i++) {
    if (a->sync && (rc = b->barrier(b->ctx)) != 0)
      goto out;
    bench_arrive_late(b->rank, a->late_us);
    double t0 = now_us();
    rc = b->run(b->ctx, c);
    double t1 = now_us();
    st->times[i] = t1 - t0;
    if (st->arrival != NULL)
      arrival_record(st->arrival, n, i, t0, t1,
                     c->coll == BENCH_BROADCAST && c->root == b->rank);
    if (rc != 0)
      goto out;
  }
  double wall = now_us() - wall0;
  const char *chosen = b->chosen != NULL ? b->chosen(b->ctx) : NULL;
  snprintf(res->chosen, sizeof res->chosen, "%s", chosen ? chosen : "");
  double loop[2] = {(bench_cpu_us() - cpu0) / wall, wall / (double)n};
  if ((rc = b->max_f64(b->ctx, loop, 2)) != 0)
    goto out;
  if (st->arrival != NULL) {
    if ((rc = b->max_f64(b->ctx, st->arrival, 4 * n)) != 0)
      goto out;
    arrival_medians(st->arrival, n, &res->spread_us, &res->after_last_us,
                    &res->from_root_us);
  }
  if ((rc = b->max_f64(b->ctx, st->times, n)) != 0)
    goto out;
  res->t = bench_timing_of(st->times, n, st->sorted);
  res->t.cpu_frac = loop[0];
  res->t.loop_us = loop[1];
  res->ran = 1;
  double us = res->t.median_us;
  res->algbw = us > 0 ? (double)c->s.bytes / (us * 1e3) : 0;
  res->busbw = res->algbw * bench_bus_factor(c->coll, b->size);
  res->wrong = -1;
  if (a->check && c->coll != BENCH_BARRIER &&
      !(b->unchecked & (1u << c->coll))) {
    prepare(st, c, 1);
    if ((rc = b->run(b->ctx, c)) != 0)
      goto out;
    size_t used = c->inplace ? c->s.out_inplace : c->s.out_outplace;
    if (b->corrupt && b->rank == 0 && used > 0)
      c->recv[used - 1] ^= 0x40; /* flips a bit of the last element */
    int64_t counts[2] = {(int64_t)verify(st, c),
                         (int64_t)bench_guard_count(c->recv, used)};
    if ((rc = b->sum_i64(b->ctx, counts, 2)) != 0)
      goto out;
    res->wrong = counts[0];
    st->wrong += counts[0];
    st->oob += counts[1];
  }
  if (c->coll != BENCH_BARRIER) {
    st->bw_sum += res->busbw;
    st->bw_count++;
  }
out:
  if (b->teardown != NULL)
    b->teardown(b->ctx, c);
  return rc;
}

/* Both placements of one row, then its line. */
static int row(run_state *st, bench_call *c) {
  bench_result out = {0}, in = {0};
  c->inplace = 0; /* barrier: its one case */
  if ((st->a->outplace || c->coll == BENCH_BARRIER) &&
      measure(st, c, &out) != 0)
    return 1;
  c->inplace = 1;
  if (st->a->inplace && c->coll != BENCH_BARRIER && measure(st, c, &in) != 0)
    return 1;
  if (st->b->rank == 0)
    bench_print_row(st->b, st->a, c, &out, &in);
  return 0;
}

/* Types, then reduce operations, then roots, then sizes, then algorithms:
 * one row each. Barrier has no size: one row per algorithm. */
static int run_rows(run_state *st) {
  const bench_args *a = st->a;
  const bench_backend *b = st->b;
  bench_coll coll = a->coll;
  int nalgos = a->nalgos > 0 ? a->nalgos : 1;
  bench_call c = {.coll = coll,
                  .dtype = BENCH_FLOAT,
                  .op = BENCH_SUM,
                  .root = -1,
                  .send = st->send,
                  .recv = st->recv,
                  .stage = st->stage};
  if (coll == BENCH_BARRIER) {
    for (int k = 0; k < nalgos; k++) {
      c.algo = a->nalgos > 0 ? k : -1;
      if (row(st, &c) != 0)
        return 1;
    }
    return 0;
  }
  int nops = bench_reduces(coll) ? a->nops : 1;
  int root_lo = -1, root_hi = -1;
  if (coll == BENCH_BROADCAST) {
    root_lo = a->root < 0 ? 0 : a->root;
    root_hi = a->root < 0 ? b->size - 1 : a->root;
  }
  for (int d = 0; d < a->ndtypes; d++) {
    c.dtype = a->dtypes[d];
    for (int o = 0; o < nops; o++) {
      c.op = a->ops[o];
      for (c.root = root_lo; c.root <= root_hi; c.root++)
        for (size_t sz = a->min_bytes; sz <= a->max_bytes;
             sz = bench_next_size(a, sz)) {
          c.s = bench_shape_of(coll, sz, bench_dtype_size(c.dtype), b->size);
          for (int k = 0; k < nalgos; k++) {
            c.algo = a->nalgos > 0 ? k : -1;
            if (row(st, &c) != 0)
              return 1;
          }
        }
    }
  }
  return 0;
}

/* Page-aligned and touched, so first-use page faults stay out of the
 * timed loop. */
static unsigned char *buffer(size_t bytes) {
  size_t n = (bytes + 4095) / 4096 * 4096;
  unsigned char *p = aligned_alloc(4096, n);
  if (p != NULL)
    memset(p, 0, n);
  return p;
}

/* --arrival compares the ranks' clocks: every rank must run on this
 * machine's kernel, whose CLOCK_MONOTONIC they then share. Host names do
 * not tell (the cluster in a box's hosts are network namespaces of one
 * kernel, each with its own name); the kernel's boot id does. Its hash
 * (exact in a double), the largest and the smallest over the ranks, from
 * one MAX of (h, -h). 0: one machine, 2: several (rank 0 says so, naming
 * the hosts where the ranks' ids are known), 1: a reduction failed. */
static int one_host(const bench_backend *b, const bench_rank_id *ids) {
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == NULL || fgets(boot, sizeof boot, f) == NULL)
    gethostname(boot, sizeof boot - 1); /* no /proc: the host's name */
  if (f != NULL)
    fclose(f);
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = boot; *p; p++)
    h = (h ^ (unsigned char)*p) * 16777619u;
  double v[2] = {(double)h, -(double)h};
  if (b->max_f64(b->ctx, v, 2) != 0)
    return 1;
  if (v[0] == -v[1])
    return 0;
  if (b->rank == 0) {
    int r = 1;
    while (ids != NULL && r < b->size &&
           strncmp(ids[r].host, ids[0].host, sizeof ids[r].host) == 0)
      r++;
    if (ids != NULL && r < b->size)
      fprintf(stderr,
              "%s: --arrival compares the ranks' clocks, so every rank "
              "must be on one machine: rank %d is on %.59s, rank 0 on "
              "%.59s\n",
              b->program, r, ids[r].host, ids[0].host);
    else
      fprintf(stderr,
              "%s: --arrival compares the ranks' clocks, so every rank "
              "must be on one machine; these ranks run on different "
              "kernels (boot ids)\n",
              b->program);
  }
  return 2;
}

/* Every rank's pid and host, when the backend can gather them. */
static int gather_ids(const bench_backend *b, bench_rank_id **out) {
  *out = NULL;
  if (b->gather_ids == NULL)
    return 0;
  bench_rank_id me = {(int32_t)getpid(), ""};
  gethostname(me.host, sizeof me.host - 1);
  bench_rank_id *all = calloc((size_t)b->size, sizeof *all);
  if (all == NULL) {
    fprintf(stderr, "%s: out of memory\n", b->program);
    return 1;
  }
  if (b->gather_ids(b->ctx, &me, all) != 0) {
    free(all);
    return 1;
  }
  *out = all;
  return 0;
}

int bench_run(const bench_backend *b, const bench_args *a) {
  if (a->coll == BENCH_BROADCAST && a->root >= b->size) {
    if (b->rank == 0)
      fprintf(stderr, "%s: -r/--root: %d is not a rank (%d ranks)\n",
              b->program, a->root, b->size);
    return 2;
  }
  run_state st = {.b = b, .a = a};
  size_t cap = a->max_bytes + BENCH_GUARD, n = (size_t)a->iters;
  unsigned char **bufs[3] = {&st.send, &st.recv, &st.stage};
  int owned[3] = {0, 0, 0}; /* the backend's: not freed here */
  for (int k = 0; k < 3; k++) {
    *bufs[k] = b->buffer != NULL ? b->buffer(b->ctx, k, cap) : NULL;
    owned[k] = *bufs[k] != NULL;
    if (!owned[k])
      *bufs[k] = buffer(cap);
  }
  st.times = calloc(n, sizeof *st.times);
  st.sorted = calloc(n, sizeof *st.sorted);
  st.arrival = a->arrival ? calloc(4 * n, sizeof *st.arrival) : NULL;
  /* Agree on whether every rank has its buffers, so that one rank short of
   * memory ends the run everywhere instead of leaving the others waiting. */
  int64_t ok = st.send && st.recv && st.stage && st.times && st.sorted &&
               (!a->arrival || st.arrival);
  if (!ok)
    fprintf(stderr, "%s rank %d: cannot allocate buffers of %zu bytes (-e)\n",
            b->program, b->rank, cap);
  int rc = 0;
  if (b->min_i64(b->ctx, &ok, 1) != 0 || !ok)
    rc = 1;
  bench_rank_id *ids = NULL;
  if (rc == 0)
    rc = gather_ids(b, &ids);
  if (rc == 0 && a->arrival)
    rc = one_host(b, ids);
  if (rc == 0 && b->rank == 0)
    bench_print_header(b, a, ids);
  if (rc == 0)
    rc = run_rows(&st);
  if (rc == 0 && b->rank == 0)
    bench_print_footer(b, a, st.oob, st.wrong, st.bw_sum, st.bw_count);
  if (rc == 0 && (st.wrong != 0 || st.oob != 0)) {
    if (b->rank == 0)
      fprintf(stderr, "%s: %lld wrong values, %lld out-of-bounds bytes\n",
              b->program, (long long)st.wrong, (long long)st.oob);
    rc = 1;
  }
  free(ids);
  for (int k = 0; k < 3; k++)
    if (!owned[k])
      free(*bufs[k]);
  free(st.times);
  free(st.sorted);
  free(st.arrival);
  return rc;
}
