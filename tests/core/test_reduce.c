/* Reduce kernels: every dtype x op against a scalar reference written here
 * (independently of src/core/reduce_scalar.c), on odd lengths and
 * misaligned buffers, for every instruction set this CPU can run; plus the
 * edge cases that SIMD code gets wrong: NaN in MIN/MAX, signed zeros,
 * float16/bfloat16 rounding ties, overflow to infinity, subnormals, integer
 * wrap-around, MEAN finishing, and the GANG_REDUCE_ISA setting.
 *
 * Buffers are surrounded by guard bytes, so a kernel writing past either end
 * of its range (a wrong tail) fails the test even where ASan cannot see it. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/reduce.h"
#include "gang/status.h"
#include "gang/types.h"

static const char *const isas[] = {"baseline", "avx2", "avx512"};
#define N_ISAS (sizeof isas / sizeof isas[0])

static const gang_reduce_op ops[] = {GANG_SUM, GANG_MEAN, GANG_PRODUCT,
                                     GANG_MIN, GANG_MAX};
#define N_OPS (sizeof ops / sizeof ops[0])

static const size_t lengths[] = {0,  1,  2,  3,  7,  15,   16,  17,
                                 31, 33, 63, 64, 65, 1000, 4099};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

/* ---- reference conversions: a different algorithm from the library's
 * (double arithmetic with nearbyint in the default round-to-nearest-even
 * mode, instead of integer bit tricks). NaNs come out as a canonical NaN;
 * comparisons treat any NaN as equal to any NaN. ---- */

static float ref_f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 31)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexpf((float)m, -24);
  else
    v = ldexpf((float)(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t ref_f32_to_f16(float f) {
  uint16_t s = signbit(f) ? 0x8000 : 0;
  if (isnan(f))
    return s | 0x7e00;
  double a = fabs((double)f);
  if (a >= 65520.0)
    return s | 0x7c00;
  if (a < 0x1p-14)
    return s | (uint16_t)nearbyint(a * 0x1p24);
  int e;
  frexp(a, &e);
  int E = e - 1; /* a in [2^E, 2^(E+1)) */
  double m = nearbyint(ldexp(a, 10 - E));
  if (m == 2048.0) {
    m = 1024.0;
    E++;
  }
  return s | (uint16_t)((E + 15) << 10) | (uint16_t)(m - 1024.0);
}

static float ref_bf16_to_f32(uint16_t h) {
  int e = (h >> 7) & 0xff, m = h & 0x7f;
  float v;
  if (e == 0xff)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexpf((float)m, -133);
  else
    v = ldexpf((float)(m | 128), e - 134);
  return (h & 0x8000) ? -v : v;
}

static uint16_t ref_f32_to_bf16(float f) {
  uint16_t s = signbit(f) ? 0x8000 : 0;
  if (isnan(f))
    return s | 0x7fc0;
  double a = fabs((double)f);
  if (a >= ldexp(2.0 - 0x1p-8, 127)) /* half-way above the largest */
    return s | 0x7f80;
  if (a < 0x1p-126)
    return s | (uint16_t)nearbyint(a * 0x1p133);
  int e;
  frexp(a, &e);
  int E = e - 1;
  double m = nearbyint(ldexp(a, 7 - E));
  if (m == 256.0) {
    m = 128.0;
    E++;
  }
  return s | (uint16_t)((E + 127) << 7) | (uint16_t)(m - 128.0);
}

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

/* Runs f for every instruction set this CPU supports (at least baseline),
 * then restores the automatic choice. */
static void for_each_isa(void (*f)(const char *isa)) {
  int ran = 0;
  for (size_t k = 0; k < N_ISAS; k++) {
    gang_status st = gang__reduce_set_isa(isas[k]);
    if (st == GANG_NOT_SUPPORTED) {
      printf("note: %s kernels not supported here, skipped\n", isas[k]);
      continue;
    }
    assert_gang_ok(st);
    assert_string_equal(gang__reduce_isa(), isas[k]);
    f(isas[k]);
    ran++;
  }
  assert_true(ran >= 1);
  assert_gang_ok(gang__reduce_set_isa("auto"));
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
  for_each_isa(matrix_for);
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
    for (size_t s = 0; s < N_ISAS; s++) {
      if (gang__reduce_set_isa(isas[s]) != GANG_OK)
        continue;
      const size_t offs[] = {0, es, 1};
      for (size_t f = 0; f < 3; f++) {
        region rd;
        unsigned char *d = region_at(&rd, bytes, offs[f]);
        gang__reduce3(d, a0, b0, n, dt, dops[k]);
        for (size_t i = 0; i < n; i++)
          if (memcmp(d + i * es, want + i * es, es) != 0)
            fail_msg("%s %s %s n=%zu offset=%zu: mismatch at [%zu]", isas[s],
                     gang_dtype_name(dt), gang_reduce_op_name(dops[k]), n,
                     offs[f], i);
        check_guards(&rd, d, bytes, "dst");
        free(rd.base);
      }
    }
    free(a0);
    free(b0);
    free(want);
  }
  assert_gang_ok(gang__reduce_set_isa("auto"));
}

/* ---- conversions ---- */

static void test_conversions(void **state) {
  (void)state;
  /* Every half and every bfloat16 widens exactly, and narrows back. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = gang__f16_to_f32((uint16_t)h), g = ref_f16_to_f32((uint16_t)h);
    if (isnan(g)) {
      assert_true(isnan(f));
      uint16_t back = gang__f32_to_f16(f);
      /* NaN stays NaN, quiet, sign and top payload bits kept. */
      assert_int_equal(back, h | 0x200);
    } else {
      assert_memory_equal(&f, &g, 4);
      assert_int_equal(gang__f32_to_f16(f), h);
    }
    f = gang__bf16_to_f32((uint16_t)h);
    g = ref_bf16_to_f32((uint16_t)h);
    if (isnan(g)) {
      assert_true(isnan(f));
      assert_int_equal(gang__f32_to_bf16(f), h | 0x40);
    } else {
      assert_memory_equal(&f, &g, 4);
      assert_int_equal(gang__f32_to_bf16(f), h);
    }
  }
  /* Narrowing: all f32 bit patterns on a stride that visits every exponent
   * and many mantissas, plus exact ties and their neighbours (constructed
   * below and in test_half_rounding). */
  for (uint64_t u = 0; u <= 0xffffffffULL; u += 4093) {
    uint32_t bits = (uint32_t)u;
    float f;
    memcpy(&f, &bits, 4);
    if (isnan(f))
      continue;
    if (gang__f32_to_f16(f) != ref_f32_to_f16(f))
      fail_msg("f16(%#x): got %#x want %#x", bits, gang__f32_to_f16(f),
               ref_f32_to_f16(f));
    if (gang__f32_to_bf16(f) != ref_f32_to_bf16(f))
      fail_msg("bf16(%#x): got %#x want %#x", bits, gang__f32_to_bf16(f),
               ref_f32_to_bf16(f));
  }
  for (uint32_t h = 0; h < 0x7bff; h++) { /* midpoints of adjacent halves */
    float lo = ref_f16_to_f32((uint16_t)h),
          hi = ref_f16_to_f32((uint16_t)(h + 1));
    float mid = (float)(((double)lo + (double)hi) / 2);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    assert_int_equal(gang__f32_to_f16(mid), even);
    assert_int_equal(gang__f32_to_f16(-mid), even | 0x8000);
    assert_int_equal(gang__f32_to_f16(nextafterf(mid, 0)), h);
    assert_int_equal(gang__f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
  }
  assert_int_equal(gang__f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(gang__f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff);
  assert_int_equal(gang__f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(gang__f32_to_f16(0x1p-25f), 0);      /* tie to 0 */
  assert_int_equal(gang__f32_to_f16(0x1.8p-25f), 1);    /* above tie */
  assert_int_equal(gang__f32_to_f16(0x1.8p-24f), 2);    /* tie 1|2 -> 2 */
  assert_int_equal(gang__f32_to_bf16(0x1p-149f), 0);    /* f32 subnormal */
  assert_int_equal(gang__f32_to_bf16(0x1p-133f), 1);    /* bf16 subnormal */
  assert_int_equal(gang__f32_to_bf16(FLT_MAX), 0x7f80); /* rounds up */
}

/* ---- edge cases through the kernels, for every ISA ---- */

/* n copies of the pair (a, b) reduced with op must all give `want` (any
 * NaN when want is NaN); n = 37 covers vector bodies and tails. */
#define PAIRS 37
static void expect_f32(gang_reduce_op op, float a, float b, float want) {
  float x[PAIRS], y[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    x[i] = a;
    y[i] = b;
  }
  gang__reduce(x, y, PAIRS, GANG_FLOAT32, op);
  for (int i = 0; i < PAIRS; i++) {
    if (isnan(want) ? !isnan(x[i]) : memcmp(&x[i], &want, 4) != 0)
      fail_msg("%s: %s(%a, %a)[%d] = %a, want %a", gang__reduce_isa(),
               gang_reduce_op_name(op), a, b, i, x[i], want);
  }
}

static void expect_f64(gang_reduce_op op, double a, double b, double want) {
  double x[PAIRS], y[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    x[i] = a;
    y[i] = b;
  }
  gang__reduce(x, y, PAIRS, GANG_FLOAT64, op);
  for (int i = 0; i < PAIRS; i++) {
    if (isnan(want) ? !isnan(x[i]) : memcmp(&x[i], &want, 8) != 0)
      fail_msg("%s: f64 %s(%a, %a)[%d] = %a, want %a", gang__reduce_isa(),
               gang_reduce_op_name(op), a, b, i, x[i], want);
  }
}

/* For 16-bit floats: bit patterns in, bit pattern out (0x7e00 = any NaN). */
static void expect_h(gang_dtype dt, gang_reduce_op op, uint16_t a, uint16_t b,
                     uint16_t want) {
  uint16_t x[PAIRS], y[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    x[i] = a;
    y[i] = b;
  }
  gang__reduce(x, y, PAIRS, dt, op);
  bool want_nan = dt == GANG_FLOAT16 ? isnan(ref_f16_to_f32(want))
                                     : isnan(ref_bf16_to_f32(want));
  for (int i = 0; i < PAIRS; i++) {
    bool nan = dt == GANG_FLOAT16 ? isnan(ref_f16_to_f32(x[i]))
                                  : isnan(ref_bf16_to_f32(x[i]));
    if (want_nan ? !nan : x[i] != want)
      fail_msg("%s: %s %s(%#x, %#x)[%d] = %#x, want %#x", gang__reduce_isa(),
               gang_dtype_name(dt), gang_reduce_op_name(op), a, b, i, x[i],
               want);
  }
}

static void nan_and_zeros_for(const char *isa) {
  (void)isa;
  const float qn = NAN, inf = INFINITY;
  for (int k = 0; k < 2; k++) {
    gang_reduce_op op = k ? GANG_MAX : GANG_MIN;
    expect_f32(op, qn, 1.0f, NAN);
    expect_f32(op, 1.0f, qn, NAN);
    expect_f32(op, qn, qn, NAN);
    expect_f32(op, -inf, qn, NAN);
    expect_f32(op, qn, inf, NAN);
    expect_f64(op, (double)qn, 1.0, NAN);
    expect_f64(op, 1.0, (double)qn, NAN);
    expect_h(GANG_FLOAT16, op, 0x7e00, 0x3c00, 0x7e00);
    expect_h(GANG_FLOAT16, op, 0x3c00, 0xfe00, 0x7e00);
    expect_h(GANG_FLOAT16, op, 0x7c01, 0x3c00, 0x7e00); /* signalling */
    expect_h(GANG_BFLOAT16, op, 0x7fc0, 0x3f80, 0x7fc0);
    expect_h(GANG_BFLOAT16, op, 0x3f80, 0xffc1, 0x7fc0);
  }
  /* A NaN's sign and payload survive MIN/MAX (it is passed through). */
  float pn;
  uint32_t pbits = 0xffc12345u;
  memcpy(&pn, &pbits, 4);
  float x[PAIRS], y[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    x[i] = 3.0f;
    y[i] = pn;
  }
  gang__reduce(x, y, PAIRS, GANG_FLOAT32, GANG_MAX);
  for (int i = 0; i < PAIRS; i++)
    assert_memory_equal(&x[i], &pbits, 4);
  /* Signed zeros: -0 < +0 whatever the order. */
  expect_f32(GANG_MIN, 0.0f, -0.0f, -0.0f);
  expect_f32(GANG_MIN, -0.0f, 0.0f, -0.0f);
  expect_f32(GANG_MAX, 0.0f, -0.0f, 0.0f);
  expect_f32(GANG_MAX, -0.0f, 0.0f, 0.0f);
  expect_f64(GANG_MIN, 0.0, -0.0, -0.0);
  expect_f64(GANG_MAX, -0.0, 0.0, 0.0);
  expect_h(GANG_FLOAT16, GANG_MIN, 0x0000, 0x8000, 0x8000);
  expect_h(GANG_BFLOAT16, GANG_MAX, 0x8000, 0x0000, 0x0000);
  /* Infinities. */
  expect_f32(GANG_SUM, inf, -inf, NAN);
  expect_f32(GANG_SUM, inf, 1e30f, inf);
  expect_f32(GANG_PRODUCT, inf, 0.0f, NAN);
  expect_f32(GANG_PRODUCT, -inf, -2.0f, inf);
  expect_f32(GANG_MIN, -inf, -3.0e38f, -inf);
  expect_f32(GANG_MAX, inf, 3.0e38f, inf);
  expect_f32(GANG_SUM, 3.0e38f, 3.0e38f, inf); /* overflow */
  expect_f64(GANG_SUM, (double)inf, -1e300, (double)inf);
  expect_h(GANG_FLOAT16, GANG_SUM, 0x7c00, 0xfc00, 0x7e00);
  expect_h(GANG_FLOAT16, GANG_MAX, 0xfc00, 0x7bff, 0x7bff);
  expect_h(GANG_BFLOAT16, GANG_PRODUCT, 0x7f80, 0xbf80, 0xff80);
}

static void test_nan_inf_zero(void **state) {
  (void)state;
  for_each_isa(nan_and_zeros_for);
}

static void half_rounding_for(const char *isa) {
  (void)isa;
  /* float16 ties to even: 1 + 2^-11 is half-way between 1 and its
   * successor 0x3c01 -> 1 (even); (1 + 2^-10) + 2^-11 -> 0x3c02. */
  expect_h(GANG_FLOAT16, GANG_SUM, 0x3c00, 0x1000, 0x3c00);
  expect_h(GANG_FLOAT16, GANG_SUM, 0x3c01, 0x1000, 0x3c02);
  /* just above the tie rounds up */
  expect_h(GANG_FLOAT16, GANG_SUM, 0x3c00, 0x1001, 0x3c01);
  /* overflow: 65504 + 16 = 65520 is the tie to infinity (0x7bff is odd) */
  expect_h(GANG_FLOAT16, GANG_SUM, 0x7bff, 0x4c00, 0x7c00);
  expect_h(GANG_FLOAT16, GANG_SUM, 0x7bff, 0x4bff, 0x7bff);
  /* product rounding: 1.5 * (1 + 2^-10) = 1.5 + 1.5*2^-10, exact tie
   * between 0x3e00+1 and +2 rounds to even: 0x3e02 */
  expect_h(GANG_FLOAT16, GANG_PRODUCT, 0x3e00, 0x3c01, 0x3e02);
  /* subnormals are kept, not flushed */
  expect_h(GANG_FLOAT16, GANG_SUM, 0x0001, 0x0001, 0x0002);
  expect_h(GANG_FLOAT16, GANG_SUM, 0x03ff, 0x0001, 0x0400);
  expect_h(GANG_FLOAT16, GANG_SUM, 0x8001, 0x0000, 0x8001);
  expect_h(GANG_FLOAT16, GANG_PRODUCT, 0x0200, 0x3800, 0x0100); /* /2 */
  expect_h(GANG_FLOAT16, GANG_PRODUCT, 0x0001, 0x3800, 0x0000); /* tie->0 */
  expect_h(GANG_FLOAT16, GANG_PRODUCT, 0x0003, 0x3800, 0x0002); /* 1.5->2 */
  /* bfloat16 ties: 1 + 2^-8 between 1 and 1+2^-7 -> 1; odd base -> up */
  expect_h(GANG_BFLOAT16, GANG_SUM, 0x3f80, 0x3b80, 0x3f80);
  expect_h(GANG_BFLOAT16, GANG_SUM, 0x3f81, 0x3b80, 0x3f82);
  expect_h(GANG_BFLOAT16, GANG_SUM, 0x7f7f, 0x7f7f, 0x7f80);     /* overflow */
  expect_h(GANG_BFLOAT16, GANG_SUM, 0x0001, 0x0001, 0x0002);     /* subnormal */
  expect_h(GANG_BFLOAT16, GANG_PRODUCT, 0x0001, 0x3f00, 0x0000); /* tie */
  expect_h(GANG_BFLOAT16, GANG_PRODUCT, 0x0003, 0x3f00, 0x0002);
  /* float32 subnormals are not flushed either */
  expect_f32(GANG_SUM, 0x1p-149f, 0x1p-149f, 0x1p-148f);
  expect_f32(GANG_PRODUCT, 0x1p-126f, 0.5f, 0x1p-127f);
  expect_f64(GANG_SUM, 0x1p-1074, 0x1p-1074, 0x1p-1073);
}

static void test_half_rounding(void **state) {
  (void)state;
  for_each_isa(half_rounding_for);
}

/* Integers wrap and compare by signedness; bool normalises. */
static void integers_for(const char *isa) {
  (void)isa;
  int8_t i8a[PAIRS], i8b[PAIRS];
  uint8_t u8a[PAIRS], u8b[PAIRS];
  int16_t i16a[PAIRS], i16b[PAIRS];
  int32_t i32a[PAIRS], i32b[PAIRS];
  uint32_t u32a[PAIRS], u32b[PAIRS];
  int64_t i64a[PAIRS], i64b[PAIRS];
  uint64_t u64a[PAIRS], u64b[PAIRS];
#define SETUP(arr_a, arr_b, va, vb)                                            \
  for (int i = 0; i < PAIRS; i++) {                                            \
    arr_a[i] = (va);                                                           \
    arr_b[i] = (vb);                                                           \
  }
#define EXPECT(arr_a, want)                                                    \
  for (int i = 0; i < PAIRS; i++)                                              \
    if (arr_a[i] != (want))                                                    \
      fail_msg("%s line %d: [%d] = %lld, want %lld", gang__reduce_isa(),       \
               __LINE__, i, (long long)arr_a[i], (long long)(want));
  SETUP(i8a, i8b, 127, 1);
  gang__reduce(i8a, i8b, PAIRS, GANG_INT8, GANG_SUM);
  EXPECT(i8a, -128);
  SETUP(i8a, i8b, -128, -1);
  gang__reduce(i8a, i8b, PAIRS, GANG_INT8, GANG_PRODUCT);
  EXPECT(i8a, -128);
  SETUP(i8a, i8b, -5, 3);
  gang__reduce(i8a, i8b, PAIRS, GANG_INT8, GANG_MIN);
  EXPECT(i8a, -5);
  SETUP(u8a, u8b, 255, 1);
  gang__reduce(u8a, u8b, PAIRS, GANG_UINT8, GANG_SUM);
  EXPECT(u8a, 0);
  SETUP(u8a, u8b, 16, 17);
  gang__reduce(u8a, u8b, PAIRS, GANG_UINT8, GANG_PRODUCT);
  EXPECT(u8a, (16 * 17) & 255);
  SETUP(u8a, u8b, 200, 3);
  gang__reduce(u8a, u8b, PAIRS, GANG_UINT8, GANG_MIN);
  EXPECT(u8a, 3);
  SETUP(i16a, i16b, 300, 300);
  gang__reduce(i16a, i16b, PAIRS, GANG_INT16, GANG_PRODUCT);
  EXPECT(i16a, (int16_t)(90000 - 65536));
  SETUP(i16a, i16b, -1, 1);
  gang__reduce(i16a, i16b, PAIRS, GANG_INT16, GANG_MAX);
  EXPECT(i16a, 1);
  SETUP(i32a, i32b, INT32_MAX, 1);
  gang__reduce(i32a, i32b, PAIRS, GANG_INT32, GANG_SUM);
  EXPECT(i32a, INT32_MIN);
  SETUP(i32a, i32b, 65536, 65537);
  gang__reduce(i32a, i32b, PAIRS, GANG_INT32, GANG_PRODUCT);
  EXPECT(i32a, 65536);
  SETUP(u32a, u32b, 0xffffffffu, 1);
  gang__reduce(u32a, u32b, PAIRS, GANG_UINT32, GANG_MAX);
  EXPECT(u32a, 0xffffffffu);
  SETUP(i32a, i32b, -1, 1);
  gang__reduce(i32a, i32b, PAIRS, GANG_INT32, GANG_MIN);
  EXPECT(i32a, -1);
  SETUP(i64a, i64b, INT64_MAX, 1);
  gang__reduce(i64a, i64b, PAIRS, GANG_INT64, GANG_SUM);
  EXPECT(i64a, INT64_MIN);
  SETUP(i64a, i64b, INT64_MIN, -1);
  gang__reduce(i64a, i64b, PAIRS, GANG_INT64, GANG_PRODUCT);
  EXPECT(i64a, INT64_MIN);
  SETUP(i64a, i64b, 0x100000003LL, 0x100000005LL);
  gang__reduce(i64a, i64b, PAIRS, GANG_INT64, GANG_PRODUCT);
  EXPECT(i64a, (int64_t)(0x800000000ULL + 15ULL)); /* (2^32+3)(2^32+5) */
  SETUP(i64a, i64b, -1, 1);
  gang__reduce(i64a, i64b, PAIRS, GANG_INT64, GANG_MIN);
  EXPECT(i64a, -1);
  SETUP(i64a, i64b, INT64_MIN, INT64_MAX);
  gang__reduce(i64a, i64b, PAIRS, GANG_INT64, GANG_MAX);
  EXPECT(i64a, INT64_MAX);
  SETUP(u64a, u64b, UINT64_MAX, 1);
  gang__reduce(u64a, u64b, PAIRS, GANG_UINT64, GANG_MIN);
  EXPECT(u64a, 1);
  SETUP(u64a, u64b, UINT64_MAX, 1);
  gang__reduce(u64a, u64b, PAIRS, GANG_UINT64, GANG_MAX);
  EXPECT(u64a, UINT64_MAX);
  SETUP(u64a, u64b, 0xffffffffffULL, 0xffffffffffULL);
  gang__reduce(u64a, u64b, PAIRS, GANG_UINT64, GANG_PRODUCT);
  EXPECT(u64a, 0xffffffffffULL * 0xffffffffffULL);
  /* bool: nonzero bytes count as true, results are 0/1 */
  uint8_t ba[PAIRS], bb[PAIRS];
  SETUP(ba, bb, 2, 0x80);
  gang__reduce(ba, bb, PAIRS, GANG_BOOL, GANG_SUM);
  EXPECT(ba, 1);
  SETUP(ba, bb, 2, 0x80);
  gang__reduce(ba, bb, PAIRS, GANG_BOOL, GANG_PRODUCT);
  EXPECT(ba, 1);
  SETUP(ba, bb, 0, 0x40);
  gang__reduce(ba, bb, PAIRS, GANG_BOOL, GANG_MIN);
  EXPECT(ba, 0);
  SETUP(ba, bb, 0, 0x40);
  gang__reduce(ba, bb, PAIRS, GANG_BOOL, GANG_MAX);
  EXPECT(ba, 1);
#undef SETUP
#undef EXPECT
}

static void test_integers(void **state) {
  (void)state;
  for_each_isa(integers_for);
}

/* MEAN: reduce as SUM over several contributions, then finish. */
static void mean_for(const char *isa) {
  (void)isa;
  enum { N = 37, RANKS = 3 };
  float f[N], g[N];
  for (int i = 0; i < N; i++)
    f[i] = (float)i;
  for (int r = 1; r < RANKS; r++) {
    for (int i = 0; i < N; i++)
      g[i] = (float)(i + r) / 7.0f;
    gang__reduce(f, g, N, GANG_FLOAT32, GANG_MEAN);
  }
  float want[N];
  for (int i = 0; i < N; i++) {
    float s = (float)i;
    for (int r = 1; r < RANKS; r++)
      s = s + (float)(i + r) / 7.0f;
    want[i] = s / 3.0f;
  }
  assert_gang_ok(gang__reduce_mean_finish(f, N, GANG_FLOAT32, RANKS));
  assert_memory_equal(f, want, sizeof f);

  double d[N];
  for (int i = 0; i < N; i++)
    d[i] = 1.0 + i;
  assert_gang_ok(gang__reduce_mean_finish(d, N, GANG_FLOAT64, 3));
  for (int i = 0; i < N; i++)
    assert_true(d[i] == (1.0 + i) / 3.0);

  uint16_t h[N], bh[N];
  for (int i = 0; i < N; i++) {
    h[i] = 0x3c00;  /* 1.0 */
    bh[i] = 0x3f80; /* 1.0 */
  }
  assert_gang_ok(gang__reduce_mean_finish(h, N, GANG_FLOAT16, 3));
  assert_gang_ok(gang__reduce_mean_finish(bh, N, GANG_BFLOAT16, 3));
  for (int i = 0; i < N; i++) {
    assert_int_equal(h[i], ref_f32_to_f16(1.0f / 3.0f));   /* 0x3555 */
    assert_int_equal(bh[i], ref_f32_to_bf16(1.0f / 3.0f)); /* 0x3eab */
  }
  /* f16 subnormal divided: 3 * 2^-24 / 2 = 1.5 * 2^-24 -> tie -> 2 */
  for (int i = 0; i < N; i++)
    h[i] = 0x0003;
  assert_gang_ok(gang__reduce_mean_finish(h, N, GANG_FLOAT16, 2));
  for (int i = 0; i < N; i++)
    assert_int_equal(h[i], 0x0002);
}

static void test_mean(void **state) {
  (void)state;
  for_each_isa(mean_for);
  /* Integers: C division, truncation toward zero. */
  int32_t i32[5] = {-7, 7, -1, INT32_MIN, INT32_MAX};
  assert_gang_ok(gang__reduce_mean_finish(i32, 5, GANG_INT32, 2));
  assert_int_equal(i32[0], -3);
  assert_int_equal(i32[1], 3);
  assert_int_equal(i32[2], 0);
  assert_int_equal(i32[3], INT32_MIN / 2);
  assert_int_equal(i32[4], INT32_MAX / 2);
  int8_t i8[3] = {-128, 127, -7};
  assert_gang_ok(gang__reduce_mean_finish(i8, 3, GANG_INT8, 200));
  assert_int_equal(i8[0], 0);
  assert_int_equal(i8[1], 0);
  assert_int_equal(i8[2], 0);
  assert_gang_ok(gang__reduce_mean_finish(i8 + 2, 1, GANG_INT8, 1));
  int16_t i16[2] = {-32768, 100};
  assert_gang_ok(gang__reduce_mean_finish(i16, 2, GANG_INT16, 3));
  assert_int_equal(i16[0], -10922);
  assert_int_equal(i16[1], 33);
  uint8_t u8[2] = {255, 5};
  assert_gang_ok(gang__reduce_mean_finish(u8, 2, GANG_UINT8, 2));
  assert_int_equal(u8[0], 127);
  assert_int_equal(u8[1], 2);
  uint32_t u32[1] = {0xffffffffu};
  assert_gang_ok(gang__reduce_mean_finish(u32, 1, GANG_UINT32, 16));
  assert_int_equal(u32[0], 0x0fffffffu);
  int64_t i64[2] = {INT64_MIN, -9};
  assert_gang_ok(gang__reduce_mean_finish(i64, 2, GANG_INT64, 4));
  assert_true(i64[0] == INT64_MIN / 4);
  assert_true(i64[1] == -2);
  uint64_t u64[1] = {UINT64_MAX};
  assert_gang_ok(gang__reduce_mean_finish(u64, 1, GANG_UINT64, 2));
  assert_true(u64[0] == UINT64_MAX / 2);
  /* bool: the or of the contributions, normalised, never divided. */
  uint8_t b[3] = {0, 1, 0x7f};
  assert_gang_ok(gang__reduce_mean_finish(b, 3, GANG_BOOL, 4));
  assert_int_equal(b[0], 0);
  assert_int_equal(b[1], 1);
  assert_int_equal(b[2], 1);
  /* n must be >= 1; nothing is touched otherwise. */
  float f[1] = {6.0f};
  assert_int_equal(gang__reduce_mean_finish(f, 1, GANG_FLOAT32, 0),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "n=0"));
  assert_true(f[0] == 6.0f);
  assert_int_equal(gang__reduce_mean_finish(f, 1, (gang_dtype)99, 2),
                   GANG_INVALID_ARGUMENT);
  assert_true(f[0] == 6.0f);
}

static void test_check(void **state) {
  (void)state;
  for (int dt = 0; dt < GANG_DTYPE_COUNT; dt++)
    for (size_t o = 0; o < N_OPS; o++)
      assert_gang_ok(gang__reduce_check((gang_dtype)dt, ops[o]));
  assert_int_equal(gang__reduce_check(GANG_DTYPE_COUNT, GANG_SUM),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "dtype 12"));
  assert_int_equal(gang__reduce_check((gang_dtype)-1, GANG_SUM),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang__reduce_check(GANG_INT8, (gang_reduce_op)0),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "op 0"));
  assert_non_null(strstr(gang_last_error(), "int8"));
  assert_int_equal(gang__reduce_check(GANG_FLOAT32, (gang_reduce_op)6),
                   GANG_INVALID_ARGUMENT);
  /* An invalid pair reaching the kernels changes nothing. */
  int32_t x[2] = {1, 2}, y[2] = {3, 4};
  gang__reduce(x, y, 2, GANG_INT32, (gang_reduce_op)9);
  gang__reduce(x, y, 2, (gang_dtype)40, GANG_SUM);
  assert_int_equal(x[0], 1);
  assert_int_equal(x[1], 2);
}

/* The instruction set: names, availability, and GANG_REDUCE_ISA read by a
 * fresh process (this binary re-run with --print-isa). */
static void test_isa_selection(void **state) {
  (void)state;
  assert_true(gang__reduce_isa_available("baseline"));
  assert_true(gang__reduce_isa_available("auto"));
  assert_false(gang__reduce_isa_available("sse9"));
  assert_int_equal(gang__reduce_set_isa("sse9"), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "sse9"));
  const char *best = gang__reduce_isa_available("avx512") ? "avx512"
                     : gang__reduce_isa_available("avx2") ? "avx2"
                                                          : "baseline";
  assert_gang_ok(gang__reduce_set_isa("auto"));
  assert_string_equal(gang__reduce_isa(), best);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw"))
    assert_string_equal(best, "avx512");
  else if (__builtin_cpu_supports("avx2"))
    assert_string_equal(best, "avx2");
#endif

  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(len > 0);
  self[len] = '\0';
  char *argv[] = {self, "--print-isa", NULL};
  struct {
    const char *env;
    const char *want;
  } cases[] = {
      {"GANG_REDUCE_ISA=baseline", "baseline"},
      {"GANG_REDUCE_ISA=avx2",
       gang__reduce_isa_available("avx2") ? "avx2" : best},
      {"GANG_REDUCE_ISA=avx512",
       gang__reduce_isa_available("avx512") ? "avx512" : best},
      {"GANG_REDUCE_ISA=auto", best},
      {"GANG_REDUCE_ISA=bogus", best},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char env[64];
    snprintf(env, sizeof env, "%s", cases[i].env);
    char *envp[] = {env, NULL};
    char *out = NULL;
    int st = gt_run_cmd(argv, envp, &out, 30000);
    assert_non_null(out);
    char line[32];
    snprintf(line, sizeof line, "isa=%s\n", cases[i].want);
    if (st != 0 || strstr(out, line) == NULL)
      fail_msg("%s: status %d, output '%s', want '%s'", cases[i].env, st, out,
               cases[i].want);
    if (strstr(cases[i].env, "bogus"))
      assert_non_null(strstr(out, "bogus"));
    free(out);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--print-isa") == 0) {
    /* For test_isa_selection: log the warning (if any) then the choice. */
    setenv("GANG_DEBUG", "WARN", 1);
    printf("isa=%s\n", gang__reduce_isa());
    return 0;
  }
  const struct CMUnitTest tests[] = {
      GT_TEST(test_conversions),
      GT_TEST(test_matrix),
      GT_TEST(test_large_streaming),
      GT_TEST(test_nan_inf_zero),
      GT_TEST(test_half_rounding),
      GT_TEST(test_integers),
      GT_TEST(test_mean),
      GT_TEST(test_check),
      GT_TEST(test_isa_selection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
