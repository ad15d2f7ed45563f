/* Slurm hostlist expansion. srun hands every task SLURM_JOB_NODELIST in
 * Slurm's compressed form ("node[01-04,07],gpu3"); the first host is the
 * rendezvous master, as fairseq takes it from `scontrol show hostnames`.
 * We expand it ourselves so a task needs neither scontrol nor a Slurm
 * library. The input comes from the environment, so the parser treats it as
 * hostile: every count is checked against a cap before anything is
 * allocated, and nothing recurses.
 *
 * Grammar (docs/launcher.md):
 *   list   := item ("," item)*
 *   item   := (text | "[" ranges "]")+       -- text: no "[", "]", ",", space
 *   ranges := range ("," range)*
 *   range  := num | num "-" num             -- lo <= hi; width of lo pads
 * Several brackets in one item form a cartesian product, the leftmost
 * varying slowest: "a[1-2]b[3-4]" is a1b3,a1b4,a2b3,a2b4. */
#include "launch/hostlist.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Longest number accepted in brackets: keeps values far from overflow. */
#define MAX_DIGITS 18

typedef struct range {
  uint64_t lo, hi;
  int width; /* digits of lo as written: "01" pads to 2 */
} range;

/* One bracket or one run of text inside an item. */
typedef struct segment {
  const char *text; /* literal: text[0..len) ; NULL for a bracket */
  size_t len;
  size_t first_range, num_ranges; /* bracket: into the item's ranges */
} segment;

typedef struct item {
  segment *segs;
  size_t nsegs, cap_segs;
  range *ranges;
  size_t nranges, cap_ranges;
  size_t count;    /* names this item expands to */
  size_t name_max; /* longest name it can produce */
} item;

static void item_free(item *it) {
  free(it->segs);
  free(it->ranges);
  memset(it, 0, sizeof *it);
}

static gang_status grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return GANG_OK;
  size_t n = *cap ? *cap * 2 : 4;
  while (n < need)
    n *= 2;
  void *q = realloc(*p, n * elem);
  if (q == NULL)
    return gang__error(GANG_NO_MEMORY, "hostlist: out of memory");
  *p = q;
  *cap = n;
  return GANG_OK;
}

static int digits_of(uint64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    d++;
  }
  return d;
}

static int is_text_char(char c) {
  return c != '[' && c != ']' && c != ',' && c != '\0' &&
         !isspace((unsigned char)c) && !iscntrl((unsigned char)c);
}

/* Parses a number at *p (1..MAX_DIGITS digits). */
static gang_status parse_num(const char *what, const char *expr, const char **p,
                             uint64_t *v, int *width) {
  const char *s = *p;
  uint64_t x = 0;
  int n = 0;
  while (isdigit((unsigned char)s[n])) {
    if (n == MAX_DIGITS)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': number at offset %d has more than %d digits",
                         what, expr, (int)(s - expr), MAX_DIGITS);
    x = x * 10 + (uint64_t)(s[n] - '0');
    n++;
  }
  if (n == 0)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s='%s': expected a number at offset %d", what, expr,
                       (int)(s - expr));
  *v = x;
  *width = n;
  *p = s + n;
  return GANG_OK;
}

/* Parses "ranges]" after a '[' at *p; appends a bracket segment. */
static gang_status parse_bracket(const char *what, const char *expr,
                                 const char **p, size_t max_hosts, item *it,
                                 size_t *count, size_t *name_len) {
  const char *s = *p;
  size_t first = it->nranges;
  size_t total = 0;
  int longest = 0;
  for (;;) {
    range r;
    uint64_t hi;
    int hw;
    GANG_CHECK(parse_num(what, expr, &s, &r.lo, &r.width));
    r.hi = r.lo;
    hw = r.width;
    if (*s == '-') {
      s++;
      GANG_CHECK(parse_num(what, expr, &s, &hi, &hw));
      if (hi < r.lo)
        return gang__error(GANG_INVALID_ARGUMENT,
                           "%s='%s': reversed range %" PRIu64 "-%" PRIu64
                           " at offset %d",
                           what, expr, r.lo, hi, (int)(s - expr));
      r.hi = hi;
    }
    /* Count this range, refusing before it can exceed the cap. */
    uint64_t n = r.hi - r.lo + 1;
    if (n > max_hosts || total + n > max_hosts)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': expands to more than %zu hosts", what, expr,
                         max_hosts);
    total += (size_t)n;
    int w = digits_of(r.hi) > r.width ? digits_of(r.hi) : r.width;
    if (w > longest)
      longest = w;
    (void)hw;
    GANG_CHECK(grow((void **)&it->ranges, &it->cap_ranges, it->nranges + 1,
                    sizeof(range)));
    it->ranges[it->nranges++] = r;
    if (*s == ',') {
      s++;
      continue;
    }
    if (*s == ']') {
      s++;
      break;
    }
    if (*s == '[')
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': nested '[' at offset %d", what, expr,
                         (int)(s - expr));
    if (*s == '\0')
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': unbalanced '[' (no closing ']')", what,
                         expr);
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s='%s': unexpected '%c' in brackets at offset %d",
                       what, expr, *s, (int)(s - expr));
  }
  GANG_CHECK(
      grow((void **)&it->segs, &it->cap_segs, it->nsegs + 1, sizeof(segment)));
  it->segs[it->nsegs++] = (segment){NULL, 0, first, it->nranges - first};
  *count = total;
  *name_len = (size_t)longest;
  *p = s;
  return GANG_OK;
}

/* Parses one item starting at *p, stopping at a top-level ',' or the end. */
static gang_status parse_item(const char *what, const char *expr,
                              const char **p, size_t max_hosts, item *it) {
  const char *s = *p;
  size_t count = 1, len = 0;
  while (*s != '\0' && *s != ',') {
    if (*s == '[') {
      s++;
      size_t n = 0, w = 0;
      GANG_CHECK(parse_bracket(what, expr, &s, max_hosts, it, &n, &w));
      /* count * n <= max_hosts, checked without overflow. */
      if (n != 0 && count > max_hosts / n)
        return gang__error(GANG_INVALID_ARGUMENT,
                           "%s='%s': expands to more than %zu hosts", what,
                           expr, max_hosts);
      count *= n;
      len += w;
    } else if (*s == ']') {
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': unbalanced ']' at offset %d", what, expr,
                         (int)(s - expr));
    } else if (is_text_char(*s)) {
      const char *t = s;
      while (is_text_char(*s))
        s++;
      GANG_CHECK(grow((void **)&it->segs, &it->cap_segs, it->nsegs + 1,
                      sizeof(segment)));
      it->segs[it->nsegs++] = (segment){t, (size_t)(s - t), 0, 0};
      len += (size_t)(s - t);
    } else {
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': invalid character 0x%02x at offset %d", what,
                         expr, (unsigned char)*s, (int)(s - expr));
    }
    if (len > GANG__HOST_NAME_MAX)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': host name longer than %d characters", what,
                         expr, GANG__HOST_NAME_MAX);
  }
  if (it->nsegs == 0)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s='%s': empty host name at offset %d", what, expr,
                       (int)(s - expr));
  it->count = count;
  it->name_max = len;
  *p = s;
  return GANG_OK;
}

/* Writes the name for the odometer position `pos` (one index per bracket,
 * each a (range, value) pair) into buf (>= name_max + 1 bytes). */
static void format_name(const item *it, const uint64_t *val, char *buf) {
  size_t o = 0, b = 0;
  for (size_t i = 0; i < it->nsegs; i++) {
    const segment *sg = &it->segs[i];
    if (sg->text != NULL) {
      memcpy(buf + o, sg->text, sg->len);
      o += sg->len;
    } else {
      const range *r = &it->ranges[sg->first_range + val[2 * b]];
      o += (size_t)sprintf(buf + o, "%0*" PRIu64, r->width, val[2 * b + 1]);
      b++;
    }
  }
  buf[o] = '\0';
}

/* Advances the odometer (rightmost bracket fastest); returns 0 on wrap. */
static int advance(const item *it, uint64_t *val) {
  size_t nb = 0;
  for (size_t i = 0; i < it->nsegs; i++)
    nb += it->segs[i].text == NULL;
  size_t b = nb;
  for (size_t i = it->nsegs; i-- > 0;) {
    const segment *sg = &it->segs[i];
    if (sg->text != NULL)
      continue;
    b--;
    uint64_t *ri = &val[2 * b], *v = &val[2 * b + 1];
    const range *r = &it->ranges[sg->first_range + *ri];
    if (*v < r->hi) {
      (*v)++;
      return 1;
    }
    if (*ri + 1 < sg->num_ranges) {
      (*ri)++;
      *v = it->ranges[sg->first_range + *ri].lo;
      return 1;
    }
    *ri = 0;
    *v = it->ranges[sg->first_range].lo;
  }
  return 0;
}

/* Parses the whole expression. If `out` is non-NULL, expands every name
 * into it; if `first` is non-NULL, writes only the first name there. */
static gang_status expand(const char *what, const char *expr, size_t max_hosts,
                          gang__hostlist *out, char *first, size_t cap) {
  if (expr == NULL)
    return gang__error(GANG_INVALID_ARGUMENT, "%s: not set", what);
  if (max_hosts == 0)
    max_hosts = GANG__HOSTLIST_MAX;
  /* Trim surrounding whitespace without copying. */
  const char *s = expr;
  while (isspace((unsigned char)*s))
    s++;
  size_t end = strlen(s);
  while (end > 0 && isspace((unsigned char)s[end - 1]))
    end--;
  if (end == 0)
    return gang__error(GANG_INVALID_ARGUMENT, "%s='%s': empty host list", what,
                       expr);
  char *text = strndup(s, end);
  if (text == NULL)
    return gang__error(GANG_NO_MEMORY, "hostlist: out of memory");

  gang_status st = GANG_OK;
  item *items = NULL;
  size_t nitems = 0, cap_items = 0, total = 0;
  const char *p = text;
  for (;;) {
    GANG_CHECK_GOTO(grow((void **)&items, &cap_items, nitems + 1, sizeof(item)),
                    st, done);
    memset(&items[nitems], 0, sizeof(item));
    nitems++;
    GANG_CHECK_GOTO(parse_item(what, text, &p, max_hosts, &items[nitems - 1]),
                    st, done);
    if (items[nitems - 1].count > max_hosts - total) {
      st = gang__error(GANG_INVALID_ARGUMENT,
                       "%s='%s': expands to more than %zu hosts", what, text,
                       max_hosts);
      goto done;
    }
    total += items[nitems - 1].count;
    if (*p == '\0')
      break;
    p++; /* ',' */
    if (*p == '\0') {
      st = gang__error(GANG_INVALID_ARGUMENT, "%s='%s': trailing ','", what,
                       text);
      goto done;
    }
  }

  uint64_t *val = NULL;
  char name[GANG__HOST_NAME_MAX + 1];
  if (first != NULL) {
    /* The first name of the first item: every bracket at its first value. */
    item *it = &items[0];
    val = calloc(2 * it->nsegs + 1, sizeof *val);
    if (val == NULL) {
      st = gang__error(GANG_NO_MEMORY, "hostlist: out of memory");
      goto done;
    }
    for (size_t i = 0, b = 0; i < it->nsegs; i++)
      if (it->segs[i].text == NULL)
        val[2 * b++ + 1] = it->ranges[it->segs[i].first_range].lo;
    format_name(it, val, name);
    free(val);
    if (strlen(name) >= cap) {
      st = gang__error(GANG_INVALID_ARGUMENT,
                       "%s: first host '%s' is longer than %zu characters",
                       what, name, cap - 1);
      goto done;
    }
    strcpy(first, name);
    goto done;
  }

  gang__hostlist list = {0, calloc(total, sizeof(char *))};
  if (list.hosts == NULL) {
    st = gang__error(GANG_NO_MEMORY, "hostlist: out of memory (%zu hosts)",
                     total);
    goto done;
  }
  for (size_t k = 0; k < nitems && st == GANG_OK; k++) {
    item *it = &items[k];
    val = calloc(2 * it->nsegs + 1, sizeof *val);
    if (val == NULL) {
      st = gang__error(GANG_NO_MEMORY, "hostlist: out of memory");
      break;
    }
    for (size_t i = 0, b = 0; i < it->nsegs; i++)
      if (it->segs[i].text == NULL)
        val[2 * b++ + 1] = it->ranges[it->segs[i].first_range].lo;
    do {
      format_name(it, val, name);
      list.hosts[list.n] = strdup(name);
      if (list.hosts[list.n] == NULL) {
        st = gang__error(GANG_NO_MEMORY, "hostlist: out of memory");
        break;
      }
      list.n++;
    } while (advance(it, val));
    free(val);
  }
  if (st == GANG_OK)
    *out = list;
  else
    gang__hostlist_free(&list);

done:
  for (size_t k = 0; k < nitems; k++)
    item_free(&items[k]);
  free(items);
  free(text);
  return st;
}

gang_status gang__hostlist_expand(const char *what, const char *expr,
                                  size_t max_hosts, gang__hostlist *out) {
  return expand(what, expr, max_hosts, out, NULL, 0);
}

gang_status gang__hostlist_first(const char *what, const char *expr, char *buf,
                                 size_t cap) {
  return expand(what, expr, 0, NULL, buf, cap);
}

void gang__hostlist_free(gang__hostlist *list) {
  if (list == NULL)
    return;
  for (size_t i = 0; i < list->n; i++)
    free(list->hosts[i]);
  free(list->hosts);
  list->hosts = NULL;
  list->n = 0;
}

gang_status gang__tasks_per_node(const char *what, const char *text, int index,
                                 int *count) {
  if (text == NULL || *text == '\0')
    return gang__error(GANG_INVALID_ARGUMENT, "%s: empty", what);
  if (index < 0)
    return gang__error(GANG_INVALID_ARGUMENT, "%s: node index %d is negative",
                       what, index);
  const char *s = text;
  int64_t seen = 0;
  for (;;) {
    uint64_t n, rep = 1;
    int w;
    GANG_CHECK(parse_num(what, text, &s, &n, &w));
    if (*s == '(') {
      if (s[1] != 'x')
        return gang__error(GANG_INVALID_ARGUMENT,
                           "%s='%s': expected '(xN)' at offset %d", what, text,
                           (int)(s - text));
      s += 2;
      GANG_CHECK(parse_num(what, text, &s, &rep, &w));
      if (*s != ')')
        return gang__error(GANG_INVALID_ARGUMENT,
                           "%s='%s': expected ')' at offset %d", what, text,
                           (int)(s - text));
      s++;
    }
    if (n == 0 || n > 0x7fffffff || rep == 0)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': task count out of range", what, text);
    if ((uint64_t)index - (uint64_t)seen < rep) {
      /* Validate the rest so garbage after the entry is still refused. */
      while (*s != '\0' && (isdigit((unsigned char)*s) || *s == ',' ||
                            *s == '(' || *s == 'x' || *s == ')'))
        s++;
      if (*s != '\0')
        return gang__error(GANG_INVALID_ARGUMENT,
                           "%s='%s': unexpected '%c' at offset %d", what, text,
                           *s, (int)(s - text));
      *count = (int)n;
      return GANG_OK;
    }
    seen += (int64_t)rep;
    if (*s == '\0')
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': has %" PRId64 " nodes, no entry for node %d",
                         what, text, seen, index);
    if (*s != ',')
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s': unexpected '%c' at offset %d", what, text,
                         *s, (int)(s - text));
    s++;
  }
}
