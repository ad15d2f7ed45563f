/* gang-bench command line: nccl-tests' flags and defaults (STYLE.md rule
 * 22), plus --op to pick the collective, since one binary measures all of
 * them. Every rank parses the same argv before joining the gang, so a bad
 * flag ends every rank with status 2 without any rendezvous. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"

static const char *const coll_names[COLL_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter",
    "broadcast",  "all_to_all", "barrier"};

const char *bench_coll_name(bench_coll c) {
  return (unsigned)c < COLL_COUNT ? coll_names[c] : "invalid";
}

/* nccl-tests' spellings first, then gang's own (gang_dtype_name). */
static const struct {
  const char *name;
  gang_dtype dt;
} dtype_names[] = {
    {"float", GANG_FLOAT32},   {"double", GANG_FLOAT64},
    {"half", GANG_FLOAT16},    {"bfloat16", GANG_BFLOAT16},
    {"int8", GANG_INT8},       {"uint8", GANG_UINT8},
    {"int16", GANG_INT16},     {"int32", GANG_INT32},
    {"uint32", GANG_UINT32},   {"int64", GANG_INT64},
    {"uint64", GANG_UINT64},   {"float32", GANG_FLOAT32},
    {"float64", GANG_FLOAT64}, {"float16", GANG_FLOAT16},
    {"int", GANG_INT32},       {"bf16", GANG_BFLOAT16},
    {"fp16", GANG_FLOAT16},    {"fp32", GANG_FLOAT32},
    {"fp64", GANG_FLOAT64},
};
#define NDTYPE_NAMES (sizeof dtype_names / sizeof dtype_names[0])
/* The first entries, one per type, are what "-d all" runs and how types
 * are printed. */
#define NDTYPES_DISTINCT 11

static const struct {
  const char *name;
  gang_reduce_op op;
} op_names[] = {
    {"sum", GANG_SUM},   {"prod", GANG_PRODUCT}, {"min", GANG_MIN},
    {"max", GANG_MAX},   {"avg", GANG_MEAN},     {"product", GANG_PRODUCT},
    {"mean", GANG_MEAN},
};
#define NOP_NAMES (sizeof op_names / sizeof op_names[0])
#define NOPS_DISTINCT 5

const char *bench_dtype_name(gang_dtype dt) {
  for (size_t i = 0; i < NDTYPES_DISTINCT; i++)
    if (dtype_names[i].dt == dt)
      return dtype_names[i].name;
  return "invalid";
}

const char *bench_op_name(gang_reduce_op op) {
  for (size_t i = 0; i < NOPS_DISTINCT; i++)
    if (op_names[i].op == op)
      return op_names[i].name;
  return "invalid";
}

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: gang-bench [options]\n"
      "Measures one gang collective over a range of sizes, nccl-tests "
      "style.\n"
      "Run one process per rank (gangrun, torchrun, srun, mpirun, or by "
      "hand\n"
      "with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0 prints.\n"
      "\n"
      "  -b, --minbytes N      smallest size (default 8); k, M, G suffixes\n"
      "  -e, --maxbytes N      largest size (default 64M)\n"
      "  -f, --stepfactor F    multiply the size by F each step (default "
      "2)\n"
      "  -i, --stepbytes N     add N bytes each step instead of -f\n"
      "  -n, --iters N         timed iterations per size (default 20)\n"
      "  -w, --warmup_iters N  untimed iterations first (default 5)\n"
      "  -c, --check 0|1       verify every element (default 1)\n"
      "  -o, --redop OP        sum|prod|min|max|avg|all (default sum)\n"
      "  -d, --datatype T      float|double|half|bfloat16|int8|uint8|int16|\n"
      "                        int32|uint32|int64|uint64|all (default "
      "float)\n"
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
      "  -h, --help            this text\n"
      "\n"
      "Exit status: 0 all good, 1 wrong results or a failed collective, "
      "2 usage.\n");
}

static int bad(const char *flag, const char *value, const char *why) {
  fprintf(stderr, "gang-bench: %s: '%s' %s (see --help)\n", flag, value, why);
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

static int parse_dtypes(const char *flag, const char *s, bench_args *a) {
  if (strcasecmp(s, "all") == 0) {
    for (size_t i = 0; i < NDTYPES_DISTINCT; i++)
      a->dtypes[i] = dtype_names[i].dt;
    a->ndtypes = NDTYPES_DISTINCT;
    return 0;
  }
  for (size_t i = 0; i < NDTYPE_NAMES; i++)
    if (strcasecmp(s, dtype_names[i].name) == 0) {
      a->dtypes[0] = dtype_names[i].dt;
      a->ndtypes = 1;
      return 0;
    }
  return bad(flag, s, "is not a data type");
}

static int parse_ops(const char *flag, const char *s, bench_args *a) {
  if (strcasecmp(s, "all") == 0) {
    for (size_t i = 0; i < NOPS_DISTINCT; i++)
      a->ops[i] = op_names[i].op;
    a->nops = NOPS_DISTINCT;
    return 0;
  }
  for (size_t i = 0; i < NOP_NAMES; i++)
    if (strcasecmp(s, op_names[i].name) == 0) {
      a->ops[0] = op_names[i].op;
      a->nops = 1;
      return 0;
    }
  return bad(flag, s, "is not a reduce operation");
}

enum {
  OPT_OP = 256,
  OPT_INPLACE,
  OPT_OUTPLACE,
  OPT_JSON,
  OPT_ARRIVAL,
  OPT_LATE
};

int bench_parse_args(int argc, char **argv, bench_args *a) {
  *a = (bench_args){.min_bytes = 8,
                    .max_bytes = 64u << 20,
                    .step_factor = 2,
                    .iters = 20,
                    .warmup = 5,
                    .check = 1,
                    .root = 0,
                    .inplace = 1,
                    .outplace = 1,
                    .coll = COLL_ALL_REDUCE,
                    .dtypes = {GANG_FLOAT32},
                    .ndtypes = 1,
                    .ops = {GANG_SUM},
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
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int only_in = 0, only_out = 0;
  opterr = 0; /* our messages name the flag and exit 2 */
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:c:o:d:r:h", longs, NULL)) !=
         -1) {
    /* Both spellings, for messages: "-b/--minbytes". */
    char flag[40] = "";
    for (const struct option *o = longs; o->name != NULL; o++)
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
      rc = parse_ops(flag, optarg, a);
      break;
    case 'd':
      rc = parse_dtypes(flag, optarg, a);
      break;
    case 'r':
      if (strcasecmp(optarg, "all") == 0)
        a->root = -1;
      else
        rc = parse_int(flag, optarg, 0, INT_MAX, &a->root);
      break;
    case OPT_OP: {
      int found = 0;
      for (int k = 0; k < COLL_COUNT; k++)
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
    case OPT_LATE:
      rc = parse_int(flag, optarg, 0, 10000000, &a->late_us);
      break;
    case 'h':
      usage(stdout);
      return -1;
    case ':':
      fprintf(stderr, "gang-bench: %s needs a value (see --help)\n",
              argv[optind - 1]);
      return 2;
    default: /* '?' */
      if (optopt != 0)
        fprintf(stderr, "gang-bench: unknown flag -%c (see --help)\n", optopt);
      else
        fprintf(stderr, "gang-bench: unknown flag %s (see --help)\n",
                argv[optind - 1]);
      return 2;
    }
    if (rc != 0)
      return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "gang-bench: unexpected argument '%s' (see --help)\n",
            argv[optind]);
    return 2;
  }
  if (a->step_bytes != 0)
    a->step_factor = 0;
  if (a->min_bytes > a->max_bytes) {
    fprintf(stderr,
            "gang-bench: -b: minbytes %zu is larger than -e maxbytes %zu\n",
            a->min_bytes, a->max_bytes);
    return 2;
  }
  if (only_in && only_out) {
    fprintf(stderr, "gang-bench: --inplace-only and --outofplace-only "
                    "exclude each other\n");
    return 2;
  }
  a->inplace = !only_out;
  a->outplace = !only_in;
  return 0;
}
