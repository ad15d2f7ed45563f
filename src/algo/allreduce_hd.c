/* Recursive halving-doubling all_reduce (Rabenseifner's): a reduce_scatter
 * by recursive halving -- at each of lg p2 steps a rank swaps half of what
 * it still holds with the partner whose rank differs in one bit and
 * reduces the half it keeps -- then an all_gather by recursive doubling of
 * the reduced blocks. The p - p2 ranks past the largest power of two p2
 * first fold their buffer into a partner below p2 and get the result back
 * at the end, as in recursive doubling. Cost 2 lg p2 alpha + 2 (p2-1)/p2
 * n beta (+ 2 alpha + 2 n beta for the folded ranks): the ring's bytes in
 * lg p steps instead of p - 1 (docs/algorithms.md).
 *
 * Swaps move in pieces of at most HD_PIECE bytes, each received into
 * scratch and reduced before the next, so the scratch stays HD_PIECE. The
 * lower rank's data is the first operand of every reduce, and each block
 * is reduced by one rank and then copied, so all ranks end with
 * bit-identical results. */
#include "algo.h"

#include <string.h>

#include "core/error.h"
#include "core/reduce.h"

#define TAG_FOLD 0u
#define TAG_HALVE 1u
#define TAG_DOUBLE 100u
#define TAG_UNFOLD 1000u
#define HD_PIECE ((size_t)4 << 20)

/* Sends scount elements at s to partner while receiving rcount of its
 * elements, piece by piece, each reduced into r (the same offsets). */
static gang_status swap_reduce(algo_ctx *a, int partner, const char *s,
                               size_t scount, char *r, size_t rcount, void *tmp,
                               gang_dtype dt, gang_reduce_op op, uint32_t tag) {
  size_t es = gang_dtype_size(dt), per = HD_PIECE / es;
  size_t most = scount > rcount ? scount : rcount;
  for (size_t done = 0; done < most; done += per) {
    size_t sn = done < scount ? (scount - done < per ? scount - done : per) : 0;
    size_t rn = done < rcount ? (rcount - done < per ? rcount - done : per) : 0;
    GANG_CHECK(gang__algo_sendrecv(a, sn ? partner : -1, s + done * es, sn * es,
                                   rn ? partner : -1, tmp, rn * es, tag));
    if (rn) {
      char *piece = r + done * es;
      if (a->rank < partner)
        gang__reduce3(piece, piece, tmp, rn, dt, op);
      else
        gang__reduce3(piece, tmp, piece, rn, dt, op);
    }
  }
  return GANG_OK;
}

/* Where blocks [lo, hi) of a halving lie (first element, elements). */
typedef void (*range_fn)(const void *arg, int lo, int hi, size_t *off,
                         size_t *len);

/* The halving: lg p2 steps, each swapping with the partner whose rank
 * differs in one bit the half of [lo, hi) on its side, and reducing the
 * half kept; rank r < p2 ends holding the reduced block r. */
static gang_status halve(algo_ctx *a, char *buf, int p2, range_fn range,
                         const void *arg, void *tmp, gang_dtype dt,
                         gang_reduce_op op) {
  size_t es = gang_dtype_size(dt);
  int r = a->rank, lo = 0, hi = p2;
  uint32_t step = 0;
  for (int mask = p2 / 2; mask >= 1; mask /= 2, step++) {
    int mid = lo + (hi - lo) / 2, partner = r ^ mask;
    int klo = r & mask ? mid : lo, khi = r & mask ? hi : mid;
    int slo = r & mask ? lo : mid, shi = r & mask ? mid : hi;
    size_t ko, kl, so, sl;
    range(arg, klo, khi, &ko, &kl);
    range(arg, slo, shi, &so, &sl);
    GANG_CHECK(swap_reduce(a, partner, buf + so * es, sl, buf + ko * es, kl,
                           tmp, dt, op, TAG_HALVE + step));
    lo = klo;
    hi = khi;
  }
  return GANG_OK;
}

/* all_reduce's blocks: count elements in p2 nearly equal blocks. */
typedef struct even {
  size_t count;
  int parts;
} even;

static void even_range(const void *arg, int lo, int hi, size_t *off,
                       size_t *len) {
  const even *e = arg;
  gang__algo_span(e->count, e->parts, lo, hi, off, len);
}

gang_status gang__algo_allreduce_hd(algo_ctx *a, const algo_call *k) {
  char *buf = k->out;
  size_t count = k->count;
  gang_dtype dt = k->dtype;
  gang_reduce_op op = k->op;
  int p = a->size, r = a->rank;
  if (p == 1 || count == 0)
    return GANG_OK;
  size_t es = gang_dtype_size(dt), bytes = count * es;
  int p2 = 1;
  while (p2 * 2 <= p)
    p2 *= 2;
  int extra = p - p2;
  void *tmp;
  GANG_CHECK(gang__algo_scratch(a, bytes < HD_PIECE ? bytes : HD_PIECE, &tmp));
  if (r >= p2) {
    GANG_CHECK(
        swap_reduce(a, r - p2, buf, count, NULL, 0, tmp, dt, op, TAG_FOLD));
    return gang__algo_sendrecv(a, -1, NULL, 0, r - p2, buf, bytes, TAG_UNFOLD);
  }
  if (r < extra)
    GANG_CHECK(
        swap_reduce(a, r + p2, NULL, 0, buf, count, tmp, dt, op, TAG_FOLD));
  /* Halving: keep the half of [lo, hi) on this rank's side of the bit. */
  GANG_CHECK(halve(a, buf, p2, even_range, &(even){count, p2}, tmp, dt, op));
  /* Doubling: swap the reduced blocks held for the partner's. */
  uint32_t step = 0;
  for (int mask = 1; mask < p2; mask *= 2, step++) {
    int base = r & ~(2 * mask - 1); /* the pair's 2 * mask blocks */
    int mine = r & mask ? base + mask : base;
    int theirs = r & mask ? base : base + mask;
    size_t mo, ml, to, tl;
    gang__algo_span(count, p2, mine, mine + mask, &mo, &ml);
    gang__algo_span(count, p2, theirs, theirs + mask, &to, &tl);
    GANG_CHECK(gang__algo_sendrecv(a, ml ? r ^ mask : -1, buf + mo * es,
                                   ml * es, tl ? r ^ mask : -1, buf + to * es,
                                   tl * es, TAG_DOUBLE + step));
  }
  if (r < extra)
    GANG_CHECK(
        gang__algo_sendrecv(a, r + p2, buf, bytes, -1, NULL, 0, TAG_UNFOLD));
  return GANG_OK;
}

/* Recursive halving reduce_scatter: the halving half of the above on a
 * copy of the input, whose p blocks of `count` elements are laid out in p2
 * groups: group j holds block j and, for j < p - p2, block j + p2 (the
 * block of the rank that folds into rank j). Group j starts at element
 * count * (j + min(j, p - p2)). A rank past p2 sends its whole copy to its
 * partner and gets its block back at the end. Cost lg p2 alpha +
 * (p2-1)/p2 N beta for N = p blocks, + 2 alpha + N beta for the fold, and
 * the halving's reduces (docs/algorithms.md). */
static size_t group_at(size_t count, int extra, int j) {
  return count * (size_t)(j + (j < extra ? j : extra));
}

typedef struct groups {
  size_t count;
  int extra;
} groups;

static void group_range(const void *arg, int lo, int hi, size_t *off,
                        size_t *len) {
  const groups *g = arg;
  *off = group_at(g->count, g->extra, lo);
  *len = group_at(g->count, g->extra, hi) - *off;
}

gang_status gang__algo_reduce_scatter_halving(algo_ctx *a, const algo_call *k) {
  size_t count = k->count;
  gang_dtype dt = k->dtype;
  gang_reduce_op op = k->op;
  int p = a->size, r = a->rank;
  size_t es = gang_dtype_size(dt), bytes = count * es;
  if (bytes == 0)
    return GANG_OK;
  size_t total = count * (size_t)p;
  if (p == 1) {
    memcpy(k->out, k->in, bytes);
    return GANG_OK;
  }
  int p2 = 1;
  while (p2 * 2 <= p)
    p2 *= 2;
  int extra = p - p2;
  char *stage;
  void *tmp;
  GANG_CHECK(gang__algo_stage(a, total * es, (void **)&stage));
  GANG_CHECK(gang__algo_scratch(
      a, total * es < HD_PIECE ? total * es : HD_PIECE, &tmp));
  const char *in = k->in;
  for (int j = 0; j < p2; j++) {
    memcpy(stage + group_at(count, extra, j) * es, in + (size_t)j * bytes,
           bytes);
    if (j < extra)
      memcpy(stage + (group_at(count, extra, j) + count) * es,
             in + (size_t)(j + p2) * bytes, bytes);
  }
  if (r >= p2) {
    GANG_CHECK(
        swap_reduce(a, r - p2, stage, total, NULL, 0, tmp, dt, op, TAG_FOLD));
    return gang__algo_sendrecv(a, -1, NULL, 0, r - p2, k->out, bytes,
                               TAG_UNFOLD);
  }
  if (r < extra)
    GANG_CHECK(
        swap_reduce(a, r + p2, NULL, 0, stage, total, tmp, dt, op, TAG_FOLD));
  GANG_CHECK(
      halve(a, stage, p2, group_range, &(groups){count, extra}, tmp, dt, op));
  char *mine = stage + group_at(count, extra, r) * es;
  memcpy(k->out, mine, bytes);
  if (r < extra)
    GANG_CHECK(gang__algo_sendrecv(a, r + p2, mine + bytes, bytes, -1, NULL, 0,
                                   TAG_UNFOLD));
  return GANG_OK;
}
