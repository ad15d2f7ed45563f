/* nccl-tests' table and the JSON Lines bench/compare reads, the same for
 * every program: only the header's first line and the JSON's "library" (or
 * gang-bench's "gang_version") name the library. */
#include <stdio.h>
#include <string.h>

#include "arrival.h"
#include "output.h"

static void print_trimmed(char *line) {
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == ' ')
    line[--n] = '\0';
  puts(line);
}

void bench_print_header(const bench_backend *b, const bench_args *a,
                        const bench_rank_id *ids) {
  if (a->json)
    return;
  bench_coll c = a->coll;
  printf("# %s %s: %s, %d ranks\n", b->program, bench_coll_name(c), b->library,
         b->size);
  printf("# minBytes %zu maxBytes %zu step: ", a->min_bytes, a->max_bytes);
  if (a->step_factor > 0)
    printf("%g(factor)", a->step_factor);
  else
    printf("%zu(bytes)", a->step_bytes);
  printf(" warmup iters: %d iters: %d validation: %d\n", a->warmup, a->iters,
         a->check);
  printf("# time: median over iterations of the slowest rank's time\n");
  const char *note = b->placement_note ? b->placement_note(c) : NULL;
  if (note != NULL)
    fputs(note, stdout);
  printf("#\n");
  if (ids != NULL) {
    printf("# Using ranks\n");
    for (int r = 0; r < b->size; r++)
      printf("#  Rank %2d Pid %6d on %10.*s\n", r, (int)ids[r].pid,
             (int)sizeof ids[r].host - 1, ids[r].host);
    printf("#\n");
  }
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
}

/* Three significant figures or so in seven columns. */
static void print_time(double us) {
  if (us >= 10000.0)
    printf("  %7.0f", us);
  else if (us >= 100.0)
    printf("  %7.1f", us);
  else
    printf("  %7.2f", us);
}

static void print_result(const bench_result *p, int has_bw) {
  if (!p->ran) {
    printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  print_time(p->t.median_us);
  if (has_bw)
    printf("  %6.2f  %6.2f", p->algbw, p->busbw);
  else
    printf("  %6s  %6s", "N/A", "N/A");
  if (p->wrong < 0)
    printf("  %6s", "N/A");
  else
    printf("  %6lld", (long long)p->wrong);
}

static void json_result(const bench_result *p, int has_bw, int arrival) {
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
  if (p->chosen[0] != '\0')
    printf("\"chosen\":\"%s\",", p->chosen);
  if (p->wrong < 0)
    printf("\"wrong\":null");
  else
    printf("\"wrong\":%lld", (long long)p->wrong);
  if (arrival) {
    printf(",");
    arrival_json(p->spread_us, p->after_last_us, p->from_root_us);
  }
  printf("}");
}

void bench_print_row(const bench_backend *b, const bench_args *a,
                     const bench_call *c, const bench_result *out,
                     const bench_result *in) {
  int has_bw = c->coll != BENCH_BARRIER;
  const char *type = has_bw ? bench_dtype_name(c->dtype) : "none";
  const char *redop = bench_reduces(c->coll) ? bench_op_name(c->op) : "none";
  const char *algo = c->algo >= 0 ? a->algos[c->algo] : NULL;
  if (a->json) {
    printf("{\"collective\":\"%s\",\"ranks\":%d,\"size\":%zu,\"count\":%zu,"
           "\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,",
           bench_coll_name(c->coll), b->size, c->s.bytes, c->s.count, type,
           redop, c->root);
    if (b->gang_version == NULL)
      printf("\"library\":\"%s\",", b->library);
    if (algo != NULL)
      printf("\"algo\":\"%s\",", algo);
    printf("\"out_of_place\":");
    json_result(out, has_bw, a->arrival);
    printf(",\"in_place\":");
    json_result(in, has_bw, a->arrival);
    printf("}\n");
  } else {
    printf("%12zu  %12zu  %8s  %6s  %6d", c->s.bytes, c->s.count, type, redop,
           c->root);
    print_result(out, has_bw);
    print_result(in, has_bw);
    if (algo != NULL)
      printf("  %s", algo);
    printf("\n");
    if (a->arrival)
      arrival_print((const int[2]){out->ran, in->ran},
                    (const double[2]){out->spread_us, in->spread_us},
                    (const double[2]){out->after_last_us, in->after_last_us},
                    (const double[2]){out->from_root_us, in->from_root_us});
  }
  fflush(stdout);
}

void bench_print_footer(const bench_backend *b, const bench_args *a,
                        int64_t oob, int64_t wrong, double bw_sum,
                        int bw_count) {
  double avg = bw_count > 0 ? bw_sum / bw_count : 0;
  if (a->json) {
    printf("{\"summary\":{\"collective\":\"%s\",\"ranks\":%d,",
           bench_coll_name(a->coll), b->size);
    if (b->gang_version != NULL)
      printf("\"gang_version\":\"%s\",", b->gang_version);
    else
      printf("\"library\":\"%s\",", b->library);
    printf("\"out_of_bounds\":%lld,\"wrong\":%lld,", (long long)oob,
           (long long)wrong);
    if (bw_count > 0)
      printf("\"avg_busbw_gbs\":%.6g}}\n", avg);
    else
      printf("\"avg_busbw_gbs\":null}}\n");
  } else {
    printf("# Out of bounds values : %lld %s\n", (long long)oob,
           oob ? "FAILED" : "OK");
    if (bw_count > 0)
      printf("# Avg bus bandwidth    : %g\n", avg);
    else
      printf("# Avg bus bandwidth    : N/A\n");
    printf("#\n# Collective test concluded: %s\n", bench_coll_name(a->coll));
  }
  fflush(stdout);
}
