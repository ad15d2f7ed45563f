/* Reduce kernels: every dtype x op against a scalar reference written here
 * (independently of src/core/reduce_scalar.c), on odd lengths and
 * misaligned buffers, for one instruction set a run (reduce_ref.h), and the
 * streaming-store kernels of large out-of-place calls. The edge cases that
 * SIMD code gets wrong are in test_reduce_edges.c.
 *
 * Buffers are surrounded by guard bytes, so a kernel writing past either end
 * of its range (a wrong tail) fails the test even where ASan cannot see it. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"

#include "core/reduce.h"
#include "gang/status.h"
#include "gang/types.h"
#include "reduce_ref.h"

static const size_t lengths[] = {0,  1,  2,  3,  7,  15,   16,  17,
                                 31, 33, 63, 64, 65, 1000, 4099};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

/* ---- reference element operation ---- */

static double ref_fop(gang_reduce_op op, double a, double b) {
  switch (op) {
  case GANG_SUM:
  case GANG_MEAN:
    return a + b;
  case GANG_PRODUCT:
    return a * b;
  case GANG_MIN:
    if (isnan(a) || isnan(b))
      return NAN;
    if (a == b) /* only differs for +-0: the negative one */
      return signbit(a) ? a : b;
    return a < b ? a : b;
  case GANG_MAX:
    if (isnan(a) || isnan(b))
      return NAN;
    if (a == b)
      return signbit(a) ? b : a;
    return a > b ? a : b;
  }
  return NAN;
}

static float ref_fop32(gang_reduce_op op, float a, float b) {
  /* One float operation, rounded to float (not via double). */
  switch (op) {
  case GANG_SUM:
  case GANG_MEAN: {
    float r = a + b;
    return r;
  }
  case GANG_PRODUCT: {
    float r = a * b;
    return r;
  }
  default:
    return (float)ref_fop(op, a, b);
  }
}

static bool is_signed_int(gang_dtype dt) {
  return dt == GANG_INT8 || dt == GANG_INT16 || dt == GANG_INT32 ||
         dt == GANG_INT64;
}

static uint64_t load_le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void store_le(unsigned char *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static int64_t sign_extend(uint64_t v, size_t bytes) {
  if (bytes == 8)
    return (int64_t)v;
  uint64_t top = 1ULL << (8 * bytes - 1);
  v &= (top << 1) - 1;
  return (int64_t)(v ^ top) - (int64_t)top;
}

/* out = a (op) b for one element of dtype dt. */
static void ref_elem(gang_dtype dt, gang_reduce_op op, const unsigned char *a,
                     const unsigned char *b, unsigned char *out) {
  size_t es = gang_dtype_size(dt);
  switch (dt) {
  case GANG_FLOAT32: {
    float x, y;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    float r = ref_fop32(op, x, y);
    memcpy(out, &r, 4);
    return;
  }
  case GANG_FLOAT64: {
    double x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    double r = ref_fop(op, x, y);
    memcpy(out, &r, 8);
    return;
  }
  case GANG_FLOAT16: {
    float r = ref_fop32(op, ref_f16_to_f32((uint16_t)load_le(a, 2)),
                        ref_f16_to_f32((uint16_t)load_le(b, 2)));
    store_le(out, ref_f32_to_f16(r), 2);
    return;
  }
  case GANG_BFLOAT16: {
    float r = ref_fop32(op, ref_bf16_to_f32((uint16_t)load_le(a, 2)),
                        ref_bf16_to_f32((uint16_t)load_le(b, 2)));
    store_le(out, ref_f32_to_bf16(r), 2);
    return;
  }
  case GANG_BOOL: {
    bool x = *a != 0, y = *b != 0;
    bool r = (op == GANG_PRODUCT || op == GANG_MIN) ? (x && y) : (x || y);
    *out = r;
    return;
  }
  default:
    break;
  }
  uint64_t ua = load_le(a, es), ub = load_le(b, es), r = 0;
  int64_t sa = sign_extend(ua, es), sb = sign_extend(ub, es);
  bool sgn = is_signed_int(dt);
  switch (op) {
  case GANG_SUM:
  case GANG_MEAN:
    r = ua + ub;
    break;
  case GANG_PRODUCT:
    r = ua * ub;
    break;
  case GANG_MIN:
    r = (sgn ? sa <= sb : ua <= ub) ? ua : ub;
    break;
  case GANG_MAX:
    r = (sgn ? sa >= sb : ua >= ub) ? ua : ub;
    break;
  }
  store_le(out, r, es);
}

/* Equal bits, or both NaN for the floating dtypes. */
static bool elem_equal(gang_dtype dt, const unsigned char *x,
                       const unsigned char *y) {
  size_t es = gang_dtype_size(dt);
  if (memcmp(x, y, es) == 0)
    return true;
  switch (dt) {
  case GANG_FLOAT32: {
    float a, b;
    memcpy(&a, x, 4);
    memcpy(&b, y, 4);
    return isnan(a) && isnan(b);
  }
  case GANG_FLOAT64: {
    double a, b;
    memcpy(&a, x, 8);
    memcpy(&b, y, 8);
    return isnan(a) && isnan(b);
  }
  case GANG_FLOAT16:
    return isnan(ref_f16_to_f32((uint16_t)load_le(x, 2))) &&
           isnan(ref_f16_to_f32((uint16_t)load_le(y, 2)));
  case GANG_BFLOAT16:
    return isnan(ref_bf16_to_f32((uint16_t)load_le(x, 2))) &&
           isnan(ref_bf16_to_f32((uint16_t)load_le(y, 2)));
  default:
    return false;
  }
}

/* ---- random inputs ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dULL;
}

/* One random finite element; b-side values sometimes copy the a-side value
 * (or its negation for zero) so MIN/MAX see ties and +-0 pairs. */
static void rand_elem(gang_dtype dt, unsigned char *out) {
  size_t es = gang_dtype_size(dt);
  uint64_t r = rnd();
  switch (dt) {
  case GANG_FLOAT32: {
    float f = (r & 15) == 0 ? 0.0f
                            : ldexpf((float)(r >> 40) / (float)(1 << 24),
                                     (int)((r >> 8) % 41) - 20);
    if (r & 16)
      f = -f;
    memcpy(out, &f, 4);
    return;
  }
  case GANG_FLOAT64: {
    double f = (r & 15) == 0 ? 0.0
                             : ldexp((double)(r >> 11) / 0x1p53,
                                     (int)((r >> 4) % 81) - 40);
    if (rnd() & 1)
      f = -f;
    memcpy(out, &f, 8);
    return;
  }
  case GANG_FLOAT16: { /* any finite half, subnormals included */
    uint16_t h = (uint16_t)r;
    if (((h >> 10) & 31) == 31)
      h &= (uint16_t)~0x4000;
    store_le(out, h, 2);
    return;
  }
  case GANG_BFLOAT16: { /* any finite bfloat16 */
    uint16_t h = (uint16_t)r;
    if (((h >> 7) & 0xff) == 0xff)
      h &= (uint16_t)~0x4000;
    store_le(out, h, 2);
    return;
  }
  case GANG_BOOL: /* half zero, the rest any nonzero byte */
    *out = (r & 1) ? 0 : (unsigned char)((r >> 8) | 1);
    return;
  default:
    store_le(out, r, es);
    return;
  }
}

static void fill_inputs(gang_dtype dt, unsigned char *a, unsigned char *b,
                        size_t n) {
  size_t es = gang_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    rand_elem(dt, a + i * es);
    uint64_t r = rnd() & 7;
    if (r == 0) {
      memcpy(b + i * es, a + i * es, es);
    } else if (r == 1) { /* the same magnitude with the other sign */
      memcpy(b + i * es, a + i * es, es);
      b[i * es + es - 1] ^= 0x80;
    } else {
      rand_elem(dt, b + i * es);
    }
  }
}

/* ---- the matrix ---- */

enum { GUARD = 64, GUARD_BYTE = 0xa5 };

typedef struct region {
  unsigned char *base; /* 64-aligned allocation */
  size_t size;
} region;

static unsigned char *region_at(region *r, size_t bytes, size_t off) {
  r->size = GUARD + off + bytes + GUARD;
  r->size = (r->size + 63) & ~(size_t)63;
  r->base = aligned_alloc(64, r->size);
  assert_non_null(r->base);
  memset(r->base, GUARD_BYTE, r->size);
  return r->base + GUARD + off;
}

static void check_guards(const region *r, const unsigned char *p, size_t bytes,
                         const char *what) {
  const unsigned char *end = r->base + r->size;
  for (const unsigned char *q = r->base; q < p; q++)
    if (*q != GUARD_BYTE)
      fail_msg("%s: byte %td before the range was written", what, p - q);
  for (const unsigned char *q = p + bytes; q < end; q++)
    if (*q != GUARD_BYTE)
      fail_msg("%s: byte %td after the range was written", what,
               q - (p + bytes));
}

enum mode { M_INPLACE, M_OUT, M_ALIAS_B, M_COUNT };
static const char *const mode_names[] = {
    "reduce(dst=a, b)", "reduce3(dst, a, b)", "reduce3(dst=b, a, dst)"};

/* Runs one case; returns false (after printing) on a mismatch. */
static bool run_case(const char *isa, gang_dtype dt, gang_reduce_op op,
                     size_t n, size_t off, enum mode mode) {
  size_t es = gang_dtype_size(dt), bytes = n * es;
  unsigned char *a0 = malloc(bytes + 1), *b0 = malloc(bytes + 1);
  unsigned char *want = malloc(bytes + 1);
  assert_true(a0 && b0 && want);
  fill_inputs(dt, a0, b0, n);
  for (size_t i = 0; i < n; i++)
    ref_elem(dt, op, a0 + i * es, b0 + i * es, want + i * es);

  /* dst and a at `off` from a 64-byte boundary, b half a line away, so the
   * three streams are also misaligned relative to each other. */
  region rd, ra, rb;
  unsigned char *d = region_at(&rd, bytes, off);
  unsigned char *a = region_at(&ra, bytes, off);
  unsigned char *b = region_at(&rb, bytes, (off + 32) % 64);
  memcpy(a, a0, bytes);
  memcpy(b, b0, bytes);
  switch (mode) {
  case M_INPLACE:
    memcpy(d, a0, bytes);
    gang__reduce(d, b, n, dt, op);
    break;
  case M_OUT:
    gang__reduce3(d, a, b, n, dt, op);
    break;
  case M_ALIAS_B:
    memcpy(d, b0, bytes);
    gang__reduce3(d, a, d, n, dt, op);
    break;
  case M_COUNT:
    break;
  }
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) {
    if (!elem_equal(dt, d + i * es, want + i * es)) {
      ok = false;
      printf("MISMATCH isa=%s dtype=%s op=%s n=%zu offset=%zu %s at [%zu]:",
             isa, gang_dtype_name(dt), gang_reduce_op_name(op), n, off,
             mode_names[mode], i);
      printf(" a=%#llx b=%#llx got=%#llx want=%#llx\n",
             (unsigned long long)load_le(a0 + i * es, es),
             (unsigned long long)load_le(b0 + i * es, es),
             (unsigned long long)load_le(d + i * es, es),
             (unsigned long long)load_le(want + i * es, es));
    }
  }
  check_guards(&rd, d, bytes, "dst");
  check_guards(&ra, a, bytes, "a");
  check_guards(&rb, b, bytes, "b");
  assert_memory_equal(a, a0, bytes);
  if (mode != M_ALIAS_B)
    assert_memory_equal(b, b0, bytes);
  free(rd.base);
  free(ra.base);
  free(rb.base);
  free(a0);
  free(b0);
  free(want);
  return ok;
}

static void matrix_for(const char *isa) {
  int failures = 0;
  for (int dt = 0; dt < GANG_DTYPE_COUNT; dt++) {
    size_t es = gang_dtype_size((gang_dtype)dt);
    /* offsets: aligned, one element past a 64-byte boundary, and every
     * sub-element byte offset (any byte alignment is supported). */
    size_t offs[10], noff = 0;
    offs[noff++] = 0;
    offs[noff++] = es;
    for (size_t o = 1; o < es; o++)
      offs[noff++] = o;
    for (size_t o = 0; o < N_OPS; o++)
      for (size_t l = 0; l < N_LENGTHS; l++)
        for (size_t f = 0; f < noff; f++)
          for (int m = 0; m < M_COUNT; m++)
            if (!run_case(isa, (gang_dtype)dt, ops[o], lengths[l], offs[f],
                          (enum mode)m) &&
                ++failures > 20)
              fail_msg("too many mismatches");
  }
  if (failures)
    fail_msg("%d mismatching cases for %s", failures, isa);
}

static void test_matrix(void **state) {
  (void)state;
  with_isa(matrix_for);
}

/* Out-of-place calls with a destination of 16 MiB or more take the
 * streaming-store kernels (GANG__REDUCE_NT_BYTES): check them too, with a
 * destination aligned, one element off, and (for wide types) one byte off,
 * which must fall back to ordinary stores. */
static void test_large_streaming(void **state) {
  (void)state;
  const size_t big = ((size_t)16 << 20) + 1000;
  const gang_dtype dts[] = {GANG_FLOAT32, GANG_INT64};
  const gang_reduce_op dops[] = {GANG_SUM, GANG_MAX};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    gang_dtype dt = dts[k];
    size_t es = gang_dtype_size(dt), n = big / es + 37, bytes = n * es;
    unsigned char *a0 = malloc(bytes), *b0 = malloc(bytes),
                  *want = malloc(bytes);
    assert_true(a0 && b0 && want);
    fill_inputs(dt, a0, b0, n);
    for (size_t i = 0; i < n; i++)
      ref_elem(dt, dops[k], a0 + i * es, b0 + i * es, want + i * es);
    assert_gang_ok(gang__reduce_set_isa(ref_isa));
    const size_t offs[] = {0, es, 1};
    for (size_t f = 0; f < 3; f++) {
      region rd;
      unsigned char *d = region_at(&rd, bytes, offs[f]);
      gang__reduce3(d, a0, b0, n, dt, dops[k]);
      for (size_t i = 0; i < n; i++)
        if (memcmp(d + i * es, want + i * es, es) != 0)
          fail_msg("%s %s %s n=%zu offset=%zu: mismatch at [%zu]", ref_isa,
                   gang_dtype_name(dt), gang_reduce_op_name(dops[k]), n,
                   offs[f], i);
      check_guards(&rd, d, bytes, "dst");
      free(rd.base);
    }
    free(a0);
    free(b0);
    free(want);
  }
  assert_gang_ok(gang__reduce_set_isa("auto"));
}

int main(int argc, char **argv) {
  int rc = ref_choose_isa(argc, argv);
  if (rc >= 0)
    return rc;
  const struct CMUnitTest tests[] = {
      GT_TEST(test_matrix),
      GT_TEST(test_large_streaming),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
