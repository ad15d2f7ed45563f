/* gang-bench as a user runs it: N real rank processes (RANK, WORLD_SIZE and
 * GANG_STORE_ADDR set, as gangrun sets them, against a store server in its
 * own process), every collective at 2 and 3 ranks with small sizes and
 * checking on. Rank 0's table is parsed: row and column counts, sizes as
 * nccl-tests rounds them, #wrong, busbw = algbw x the collective's factor,
 * the footer; --json output is checked to be valid JSON with the expected
 * keys, and --arrival's two figures checked against the time column. Bad
 * flags must exit 2 naming the flag, and a corrupted result
 * (GANG_BENCH_CORRUPT) must be counted and exit 1. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness/harness.h"

static char *tool;
static int run_counter;

/* Largest size and step of the standard runs. */
#define MIN_BYTES 8
#define MAX_BYTES 65536

typedef struct launch {
  char **argv; /* NULL-terminated, argv[0] = tool */
  int port;
  char run_id[64];
  int out_fd; /* rank 0's stdout */
  const char *extra_env;
} launch;

static int exec_rank(int rank, int size, void *arg) {
  launch *l = arg;
  char buf[64];
  snprintf(buf, sizeof buf, "%d", rank);
  setenv("RANK", buf, 1);
  snprintf(buf, sizeof buf, "%d", size);
  setenv("WORLD_SIZE", buf, 1);
  snprintf(buf, sizeof buf, "127.0.0.1:%d", l->port);
  setenv("GANG_STORE_ADDR", buf, 1);
  setenv("GANG_RUN_ID", l->run_id, 1);
  /* torchrun's variables name the rendezvous too; GANG_STORE_ADDR wins. */
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  snprintf(buf, sizeof buf, "%d", l->port);
  setenv("MASTER_PORT", buf, 1);
  if (l->extra_env != NULL)
    putenv((char *)l->extra_env);
  if (rank == 0)
    dup2(l->out_fd, 1);
  execv(l->argv[0], l->argv);
  fprintf(stderr, "exec %s: %s\n", l->argv[0], strerror(errno));
  return 127;
}

static char *slurp(int fd) {
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  char *s = malloc((size_t)st.st_size + 1);
  assert_non_null(s);
  ssize_t got = pread(fd, s, (size_t)st.st_size, 0);
  assert_true(got == st.st_size);
  s[got] = '\0';
  return s;
}

/* Runs `prog` (gang-bench or bench/copy_floor) with `args`
 * (NULL-terminated) on `size` ranks, with one extra variable `env` (NULL:
 * none); returns rank 0's stdout (caller frees). Fails the test unless
 * every rank exits 0 within timeout_ms. */
static char *run_prog_for(char *prog, int size, const char *const *args,
                          const char *env, int timeout_ms) {
  gt_store_proc sp = gt_store_proc_start(NULL);
  char *argv[32] = {prog};
  int n = 1;
  for (int i = 0; args[i] != NULL && n < 31; i++)
    argv[n++] = (char *)args[i];
  argv[n] = NULL;
  launch l = {.argv = argv, .port = sp.port, .extra_env = env};
  snprintf(l.run_id, sizeof l.run_id, "bench-%d-%d", (int)getpid(),
           run_counter++);
  l.out_fd = gt_out_fd("bench-out");
  assert_true(l.out_fd >= 0);
  int rc = gt_run_ranks(size, exec_rank, &l, timeout_ms);
  char *out = slurp(l.out_fd);
  close(l.out_fd);
  gt_store_proc_stop(&sp);
  if (rc != 0) {
    fprintf(stderr, "rank 0 stdout:\n%s\n", out);
    fail_msg("%s %s on %d ranks (%s) failed", prog, args[1], size,
             env ? env : "");
  }
  return out;
}

static char *run_bench_for(int size, const char *const *args, int timeout_ms) {
  return run_prog_for(tool, size, args, NULL, timeout_ms);
}

static char *run_bench(int size, const char *const *args) {
  return run_bench_for(size, args, 30000);
}

/* ---- A minimal JSON syntax check (RFC 8259 values) ---------------------- */

static const char *json_value(const char *p);

static const char *ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
    p++;
  return p;
}

static const char *json_string(const char *p) {
  if (*p++ != '"')
    return NULL;
  while (*p != '"') {
    if (*p == '\0' || (unsigned char)*p < 0x20)
      return NULL;
    if (*p == '\\')
      p++;
    p++;
  }
  return p + 1;
}

static const char *json_value(const char *p) {
  p = ws(p);
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    p = ws(p + 1);
    if (*p == close)
      return p + 1;
    for (;;) {
      if (close == '}') {
        p = json_string(ws(p));
        if (p == NULL || *(p = ws(p)) != ':')
          return NULL;
        p++;
      }
      p = json_value(p);
      if (p == NULL)
        return NULL;
      p = ws(p);
      if (*p == close)
        return p + 1;
      if (*p++ != ',')
        return NULL;
    }
  }
  if (*p == '"')
    return json_string(p);
  if (strncmp(p, "null", 4) == 0 || strncmp(p, "true", 4) == 0)
    return p + 4;
  if (strncmp(p, "false", 5) == 0)
    return p + 5;
  /* A number: strtod accepts more than JSON (inf, nan, hex), so reject
   * those first. */
  if (*p != '-' && !isdigit((unsigned char)*p))
    return NULL;
  if (strncasecmp(p + (*p == '-'), "inf", 3) == 0 ||
      strncasecmp(p + (*p == '-'), "nan", 3) == 0 ||
      strncasecmp(p + (*p == '-'), "0x", 2) == 0)
    return NULL;
  char *end = NULL;
  strtod(p, &end);
  return end == p ? NULL : end;
}

/* The number after "key": in line, or NAN if absent / null. */
static double json_num(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (p == NULL || strncmp(p + strlen(pat), "null", 4) == 0)
    return NAN;
  return strtod(p + strlen(pat), NULL);
}

/* ---- Expectations -------------------------------------------------------- */

typedef struct coll_case {
  const char *name;
  int blocks;    /* sizes round down to a multiple of ranks x elements */
  double factor; /* busbw / algbw for n ranks: f(n) */
  int kind;      /* 0: 2(n-1)/n, 1: (n-1)/n, 2: 1, 3: none (barrier) */
} coll_case;

static const coll_case cases[] = {
    {"all_reduce", 0, 0, 0},     {"all_gather", 1, 0, 1},
    {"reduce_scatter", 1, 0, 1}, {"broadcast", 0, 0, 2},
    {"all_to_all", 1, 0, 1},     {"barrier", 0, 0, 3},
};

static double factor(const coll_case *c, int n) {
  switch (c->kind) {
  case 0:
    return 2.0 * (n - 1) / n;
  case 1:
    return (double)(n - 1) / n;
  case 2:
    return 1.0;
  default:
    return 0.0;
  }
}

static int expected_rows(const coll_case *c) {
  if (c->kind == 3)
    return 1;
  int rows = 0;
  for (size_t s = MIN_BYTES; s <= MAX_BYTES; s *= 2)
    rows++;
  return rows;
}

static size_t expected_size(const coll_case *c, size_t s, int n) {
  size_t unit = c->blocks ? 4 * (size_t)n : 4;
  return c->kind == 3 ? 0 : s / unit * unit;
}

/* Splits `line` into at most `max` whitespace-separated fields in place. */
static int split(char *line, char **f, int max) {
  int n = 0;
  for (char *save = NULL, *t = strtok_r(line, " \t", &save); t && n < max;
       t = strtok_r(NULL, " \t", &save))
    f[n++] = t;
  return n;
}

/* The table of one run: rows, columns, values, footer. */
static void check_table(const coll_case *c, int n, char *out) {
  int rows = 0, footer_oob = 0, footer_avg = 0, ranks_listed = 0;
  size_t want_size = MIN_BYTES;
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "# Out of bounds values : 0 OK", 29) == 0)
      footer_oob = 1;
    if (strncmp(line, "# Avg bus bandwidth    : ", 25) == 0)
      footer_avg = 1;
    if (strncmp(line, "#  Rank ", 8) == 0)
      ranks_listed++;
    if (line[0] == '#')
      continue;
    char *f[20];
    int nf = split(line, f, 20);
    if (nf != 13)
      fail_msg("%s: row has %d columns, want 13: %s", c->name, nf, line);
    rows++;
    size_t size = strtoull(f[0], NULL, 10);
    assert_int_equal(size, expected_size(c, want_size, n));
    assert_int_equal(strtoull(f[1], NULL, 10), size / 4);
    if (c->kind == 3) {
      assert_string_equal(f[2], "none");
      assert_true(atof(f[5]) > 0);
      for (int k = 6; k < 13; k++)
        assert_string_equal(f[k], "N/A");
      continue;
    }
    assert_string_equal(f[2], "float");
    int reduces = strcmp(c->name, "all_reduce") == 0 ||
                  strcmp(c->name, "reduce_scatter") == 0;
    assert_string_equal(f[3], reduces ? "sum" : "none");
    assert_int_equal(atoi(f[4]), c->kind == 2 ? n - 1 : -1);
    for (int k = 5; k < 13; k += 4) {
      assert_true(atof(f[k]) > 0); /* time */
      if (strcmp(f[k + 3], "0") != 0)
        fail_msg("%s: %s wrong values in row: %s", c->name, f[k + 3], f[0]);
    }
    want_size *= 2;
  }
  assert_int_equal(rows, expected_rows(c));
  assert_int_equal(ranks_listed, n);
  assert_true(footer_oob);
  assert_true(footer_avg);
}

static void check_json(const coll_case *c, int n, char *out) {
  int rows = 0, summary = 0;
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    const char *end = json_value(line);
    if (end == NULL || *ws(end) != '\0')
      fail_msg("%s: not one JSON value: %s", c->name, line);
    if (strncmp(line, "{\"summary\":", 11) == 0) {
      summary++;
      assert_non_null(strstr(line, "\"wrong\":0,"));
      assert_non_null(strstr(line, "\"out_of_bounds\":0,"));
      if (c->kind == 3)
        assert_non_null(strstr(line, "\"avg_busbw_gbs\":null"));
      else
        assert_true(json_num(line, "avg_busbw_gbs") >= 0);
      continue;
    }
    rows++;
    char want[64];
    snprintf(want, sizeof want, "\"collective\":\"%s\"", c->name);
    assert_non_null(strstr(line, want));
    snprintf(want, sizeof want, "\"ranks\":%d,", n);
    assert_non_null(strstr(line, want));
    assert_non_null(strstr(line, "\"out_of_place\":{\"time_us\":"));
    if (c->kind == 3) {
      assert_non_null(strstr(line, "\"in_place\":null"));
      continue;
    }
    assert_non_null(strstr(line, "\"in_place\":{\"time_us\":"));
    assert_null(strstr(line, "\"wrong\":null"));
    /* Every wrong count is 0 (two placements). */
    const char *p = line;
    int zeros = 0;
    while ((p = strstr(p, "\"wrong\":")) != NULL) {
      p += 8;
      assert_true(*p == '0' && (p[1] == '}' || p[1] == ','));
      zeros++;
    }
    assert_int_equal(zeros, 2);
    /* busbw = algbw x factor, to the printed precision. */
    double alg = json_num(line, "algbw_gbs"), bus = json_num(line, "busbw_gbs");
    assert_false(isnan(alg) || isnan(bus));
    double want_bus = alg * factor(c, n);
    if (fabs(bus - want_bus) > 1e-5 * (fabs(want_bus) + 1e-9) + 1e-12)
      fail_msg("%s: busbw %g, want algbw %g x %g", c->name, bus, alg,
               factor(c, n));
  }
  assert_int_equal(rows, expected_rows(c));
  assert_int_equal(summary, 1);
}

/* The rows of a table (out, changed by strtok) whose #wrong columns, both
 * placements, read `wrong`; how many there are. */
static int table_rows(char *out, const char *wrong) {
  int rows = 0;
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#')
      continue;
    char *f[20];
    assert_int_equal(split(line, f, 20), 13);
    assert_string_equal(f[8], wrong);
    assert_string_equal(f[12], wrong);
    rows++;
  }
  return rows;
}

/* ---- Tests ------------------------------------------------------------- */

static void run_case(const coll_case *c, int n, int json) {
  char root[16];
  snprintf(root, sizeof root, "%d", n - 1);
  const char *args[] = {"--op", c->name, "-b", "8",  "-e",
                        "64k",  "-n",    "3",  "-w", "1",
                        "-c",   "1",     "-r", root, json ? "--json" : NULL,
                        NULL};
  char *out = run_bench(n, args);
  if (json)
    check_json(c, n, out);
  else
    check_table(c, n, out);
  free(out);
}

static void test_table_2_ranks(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i], 2, 0);
}

static void test_table_3_ranks(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i], 3, 0);
}

static void test_json(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i], i % 2 ? 3 : 2, 1);
}

/* Every type and reduce operation gives exact results (half and bfloat16
 * included) at 3 ranks, for both reducing collectives. */
static void test_all_types_and_ops(void **state) {
  (void)state;
  const char *colls[] = {"all_reduce", "reduce_scatter"};
  for (int k = 0; k < 2; k++) {
    const char *args[] = {"--op", colls[k], "-b", "1",   "-e", "4k",
                          "-f",   "4",      "-n", "1",   "-w", "0",
                          "-d",   "all",    "-o", "all", NULL};
    char *out = run_bench(3, args);
    /* 11 types x 5 ops x sizes 1, 4, 16, 64, 256, 1k, 4k. */
    assert_int_equal(table_rows(out, "0"), 11 * 5 * 7);
    free(out);
  }
}

/* A result corrupted before the check must be counted and fail the run;
 * one process (no launcher variables) is a world of one rank. */
static void test_corrupt_result_is_counted(void **state) {
  (void)state;
  char *argv[] = {tool, "-b", "64", "-e", "64", "-n", "1", "-w", "0", NULL};
  char *envp[] = {"GANG_BENCH_CORRUPT=1", NULL};
  char *out = NULL;
  int st = gt_run_cmd(argv, envp, &out, 30000);
  if (!(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1))
    fail_msg("corrupted run: status %d, want exit 1; output:\n%s", st, out);
  /* One wrong element in each placement. */
  char *row = out;
  while (row && row[0] == '#')
    row = strchr(row, '\n') ? strchr(row, '\n') + 1 : NULL;
  assert_non_null(row);
  char *eol = strchr(row, '\n');
  if (eol != NULL)
    *eol = '\0';
  char *f[20];
  assert_int_equal(split(row, f, 20), 13);
  assert_string_equal(f[8], "1");
  assert_string_equal(f[12], "1");
  free(out);

  /* And without the corruption the same run passes. */
  assert_int_equal(gt_run_cmd(argv, NULL, &out, 30000), 0);
  free(out);
}

static void expect_usage_error(const char *const *args, const char *flag) {
  char *argv[16] = {tool};
  int n = 1;
  for (int i = 0; args[i] != NULL; i++)
    argv[n++] = (char *)args[i];
  argv[n] = NULL;
  char *out = NULL;
  int st = gt_run_cmd(argv, NULL, &out, 10000);
  if (!(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2))
    fail_msg("%s %s: status %d, want exit 2; output:\n%s", args[0],
             args[1] ? args[1] : "", st, out);
  if (strstr(out, flag) == NULL)
    fail_msg("%s: message does not name %s: %s", args[0], flag, out);
  free(out);
}

/* 16 ranks on 2 cores: every collective completes every size with correct
 * results (gang-bench exits 1 on a wrong element), over shared memory whose
 * waits must sleep rather than spin for the others to run. */
static void test_16_ranks_oversubscribed(void **state) {
  (void)state;
  const char *ops[] = {"all_reduce",     "broadcast",  "all_gather",
                       "reduce_scatter", "all_to_all", "barrier"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    const char *args[] = {"--op", ops[i], "-b", "8", "-e", "256k", "-f", "32",
                          "-n",   "2",    "-w", "1", "-c", "1",    NULL};
    char *out = run_bench_for(16, args, 120000);
    assert_non_null(strstr(out, "# Out of bounds values : 0 OK"));
    free(out);
  }
}

static void test_bad_flags(void **state) {
  (void)state;
  expect_usage_error((const char *[]){"--frobnicate", NULL}, "--frobnicate");
  expect_usage_error((const char *[]){"-b", "12X", NULL}, "-b");
  expect_usage_error((const char *[]){"-e", "lots", NULL}, "-e");
  expect_usage_error((const char *[]){"-f", "1", NULL}, "-f");
  expect_usage_error((const char *[]){"-n", "0", NULL}, "-n");
  expect_usage_error((const char *[]){"-c", "2", NULL}, "-c");
  expect_usage_error((const char *[]){"-d", "complex", NULL}, "-d");
  expect_usage_error((const char *[]){"-o", "xor", NULL}, "-o");
  expect_usage_error((const char *[]){"--op", "gather", NULL}, "--op");
  expect_usage_error((const char *[]){"-b", "1M", "-e", "1k", NULL}, "-b");
  expect_usage_error((const char *[]){"-w", NULL}, "-w");
  expect_usage_error(
      (const char *[]){"--inplace-only", "--outofplace-only", NULL},
      "--inplace-only");
  expect_usage_error((const char *[]){"--op", "broadcast", "-r", "5", NULL},
                     "-r");

  /* --help is not an error. */
  char *argv[] = {tool, "--help", NULL};
  char *out = NULL;
  assert_int_equal(gt_run_cmd(argv, NULL, &out, 10000), 0);
  assert_non_null(strstr(out, "--op COLL"));
  free(out);
}

/* --arrival: each placement also reports the median spread of the ranks'
 * entries and the median time from the last entry to the last exit. Both
 * are at most the time column, iteration by iteration, so their medians
 * are too: the rank that leaves last entered no later than the last
 * arrival, and in an all_reduce or a barrier the first to enter cannot
 * leave before the last has entered. The table says the same in a comment
 * line under each row. */
static void check_arrival_fields(const char *line, const char *placement) {
  const char *p = strstr(line, placement);
  assert_non_null(p);
  double t = json_num(p, "time_us"), spread = json_num(p, "spread_us"),
         after = json_num(p, "after_last_us");
  double most = t * (1 + 1e-5);
  if (!(spread >= 0 && spread <= most && after > 0 && after <= most))
    fail_msg("%s: time %g, spread %g, after last %g", placement, t, spread,
             after);
}

/* The JSON rows of gang-bench's output (the summary left out), each
 * checked to be one JSON value, split in place: their number, at most
 * cap of them in rows. */
static int json_rows(char *out, char **rows, int cap) {
  int n = 0;
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "{\"summary\":", 11) == 0)
      continue;
    const char *end = json_value(line);
    if (end == NULL || *ws(end) != '\0')
      fail_msg("not one JSON value: %s", line);
    if (n < cap)
      rows[n] = line;
    n++;
  }
  return n;
}

static void test_arrival(void **state) {
  (void)state;
  const char *json[] = {"--op", "all_reduce", "-b",        "8",      "-e", "1k",
                        "-f",   "8",          "-n",        "200",    "-w", "10",
                        "-c",   "1",          "--arrival", "--json", NULL};
  char *out = run_bench(2, json);
  char *rows[8];
  assert_int_equal(json_rows(out, rows, 8), 3); /* 8, 64 and 512 bytes */
  for (int i = 0; i < 3; i++) {
    check_arrival_fields(rows[i], "\"out_of_place\":");
    check_arrival_fields(rows[i], "\"in_place\":");
    /* No root, no root's entry to measure from. */
    assert_null(strstr(rows[i], "from_root_us"));
  }
  free(out);

  const char *table[] = {"--op", "barrier", "-n", "200", "--arrival", NULL};
  out = run_bench(3, table);
  const char *a = strstr(out, "#  arrival: out-of-place spread ");
  assert_non_null(a);
  double spread = -1, after = -1;
  assert_int_equal(sscanf(a,
                          "#  arrival: out-of-place spread %lf us, after "
                          "last %lf us",
                          &spread, &after),
                   2);
  assert_true(spread >= 0 && after > 0);
  /* The row above it: the barrier's time bounds both. */
  char *row = out + (a - out);
  while (row > out && row[-1] != '\n')
    row--;
  do
    row--;
  while (row > out && row[-1] != '\n');
  char *f[20];
  char *eol = strchr(row, '\n');
  *eol = '\0';
  assert_int_equal(split(row, f, 20), 13);
  double t = strtod(f[5], NULL);
  /* The table prints two decimals, the comment three. */
  if (!(spread <= t + 0.005 && after <= t + 0.005))
    fail_msg("barrier: time %g, spread %g, after last %g", t, spread, after);
  free(out);
}

/* --sync --arrival of a broadcast: every placement also reports the
 * median time from the root's entry to the last exit, which is positive
 * (the last rank to leave has the root's data, which left no sooner than
 * the root entered) and, with a barrier before each call, at most the
 * slowest rank's time plus the spread of the entries in every iteration;
 * the medians get a margin for that. The table's comment line says it
 * too. */
static void test_arrival_broadcast(void **state) {
  (void)state;
  const char *json[] = {"--op",      "broadcast", "-b", "8",  "-e",
                        "64k",       "-f",        "8",  "-n", "100",
                        "-w",        "5",         "-r", "1",  "--sync",
                        "--arrival", "--json",    NULL};
  char *out = run_bench(3, json);
  char *rows[8];
  assert_int_equal(json_rows(out, rows, 8), 5); /* 8 B to 32 KiB */
  for (int i = 0; i < 5; i++) {
    for (int k = 0; k < 2; k++) {
      const char *p =
          strstr(rows[i], k ? "\"in_place\":" : "\"out_of_place\":");
      assert_non_null(p);
      assert_non_null(strstr(p, "from_root_us"));
      double t = json_num(p, "time_us"), spread = json_num(p, "spread_us"),
             root = json_num(p, "from_root_us");
      if (!(root > 0 && root <= 2 * (t + spread) + 50))
        fail_msg("broadcast: time %g, spread %g, from the root %g", t, spread,
                 root);
    }
  }
  free(out);
  const char *table[] = {"--op", "broadcast", "-b",     "4k",        "-e", "4k",
                         "-n",   "50",        "--sync", "--arrival", NULL};
  out = run_bench(2, table);
  assert_non_null(strstr(out, ", root's entry to last exit "));
  free(out);
}

/* run_prog_for, and rank 0's table must report no out-of-bounds byte
 * (the program exits 1 on a wrong one). */
static char *run_prog(char *prog, int size, const char *const *args,
                      const char *env) {
  char *out = run_prog_for(prog, size, args, env, 60000);
  if (strstr(out, "# Out of bounds values : 0 OK") == NULL)
    fail_msg("%s %s on %d ranks (%s): no clean summary:\n%s", prog, args[1],
             size, env ? env : "", out);
  return out;
}

/* Buffers from gang_mem_alloc (GANG_BENCH_MEM=1): every collective checks
 * out, at 2 or 3 ranks in turn (test_pg_mem covers each algorithm), at
 * sizes that take the direct steps and single copy, several staging
 * chunks included. */
static void test_gang_mem_buffers(void **state) {
  (void)state;
  const char *ops[] = {"all_gather", "reduce_scatter", "all_to_all",
                       "broadcast", "all_reduce"};
  for (int size = 2; size <= 3; size++)
    for (size_t k = size - 2; k < sizeof ops / sizeof ops[0]; k += 2) {
      const char *args[] = {"--op", ops[k], "-b", "64k", "-e", "4M", "-f",
                            "8",    "-n",   "2",  "-w",  "1",  NULL};
      free(run_prog(tool, size, args, "GANG_BENCH_MEM=1"));
    }
}

/* bench/copy_floor, the memory floor bench/compare --floor measures:
 * every collective's results check out (all_reduce's, a copy, are not
 * checked: N/A), with loads (2 ranks) and with process_vm_readv (3). */
static void test_copy_floor(void **state) {
  (void)state;
  size_t cap = strlen(GT_BUILD_DIR) + 32;
  char *floor_tool = malloc(cap);
  assert_non_null(floor_tool);
  snprintf(floor_tool, cap, "%s/bench/copy_floor", GT_BUILD_DIR);
  const char *ops[] = {"all_gather", "reduce_scatter", "all_to_all",
                       "broadcast",  "all_reduce",     "barrier"};
  const char *envs[] = {NULL, "COPY_FLOOR_CMA=1"};
  for (int size = 2; size <= 3; size++) {
    int e = size - 2; /* loads at 2 ranks, process_vm_readv at 3 */
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
      const char *args[] = {"--op", ops[k], "-b", "1k", "-e", "1M", "-f",
                            "32",   "-n",   "2",  "-w", "1",  NULL};
      char *out = run_prog(floor_tool, size, args, envs[e]);
      /* #wrong 0 in both placements; N/A for the copy and the barrier. */
      bool unchecked =
          strcmp(ops[k], "all_reduce") == 0 || strcmp(ops[k], "barrier") == 0;
      assert_int_equal(table_rows(out, unchecked ? "N/A" : "0"),
                       strcmp(ops[k], "barrier") == 0 ? 1 : 3);
      free(out);
    }
  }
  free(floor_tool);
}

int main(void) {
  tool = gt_tool_path("gang-bench");
  const struct CMUnitTest tests[] = {
      GT_TEST(test_bad_flags),
      GT_TEST(test_corrupt_result_is_counted),
      GT_TEST(test_table_2_ranks),
      GT_TEST(test_table_3_ranks),
      GT_TEST(test_json),
      GT_TEST(test_all_types_and_ops),
      GT_TEST(test_16_ranks_oversubscribed),
      GT_TEST(test_arrival),
      GT_TEST(test_arrival_broadcast),
      GT_TEST(test_gang_mem_buffers),
      GT_TEST(test_copy_floor),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(tool);
  return rc;
}
