/* The process-group gang with real processes: every collective
 * against a sequential reference computed in the test, for world sizes
 * {1,2,3,4,5,8}, counts {0,1,7,1000} (and large counts for the bandwidth
 * paths), every dtype and reduce op, on the world gang and on sub-gangs,
 * blocking and _post forms. Integer results are exact; float data are
 * small integers, so every reduction order gives the exact result too.
 * Before those: barriers that must not let a rank out before all are in,
 * and calls that take different paths on different ranks (blocking at
 * once, or queued behind posted ones) but must agree on their sequence.
 *
 * The transport is the test's argument (one ctest each):
 *   shm    ranks share this host: shared memory, single copy allowed;
 *   nocma  shared memory staged only, with 16 KiB staging buffers, so
 *          the large counts run many double-buffered steps;
 *   tcp    GANG_SHM_DISABLE=1: every byte over TCP (and each forced
 *          all_reduce algorithm), exchanges paced in pieces of 12289 bytes
 *          (GANG_TCP_PIECE), so large messages move in many pieces that
 *          split elements;
 *   mixed  GANG_HOST_ID makes even and odd ranks two hosts: the world and
 *          the reversed gang go over TCP, the odd/even halves over shm. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "harness/harness.h"

#include "core/reduce.h"
#include "gang/gang.h"
#include "gang/store.h"
#include "pg.h"

static int g_port;
static int g_round; /* a fresh store namespace per run */
static const char *g_mode = "shm";

/* Barrier rounds of check_barrier_order, and how many ranks entered each:
 * shared by the rank processes (mapped before they fork), zeroed per run. */
#define ORDER_ROUNDS 400
static _Atomic int *g_entered;

/* Value of element i on rank r for op, as a double (always a small
 * integer, exact in every dtype including float16/bfloat16 and int8). The
 * index enters through a residue modulo a large prime, so the values have
 * no short period: a block of the result misplaced by any offset (a
 * multiple of 3, an even one) shows. */
static double value(int r, size_t i, gang_reduce_op op) {
  int h = (int)((i * 40503u + 17u) % 1000003u);
  switch (op) {
  case GANG_PRODUCT:
    return (double)(1 + (r + h) % 2); /* 1 or 2 */
  case GANG_MIN:
  case GANG_MAX:
    return (double)((r * 7 + h) % 11);
  default:
    return (double)((r + 1) + h % 7); /* int8 SUM of 8 ranks: at most 84 */
  }
}

static void put(void *buf, size_t i, gang_dtype dt, double v) {
  switch (dt) {
  case GANG_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  case GANG_FLOAT64:
    ((double *)buf)[i] = v;
    break;
  case GANG_FLOAT16:
    ((uint16_t *)buf)[i] = gang__f32_to_f16((float)v);
    break;
  case GANG_BFLOAT16:
    ((uint16_t *)buf)[i] = gang__f32_to_bf16((float)v);
    break;
  case GANG_INT8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case GANG_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case GANG_INT16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  case GANG_INT32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case GANG_INT64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  case GANG_UINT32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  case GANG_UINT64:
    ((uint64_t *)buf)[i] = (uint64_t)v;
    break;
  case GANG_BOOL:
    ((uint8_t *)buf)[i] = v != 0;
    break;
  default:
    break;
  }
}

static double get(const void *buf, size_t i, gang_dtype dt) {
  switch (dt) {
  case GANG_FLOAT32:
    return ((const float *)buf)[i];
  case GANG_FLOAT64:
    return ((const double *)buf)[i];
  case GANG_FLOAT16:
    return gang__f16_to_f32(((const uint16_t *)buf)[i]);
  case GANG_BFLOAT16:
    return gang__bf16_to_f32(((const uint16_t *)buf)[i]);
  case GANG_INT8:
    return ((const int8_t *)buf)[i];
  case GANG_UINT8:
    return ((const uint8_t *)buf)[i];
  case GANG_INT16:
    return ((const int16_t *)buf)[i];
  case GANG_INT32:
    return ((const int32_t *)buf)[i];
  case GANG_INT64:
    return (double)((const int64_t *)buf)[i];
  case GANG_UINT32:
    return ((const uint32_t *)buf)[i];
  case GANG_UINT64:
    return (double)((const uint64_t *)buf)[i];
  case GANG_BOOL:
    return ((const uint8_t *)buf)[i];
  default:
    return NAN;
  }
}

/* The reference result over ranks 0..n-1 (the gang's ranks). */
static double expect(int n, size_t i, gang_reduce_op op, gang_dtype dt) {
  double acc = value(0, i, op);
  for (int r = 1; r < n; r++) {
    double v = value(r, i, op);
    switch (op) {
    case GANG_SUM:
    case GANG_MEAN:
      acc += v;
      break;
    case GANG_PRODUCT:
      acc *= v;
      break;
    case GANG_MIN:
      acc = v < acc ? v : acc;
      break;
    case GANG_MAX:
      acc = v > acc ? v : acc;
      break;
    }
  }
  if (dt == GANG_BOOL)
    return acc != 0;
  if (op == GANG_MEAN) {
    acc /= n;
    if (dt != GANG_FLOAT32 && dt != GANG_FLOAT64 && dt != GANG_FLOAT16 &&
        dt != GANG_BFLOAT16)
      acc = trunc(acc);
  }
  return acc;
}

static int close_enough(double got, double want, gang_dtype dt,
                        gang_reduce_op op) {
  if (op == GANG_MEAN && (dt == GANG_FLOAT16 || dt == GANG_BFLOAT16))
    return fabs(got - want) <= 0.02 * fabs(want) + 1e-3;
  if (op == GANG_MEAN && (dt == GANG_FLOAT32 || dt == GANG_FLOAT64))
    return fabs(got - want) <= 1e-5 * fabs(want) + 1e-6;
  return got == want;
}

static const gang_dtype all_dtypes[] = {
    GANG_FLOAT32, GANG_FLOAT64, GANG_FLOAT16, GANG_BFLOAT16,
    GANG_INT8,    GANG_UINT8,   GANG_INT16,   GANG_INT32,
    GANG_INT64,   GANG_UINT32,  GANG_UINT64,  GANG_BOOL};
static const gang_reduce_op all_ops[] = {GANG_SUM, GANG_MEAN, GANG_PRODUCT,
                                         GANG_MIN, GANG_MAX};

/* all_reduce and reduce_scatter, every dtype x op x count, on gang g whose
 * members hold the test data of "ranks" 0..size-1 (the gang rank). */
static void check_all_reduce(gang_t *g, size_t count, int use_post) {
  int r = gang_rank(g), n = gang_size(g);
  uint8_t *buf = malloc(count * 8 + 8);
  RCHECK(buf != NULL);
  for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
    for (size_t o = 0; o < 5; o++) {
      gang_dtype dt = all_dtypes[d];
      gang_reduce_op op = all_ops[o];
      /* int8 SUM of 8 ranks of (r+1+h%7) stays below 127; PRODUCT of 2s
       * reaches 2^8 = 256 for n = 8 and wraps in int8/uint8 alike in the
       * reference and the kernel only if both wrap: skip that case. */
      if (op == GANG_PRODUCT && n > 6 && (dt == GANG_INT8 || dt == GANG_UINT8))
        continue;
      for (size_t i = 0; i < count; i++)
        put(buf, i, dt, value(r, i, op));
      if (use_post) {
        gang_work *w = NULL;
        RCHECK_OK(gang_all_reduce_post(g, buf, count, dt, op, &w));
        RCHECK_OK(gang_work_wait(w, -1));
        gang_work_free(w);
      } else {
        RCHECK_OK(gang_all_reduce(g, buf, count, dt, op));
      }
      for (size_t i = 0; i < count; i++) {
        double got = get(buf, i, dt), want = expect(n, i, op, dt);
        if (!close_enough(got, want, dt, op)) {
          fprintf(stderr, "all_reduce %s %s count %zu [%zu]: got %g want %g\n",
                  gang_dtype_name(dt), gang_reduce_op_name(op), count, i, got,
                  want);
          _exit(1);
        }
      }
      /* reduce_scatter of the same kind of data: element i of block q is
       * value(rank, q * count + i); this rank gets block `r` reduced. */
      size_t es = gang_dtype_size(dt);
      uint8_t *rin = malloc(count * (size_t)n * es + 8);
      RCHECK(rin != NULL);
      for (size_t i = 0; i < count * (size_t)n; i++)
        put(rin, i, dt, value(r, i, op));
      if (use_post) {
        gang_work *w = NULL;
        RCHECK_OK(gang_reduce_scatter_post(g, buf, rin, count, dt, op, &w));
        RCHECK_OK(gang_work_wait(w, -1));
        gang_work_free(w);
      } else {
        RCHECK_OK(gang_reduce_scatter(g, buf, rin, count, dt, op));
      }
      for (size_t i = 0; i < count; i++) {
        size_t idx = (size_t)r * count + i;
        double got = get(buf, i, dt), want = expect(n, idx, op, dt);
        if (!close_enough(got, want, dt, op)) {
          fprintf(stderr,
                  "reduce_scatter %s %s count %zu [%zu]: got %g want %g\n",
                  gang_dtype_name(dt), gang_reduce_op_name(op), count, i, got,
                  want);
          _exit(1);
        }
      }
      free(rin);
    }
  }
  free(buf);
}

/* Runs a collective in its blocking or its _post + wait form. */
#define RUN(use_post, blocking, ...)                                           \
  do {                                                                         \
    if (use_post) {                                                            \
      gang_work *w_ = NULL;                                                    \
      RCHECK_OK(blocking##_post(__VA_ARGS__, &w_));                            \
      RCHECK_OK(gang_work_wait(w_, -1));                                       \
      gang_work_free(w_);                                                      \
    } else {                                                                   \
      RCHECK_OK(blocking(__VA_ARGS__));                                        \
    }                                                                          \
  } while (0)

/* Elements rank `src` sends rank `dst` in the all_to_all_v check. */
static size_t a2av_count(int src, int dst, size_t scale) {
  return (size_t)((src + 2 * dst) % 4) * scale;
}

static void check_others(gang_t *g, size_t count, int use_post) {
  int r = gang_rank(g), n = gang_size(g);
  /* broadcast from every root */
  int32_t *b = malloc((count + 1) * sizeof *b);
  for (int root = 0; root < n; root++) {
    for (size_t i = 0; i < count; i++)
      b[i] = r == root ? (int32_t)(root * 1000 + (int)i) : -1;
    RUN(use_post, gang_broadcast, g, b, count, GANG_INT32, root);
    for (size_t i = 0; i < count; i++)
      RCHECK(b[i] == (int32_t)(root * 1000 + (int)i));
  }
  /* all_gather, out of place and in place, and to a list */
  int64_t *in = malloc((count + 1) * sizeof *in);
  int64_t *out = malloc((count * (size_t)n + 1) * sizeof *out);
  for (size_t i = 0; i < count; i++)
    in[i] = r * 100000 + (int64_t)i;
  RUN(use_post, gang_all_gather, g, out, in, count, GANG_INT64);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      RCHECK(out[(size_t)q * count + i] == q * 100000 + (int64_t)i);
  memset(out, 0, (count * (size_t)n + 1) * sizeof *out);
  memcpy(out + (size_t)r * count, in, count * sizeof *in);
  RCHECK_OK(
      gang_all_gather(g, out, out + (size_t)r * count, count, GANG_INT64));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      RCHECK(out[(size_t)q * count + i] == q * 100000 + (int64_t)i);
  void *outs[8];
  for (int q = 0; q < n; q++)
    outs[q] = malloc((count + 1) * sizeof *in);
  RUN(use_post, gang_all_gather_to_list, g, outs, in, count, GANG_INT64);
  for (int q = 0; q < n; q++) {
    for (size_t i = 0; i < count; i++)
      RCHECK(((int64_t *)outs[q])[i] == q * 100000 + (int64_t)i);
    free(outs[q]);
  }
  /* reduce_scatter SUM: block q of rank r's input is r + q*1000 + i */
  float *rs_in = malloc((count * (size_t)n + 1) * sizeof *rs_in);
  float *rs_out = malloc((count + 1) * sizeof *rs_out);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      rs_in[(size_t)q * count + i] = (float)(r + q * 10 + (int)(i % 5));
  RCHECK_OK(
      gang_reduce_scatter(g, rs_out, rs_in, count, GANG_FLOAT32, GANG_SUM));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < n; q++)
      want += (float)(q + r * 10 + (int)(i % 5));
    RCHECK(rs_out[i] == want);
  }
  /* all_to_all: rank r sends block q = r*1000 + q*10 + i to rank q */
  int32_t *a_in = malloc((count * (size_t)n + 1) * sizeof *a_in);
  int32_t *a_out = malloc((count * (size_t)n + 1) * sizeof *a_out);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      a_in[(size_t)q * count + i] = r * 1000 + q * 10 + (int32_t)(i % 7);
  RUN(use_post, gang_all_to_all, g, a_out, a_in, count, GANG_INT32);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      RCHECK(a_out[(size_t)q * count + i] ==
             q * 1000 + r * 10 + (int32_t)(i % 7));
  /* all_to_all_v: rank src sends rank dst a2av_count(src, dst) elements,
   * element k being src * 1000 + dst * 10 + k % 7. */
  size_t scale = count ? count : 1, in_counts[8], out_counts[8];
  size_t tin = 0, tout = 0;
  for (int q = 0; q < n; q++) {
    in_counts[q] = a2av_count(r, q, scale);
    out_counts[q] = a2av_count(q, r, scale);
    tin += in_counts[q];
    tout += out_counts[q];
  }
  int32_t *v_in = malloc((tin + 1) * sizeof *v_in);
  int32_t *v_out = malloc((tout + 1) * sizeof *v_out);
  for (int q = 0, o = 0; q < n; q++)
    for (size_t k = 0; k < in_counts[q]; k++)
      v_in[o++] = r * 1000 + q * 10 + (int32_t)(k % 7);
  RUN(use_post, gang_all_to_all_v, g, v_out, out_counts, v_in, in_counts,
      GANG_INT32);
  for (int q = 0, o = 0; q < n; q++)
    for (size_t k = 0; k < out_counts[q]; k++)
      RCHECK(v_out[o++] == q * 1000 + r * 10 + (int32_t)(k % 7));
  free(v_in), free(v_out);
  if (use_post) {
    gang_work *w = NULL;
    RCHECK_OK(gang_barrier_post(g, &w));
    RCHECK_OK(gang_work_wait(w, -1));
    gang_work_free(w);
  } else {
    RCHECK_OK(gang_barrier(g));
  }
  free(b), free(in), free(out), free(rs_in), free(rs_out), free(a_in),
      free(a_out);
}

static void check_p2p_and_bytes(gang_t *g) {
  int r = gang_rank(g), n = gang_size(g);
  if (n > 1) {
    /* A ring exchange with posted receives and sends (would deadlock if
     * point-to-point ops were serialised). */
    int next = (r + 1) % n, prev = (r - 1 + n) % n;
    char sbuf[32], rbuf[32];
    snprintf(sbuf, sizeof sbuf, "from %d", r);
    gang_work *rw, *sw;
    RCHECK_OK(gang_recv_post(g, rbuf, sizeof rbuf, prev, 5, &rw));
    RCHECK_OK(gang_send_post(g, sbuf, sizeof sbuf, next, 5, &sw));
    RCHECK_OK(gang_work_wait(rw, -1));
    RCHECK_OK(gang_work_wait(sw, -1));
    gang_work_free(rw);
    gang_work_free(sw);
    char want[32];
    snprintf(want, sizeof want, "from %d", prev);
    RCHECK(strcmp(rbuf, want) == 0);
  }
  char text[64];
  snprintf(text, sizeof text, "rank %d says %.*s", r, r, "abcdefgh");
  void *data = r == n - 1 ? text : NULL;
  size_t len = r == n - 1 ? strlen(text) : 0;
  RCHECK_OK(gang_broadcast_bytes(g, &data, &len, n - 1));
  char want[64];
  snprintf(want, sizeof want, "rank %d says %.*s", n - 1, n - 1, "abcdefgh");
  RCHECK(len == strlen(want) && memcmp(data, want, len) == 0);
  if (r != n - 1)
    free(data);
  void **outs;
  size_t *lens;
  RCHECK_OK(gang_all_gather_bytes(g, text, strlen(text), &outs, &lens));
  for (int q = 0; q < n; q++) {
    snprintf(want, sizeof want, "rank %d says %.*s", q, q, "abcdefgh");
    RCHECK(lens[q] == strlen(want) && memcmp(outs[q], want, lens[q]) == 0);
  }
  gang_bytes_free(g, outs, lens);
}

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* No rank leaves a barrier before every rank has entered it. Each rank
 * counts itself in (in memory the rank processes share) just before the
 * barrier and checks the count right after it. Ranks arrive in a random
 * order, some after a sleep, and between barriers run small broadcasts
 * (whose root may run steps ahead of the readers), all_reduces and
 * all_gathers, chosen alike on every rank. */
static void check_barrier_order(gang_t *g) {
  int rank = gang_rank(g), size = gang_size(g);
  RCHECK(size <= 8); /* in and out below */
  uint64_t common = 0x9e3779b97f4a7c15ull;
  uint64_t mine = 0x2545f4914f6cdd1dull * (uint64_t)(rank + 1);
  int32_t in[8], out[8]; /* sizes up to 8 */
  for (int i = 0; i < ORDER_ROUNDS; i++) {
    int ncalls = (int)(xorshift(&common) % 3);
    for (int k = 0; k < ncalls; k++) {
      int what = (int)(xorshift(&common) % 3);
      int root = (int)(xorshift(&common) % (uint64_t)size);
      for (int j = 0; j < 8; j++)
        in[j] = rank * 100 + i + j;
      if (what == 0) {
        RCHECK_OK(gang_broadcast(g, in, 8, GANG_INT32, root));
        RCHECK(in[7] == root * 100 + i + 7);
      } else if (what == 1) {
        RCHECK_OK(gang_all_reduce(g, in, 1, GANG_INT32, GANG_MAX));
        RCHECK(in[0] == (size - 1) * 100 + i);
      } else {
        RCHECK_OK(gang_all_gather(g, out, in, 1, GANG_INT32));
        RCHECK(out[size - 1] == (size - 1) * 100 + i);
      }
    }
    uint64_t r = xorshift(&mine) % 1000;
    if (r < 5) {
      struct timespec ts = {0, (long)(xorshift(&mine) % 2000000)};
      nanosleep(&ts, NULL);
    } else if (r < 300) {
      volatile int spin = 0;
      for (int n = (int)(xorshift(&mine) % 20000); n > 0; n--)
        spin += n;
    }
    atomic_fetch_add(&g_entered[i], 1);
    RCHECK_OK(gang_barrier(g));
    int seen = atomic_load(&g_entered[i]);
    if (seen != size)
      fprintf(stderr, "rank %d left barrier %d when %d of %d had entered\n",
              rank, i, seen, size);
    RCHECK(seen == size);
  }
}

/* The same collectives through different paths on different ranks: in each
 * round some ranks block in every call (each runs at once on the caller's
 * thread), the others post two and block in the third, which queues behind
 * them. Every path must give the call the same sequence number, which
 * tells TCP frames of different collectives apart, and the right result. */
static void check_paths(gang_t *g) {
  int rank = gang_rank(g), size = gang_size(g);
  int64_t ranks_sum = (int64_t)size * (size + 1) / 2;
  for (int round = 0; round < 30; round++) {
    int64_t a[3];
    for (int k = 0; k < 3; k++)
      a[k] = (int64_t)(rank + 1) * (round * 3 + k + 1);
    if ((rank + round) % 2 == 0) {
      for (int k = 0; k < 3; k++)
        RCHECK_OK(gang_all_reduce(g, &a[k], 1, GANG_INT64, GANG_SUM));
    } else {
      gang_work *w0 = NULL, *w1 = NULL;
      RCHECK_OK(gang_all_reduce_post(g, &a[0], 1, GANG_INT64, GANG_SUM, &w0));
      RCHECK_OK(gang_all_reduce_post(g, &a[1], 1, GANG_INT64, GANG_SUM, &w1));
      RCHECK_OK(gang_all_reduce(g, &a[2], 1, GANG_INT64, GANG_SUM));
      RCHECK_OK(gang_work_wait(w0, -1));
      RCHECK_OK(gang_work_wait(w1, -1));
      gang_work_free(w0);
      gang_work_free(w1);
    }
    for (int k = 0; k < 3; k++)
      RCHECK(a[k] == ranks_sum * (round * 3 + k + 1));
  }
}

/* The transport is the one meant: a large all_gather on the world runs
 * single copy under shm from three members (forced: a probe the kernel
 * refused would stage it and the matrix would test staging twice; two
 * members measure staging against single copy at blocks this size,
 * select.c), staged copies under nocma,
 * the TCP ring under tcp, and under mixed a flat TCP algorithm (the world
 * spans two hosts of every other rank, which all_gather has no
 * hierarchical form for; the link model measured between them chooses the
 * ring or Bruck). */
static void check_transport(gang_t *g) {
  int r = gang_rank(g), n = gang_size(g);
  if (n == 1)
    return;
  const char *want = strcmp(g_mode, "shm") == 0
                         ? (n >= 3 ? "single_copy" : "staged_or_single_copy")
                     : strcmp(g_mode, "nocma") == 0 ? "staged"
                                                    : "ring";
  size_t count = 50000; /* 400 KB per rank */
  int64_t *in = malloc(count * sizeof *in);
  int64_t *out = malloc(count * (size_t)n * sizeof *out);
  RCHECK(in != NULL && out != NULL);
  for (size_t i = 0; i < count; i++)
    in[i] = r * 1000003 + (int64_t)i;
  RCHECK_OK(gang_all_gather(g, out, in, count, GANG_INT64));
  const char *ran = gang_last_algorithm(g);
  bool bruck = ran != NULL && strcmp(ran, "bruck") == 0;
  if (strcmp(g_mode, "mixed") != 0 || !bruck)
    RCHECK(gt_ran(g, want, "a large all_gather"));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      RCHECK(out[(size_t)q * count + i] == q * 1000003 + (int64_t)i);
  free(in);
  free(out);
}

/* The rails' all_reduce forced (GANG_ALGO) on a gang whose hosts hold
 * equal members: a count that splits into whole parts runs it, one that
 * does not (odd, or fewer elements than members on a host) runs the
 * leaders' form, both with the right sums; on uneven hosts neither splits
 * and the leaders' form runs. */
static void check_rails(gang_t *g, bool even_hosts) {
  int n = gang_size(g), r = gang_rank(g);
  size_t counts[] = {1000, 999, 1};
  for (size_t c = 0; c < 3; c++) {
    int32_t buf[1000];
    for (size_t i = 0; i < counts[c]; i++)
      buf[i] = r * 7 + (int32_t)i;
    RCHECK_OK(gang_all_reduce(g, buf, counts[c], GANG_INT32, GANG_SUM));
    for (size_t i = 0; i < counts[c]; i++)
      RCHECK(buf[i] == 7 * n * (n - 1) / 2 + n * (int32_t)i);
    RCHECK(gt_ran(g,
                  even_hosts && c == 0 ? "hierarchical_rails" : "hierarchical",
                  "a forced rails all_reduce"));
  }
}

/* arg non-NULL: all_reduce only, at the counts that matter to TCP (an
 * all_reduce algorithm is forced over TCP; the other collectives would run
 * as they did without it, and the counts below that fill shared memory's
 * flagged lines are nothing special to it). */
/* The world of this round (under mixed, even and odd ranks on two
 * hosts). */
static gang_t *join_world(int rank, int size) {
  if (strcmp(g_mode, "mixed") == 0)
    setenv("GANG_HOST_ID", rank % 2 ? "odd" : "even", 1);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/world%d-%d", g_port, size, g_round);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 60000;
  gang_t *g = NULL;
  RCHECK_OK(gang_create_with_store(&o, addr, rank, size, &g));
  RCHECK(gang_rank(g) == rank && gang_size(g) == size);
  return g;
}

static int rank_main(int rank, int size, void *arg) {
  bool others = arg == NULL;
  gang_t *g = join_world(rank, size);
  check_transport(g);
  if (others) {
    check_barrier_order(g);
    check_paths(g);
  }
  /* 50000 elements take the large-message paths of shared memory (single
   * copy, or many staged chunks). */
  size_t counts[] = {0, 1, 7, 1000, 50000};
  for (size_t c = 0; c < 5; c++) {
    check_all_reduce(g, counts[c], c == 2);
    if (others)
      check_others(g, counts[c], c % 2);
  }
  /* Small all_reduces in flagged lines of 56 bytes, up to 504 bytes (9
   * lines), and in the small slot above: across the dtypes these counts
   * fill 2 to 9 flagged lines, end on and after line boundaries, reach
   * 504 bytes exactly (63 doubles, 126 floats, 252 halves) and one element
   * more, and put 505 bytes to 1 KiB in the small slot (896 bytes: 112
   * doubles, 224 floats, and one element more). */
  size_t ll_counts[] = {57, 63, 64, 112, 113, 126, 127, 224, 225, 252, 253};
  for (size_t c = 0; others && c < sizeof ll_counts / sizeof ll_counts[0]; c++)
    check_all_reduce(g, ll_counts[c], c == 1);
  /* The bandwidth paths with a large count: the ring, or recursive
   * doubling (two ranks, or forced) in two pieces of its 4 MiB, the second
   * short. */
  size_t big = ((size_t)1 << 20) + 12345;
  float *f = malloc(big * sizeof *f);
  for (size_t i = 0; i < big; i++)
    f[i] = (float)(rank + (int)(i % 13));
  RCHECK_OK(gang_all_reduce(g, f, big, GANG_FLOAT32, GANG_SUM));
  for (size_t i = 0; i < big; i++) {
    float want = 0;
    for (int q = 0; q < size; q++)
      want += (float)(q + (int)(i % 13));
    RCHECK(f[i] == want);
  }
  free(f);
  if (others)
    check_p2p_and_bytes(g);
  /* Sub-gangs: odd/even by split, and the reversed world by list. */
  gang_t *half = NULL;
  RCHECK_OK(gang_split(g, rank % 2, 0, &half));
  RCHECK(half != NULL && gang_size(half) == (size + 1 - rank % 2) / 2);
  RCHECK(gang_rank(half) == rank / 2);
  check_all_reduce(half, 7, 0);
  if (others)
    check_others(half, 7, 1);
  int rev[8];
  for (int i = 0; i < size; i++)
    rev[i] = size - 1 - i;
  gang_t *reversed = NULL;
  RCHECK_OK(gang_create_subgang(g, rev, size, &reversed));
  RCHECK(gang_rank(reversed) == size - 1 - rank);
  check_all_reduce(reversed, 7, 1);
  if (others) {
    check_others(reversed, 1000, 0);
    check_p2p_and_bytes(reversed);
  }
  gang_destroy(reversed);
  gang_destroy(half);
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  RCHECK(gt_count_shm_maps() == 0); /* the arena left with the world */
  return 0;
}

/* Under mixed with the rails' all_reduce forced: check_rails on the world
 * and on the reversed world, every dtype and op at a count that splits,
 * and a large buffer (many staged chunks in each host). */
static int rails_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join_world(rank, size);
  bool even = size % 2 == 0;
  check_rails(g, even);
  check_all_reduce(g, 1000, 1);
  size_t big = (size_t)1 << 18; /* 1 MiB of floats: the rails' form */
  float *f = malloc(big * sizeof *f);
  RCHECK(f != NULL);
  for (size_t i = 0; i < big; i++)
    f[i] = (float)(rank + (int)(i % 13));
  RCHECK_OK(gang_all_reduce(g, f, big, GANG_FLOAT32, GANG_SUM));
  RCHECK(gt_ran(g, even ? "hierarchical_rails" : "hierarchical", "1 MiB"));
  for (size_t i = 0; i < big; i++)
    RCHECK(f[i] == (float)(size * (size - 1) / 2 + size * (int)(i % 13)));
  free(f);
  int rev[8];
  for (int i = 0; i < size; i++)
    rev[i] = size - 1 - i;
  gang_t *reversed = NULL;
  RCHECK_OK(gang_create_subgang(g, rev, size, &reversed));
  check_rails(reversed, even);
  gang_destroy(reversed);
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  return 0;
}

static void test_matrix(void **state) {
  (void)state;
  gt_store_proc srv = gt_store_proc_start(NULL);
  g_port = srv.port;
  g_entered = mmap(NULL, ORDER_ROUNDS * sizeof *g_entered,
                   PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(g_entered != MAP_FAILED);
  /* ThreadSanitizer, at many times the cost of a rank, looks at the
   * threads of 2 ranks (the two-member paths), 4 (two hosts of two under
   * mixed: every two-level form) and 5 (uneven hosts); the other builds
   * run one rank, 3 and 8 as well, except 8 over TCP alone under
   * AddressSanitizer: the same ring and doubling steps as at 4 and 5 (and
   * forced at 5 below), at a third of that test's CPU. */
#if defined(__SANITIZE_THREAD__)
  int sizes[] = {2, 4, 5};
#else
  int sizes[] = {1, 2, 3, 4, 5, 8};
#endif
  size_t nsizes = sizeof sizes / sizeof sizes[0];
#if defined(__SANITIZE_ADDRESS__)
  if (strcmp(g_mode, "tcp") == 0)
    nsizes--; /* the 8 at the end */
#endif
  for (size_t i = 0; i < nsizes; i++) {
    fprintf(stderr, "world size %d\n", sizes[i]);
    g_round++;
    memset((void *)g_entered, 0, ORDER_ROUNDS * sizeof *g_entered);
    assert_int_equal(gt_run_ranks(sizes[i], rank_main, NULL, 240000), 0);
  }
  /* Each TCP all_reduce algorithm forced over every count (the
   * all_reduces alone: nothing else changes with it) at 5 ranks, one past a
   * power of two, where recursive doubling and halving-doubling fold the
   * extra rank in; the matrix above already ran each where the table
   * chooses it, and test_pg_algos forces each at 2 and 3 ranks
   * (halving-doubling at 4 to 7 too). */
  const char *algos[] = {"all_reduce=ring", "all_reduce=recursive_doubling",
                         "all_reduce=halving_doubling"};
  for (size_t a = 0; strcmp(g_mode, "tcp") == 0 && a < 3; a++) {
    setenv("GANG_ALGO", algos[a], 1);
    fprintf(stderr, "%s, world size 5\n", algos[a]);
    g_round++;
    memset((void *)g_entered, 0, ORDER_ROUNDS * sizeof *g_entered);
    assert_int_equal(gt_run_ranks(5, rank_main, (void *)algos[a], 240000), 0);
  }
  /* The rails' all_reduce forced over mixed's two hosts of every other
   * rank (equal hosts, not blocks of consecutive ranks: 4 and 8 ranks)
   * and over uneven ones (5). */
#if defined(__SANITIZE_THREAD__)
  int rails_sizes[] = {4};
#else
  int rails_sizes[] = {4, 8, 5};
#endif
  for (size_t i = 0;
       strcmp(g_mode, "mixed") == 0 && i < sizeof rails_sizes / sizeof(int);
       i++) {
    const char *force = "all_reduce=hierarchical_rails";
    setenv("GANG_ALGO", force, 1);
    /* Uneven hosts cannot run the rails, and the table chooses: the
     * two-level form, by a link model set here rather than measured (the
     * loopback's measured one, 20-25 us and 2-3 GB/s, prices 1 MiB
     * within 1 % of the flat ring either way). */
    setenv("GANG_NET_LATENCY_US", "50", 1);
    setenv("GANG_NET_BANDWIDTH", "1g", 1);
    fprintf(stderr, "%s, world size %d\n", force, rails_sizes[i]);
    g_round++;
    memset((void *)g_entered, 0, ORDER_ROUNDS * sizeof *g_entered);
    assert_int_equal(gt_run_ranks(rails_sizes[i], rails_rank, NULL, 240000), 0);
  }
  unsetenv("GANG_ALGO");
  unsetenv("GANG_NET_LATENCY_US");
  unsetenv("GANG_NET_BANDWIDTH");
  munmap((void *)g_entered, ORDER_ROUNDS * sizeof *g_entered);
  gt_store_proc_stop(&srv);
}

int main(int argc, char **argv) {
  if (argc > 1)
    g_mode = argv[1];
  if (strcmp(g_mode, "tcp") == 0) {
    setenv("GANG_SHM_DISABLE", "1", 1);
    setenv("GANG_TCP_PIECE", "12289", 1);
  } else if (strcmp(g_mode, "shm") == 0) {
    /* Single copy even with more ranks than CPUs, where auto stages
     * (mixed mode and test_gang_bench run auto). */
    setenv("GANG_SHM_CMA", "1", 1);
  } else if (strcmp(g_mode, "nocma") == 0) {
    setenv("GANG_SHM_CMA", "0", 1);
    setenv("GANG_SHM_CHUNK", "16k", 1);
  } else if (strcmp(g_mode, "mixed") != 0) {
    fprintf(stderr, "test_pg_gang: unknown transport '%s'\n", g_mode);
    return 2;
  }
  const struct CMUnitTest tests[] = {GT_TEST(test_matrix)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
