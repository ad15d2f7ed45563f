/* gang-bench: nccl-tests for gang. Every rank runs this program; they join
 * the world gang from the environment, run one collective over a range of
 * sizes, and rank 0 prints a table (or JSON Lines) of time, algorithm
 * bandwidth and bus bandwidth, out of place and in place, with the number
 * of wrong elements found by checking every result.
 *
 * Timing: each rank times every iteration of its own call; after the timed
 * loop the per-iteration times are combined with an all_reduce MAX (so a
 * row's iteration takes as long as its slowest rank), and the row reports
 * the median over iterations. Combining after the loop keeps the loop free
 * of anything but the collective; the median keeps one descheduled
 * iteration (2 cores, shared) from moving the figure.
 *
 * gang's all_reduce and broadcast work in place only, and its all_to_all
 * only out of place; the missing placement is measured the way a caller
 * would get it: a copy plus the call (docs/benchmarking.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gang/env.h>
#include <gang/gang.h>
#include <gang/version.h>

#include "arrival.h"
#include "timing.h"
#include "bench.h"

/* One rank's state for the whole run. */
typedef struct bench {
  gang_t *g;
  int rank, size;
  const bench_args *a;
  unsigned char *send, *recv, *stage; /* stage: all_to_all in place only */
  double *times;                      /* a->iters per-iteration times, us */
  double *sorted;
  double *arrival; /* --arrival: 3 * a->iters (tools/gang-bench/arrival.h) */
  /* Totals over the run, valid on every rank (reduced as rows go). */
  double bw_sum;
  int bw_count;
  int64_t wrong, oob;
  int corrupt; /* GANG_BENCH_CORRUPT: self-test of the checker */
} bench;

/* The shape of one row: element counts and bytes. */
typedef struct shape {
  size_t count; /* elements in the size column (nccl-tests' count) */
  size_t per;   /* elements per rank block (all_gather, reduce_scatter,
                   all_to_all) or count */
  size_t bytes; /* the size column: count * element size */
  size_t out_bytes_inplace, out_bytes_outplace; /* checked region */
} shape;

/* The result of one placement of one row. */
typedef struct placement {
  int ran;
  bench_timing t; /* t.median_us is the row's time */
  double time_us, algbw, busbw;
  int64_t wrong;                   /* -1: not checked */
  double spread_us, after_last_us; /* --arrival only */
} placement;

static int fail(bench *b, const char *what, gang_status st) {
  fprintf(stderr, "gang-bench rank %d: %s failed: %s: %s\n", b->rank, what,
          gang_status_name(st), gang_last_error());
  return 1;
}

#define TRY(b, call)                                                           \
  do {                                                                         \
    gang_status st_ = (call);                                                  \
    if (st_ != GANG_OK)                                                        \
      return fail((b), #call, st_);                                            \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int reduces(bench_coll c) {
  return c == COLL_ALL_REDUCE || c == COLL_REDUCE_SCATTER;
}

/* nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md there). */
static double bus_factor(bench_coll c, int n) {
  switch (c) {
  case COLL_ALL_REDUCE:
    return 2.0 * (n - 1) / n;
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_ALL_TO_ALL:
    return (double)(n - 1) / n;
  case COLL_BROADCAST:
    return 1.0;
  default:
    return 0.0;
  }
}

/* nccl-tests' size semantics: the size is the whole buffer (all_gather:
 * the gathered output; reduce_scatter: the input; all_to_all: one rank's
 * buffer), rounded down to a whole number of elements per rank. */
static shape make_shape(bench_coll c, size_t bytes, size_t es, int n) {
  shape s = {0};
  switch (c) {
  case COLL_ALL_REDUCE:
  case COLL_BROADCAST:
    s.count = s.per = bytes / es;
    s.bytes = s.count * es;
    s.out_bytes_inplace = s.out_bytes_outplace = s.bytes;
    break;
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_ALL_TO_ALL:
    s.per = bytes / es / (size_t)n;
    s.count = s.per * (size_t)n;
    s.bytes = s.count * es;
    s.out_bytes_inplace = s.out_bytes_outplace = s.bytes;
    if (c == COLL_REDUCE_SCATTER)
      s.out_bytes_outplace = s.per * es;
    break;
  default:
    break;
  }
  return s;
}

/* Writes this rank's inputs for one placement; for a check also poisons
 * the output and arms its guard. */
static void prepare(bench *b, bench_coll c, int inplace, const shape *s,
                    gang_dtype dt, gang_reduce_op op, int root, int check) {
  size_t es = gang_dtype_size(dt);
  int r = b->rank, n = b->size;
  unsigned char *in = inplace ? b->recv : b->send;
  if (!inplace)
    memset(b->recv, BENCH_GUARD_BYTE, s->out_bytes_outplace);
  switch (c) {
  case COLL_ALL_REDUCE:
  case COLL_REDUCE_SCATTER:
    bench_fill(in, s->count, dt, op, r, n, 0);
    break;
  case COLL_BROADCAST:
    /* Non-roots start from their own (different) values in place. */
    if (r == root || inplace)
      bench_fill(in, s->count, dt, GANG_SUM, r, n, 0);
    break;
  case COLL_ALL_GATHER:
    bench_fill(inplace ? in + (size_t)r * s->per * es : in, s->per, dt,
               GANG_SUM, r, n, (size_t)r * s->per);
    break;
  case COLL_ALL_TO_ALL:
    bench_fill(in, s->count, dt, GANG_SUM, r, n, 0);
    break;
  default:
    break;
  }
  if (check)
    bench_guard_set(b->recv,
                    inplace ? s->out_bytes_inplace : s->out_bytes_outplace);
}

/* One call of the collective in the given placement. */
static gang_status run_once(bench *b, bench_coll c, int inplace, const shape *s,
                            gang_dtype dt, gang_reduce_op op, int root) {
  size_t es = gang_dtype_size(dt);
  gang_t *g = b->g;
  switch (c) {
  case COLL_ALL_REDUCE:
    if (!inplace)
      memcpy(b->recv, b->send, s->bytes);
    return gang_all_reduce(g, b->recv, s->count, dt, op);
  case COLL_BROADCAST:
    if (!inplace && b->rank == root)
      memcpy(b->recv, b->send, s->bytes);
    return gang_broadcast(g, b->recv, s->count, dt, root);
  case COLL_ALL_GATHER:
    return gang_all_gather(
        g, b->recv, inplace ? b->recv + (size_t)b->rank * s->per * es : b->send,
        s->per, dt);
  case COLL_REDUCE_SCATTER:
    return inplace
               ? gang_reduce_scatter(g, b->recv + (size_t)b->rank * s->per * es,
                                     b->recv, s->per, dt, op)
               : gang_reduce_scatter(g, b->recv, b->send, s->per, dt, op);
  case COLL_ALL_TO_ALL:
    if (!inplace)
      return gang_all_to_all(g, b->recv, b->send, s->per, dt);
    memcpy(b->stage, b->recv, s->bytes);
    return gang_all_to_all(g, b->recv, b->stage, s->per, dt);
  case COLL_BARRIER:
    return gang_barrier(g);
  default:
    return GANG_INVALID_ARGUMENT;
  }
}

/* Wrong elements of this rank's result. */
static size_t verify(bench *b, bench_coll c, int inplace, const shape *s,
                     gang_dtype dt, gang_reduce_op op, int root) {
  size_t es = gang_dtype_size(dt);
  int r = b->rank, n = b->size;
  const unsigned char *out = b->recv;
  size_t wrong = 0;
  switch (c) {
  case COLL_ALL_REDUCE:
    return bench_count_wrong(out, s->count, dt, op, n, 1, 0, 0);
  case COLL_REDUCE_SCATTER:
    if (inplace)
      out += (size_t)r * s->per * es;
    return bench_count_wrong(out, s->per, dt, op, n, 1, 0, (size_t)r * s->per);
  case COLL_BROADCAST:
    return bench_count_wrong(out, s->count, dt, GANG_SUM, n, 0, root, 0);
  case COLL_ALL_GATHER:
    for (int src = 0; src < n; src++)
      wrong += bench_count_wrong(out + (size_t)src * s->per * es, s->per, dt,
                                 GANG_SUM, n, 0, src, (size_t)src * s->per);
    return wrong;
  case COLL_ALL_TO_ALL:
    /* Block src of my output is what src sent to me: its block r. */
    for (int src = 0; src < n; src++)
      wrong += bench_count_wrong(out + (size_t)src * s->per * es, s->per, dt,
                                 GANG_SUM, n, 0, src, (size_t)r * s->per);
    return wrong;
  default:
    return 0;
  }
}

/* Times and checks one placement of one row. */
static int measure(bench *b, bench_coll c, int inplace, const shape *s,
                   gang_dtype dt, gang_reduce_op op, int root, placement *p) {
  const bench_args *a = b->a;
  prepare(b, c, inplace, s, dt, op, root, 0);
  TRY(b, gang_barrier(b->g));
  for (int i = 0; i < a->warmup; i++)
    TRY(b, run_once(b, c, inplace, s, dt, op, root));
  double cpu0 = bench_cpu_us(), wall0 = now_us();
  for (int i = 0; i < a->iters; i++) {
    bench_arrive_late(b->rank, a->late_us);
    double t0 = now_us();
    gang_status st = run_once(b, c, inplace, s, dt, op, root);
    double t1 = now_us();
    b->times[i] = t1 - t0;
    if (b->arrival != NULL)
      arrival_record(b->arrival, (size_t)a->iters, (size_t)i, t0, t1);
    if (st != GANG_OK)
      return fail(b, bench_coll_name(c), st);
  }
  double cpu_frac = (bench_cpu_us() - cpu0) / (now_us() - wall0);
  TRY(b, gang_all_reduce(b->g, &cpu_frac, 1, GANG_FLOAT64, GANG_MAX));
  if (b->arrival != NULL) {
    TRY(b, gang_all_reduce(b->g, b->arrival, 3 * (size_t)a->iters, GANG_FLOAT64,
                           GANG_MAX));
    arrival_medians(b->arrival, (size_t)a->iters, &p->spread_us,
                    &p->after_last_us);
  }
  TRY(b, gang_all_reduce(b->g, b->times, (size_t)a->iters, GANG_FLOAT64,
                         GANG_MAX));
  p->t = bench_timing_of(b->times, (size_t)a->iters, b->sorted);
  p->t.cpu_frac = cpu_frac;
  p->ran = 1;
  p->time_us = p->t.median_us;
  p->algbw = p->time_us > 0 ? (double)s->bytes / (p->time_us * 1e3) : 0;
  p->busbw = p->algbw * bus_factor(c, b->size);
  p->wrong = -1;
  if (a->check && c != COLL_BARRIER) {
    prepare(b, c, inplace, s, dt, op, root, 1);
    TRY(b, run_once(b, c, inplace, s, dt, op, root));
    size_t used = inplace ? s->out_bytes_inplace : s->out_bytes_outplace;
    if (b->corrupt && b->rank == 0 && used > 0)
      b->recv[used - 1] ^= 0x40; /* flips a bit of the last element */
    int64_t counts[2] = {(int64_t)verify(b, c, inplace, s, dt, op, root),
                         (int64_t)bench_guard_count(b->recv, used)};
    TRY(b, gang_all_reduce(b->g, counts, 2, GANG_INT64, GANG_SUM));
    p->wrong = counts[0];
    b->wrong += counts[0];
    b->oob += counts[1];
  }
  if (c != COLL_BARRIER) {
    b->bw_sum += p->busbw;
    b->bw_count++;
  }
  return 0;
}

/* ---- Output (rank 0) ---------------------------------------------------- */

static void print_time(double us) {
  if (us >= 10000.0)
    printf("  %7.0f", us);
  else if (us >= 100.0)
    printf("  %7.1f", us);
  else
    printf("  %7.2f", us);
}

static void print_placement(const placement *p, int has_bw) {
  if (!p->ran) {
    printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  print_time(p->time_us);
  if (has_bw)
    printf("  %6.2f  %6.2f", p->algbw, p->busbw);
  else
    printf("  %6s  %6s", "N/A", "N/A");
  if (p->wrong < 0)
    printf("  %6s", "N/A");
  else
    printf("  %6lld", (long long)p->wrong);
}

static void json_placement(const placement *p, int has_bw, int arrival) {
  if (!p->ran) {
    printf("null");
    return;
  }
  printf("{");
  bench_timing_json(&p->t);
  if (has_bw)
    printf("\"algbw_gbs\":%.6g,\"busbw_gbs\":%.6g,", p->algbw, p->busbw);
  else
    printf("\"algbw_gbs\":null,\"busbw_gbs\":null,");
  if (p->wrong < 0)
    printf("\"wrong\":null");
  else
    printf("\"wrong\":%lld", (long long)p->wrong);
  if (arrival) {
    printf(",");
    arrival_json(p->spread_us, p->after_last_us);
  }
  printf("}");
}

static void print_row(const bench *b, bench_coll c, const shape *s,
                      gang_dtype dt, gang_reduce_op op, int root,
                      const placement *out, const placement *in) {
  int is_barrier = c == COLL_BARRIER;
  const char *type = is_barrier ? "none" : bench_dtype_name(dt);
  const char *redop = reduces(c) ? bench_op_name(op) : "none";
  if (b->a->json) {
    printf("{\"collective\":\"%s\",\"ranks\":%d,\"size\":%zu,\"count\":%zu,"
           "\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"out_of_place\":",
           bench_coll_name(c), b->size, s->bytes, s->count, type, redop, root);
    json_placement(out, !is_barrier, b->arrival != NULL);
    printf(",\"in_place\":");
    json_placement(in, !is_barrier, b->arrival != NULL);
    printf("}\n");
  } else {
    printf("%12zu  %12zu  %8s  %6s  %6d", s->bytes, s->count, type, redop,
           root);
    print_placement(out, !is_barrier);
    print_placement(in, !is_barrier);
    printf("\n");
    if (b->arrival != NULL)
      arrival_print((const int[2]){out->ran, in->ran},
                    (const double[2]){out->spread_us, in->spread_us},
                    (const double[2]){out->after_last_us, in->after_last_us});
  }
  fflush(stdout);
}

static void print_trimmed(char *line) {
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == ' ')
    line[--n] = '\0';
  puts(line);
}

typedef struct rank_id {
  int32_t pid;
  char host[60];
} rank_id;

static int print_header(bench *b) {
  rank_id me = {(int32_t)getpid(), ""}, *all;
  gethostname(me.host, sizeof me.host - 1);
  all = calloc((size_t)b->size, sizeof *all);
  if (all == NULL) {
    fprintf(stderr, "gang-bench: out of memory\n");
    return 1;
  }
  gang_status st = gang_all_gather(b->g, all, &me, sizeof me, GANG_UINT8);
  if (st != GANG_OK) {
    free(all);
    return fail(b, "gang_all_gather (ranks' hosts)", st);
  }
  for (int r = 1; b->arrival != NULL && r < b->size; r++)
    if (strncmp(all[r].host, all[0].host, sizeof all[r].host) != 0) {
      if (b->rank == 0)
        fprintf(stderr,
                "gang-bench: --arrival compares the ranks' clocks, so every "
                "rank must be on one host: rank %d is on %.59s, rank 0 on "
                "%.59s\n",
                r, all[r].host, all[0].host);
      free(all);
      return 2;
    }
  if (b->rank != 0 || b->a->json) {
    free(all);
    return 0;
  }
  const bench_args *a = b->a;
  bench_coll c = a->coll;
  printf("# gang-bench %s: gang %s, %d ranks\n", bench_coll_name(c),
         gang_version_string(), b->size);
  printf("# minBytes %zu maxBytes %zu step: ", a->min_bytes, a->max_bytes);
  if (a->step_factor > 0)
    printf("%g(factor)", a->step_factor);
  else
    printf("%zu(bytes)", a->step_bytes);
  printf(" warmup iters: %d iters: %d validation: %d\n", a->warmup, a->iters,
         a->check);
  printf("# time: median over iterations of the slowest rank's time\n");
  if (c == COLL_ALL_REDUCE || c == COLL_BROADCAST)
    printf("# %s works in place: out-of-place = copy to the output buffer"
           " + in-place call\n",
           bench_coll_name(c));
  if (c == COLL_ALL_TO_ALL)
    printf("# all_to_all needs distinct buffers: in-place = copy to a "
           "staging buffer + call\n");
  printf("#\n# Using ranks\n");
  for (int r = 0; r < b->size; r++) {
    all[r].host[sizeof all[r].host - 1] = '\0';
    printf("#  Rank %2d Pid %6d on %10s\n", r, (int)all[r].pid, all[r].host);
  }
  free(all);
  printf("#\n");
  /* Group labels centred over their four columns (33 characters each). */
  const char *labels[2] = {"out-of-place", "in-place"};
  char line[256];
  int len = snprintf(line, sizeof line, "#%51s", "");
  for (int k = 0; k < 2; k++) {
    int w = (int)strlen(labels[k]), pad = (33 - w) / 2;
    len += snprintf(line + len, sizeof line - (size_t)len, "%*s%s%*s", pad, "",
                    labels[k], 33 - w - pad, "");
  }
  print_trimmed(line);
  len = snprintf(line, sizeof line, "# %10s  %12s  %8s  %6s  %6s", "size",
                 "count", "type", "redop", "root");
  for (int k = 0; k < 2; k++)
    len += snprintf(line + len, sizeof line - (size_t)len,
                    "  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  print_trimmed(line);
  len = snprintf(line, sizeof line, "# %10s  %12s  %8s  %6s  %6s", "(B)",
                 "(elements)", "", "", "");
  for (int k = 0; k < 2; k++)
    len += snprintf(line + len, sizeof line - (size_t)len,
                    "  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  print_trimmed(line);
  fflush(stdout);
  return 0;
}

static void print_footer(const bench *b) {
  if (b->rank != 0)
    return;
  int have_bw = b->bw_count > 0;
  double avg = have_bw ? b->bw_sum / b->bw_count : 0;
  if (b->a->json) {
    printf("{\"summary\":{\"collective\":\"%s\",\"ranks\":%d,"
           "\"gang_version\":\"%s\",\"out_of_bounds\":%lld,\"wrong\":%lld,",
           bench_coll_name(b->a->coll), b->size, gang_version_string(),
           (long long)b->oob, (long long)b->wrong);
    if (have_bw)
      printf("\"avg_busbw_gbs\":%.6g}}\n", avg);
    else
      printf("\"avg_busbw_gbs\":null}}\n");
  } else {
    printf("# Out of bounds values : %lld %s\n", (long long)b->oob,
           b->oob ? "FAILED" : "OK");
    if (have_bw)
      printf("# Avg bus bandwidth    : %g\n", avg);
    else
      printf("# Avg bus bandwidth    : N/A\n");
    printf("#\n# Collective test concluded: %s\n", bench_coll_name(b->a->coll));
  }
  fflush(stdout);
}

/* ---- Driver -------------------------------------------------------------- */

static size_t next_size(const bench_args *a, size_t size) {
  if (a->step_factor <= 0)
    return size + a->step_bytes;
  double next = floor((double)size * a->step_factor);
  return next > (double)size ? (size_t)next : size + 1;
}

static int run_rows(bench *b) {
  const bench_args *a = b->a;
  bench_coll c = a->coll;
  int nops = reduces(c) ? a->nops : 1;
  int root_lo = 0, root_hi = 0;
  if (c == COLL_BROADCAST) {
    root_lo = a->root < 0 ? 0 : a->root;
    root_hi = a->root < 0 ? b->size - 1 : a->root;
  }
  if (c == COLL_BARRIER) {
    shape s = {0};
    placement out = {0}, in = {0};
    if (measure(b, c, 0, &s, GANG_FLOAT32, GANG_SUM, -1, &out) != 0)
      return 1;
    if (b->rank == 0)
      print_row(b, c, &s, GANG_FLOAT32, GANG_SUM, -1, &out, &in);
    return 0;
  }
  for (int d = 0; d < a->ndtypes; d++) {
    gang_dtype dt = a->dtypes[d];
    size_t es = gang_dtype_size(dt);
    for (int o = 0; o < nops; o++) {
      gang_reduce_op op = a->ops[o];
      for (int root = root_lo; root <= root_hi; root++) {
        for (size_t sz = a->min_bytes; sz <= a->max_bytes;
             sz = next_size(a, sz)) {
          shape s = make_shape(c, sz, es, b->size);
          placement out = {0}, in = {0};
          int shown_root = c == COLL_BROADCAST ? root : -1;
          if (a->outplace &&
              measure(b, c, 0, &s, dt, op, shown_root, &out) != 0)
            return 1;
          if (a->inplace && measure(b, c, 1, &s, dt, op, shown_root, &in) != 0)
            return 1;
          if (b->rank == 0)
            print_row(b, c, &s, dt, op, shown_root, &out, &in);
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

int main(int argc, char **argv) {
  bench_args a;
  int rc = bench_parse_args(argc, argv, &a);
  if (rc != 0)
    return rc < 0 ? 0 : rc;

  bench b = {.a = &a};
  const char *corrupt = getenv("GANG_BENCH_CORRUPT");
  b.corrupt = corrupt != NULL && strcmp(corrupt, "1") == 0;
  gang_status st = gang_create_default(NULL, &b.g);
  if (st != GANG_OK) {
    fprintf(stderr, "gang-bench: cannot join the gang: %s: %s\n",
            gang_status_name(st), gang_last_error());
    return 1;
  }
  b.rank = gang_rank(b.g);
  b.size = gang_size(b.g);
  if (a.coll == COLL_BROADCAST && a.root >= b.size) {
    fprintf(stderr,
            "gang-bench: -r/--root: %d is not a rank of this gang "
            "(%d ranks)\n",
            a.root, b.size);
    gang_destroy(b.g);
    return 2;
  }
  size_t cap = a.max_bytes + BENCH_GUARD;
  b.send = buffer(cap);
  b.recv = buffer(cap);
  b.stage = a.coll == COLL_ALL_TO_ALL ? buffer(cap) : NULL;
  b.times = calloc((size_t)a.iters, sizeof *b.times);
  b.sorted = calloc((size_t)a.iters, sizeof *b.sorted);
  b.arrival = a.arrival ? calloc(3 * (size_t)a.iters, sizeof *b.arrival) : NULL;
  /* Agree on whether every rank has its buffers, so that one rank short of
   * memory ends the run everywhere instead of leaving the others waiting. */
  int64_t ok = b.send && b.recv && (a.coll != COLL_ALL_TO_ALL || b.stage) &&
               b.times && b.sorted && (!a.arrival || b.arrival);
  if (!ok)
    fprintf(stderr,
            "gang-bench rank %d: cannot allocate buffers of %zu "
            "bytes (-e)\n",
            b.rank, cap);
  st = gang_all_reduce(b.g, &ok, 1, GANG_INT64, GANG_MIN);
  if (st != GANG_OK)
    rc = fail(&b, "gang_all_reduce (buffer check)", st);
  else if (!ok)
    rc = 1;
  if (rc == 0)
    rc = print_header(&b);
  if (rc == 0)
    rc = run_rows(&b);
  if (rc == 0) {
    print_footer(&b);
    if (b.wrong != 0 || b.oob != 0) {
      if (b.rank == 0)
        fprintf(stderr,
                "gang-bench: %lld wrong values, %lld out-of-bounds bytes\n",
                (long long)b.wrong, (long long)b.oob);
      rc = 1;
    }
  }
  free(b.send);
  free(b.recv);
  free(b.stage);
  free(b.times);
  free(b.sorted);
  free(b.arrival);
  gang_destroy(b.g);
  return rc;
}
