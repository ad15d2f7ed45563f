/* gang-flight: reads the flight recorder's dumps of every rank (files
 * written through GANG_FLIGHT_DUMP, or logs holding "gang-flight" lines,
 * in any mix) and prints each gang's recent collectives side by side,
 * then the first one where its ranks differ: a rank that never posted it,
 * ranks that disagree on it, or the first one not finished everywhere.
 *
 * Exit status: 0 when every gang's ranks agree and finished every call,
 * 1 when a difference or an unfinished call was found, 2 on bad usage or
 * unreadable input. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROW(arr, n, cap)                                                      \
  do {                                                                         \
    if ((n) == (cap)) {                                                        \
      size_t nc = (cap) ? 2 * (cap) : 8;                                       \
      void *p = realloc((arr), nc * sizeof *(arr));                            \
      if (p == NULL) {                                                         \
        fprintf(stderr, "gang-flight: out of memory\n");                       \
        exit(2);                                                               \
      }                                                                        \
      (arr) = p;                                                               \
      (cap) = nc;                                                              \
    }                                                                          \
  } while (0)

typedef struct call {
  uint64_t seq, count;
  int64_t posted, started, ended;
  int root, tag;
  char kind[24], dtype[16], op[12], state[12], status[24], algo[24];
} call;

typedef struct grec { /* one rank's record of one gang, from one dump */
  char world[256];
  uint64_t ctx, recorded;
  int wrank, grank, gsize;
  int *ranks;
  call *calls;
  size_t ncalls, cap;
  int64_t dump_mono; /* the dump's clock, for "running for" */
} grec;

typedef struct dump {
  char id[128], host[80], reason[600];
  int pid, rank;
  int64_t mono, real;
  bool complete;
  grec *gangs;
  size_t ngangs, cap;
} dump;

static dump *dumps;
static size_t ndumps, dumps_cap;

/* The value of key `k` ("ctx=") in a line, copied to out; false if absent.
 * "reason=" takes the rest of the line. */
static bool field(const char *line, const char *k, char *out, size_t cap) {
  size_t kl = strlen(k);
  const char *p = line;
  while ((p = strstr(p, k)) != NULL) {
    if (p == line || p[-1] == ' ')
      break;
    p += kl;
  }
  if (p == NULL)
    return false;
  p += kl;
  size_t n = 0;
  bool rest = strcmp(k, "reason=") == 0;
  while (p[n] && p[n] != '\n' && (rest || p[n] != ' ') && n + 1 < cap) {
    out[n] = p[n];
    n++;
  }
  out[n] = '\0';
  return true;
}

/* A numeric field: signed decimal (`sign`) or unsigned in `base`, the
 * whole value or nothing. */
static bool field_num(const char *line, const char *k, bool sign, int base,
                      int64_t *i, uint64_t *u) {
  char b[40];
  if (!field(line, k, b, sizeof b))
    return false;
  char *end;
  errno = 0;
  if (sign)
    *i = strtoll(b, &end, base);
  else
    *u = strtoull(b, &end, base);
  return errno == 0 && *end == '\0' && end != b;
}

static bool field_i64(const char *line, const char *k, int64_t *v) {
  return field_num(line, k, true, 10, v, NULL);
}

static bool field_u64(const char *line, const char *k, uint64_t *v, int base) {
  return field_num(line, k, false, base, NULL, v);
}

static dump *find_dump(const char *id) {
  for (size_t i = 0; i < ndumps; i++)
    if (strcmp(dumps[i].id, id) == 0)
      return &dumps[i];
  return NULL;
}

static int bad_lines;

static void parse_line(const char *line, const char *src, long lineno) {
  const char *p = strstr(line, "gang-flight ");
  if (p == NULL)
    return;
  p += strlen("gang-flight ");
  char id[128];
  if (!field(p, "dump=", id, sizeof id)) {
    fprintf(stderr, "gang-flight: %s:%ld: a line without dump=, skipped\n", src,
            lineno);
    bad_lines++;
    return;
  }
  dump *d = find_dump(id);
  if (strncmp(p, "begin ", 6) == 0) {
    if (d != NULL) /* the same dump read twice (two copies of a log) */
      return;
    GROW(dumps, ndumps, dumps_cap);
    d = &dumps[ndumps++];
    memset(d, 0, sizeof *d);
    snprintf(d->id, sizeof d->id, "%s", id);
    int64_t v;
    d->pid = field_i64(p, "pid=", &v) ? (int)v : -1;
    d->rank = field_i64(p, "rank=", &v) ? (int)v : -1;
    field_i64(p, "mono=", &d->mono);
    field_i64(p, "real=", &d->real);
    field(p, "host=", d->host, sizeof d->host);
    field(p, "reason=", d->reason, sizeof d->reason);
    return;
  }
  if (d == NULL || d->complete)
    return; /* its begin line is not in the input, or a second copy */
  if (strncmp(p, "end ", 4) == 0 || strcmp(p, "end") == 0 ||
      strncmp(p, "end\n", 4) == 0) {
    d->complete = true;
    return;
  }
  if (strncmp(p, "gang ", 5) == 0) {
    GROW(d->gangs, d->ngangs, d->cap);
    grec *g = &d->gangs[d->ngangs];
    memset(g, 0, sizeof *g);
    int64_t v;
    char ranks[8192];
    bool ok = field(p, "world=", g->world, sizeof g->world) &&
              field_u64(p, "ctx=", &g->ctx, 16) && field_i64(p, "wrank=", &v) &&
              (g->wrank = (int)v, true) && field_i64(p, "grank=", &v) &&
              (g->grank = (int)v, true) && field_i64(p, "gsize=", &v) &&
              (g->gsize = (int)v, true) && g->gsize > 0 && g->grank >= 0 &&
              g->grank < g->gsize &&
              field_u64(p, "recorded=", &g->recorded, 10) &&
              field(p, "ranks=", ranks, sizeof ranks);
    if (ok) {
      g->ranks = calloc((size_t)g->gsize, sizeof *g->ranks);
      char *s = ranks;
      for (int i = 0; ok && i < g->gsize; i++) {
        char *end;
        long r = strtol(s, &end, 10);
        ok = end != s && (*end == ',' || (*end == '\0' && i == g->gsize - 1));
        g->ranks[i] = (int)r;
        s = end + (*end == ',');
      }
    }
    if (!ok) {
      free(g->ranks);
      fprintf(stderr, "gang-flight: %s:%ld: malformed gang line, skipped\n",
              src, lineno);
      bad_lines++;
      return;
    }
    g->dump_mono = d->mono;
    d->ngangs++;
    return;
  }
  if (strncmp(p, "call ", 5) == 0) {
    uint64_t ctx;
    grec *g = NULL;
    if (field_u64(p, "ctx=", &ctx, 16))
      for (size_t i = d->ngangs; i-- > 0 && g == NULL;)
        if (d->gangs[i].ctx == ctx)
          g = &d->gangs[i];
    call c;
    memset(&c, 0, sizeof c);
    int64_t v;
    bool ok = g != NULL && field_u64(p, "seq=", &c.seq, 10) &&
              field_u64(p, "count=", &c.count, 10) &&
              field(p, "call=", c.kind, sizeof c.kind) &&
              field(p, "dtype=", c.dtype, sizeof c.dtype) &&
              field(p, "op=", c.op, sizeof c.op) && field_i64(p, "root=", &v) &&
              (c.root = (int)v, true) && field_i64(p, "tag=", &v) &&
              (c.tag = (int)v, true) &&
              field(p, "state=", c.state, sizeof c.state) &&
              field(p, "status=", c.status, sizeof c.status) &&
              field_i64(p, "posted=", &c.posted) &&
              field_i64(p, "started=", &c.started) &&
              field_i64(p, "ended=", &c.ended) &&
              field(p, "algo=", c.algo, sizeof c.algo);
    if (!ok) {
      fprintf(stderr, "gang-flight: %s:%ld: malformed call line, skipped\n",
              src, lineno);
      bad_lines++;
      return;
    }
    GROW(g->calls, g->ncalls, g->cap);
    g->calls[g->ncalls++] = c;
    return;
  }
}

static int read_input(FILE *in, const char *src) {
  char *line = NULL;
  size_t cap = 0;
  long n = 0;
  while (getline(&line, &cap, in) >= 0)
    parse_line(line, src, ++n);
  free(line);
  return ferror(in) ? -1 : 0;
}

/* ---- Comparing the ranks of a gang -------------------------------------- */

typedef struct gview { /* one gang, every rank's latest record of it */
  const char *world;
  uint64_t ctx;
  int gsize;
  const int *ranks;
  const grec **by_rank; /* gang rank -> record (NULL: none) */
} gview;

static const call *find_seq(const grec *g, uint64_t seq) {
  for (size_t i = 0; i < g->ncalls; i++)
    if (g->calls[i].seq == seq)
      return &g->calls[i];
  return NULL;
}

/* Lowest and highest collective numbers kept; false when none. */
static bool seq_range(const grec *g, uint64_t *lo, uint64_t *hi) {
  bool any = false;
  for (size_t i = 0; i < g->ncalls; i++) {
    uint64_t s = g->calls[i].seq;
    if (s == 0)
      continue;
    if (!any || s < *lo)
      *lo = s;
    if (!any || s > *hi)
      *hi = s;
    any = true;
  }
  return any;
}

static bool finished_ok(const call *c) {
  return strcmp(c->state, "done") == 0 && strcmp(c->status, "OK") == 0;
}

static bool same_call(const call *a, const call *b) {
  return strcmp(a->kind, b->kind) == 0 && a->count == b->count &&
         strcmp(a->dtype, b->dtype) == 0 && strcmp(a->op, b->op) == 0 &&
         a->root == b->root;
}

/* "all_reduce 256 float32 sum", "broadcast 16 uint8 root 1", "barrier" */
static void describe(char *out, size_t cap, const call *c) {
  if (strcmp(c->kind, "barrier") == 0) {
    snprintf(out, cap, "barrier");
    return;
  }
  int n = snprintf(out, cap, "%s %" PRIu64 " %s", c->kind, c->count, c->dtype);
  if (n < 0 || (size_t)n >= cap)
    return;
  if (strcmp(c->kind, "all_reduce") == 0 ||
      strcmp(c->kind, "reduce_scatter") == 0)
    snprintf(out + n, cap - (size_t)n, " %s", c->op);
  else if (strcmp(c->kind, "broadcast") == 0)
    snprintf(out + n, cap - (size_t)n, " root %d", c->root);
  else if (strcmp(c->kind, "send") == 0 || strcmp(c->kind, "recv") == 0)
    snprintf(out + n, cap - (size_t)n, " %s %d tag %d",
             strcmp(c->kind, "send") == 0 ? "to" : "from", c->root, c->tag);
}

/* "done 12 us", "RUNNING 4.93 s", "TIMEOUT 1.00 s" (failed), "posted" */
static void describe_state(char *out, size_t cap, const call *c, int64_t now) {
  if (strcmp(c->state, "done") == 0) {
    double us = (double)(c->ended - c->started) / 1e3;
    bool ok = strcmp(c->status, "OK") == 0;
    const char *how = ok ? "done" : c->status;
    if (us < 10000)
      snprintf(out, cap, "%s %.0f us", how, us);
    else
      snprintf(out, cap, "%s %.2f s", how, us / 1e6);
  } else if (strcmp(c->state, "running") == 0) {
    snprintf(out, cap, "RUNNING %.2f s", (double)(now - c->started) / 1e9);
  } else {
    snprintf(out, cap, "posted, not started");
  }
}

static int rows_shown = 12;

/* One row per collective: the call, when every rank that posted it
 * agrees, then each rank's state; where they differ, each rank's call. */
#define CELL 96
static void print_table(const gview *v, uint64_t first, uint64_t last,
                        uint64_t at) {
  size_t rows = (size_t)(last - first + 1), cols = (size_t)v->gsize + 1;
  char(*cell)[CELL] = calloc(rows * cols, CELL);
  size_t *width = calloc(cols, sizeof *width);
  if (cell == NULL || width == NULL) {
    fprintf(stderr, "gang-flight: out of memory\n");
    exit(2);
  }
  for (size_t r = 0; r < rows; r++) {
    uint64_t s = first + r;
    const call *ref = NULL;
    bool differ = false;
    for (int k = 0; k < v->gsize; k++) {
      const call *c = v->by_rank[k] ? find_seq(v->by_rank[k], s) : NULL;
      if (c != NULL && ref != NULL && !same_call(ref, c))
        differ = true;
      if (c != NULL && ref == NULL)
        ref = c;
    }
    char *head = cell[r * cols];
    if (differ)
      snprintf(head, CELL, "(ranks differ)");
    else if (ref != NULL)
      describe(head, CELL, ref);
    for (int k = 0; k < v->gsize; k++) {
      const grec *g = v->by_rank[k];
      const call *c = g ? find_seq(g, s) : NULL;
      char *o = cell[r * cols + (size_t)k + 1];
      uint64_t lo = 0, hi = 0;
      if (g == NULL) {
        snprintf(o, CELL, "(no record)");
      } else if (c != NULL) {
        char d[160], st[32];
        describe_state(st, sizeof st, c, g->dump_mono);
        describe(d, sizeof d, c);
        if (differ)
          snprintf(o, CELL, "%.60s: %s", d, st);
        else
          snprintf(o, CELL, "%s", st);
      } else if (seq_range(g, &lo, &hi) && s < lo) {
        snprintf(o, CELL, "(out of its ring)");
      } else {
        snprintf(o, CELL, "- not posted");
      }
    }
  }
  for (size_t r = 0; r < rows; r++)
    for (size_t k = 0; k < cols; k++)
      if (strlen(cell[r * cols + k]) > width[k])
        width[k] = strlen(cell[r * cols + k]);
  if (width[0] < 4)
    width[0] = 4;
  char h[48];
  printf("   %6s | %-*s", "#", (int)width[0], "call");
  for (int k = 0; k < v->gsize; k++) {
    snprintf(h, sizeof h, "rank %d", v->ranks[k]);
    if (strlen(h) > width[k + 1])
      width[k + 1] = strlen(h);
    printf(" | %-*s", (int)width[k + 1], h);
  }
  printf("\n");
  for (size_t r = 0; r < rows; r++) {
    printf("%s %6" PRIu64, first + r == at ? "=>" : "  ", first + r);
    for (size_t k = 0; k < cols; k++)
      printf(" | %-*s", (int)width[k], cell[r * cols + k]);
    printf("\n");
  }
  free(cell);
  free(width);
}

/* Prints the gang and returns 0 if its ranks agree and finished. */
static int compare(const gview *v) {
  printf("\ngang %016" PRIx64 " of world %s: %d ranks (world ranks", v->ctx,
         v->world, v->gsize);
  for (int r = 0; r < v->gsize; r++)
    printf("%s%d", r ? "," : " ", v->ranks[r]);
  printf(")\n");
  int missing = 0;
  for (int r = 0; r < v->gsize; r++)
    if (v->by_rank[r] == NULL) {
      printf("  no record from gang rank %d (world rank %d): it wrote no dump "
             "(dead, stopped, or its dump is not among the inputs)\n",
             r, v->ranks[r]);
      missing++;
    }
  /* The window every recording rank still holds. */
  uint64_t from = 0, to = 0;
  bool any = false;
  for (int r = 0; r < v->gsize; r++) {
    uint64_t lo, hi;
    if (v->by_rank[r] == NULL || !seq_range(v->by_rank[r], &lo, &hi))
      continue;
    if (!any || lo > from)
      from = lo;
    if (!any || hi > to)
      to = hi;
    any = true;
  }
  if (!any) {
    printf("  no collective recorded\n");
    return missing > 0;
  }
  /* The first difference. */
  uint64_t at = 0;
  char verdict[4096] = "";
  for (uint64_t s = from; s <= to && at == 0; s++) {
    const call *ref = NULL;
    int ref_rank = -1;
    size_t o = 0;
    for (int r = 0; r < v->gsize && at == 0; r++) {
      const grec *g = v->by_rank[r];
      if (g == NULL)
        continue;
      const call *c = find_seq(g, s);
      if (c == NULL) {
        uint64_t lo = 0, hi = 0;
        bool has = seq_range(g, &lo, &hi);
        const call *last = has ? find_seq(g, hi) : NULL;
        char d[160] = "nothing", st[64] = "";
        if (last != NULL) {
          describe(d, sizeof d, last);
          describe_state(st, sizeof st, last, g->dump_mono);
        }
        at = s;
        o += (size_t)snprintf(verdict + o, sizeof verdict - o,
                              "gang rank %d (world rank %d) never posted "
                              "collective #%" PRIu64 "; its last is #%" PRIu64
                              " %s, %s",
                              r, v->ranks[r], s, hi, d, st);
        continue;
      }
      if (ref == NULL) {
        ref = c;
        ref_rank = r;
      } else if (!same_call(ref, c)) {
        char a[160], b[160];
        describe(a, sizeof a, ref);
        describe(b, sizeof b, c);
        at = s;
        snprintf(verdict, sizeof verdict,
                 "ranks disagree on collective #%" PRIu64
                 ": gang rank %d (world rank %d) called %s, gang rank %d "
                 "(world rank %d) %s",
                 s, ref_rank, v->ranks[ref_rank], a, r, v->ranks[r], b);
      }
    }
  }
  /* Without a difference: the first call not finished everywhere. */
  for (uint64_t s = from; s <= to && at == 0; s++)
    for (int r = 0; r < v->gsize && at == 0; r++) {
      const grec *g = v->by_rank[r];
      const call *c = g ? find_seq(g, s) : NULL;
      if (c != NULL && !finished_ok(c)) {
        char d[160], st[64];
        describe(d, sizeof d, c);
        describe_state(st, sizeof st, c, g->dump_mono);
        at = s;
        snprintf(verdict, sizeof verdict,
                 "every rank posted the same calls; the first not finished "
                 "everywhere is #%" PRIu64 " %s: %s on gang rank %d (world "
                 "rank %d)",
                 s, d, st, r, v->ranks[r]);
      }
    }
  /* The table: the rows up to the first difference (or the last ones). */
  uint64_t last_row = at ? (at + 2 < to ? at + 2 : to) : to;
  uint64_t first_row = last_row + 1 > (uint64_t)rows_shown
                           ? last_row + 1 - (uint64_t)rows_shown
                           : 1;
  if (first_row < from)
    first_row = from;
  print_table(v, first_row, last_row, at);
  /* Sends and receives not finished. */
  for (int r = 0; r < v->gsize; r++) {
    const grec *g = v->by_rank[r];
    for (size_t i = 0; g != NULL && i < g->ncalls; i++) {
      const call *c = &g->calls[i];
      if (c->seq != 0 || finished_ok(c))
        continue;
      char d[160], st[64];
      describe(d, sizeof d, c);
      describe_state(st, sizeof st, c, g->dump_mono);
      printf("  gang rank %d: %s, %s\n", r, d, st);
    }
  }
  if (at != 0) {
    printf("  first difference: %s\n", verdict);
    return 1;
  }
  printf("  every rank posted the same %" PRIu64 " collectives (#%" PRIu64
         "-#%" PRIu64 " kept) and finished them\n",
         to - from + 1, from, to);
  return missing > 0;
}

/* The latest complete dump of each process. */
static bool latest(const dump *d) {
  if (!d->complete)
    return false;
  for (size_t i = 0; i < ndumps; i++) {
    const dump *e = &dumps[i];
    if (e != d && e->complete && e->pid == d->pid &&
        strcmp(e->host, d->host) == 0 && e->real > d->real)
      return false;
  }
  return true;
}

static void usage(FILE *o) {
  fprintf(o,
          "usage: gang-flight [--rows N] [FILE...]\n"
          "Reads flight recorder dumps (GANG_FLIGHT_DUMP files, or logs with\n"
          "gang-flight lines; '-' or none: standard input), prints each "
          "gang's\n"
          "recent collectives side by side per rank and the first where "
          "they\n"
          "differ. --rows N: table rows per gang (default 12).\n"
          "Exit: 0 all agree and finished, 1 a difference or unfinished "
          "call,\n"
          "2 bad usage or input.\n");
}

int main(int argc, char **argv) {
  int nfiles = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--rows") == 0) {
      char *end;
      long n = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || *end != '\0' || n < 1 || n > 1000000) {
        fprintf(stderr, "gang-flight: --rows needs a number from 1 to "
                        "1000000, e.g. --rows 40\n");
        return 2;
      }
      rows_shown = (int)n;
      i++;
      continue;
    }
    nfiles++;
    FILE *in = strcmp(argv[i], "-") == 0 ? stdin : fopen(argv[i], "r");
    if (in == NULL) {
      fprintf(stderr, "gang-flight: cannot read %s: %s\n", argv[i],
              strerror(errno));
      return 2;
    }
    int rc = read_input(in, argv[i]);
    if (in != stdin)
      fclose(in);
    if (rc != 0) {
      fprintf(stderr, "gang-flight: error reading %s\n", argv[i]);
      return 2;
    }
  }
  if (nfiles == 0 && read_input(stdin, "stdin") != 0)
    return 2;
  size_t used = 0;
  for (size_t i = 0; i < ndumps; i++)
    used += latest(&dumps[i]);
  if (used == 0) {
    fprintf(stderr, "gang-flight: no complete dump in the input (lines from "
                    "\"gang-flight begin\" to \"gang-flight end\"; set "
                    "GANG_FLIGHT on the ranks)\n");
    return 2;
  }
  printf("%zu dumps (the latest of each process):\n", used);
  for (size_t i = 0; i < ndumps; i++)
    if (latest(&dumps[i]))
      printf("  world rank %d, %s pid %d: %.160s\n", dumps[i].rank,
             dumps[i].host, dumps[i].pid, dumps[i].reason);
  /* Each gang once: (world, ctx), in the order first seen. */
  int rc = 0;
  for (size_t i = 0; i < ndumps; i++) {
    if (!latest(&dumps[i]))
      continue;
    for (size_t j = 0; j < dumps[i].ngangs; j++) {
      const grec *g = &dumps[i].gangs[j];
      bool seen = false;
      for (size_t a = 0; a <= i && !seen; a++) {
        if (!latest(&dumps[a]))
          continue;
        size_t lim = a == i ? j : dumps[a].ngangs;
        for (size_t b = 0; b < lim && !seen; b++)
          seen = dumps[a].gangs[b].ctx == g->ctx &&
                 strcmp(dumps[a].gangs[b].world, g->world) == 0;
      }
      if (seen)
        continue;
      gview v = {g->world, g->ctx, g->gsize, g->ranks,
                 calloc((size_t)g->gsize, sizeof(grec *))};
      for (size_t a = 0; a < ndumps; a++) {
        if (!latest(&dumps[a]))
          continue;
        for (size_t b = 0; b < dumps[a].ngangs; b++) {
          const grec *h = &dumps[a].gangs[b];
          if (h->ctx == g->ctx && strcmp(h->world, g->world) == 0 &&
              h->gsize == g->gsize)
            v.by_rank[h->grank] = h;
        }
      }
      rc |= compare(&v);
      free(v.by_rank);
    }
  }
  for (size_t i = 0; i < ndumps; i++) {
    for (size_t j = 0; j < dumps[i].ngangs; j++) {
      free(dumps[i].gangs[j].ranks);
      free(dumps[i].gangs[j].calls);
    }
    free(dumps[i].gangs);
  }
  free(dumps);
  if (bad_lines > 0)
    fprintf(stderr, "gang-flight: %d malformed lines skipped\n", bad_lines);
  return rc ? 1 : 0;
}
