/* The gang-bench measurement for peer libraries (peer_bench.h): the same
 * flags, sizes, warm-up, timing method, bandwidth factors, checks and JSON
 * schema as tools/gang-bench, so that bench/compare reads every library's
 * figures with one parser and compares like with like.
 *
 * Timing, as gang-bench does it: inputs written, barrier, -w untimed
 * calls, then -n calls back to back, each timed on each rank with
 * CLOCK_MONOTONIC into an array; after the loop one MAX reduction gives
 * every iteration's slowest rank, and the row reports the median over
 * iterations. Only the collective runs inside the loop. */
#include "peer_bench.h"

#include "../../tools/gang-bench/arrival.h"
#include "../../tools/gang-bench/timing.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define GUARD 256
#define GUARD_BYTE 0xa5

static const char *const coll_names[PB_NCOLL] = {"all_reduce",     "all_gather",
                                                 "reduce_scatter", "broadcast",
                                                 "all_to_all",     "barrier"};
static const char *const dtype_names[PB_NDTYPE] = {
    "float", "double", "int8", "uint8", "int32", "uint32", "int64", "uint64"};
static const size_t dtype_sizes[PB_NDTYPE] = {4, 8, 1, 1, 4, 4, 8, 8};
static const char *const op_names[PB_NOP] = {"sum", "prod", "min", "max"};

const char *pb_coll_name(pb_coll c) {
  return (unsigned)c < PB_NCOLL ? coll_names[c] : "invalid";
}
const char *pb_dtype_name(pb_dtype t) {
  return (unsigned)t < PB_NDTYPE ? dtype_names[t] : "invalid";
}
const char *pb_op_name(pb_op op) {
  return (unsigned)op < PB_NOP ? op_names[op] : "invalid";
}
size_t pb_dtype_size(pb_dtype t) {
  return (unsigned)t < PB_NDTYPE ? dtype_sizes[t] : 0;
}

/* ---- Command line ------------------------------------------------------- */

static const char *prog_name = "peer-bench";

static int bad(const char *flag, const char *value, const char *why) {
  fprintf(stderr, "%s: %s: '%s' %s (see --help)\n", prog_name, flag, value,
          why);
  return 2;
}

static int parse_size(const char *flag, const char *s, size_t *out) {
  if (s[0] < '0' || s[0] > '9')
    return bad(flag, s, "is not a size (N, Nk, NM or NG)");
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;
  if (*end == 'k' || *end == 'K')
    shift = 10, end++;
  else if (*end == 'm' || *end == 'M')
    shift = 20, end++;
  else if (*end == 'g' || *end == 'G')
    shift = 30, end++;
  if (*end == 'B' || *end == 'b')
    end++;
  if (errno != 0 || *end != '\0')
    return bad(flag, s, "is not a size (N, Nk, NM or NG)");
  if (v > (SIZE_MAX >> shift) || (v << shift) > SIZE_MAX / 4)
    return bad(flag, s, "is too large");
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_int(const char *flag, const char *s, long lo, long hi,
                     int *out) {
  errno = 0;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0')
    return bad(flag, s, "is not an integer");
  if (v < lo || v > hi)
    return bad(flag, s, "is out of range");
  *out = (int)v;
  return 0;
}

static int lookup(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcasecmp(s, names[i]) == 0)
      return i;
  return -1;
}

static void usage(void) {
  printf("usage: %s [options]\n"
         "gang-bench's measurement of one collective for a peer library;\n"
         "started one process per rank by the library's launcher.\n"
         "  -b N  -e N  -f F  -i N  sizes as gang-bench (default 8 .. 64M, "
         "x2)\n"
         "  -n N  timed iterations (20)   -w N  warm-up iterations (5)\n"
         "  -c 0|1  check every element (1)   -r R  broadcast root (0)\n"
         "  -o sum|prod|min|max   -d float|double|int8|uint8|int32|uint32|"
         "int64|uint64\n"
         "  --op all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|"
         "barrier\n"
         "  --inplace-only  --outofplace-only  --json\n"
         "  --arrival  also the entries' spread and the time from the last "
         "entry\n"
         "             to the last exit (medians; every rank on one machine)\n"
         "  --late-us N  rank 0 enters each timed call N us late\n"
         "  -A, --algo NAME[,NAME...]  algorithms to measure in turn "
         "(library specific)\n",
         prog_name);
}

enum {
  OPT_OP = 256,
  OPT_INPLACE,
  OPT_OUTPLACE,
  OPT_JSON,
  OPT_ARRIVAL,
  OPT_LATE
};

int pb_parse_args(int argc, char **argv, const char *prog, pb_args *a) {
  prog_name = prog;
  *a = (pb_args){.min_bytes = 8,
                 .max_bytes = 64u << 20,
                 .step_factor = 2,
                 .iters = 20,
                 .warmup = 5,
                 .check = 1,
                 .coll = PB_ALL_REDUCE,
                 .dtype = PB_FLOAT,
                 .op = PB_SUM};
  static const struct option longs[] = {
      {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'},
      {"stepbytes", required_argument, NULL, 'i'},
      {"iters", required_argument, NULL, 'n'},
      {"warmup_iters", required_argument, NULL, 'w'},
      {"check", required_argument, NULL, 'c'},
      {"redop", required_argument, NULL, 'o'},
      {"datatype", required_argument, NULL, 'd'},
      {"root", required_argument, NULL, 'r'},
      {"algo", required_argument, NULL, 'A'},
      {"op", required_argument, NULL, OPT_OP},
      {"inplace-only", no_argument, NULL, OPT_INPLACE},
      {"outofplace-only", no_argument, NULL, OPT_OUTPLACE},
      {"json", no_argument, NULL, OPT_JSON},
      {"arrival", no_argument, NULL, OPT_ARRIVAL},
      {"late-us", required_argument, NULL, OPT_LATE},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int only_in = 0, only_out = 0, c, k;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:c:o:d:r:A:h", longs,
                          NULL)) != -1) {
    int rc = 0;
    switch (c) {
    case 'b':
      rc = parse_size("-b", optarg, &a->min_bytes);
      break;
    case 'e':
      rc = parse_size("-e", optarg, &a->max_bytes);
      break;
    case 'f': {
      char *end = NULL;
      double f = strtod(optarg, &end);
      if (end == optarg || *end != '\0' || !(f > 1.0) || !isfinite(f))
        rc = bad("-f", optarg, "must be a number greater than 1");
      a->step_factor = f;
      break;
    }
    case 'i':
      rc = parse_size("-i", optarg, &a->step_bytes);
      if (rc == 0 && a->step_bytes == 0)
        rc = bad("-i", optarg, "must be at least 1");
      break;
    case 'n':
      rc = parse_int("-n", optarg, 1, 10000000, &a->iters);
      break;
    case 'w':
      rc = parse_int("-w", optarg, 0, 10000000, &a->warmup);
      break;
    case 'c':
      rc = parse_int("-c", optarg, 0, 1, &a->check);
      break;
    case 'r':
      rc = parse_int("-r", optarg, 0, INT_MAX, &a->root);
      break;
    case 'o':
      if ((k = lookup(op_names, PB_NOP, optarg)) < 0)
        rc = bad("-o", optarg, "is not a reduce operation of this program");
      a->op = (pb_op)k;
      break;
    case 'd':
      if ((k = lookup(dtype_names, PB_NDTYPE, optarg)) < 0)
        rc = bad("-d", optarg, "is not a data type of this program");
      a->dtype = (pb_dtype)k;
      break;
    case 'A': {
      /* Comma list; the names point into argv, which outlives the run. */
      char *s = optarg;
      a->nalgos = 0;
      for (char *tok = strtok(s, ","); tok != NULL; tok = strtok(NULL, ","))
        if (a->nalgos < PB_MAX_ALGOS)
          a->algos[a->nalgos++] = tok;
      break;
    }
    case OPT_OP:
      if ((k = lookup(coll_names, PB_NCOLL, optarg)) < 0)
        rc = bad("--op", optarg, "is not a collective");
      a->coll = (pb_coll)k;
      break;
    case OPT_INPLACE:
      only_in = 1;
      break;
    case OPT_OUTPLACE:
      only_out = 1;
      break;
    case OPT_JSON:
      a->json = 1;
      break;
    case OPT_ARRIVAL:
      a->arrival = 1;
      break;
    case OPT_LATE:
      rc = parse_int("--late-us", optarg, 0, 10000000, &a->late_us);
      break;
    case 'h':
      usage();
      return -1;
    case ':':
      fprintf(stderr, "%s: %s needs a value\n", prog, argv[optind - 1]);
      return 2;
    default:
      fprintf(stderr, "%s: unknown flag %s\n", prog, argv[optind - 1]);
      return 2;
    }
    if (rc != 0)
      return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    return 2;
  }
  if (a->step_bytes != 0)
    a->step_factor = 0;
  if (a->min_bytes > a->max_bytes || (only_in && only_out)) {
    fprintf(stderr, "%s: -b above -e, or both placements excluded\n", prog);
    return 2;
  }
  a->inplace = !only_out;
  a->outplace = !only_in;
  return 0;
}

/* ---- Values: exact in every type --------------------------------------- */

/* Small non-negative integers depending on rank and index: a misplaced
 * block or a double-counted rank shows, and any reduction over n ranks
 * stays exact (below 2^24 for float, the type's range for integers), so
 * results compare bit for bit whatever the order of additions. */
static int64_t modulus(pb_dtype t, int n) {
  int64_t cap;
  switch (t) {
  case PB_INT8:
    cap = INT8_MAX;
    break;
  case PB_UINT8:
    cap = UINT8_MAX;
    break;
  case PB_FLOAT:
    cap = 1 << 24;
    break;
  default:
    cap = 1 << 20;
    break;
  }
  int64_t m = cap / n;
  return m < 1 ? 1 : (m > (1 << 20) ? 1 << 20 : m);
}

static int64_t value(pb_dtype t, pb_op op, int r, int n, size_t i) {
  uint64_t mix = (uint64_t)i * 5 + (uint64_t)r * 7 + 3;
  switch (op) {
  case PB_PROD: /* one rank gives 1..3, the rest 1 */
    return i % (size_t)n == (size_t)r ? 1 + (int64_t)((i / (size_t)n) % 3) : 1;
  case PB_MIN:
  case PB_MAX:
    return (int64_t)(mix % (uint64_t)modulus(t, 1));
  default:
    return (int64_t)(mix % (uint64_t)modulus(t, n));
  }
}

static int64_t reduced(pb_dtype t, pb_op op, int n, size_t i) {
  int64_t acc = value(t, op, 0, n, i);
  for (int r = 1; r < n; r++) {
    int64_t v = value(t, op, r, n, i);
    acc = op == PB_PROD  ? acc * v
          : op == PB_MIN ? (v < acc ? v : acc)
          : op == PB_MAX ? (v > acc ? v : acc)
                         : acc + v;
  }
  return acc;
}

static void store(void *buf, size_t i, pb_dtype t, int64_t v) {
  switch (t) {
  case PB_FLOAT:
    ((float *)buf)[i] = (float)v;
    break;
  case PB_DOUBLE:
    ((double *)buf)[i] = (double)v;
    break;
  case PB_INT8:
  case PB_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case PB_INT32:
  case PB_UINT32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  default:
    ((uint64_t *)buf)[i] = (uint64_t)v;
    break;
  }
}

static void fill(void *buf, size_t count, pb_dtype t, pb_op op, int r, int n,
                 size_t base) {
  for (size_t k = 0; k < count; k++)
    store(buf, k, t, value(t, op, r, n, base + k));
}

/* Elements of buf[0..count) that differ from the expected value: the
 * reduction over ranks if `red`, else rank src's value. */
static size_t count_wrong(const void *buf, size_t count, pb_dtype t, pb_op op,
                          int n, int red, int src, size_t base) {
  size_t es = pb_dtype_size(t), wrong = 0;
  unsigned char want[8];
  for (size_t k = 0; k < count; k++) {
    store(want, 0, t,
          red ? reduced(t, op, n, base + k) : value(t, op, src, n, base + k));
    wrong += memcmp(want, (const unsigned char *)buf + k * es, es) != 0;
  }
  return wrong;
}

/* ---- Rows ---------------------------------------------------------------- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double bus_factor(pb_coll c, int n) {
  switch (c) {
  case PB_ALL_REDUCE:
    return 2.0 * (n - 1) / n;
  case PB_ALL_GATHER:
  case PB_REDUCE_SCATTER:
  case PB_ALL_TO_ALL:
    return (double)(n - 1) / n;
  case PB_BROADCAST:
    return 1.0;
  default:
    return 0.0;
  }
}

static pb_shape make_shape(pb_coll c, size_t bytes, size_t es, int n) {
  pb_shape s = {0};
  if (c == PB_ALL_REDUCE || c == PB_BROADCAST) {
    s.count = s.per = bytes / es;
  } else if (c != PB_BARRIER) {
    s.per = bytes / es / (size_t)n;
    s.count = s.per * (size_t)n;
  }
  s.bytes = s.count * es;
  s.out_inplace = s.out_outplace = s.bytes;
  if (c == PB_REDUCE_SCATTER)
    s.out_outplace = s.per * es;
  return s;
}

typedef struct result {
  int ran;
  bench_timing t; /* t.median_us is the row's time */
  double time_us, algbw, busbw;
  int64_t wrong;
  double spread_us, after_last_us; /* --arrival only */
} result;

typedef struct run_state {
  pb_backend *b;
  const pb_args *a;
  double *times, *sorted;
  double *arrival; /* --arrival: 3 * iters (tools/gang-bench/arrival.h) */
  unsigned char *send, *recv, *stage;
  double bw_sum;
  int bw_count;
  int64_t wrong, oob;
} run_state;

static int reduces(pb_coll c) {
  return c == PB_ALL_REDUCE || c == PB_REDUCE_SCATTER;
}

/* Inputs of one placement; for a check, the output poisoned and guarded. */
static void prepare(run_state *st, const pb_call *c, int check) {
  size_t es = pb_dtype_size(c->dtype);
  int r = st->b->rank, n = st->b->size;
  unsigned char *in = c->inplace ? c->recv : c->send;
  if (!c->inplace)
    memset(c->recv, GUARD_BYTE, c->s.out_outplace);
  switch (c->coll) {
  case PB_ALL_REDUCE:
  case PB_REDUCE_SCATTER:
    fill(in, c->s.count, c->dtype, c->op, r, n, 0);
    break;
  case PB_BROADCAST:
    if (r == c->root || c->inplace)
      fill(in, c->s.count, c->dtype, PB_SUM, r, n, 0);
    break;
  case PB_ALL_GATHER:
    fill(c->inplace ? in + (size_t)r * c->s.per * es : in, c->s.per, c->dtype,
         PB_SUM, r, n, (size_t)r * c->s.per);
    break;
  case PB_ALL_TO_ALL:
    fill(in, c->s.count, c->dtype, PB_SUM, r, n, 0);
    break;
  default:
    break;
  }
  if (check)
    memset(c->recv + (c->inplace ? c->s.out_inplace : c->s.out_outplace),
           GUARD_BYTE, GUARD);
}

static size_t verify(run_state *st, const pb_call *c) {
  size_t es = pb_dtype_size(c->dtype), wrong = 0, per = c->s.per;
  int r = st->b->rank, n = st->b->size;
  const unsigned char *out = c->recv;
  switch (c->coll) {
  case PB_ALL_REDUCE:
    return count_wrong(out, c->s.count, c->dtype, c->op, n, 1, 0, 0);
  case PB_REDUCE_SCATTER:
    if (c->inplace && !st->b->reduce_scatter_inplace_at_start)
      out += (size_t)r * per * es;
    return count_wrong(out, per, c->dtype, c->op, n, 1, 0, (size_t)r * per);
  case PB_BROADCAST:
    return count_wrong(out, c->s.count, c->dtype, PB_SUM, n, 0, c->root, 0);
  case PB_ALL_GATHER:
    for (int src = 0; src < n; src++)
      wrong += count_wrong(out + (size_t)src * per * es, per, c->dtype, PB_SUM,
                           n, 0, src, (size_t)src * per);
    return wrong;
  case PB_ALL_TO_ALL:
    for (int src = 0; src < n; src++)
      wrong += count_wrong(out + (size_t)src * per * es, per, c->dtype, PB_SUM,
                           n, 0, src, (size_t)r * per);
    return wrong;
  default:
    return 0;
  }
}

static int measure(run_state *st, const pb_call *c, result *res) {
  pb_backend *b = st->b;
  const pb_args *a = st->a;
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
  for (int i = 0; i < a->iters; i++) {
    bench_arrive_late(b->rank, a->late_us);
    double t0 = now_us();
    rc = b->run(b->ctx, c);
    double t1 = now_us();
    st->times[i] = t1 - t0;
    if (st->arrival != NULL)
      arrival_record(st->arrival, (size_t)a->iters, (size_t)i, t0, t1);
    if (rc != 0)
      goto out;
  }
  if (st->arrival != NULL) {
    if ((rc = b->max_f64(b->ctx, st->arrival, 3 * (size_t)a->iters)) != 0)
      goto out;
    arrival_medians(st->arrival, (size_t)a->iters, &res->spread_us,
                    &res->after_last_us);
  }
  double cpu_frac = (bench_cpu_us() - cpu0) / (now_us() - wall0);
  if ((rc = b->max_f64(b->ctx, &cpu_frac, 1)) != 0)
    goto out;
  if ((rc = b->max_f64(b->ctx, st->times, (size_t)a->iters)) != 0)
    goto out;
  res->t = bench_timing_of(st->times, (size_t)a->iters, st->sorted);
  res->t.cpu_frac = cpu_frac;
  res->ran = 1;
  res->time_us = res->t.median_us;
  res->algbw = res->time_us > 0 ? (double)c->s.bytes / (res->time_us * 1e3) : 0;
  res->busbw = res->algbw * bus_factor(c->coll, b->size);
  res->wrong = -1;
  if (a->check && c->coll != PB_BARRIER) {
    prepare(st, c, 1);
    if ((rc = b->run(b->ctx, c)) != 0)
      goto out;
    size_t used = c->inplace ? c->s.out_inplace : c->s.out_outplace;
    int64_t counts[2] = {(int64_t)verify(st, c), 0};
    for (size_t k = 0; k < GUARD; k++)
      counts[1] += c->recv[used + k] != GUARD_BYTE;
    if ((rc = b->sum_i64(b->ctx, counts, 2)) != 0)
      goto out;
    res->wrong = counts[0];
    st->wrong += counts[0];
    st->oob += counts[1];
  }
  if (c->coll != PB_BARRIER) {
    st->bw_sum += res->busbw;
    st->bw_count++;
  }
out:
  if (b->teardown != NULL)
    b->teardown(b->ctx, c);
  return rc;
}

static void json_result(const result *r, int has_bw, int arrival) {
  if (!r->ran) {
    printf("null");
    return;
  }
  printf("{");
  bench_timing_json(&r->t);
  if (has_bw)
    printf("\"algbw_gbs\":%.6g,\"busbw_gbs\":%.6g,", r->algbw, r->busbw);
  else
    printf("\"algbw_gbs\":null,\"busbw_gbs\":null,");
  if (r->wrong < 0)
    printf("\"wrong\":null");
  else
    printf("\"wrong\":%lld", (long long)r->wrong);
  if (arrival) {
    printf(",");
    arrival_json(r->spread_us, r->after_last_us);
  }
  printf("}");
}

static void text_result(const result *r, int has_bw) {
  if (!r->ran) {
    printf("  %8s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  printf("  %8.2f", r->time_us);
  if (has_bw)
    printf("  %6.2f  %6.2f", r->algbw, r->busbw);
  else
    printf("  %6s  %6s", "N/A", "N/A");
  if (r->wrong < 0)
    printf("  %6s", "N/A");
  else
    printf("  %6lld", (long long)r->wrong);
}

/* One line per row: gang-bench's schema, plus "library" and, when an
 * algorithm was chosen, "algo". */
static void print_row(run_state *st, const pb_call *c, const result *out,
                      const result *in) {
  const pb_args *a = st->a;
  int bar = c->coll == PB_BARRIER;
  const char *type = bar ? "none" : pb_dtype_name(c->dtype);
  const char *redop = reduces(c->coll) ? pb_op_name(c->op) : "none";
  const char *algo = c->algo >= 0 ? a->algos[c->algo] : NULL;
  if (a->json) {
    printf("{\"collective\":\"%s\",\"ranks\":%d,\"size\":%zu,\"count\":%zu,"
           "\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"library\":\"%s\",",
           pb_coll_name(c->coll), st->b->size, c->s.bytes, c->s.count, type,
           redop, c->coll == PB_BROADCAST ? c->root : -1, st->b->library);
    if (algo != NULL)
      printf("\"algo\":\"%s\",", algo);
    printf("\"out_of_place\":");
    json_result(out, !bar, a->arrival);
    printf(",\"in_place\":");
    json_result(in, !bar, a->arrival);
    printf("}\n");
  } else {
    printf("%12zu  %12zu  %8s  %6s  %6d", c->s.bytes, c->s.count, type, redop,
           c->coll == PB_BROADCAST ? c->root : -1);
    text_result(out, !bar);
    text_result(in, !bar);
    if (algo != NULL)
      printf("  %s", algo);
    printf("\n");
    if (a->arrival)
      arrival_print((const int[2]){out->ran, in->ran},
                    (const double[2]){out->spread_us, in->spread_us},
                    (const double[2]){out->after_last_us, in->after_last_us});
  }
  fflush(stdout);
}

static size_t next_size(const pb_args *a, size_t size) {
  if (a->step_factor <= 0)
    return size + a->step_bytes;
  double next = floor((double)size * a->step_factor);
  return next > (double)size ? (size_t)next : size + 1;
}

static unsigned char *buffer(size_t bytes) {
  size_t n = (bytes + 4095) / 4096 * 4096;
  unsigned char *p = aligned_alloc(4096, n);
  if (p != NULL)
    memset(p, 0, n); /* first-touch page faults stay out of the loop */
  return p;
}

static int run_rows(run_state *st) {
  const pb_args *a = st->a;
  pb_backend *b = st->b;
  pb_call c = {.coll = a->coll,
               .dtype = a->dtype,
               .op = a->op,
               .root = a->coll == PB_BROADCAST ? a->root : -1,
               .send = st->send,
               .recv = st->recv,
               .stage = st->stage};
  int nalgos = a->nalgos > 0 ? a->nalgos : 1;
  if (a->coll == PB_BARRIER) {
    for (int k = 0; k < nalgos; k++) {
      result out = {0}, in = {0};
      c.algo = a->nalgos > 0 ? k : -1;
      if (measure(st, &c, &out) != 0)
        return 1;
      if (b->rank == 0)
        print_row(st, &c, &out, &in);
    }
    return 0;
  }
  size_t es = pb_dtype_size(a->dtype);
  for (size_t sz = a->min_bytes; sz <= a->max_bytes; sz = next_size(a, sz)) {
    c.s = make_shape(a->coll, sz, es, b->size);
    for (int k = 0; k < nalgos; k++) {
      result out = {0}, in = {0};
      c.algo = a->nalgos > 0 ? k : -1;
      c.inplace = 0;
      if (a->outplace && measure(st, &c, &out) != 0)
        return 1;
      c.inplace = 1;
      if (a->inplace && measure(st, &c, &in) != 0)
        return 1;
      if (b->rank == 0)
        print_row(st, &c, &out, &in);
    }
  }
  return 0;
}

/* --arrival compares the ranks' clocks: every rank must be on this host.
 * The host names' hashes (exact in a double) must agree: the largest and
 * the smallest over the ranks, from one MAX of (h, -h). 1: one host, 0:
 * several (rank 0 says so), -1: the reduction failed. */
static int same_host(pb_backend *b) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = host; *p; p++)
    h = (h ^ (unsigned char)*p) * 16777619u;
  double v[2] = {(double)h, -(double)h};
  if (b->max_f64(b->ctx, v, 2) != 0)
    return -1;
  if (v[0] == -v[1])
    return 1;
  if (b->rank == 0)
    fprintf(stderr,
            "%s: --arrival compares the ranks' clocks, so every rank must "
            "be on one host; these ranks report different host names\n",
            prog_name);
  return 0;
}

int pb_run(pb_backend *b, const pb_args *a) {
  run_state st = {.b = b, .a = a};
  if (a->coll == PB_BROADCAST && a->root >= b->size) {
    if (b->rank == 0)
      fprintf(stderr, "%s: -r: %d is not a rank (%d ranks)\n", prog_name,
              a->root, b->size);
    return 2;
  }
  size_t cap = a->max_bytes + GUARD;
  st.send = buffer(cap);
  st.recv = buffer(cap);
  st.stage = buffer(cap);
  st.times = calloc((size_t)a->iters, sizeof *st.times);
  st.sorted = calloc((size_t)a->iters, sizeof *st.sorted);
  st.arrival =
      a->arrival ? calloc(3 * (size_t)a->iters, sizeof *st.arrival) : NULL;
  int64_t ok = st.send && st.recv && st.stage && st.times && st.sorted &&
               (!a->arrival || st.arrival);
  int rc = 0;
  if (!ok)
    fprintf(stderr, "%s rank %d: cannot allocate %zu-byte buffers\n", prog_name,
            b->rank, cap);
  /* Every rank learns whether all have their buffers: none is left
   * waiting for one that gave up. */
  if (b->min_i64(b->ctx, &ok, 1) != 0 || !ok)
    rc = 1;
  if (rc == 0 && a->arrival) {
    int one = same_host(b);
    rc = one < 0 ? 1 : one == 0 ? 2 : 0;
  }
  if (rc == 0 && b->rank == 0 && !a->json) {
    printf("# %s %s: %s, %d ranks; time: median over iterations of the "
           "slowest rank's time\n",
           prog_name, pb_coll_name(a->coll), b->library, b->size);
    printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  "
           "%6s\n",
           "size", "count", "type", "redop", "root", "oop-us", "algbw", "busbw",
           "#wrong", "inp-us", "algbw", "busbw", "#wrong");
  }
  if (rc == 0)
    rc = run_rows(&st);
  if (rc == 0 && b->rank == 0) {
    double avg = st.bw_count > 0 ? st.bw_sum / st.bw_count : 0;
    if (a->json) {
      printf("{\"summary\":{\"collective\":\"%s\",\"ranks\":%d,"
             "\"library\":\"%s\",\"out_of_bounds\":%lld,\"wrong\":%lld,",
             pb_coll_name(a->coll), b->size, b->library, (long long)st.oob,
             (long long)st.wrong);
      if (st.bw_count > 0)
        printf("\"avg_busbw_gbs\":%.6g}}\n", avg);
      else
        printf("\"avg_busbw_gbs\":null}}\n");
    } else {
      printf("# Out of bounds values : %lld %s\n", (long long)st.oob,
             st.oob ? "FAILED" : "OK");
      printf("# Avg bus bandwidth    : %g\n", avg);
    }
    fflush(stdout);
  }
  if (rc == 0 && (st.wrong != 0 || st.oob != 0)) {
    if (b->rank == 0)
      fprintf(stderr, "%s: %lld wrong values, %lld out-of-bounds bytes\n",
              prog_name, (long long)st.wrong, (long long)st.oob);
    rc = 1;
  }
  free(st.send);
  free(st.recv);
  free(st.stage);
  free(st.times);
  free(st.sorted);
  free(st.arrival);
  return rc;
}
