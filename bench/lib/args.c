/* The command line every benchmark program takes: nccl-tests' flags and
 * defaults (STYLE.md rule 22), plus --op to pick the collective, since one
 * binary measures all of them, and the names of collectives, types and
 * reduce operations. A program narrows the types and operations to those
 * its library has (bench_program). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"

static const char *const coll_names[BENCH_NCOLL] = {
    "all_reduce", "all_gather", "reduce_scatter",
    "broadcast",  "all_to_all", "barrier"};

const char *bench_coll_name(bench_coll c) {
  return (unsigned)c < BENCH_NCOLL ? coll_names[c] : "invalid";
}

int bench_reduces(bench_coll c) {
  return c == BENCH_ALL_REDUCE || c == BENCH_REDUCE_SCATTER;
}

/* nccl-tests' spellings first, one per type in bench_dtype's order (how
 * types are printed), then gang's own (gang_dtype_name) and the usual
 * short forms. */
static const struct {
  const char *name;
  bench_dtype t;
} dtype_names[] = {
    {"float", BENCH_FLOAT},    {"double", BENCH_DOUBLE},
    {"half", BENCH_HALF},      {"bfloat16", BENCH_BFLOAT16},
    {"int8", BENCH_INT8},      {"uint8", BENCH_UINT8},
    {"int16", BENCH_INT16},    {"int32", BENCH_INT32},
    {"uint32", BENCH_UINT32},  {"int64", BENCH_INT64},
    {"uint64", BENCH_UINT64},  {"float32", BENCH_FLOAT},
    {"float64", BENCH_DOUBLE}, {"float16", BENCH_HALF},
    {"int", BENCH_INT32},      {"bf16", BENCH_BFLOAT16},
    {"fp16", BENCH_HALF},      {"fp32", BENCH_FLOAT},
    {"fp64", BENCH_DOUBLE},
};
#define NDTYPE_NAMES (sizeof dtype_names / sizeof dtype_names[0])
static const size_t dtype_sizes[BENCH_NDTYPE] = {4, 8, 2, 2, 1, 1,
                                                 2, 4, 4, 8, 8};

static const struct {
  const char *name;
  bench_op op;
} op_names[] = {
    {"sum", BENCH_SUM},  {"prod", BENCH_PROD}, {"min", BENCH_MIN},
    {"max", BENCH_MAX},  {"avg", BENCH_AVG},   {"product", BENCH_PROD},
    {"mean", BENCH_AVG},
};
#define NOP_NAMES (sizeof op_names / sizeof op_names[0])

const char *bench_dtype_name(bench_dtype t) {
  return (unsigned)t < BENCH_NDTYPE ? dtype_names[t].name : "invalid";
}

size_t bench_dtype_size(bench_dtype t) {
  return (unsigned)t < BENCH_NDTYPE ? dtype_sizes[t] : 0;
}

const char *bench_op_name(bench_op op) {
  return (unsigned)op < BENCH_NOP ? op_names[op].name : "invalid";
}

/* "float|double|...|all (default float)" for the types or operations in
 * `mask`, wrapped under the flags' help column at 72 characters. */
static void print_choices(FILE *out, unsigned mask, int dtypes) {
  int n = dtypes ? BENCH_NDTYPE : BENCH_NOP, col = 24;
  for (int k = 0; k < n; k++) {
    if (!(mask & (1u << k)))
      continue;
    const char *name = dtypes ? dtype_names[k].name : op_names[k].name;
    int len = (int)strlen(name) + 1;
    if (col + len > 72) {
      fprintf(out, "\n%24s", "");
      col = 24;
    }
    fprintf(out, "%s|", name);
    col += len;
  }
  fprintf(out, "all (default %s)\n", dtypes ? "float" : "sum");
}

static void usage(FILE *out, const bench_program *p) {
  fprintf(out, "usage: %s [options]\n%s\n", p->name, p->about);
  fprintf(
      out,
      "  -b, --minbytes N      smallest size (default 8); k, M, G suffixes\n"
      "  -e, --maxbytes N      largest size (default 64M)\n"
      "  -f, --stepfactor F    multiply the size by F each step (default "
      "2)\n"
      "  -i, --stepbytes N     add N bytes each step instead of -f\n"
      "  -n, --iters N         timed iterations per size (default 20)\n"
      "  -w, --warmup_iters N  untimed iterations first (default 5)\n"
      "  -c, --check 0|1       verify every element (default 1)\n");
  fprintf(out, "  -o, --redop OP        ");
  print_choices(out, p->ops, 0);
  fprintf(out, "  -d, --datatype T      ");
  print_choices(out, p->dtypes, 1);
  fprintf(
      out,
      "  -r, --root R          broadcast source rank, or all (default 0)\n"
      "      --op COLL         all_reduce|all_gather|reduce_scatter|"
      "broadcast|\n"
      "                        all_to_all|barrier (default all_reduce)\n"
      "      --inplace-only    only the in-place placement\n"
      "      --outofplace-only only the out-of-place placement\n"
      "      --json            JSON Lines instead of the table\n"
      "      --arrival         also the spread of the ranks' entries and the\n"
      "                        time from the last entry to the last exit\n"
      "                        (medians; every rank on one machine)\n"
      "      --late-us N       rank 0 enters each timed call N us after the\n"
      "                        others (their CPU use while they wait is the\n"
      "                        JSON's cpu_frac)\n"
      "      --sync            an untimed barrier before each timed call, so\n"
      "                        that calls never overlap (with --arrival, a\n"
      "                        broadcast's time from the root's entry to the\n"
      "                        last exit is a single call's)\n");
  if (p->algos)
    fprintf(out,
            "  -A, --algo NAME[,NAME...]\n"
            "                        the library's algorithms to measure in "
            "turn\n");
  fprintf(out, "  -h, --help            this text\n"
               "\n"
               "Exit status: 0 all good, 1 wrong results or a failed "
               "collective, 2 usage.\n");
}

static const char *prog_name = "bench";

static int bad(const char *flag, const char *value, const char *why) {
  fprintf(stderr, "%s: %s: '%s' %s (see --help)\n", prog_name, flag, value,
          why);
  return 2;
}

/* "8", "64M", "1k", "2G": binary multiples, as nccl-tests parses them. */
static int parse_size(const char *flag, const char *s, size_t *out) {
  if (s[0] < '0' || s[0] > '9')
    return bad(flag, s, "is not a size (N, Nk, NM or NG)");
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10, end++;
    break;
  case 'm':
  case 'M':
    shift = 20, end++;
    break;
  case 'g':
  case 'G':
    shift = 30, end++;
    break;
  default:
    break;
  }
  if (*end == 'B' || *end == 'b')
    end++;
  if (errno != 0 || *end != '\0')
    return bad(flag, s, "is not a size (N, Nk, NM or NG)");
  if (v > (SIZE_MAX >> shift) || (v << shift) > (SIZE_MAX / 4))
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
  if (v < lo || v > hi) {
    char why[96];
    snprintf(why, sizeof why, "is out of range [%ld, %ld]", lo, hi);
    return bad(flag, s, why);
  }
  *out = (int)v;
  return 0;
}

/* A type name, or "all": every type the program has. */
static int parse_dtypes(const char *flag, const char *s, unsigned mask,
                        bench_args *a) {
  if (strcasecmp(s, "all") == 0) {
    a->ndtypes = 0;
    for (int t = 0; t < BENCH_NDTYPE; t++)
      if (mask & (1u << t))
        a->dtypes[a->ndtypes++] = (bench_dtype)t;
    return 0;
  }
  for (size_t i = 0; i < NDTYPE_NAMES; i++)
    if (strcasecmp(s, dtype_names[i].name) == 0) {
      if (!(mask & (1u << dtype_names[i].t)))
        return bad(flag, s, "is not a data type of this library");
      a->dtypes[0] = dtype_names[i].t;
      a->ndtypes = 1;
      return 0;
    }
  return bad(flag, s, "is not a data type");
}

static int parse_ops(const char *flag, const char *s, unsigned mask,
                     bench_args *a) {
  if (strcasecmp(s, "all") == 0) {
    a->nops = 0;
    for (int op = 0; op < BENCH_NOP; op++)
      if (mask & (1u << op))
        a->ops[a->nops++] = (bench_op)op;
    return 0;
  }
  for (size_t i = 0; i < NOP_NAMES; i++)
    if (strcasecmp(s, op_names[i].name) == 0) {
      if (!(mask & (1u << op_names[i].op)))
        return bad(flag, s, "is not a reduce operation of this library");
      a->ops[0] = op_names[i].op;
      a->nops = 1;
      return 0;
    }
  return bad(flag, s, "is not a reduce operation");
}

/* A comma list; the names point into argv, which outlives the run. */
static int parse_algos(const char *flag, char *s, bench_args *a) {
  a->nalgos = 0;
  for (char *tok = strtok(s, ","); tok != NULL; tok = strtok(NULL, ",")) {
    if (a->nalgos == BENCH_MAX_ALGOS)
      return bad(flag, tok, "is one algorithm too many");
    a->algos[a->nalgos++] = tok;
  }
  return 0;
}

enum {
  OPT_OP = 256,
  OPT_INPLACE,
  OPT_OUTPLACE,
  OPT_JSON,
  OPT_ARRIVAL,
  OPT_LATE,
  OPT_SYNC
};

int bench_parse_args(int argc, char **argv, const bench_program *p,
                     bench_args *a) {
  prog_name = p->name;
  *a = (bench_args){.min_bytes = 8,
                    .max_bytes = 64u << 20,
                    .step_factor = 2,
                    .iters = 20,
                    .warmup = 5,
                    .check = 1,
                    .root = 0,
                    .inplace = 1,
                    .outplace = 1,
                    .coll = BENCH_ALL_REDUCE,
                    .dtypes = {BENCH_FLOAT},
                    .ndtypes = 1,
                    .ops = {BENCH_SUM},
                    .nops = 1};
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
      {"op", required_argument, NULL, OPT_OP},
      {"inplace-only", no_argument, NULL, OPT_INPLACE},
      {"outofplace-only", no_argument, NULL, OPT_OUTPLACE},
      {"json", no_argument, NULL, OPT_JSON},
      {"arrival", no_argument, NULL, OPT_ARRIVAL},
      {"late-us", required_argument, NULL, OPT_LATE},
      {"sync", no_argument, NULL, OPT_SYNC},
      {"help", no_argument, NULL, 'h'},
      {"algo", required_argument, NULL, 'A'}, /* last: only if p->algos */
      {NULL, 0, NULL, 0}};
  enum { NLONGS = sizeof longs / sizeof longs[0] };
  struct option opts[NLONGS];
  memcpy(opts, longs, sizeof longs);
  if (!p->algos)
    opts[NLONGS - 2] = (struct option){NULL, 0, NULL, 0};
  int only_in = 0, only_out = 0;
  opterr = 0; /* our messages name the flag and exit 2 */
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv,
                          p->algos ? ":b:e:f:i:n:w:c:o:d:r:A:h"
                                   : ":b:e:f:i:n:w:c:o:d:r:h",
                          opts, NULL)) != -1) {
    /* Both spellings, for messages: "-b/--minbytes". */
    char flag[40] = "";
    for (const struct option *o = opts; o->name != NULL; o++)
      if (o->val == c && c < 256)
        snprintf(flag, sizeof flag, "-%c/--%s", c, o->name);
      else if (o->val == c)
        snprintf(flag, sizeof flag, "--%s", o->name);
    int rc = 0;
    switch (c) {
    case 'b':
      rc = parse_size(flag, optarg, &a->min_bytes);
      break;
    case 'e':
      rc = parse_size(flag, optarg, &a->max_bytes);
      break;
    case 'f': {
      char *end = NULL;
      errno = 0;
      double f = strtod(optarg, &end);
      if (errno != 0 || end == optarg || *end != '\0' || !(f > 1.0) ||
          !isfinite(f))
        rc = bad(flag, optarg, "must be a number greater than 1");
      a->step_factor = f;
      break;
    }
    case 'i':
      rc = parse_size(flag, optarg, &a->step_bytes);
      if (rc == 0 && a->step_bytes == 0)
        rc = bad(flag, optarg, "must be at least 1");
      break;
    case 'n':
      rc = parse_int(flag, optarg, 1, 10000000, &a->iters);
      break;
    case 'w':
      rc = parse_int(flag, optarg, 0, 10000000, &a->warmup);
      break;
    case 'c':
      rc = parse_int(flag, optarg, 0, 1, &a->check);
      break;
    case 'o':
      rc = parse_ops(flag, optarg, p->ops, a);
      break;
    case 'd':
      rc = parse_dtypes(flag, optarg, p->dtypes, a);
      break;
    case 'r':
      if (strcasecmp(optarg, "all") == 0)
        a->root = -1;
      else
        rc = parse_int(flag, optarg, 0, INT_MAX, &a->root);
      break;
    case 'A':
      rc = parse_algos(flag, optarg, a);
      break;
    case OPT_OP: {
      int found = 0;
      for (int k = 0; k < BENCH_NCOLL; k++)
        if (strcmp(optarg, coll_names[k]) == 0)
          a->coll = (bench_coll)k, found = 1;
      if (!found)
        rc = bad(flag, optarg, "is not a collective");
      break;
    }
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
    case OPT_SYNC:
      a->sync = 1;
      break;
    case OPT_LATE:
      rc = parse_int(flag, optarg, 0, 10000000, &a->late_us);
      break;
    case 'h':
      usage(stdout, p);
      return -1;
    case ':':
      fprintf(stderr, "%s: %s needs a value (see --help)\n", prog_name,
              argv[optind - 1]);
      return 2;
    default: /* '?' */
      if (optopt != 0)
        fprintf(stderr, "%s: unknown flag -%c (see --help)\n", prog_name,
                optopt);
      else
        fprintf(stderr, "%s: unknown flag %s (see --help)\n", prog_name,
                argv[optind - 1]);
      return 2;
    }
    if (rc != 0)
      return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog_name,
            argv[optind]);
    return 2;
  }
  if (a->step_bytes != 0)
    a->step_factor = 0;
  if (a->min_bytes > a->max_bytes) {
    fprintf(stderr, "%s: -b: minbytes %zu is larger than -e maxbytes %zu\n",
            prog_name, a->min_bytes, a->max_bytes);
    return 2;
  }
  if (only_in && only_out) {
    fprintf(stderr,
            "%s: --inplace-only and --outofplace-only "
            "exclude each other\n",
            prog_name);
    return 2;
  }
  a->inplace = !only_out;
  a->outplace = !only_in;
  return 0;
}
