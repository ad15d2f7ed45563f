/* Reduce kernels, the cases that SIMD code gets wrong, for one instruction
 * set a run (reduce_ref.h): float16/bfloat16 conversions and rounding ties, NaN
 * in MIN/MAX, signed zeros, overflow to infinity, subnormals, integer
 * wrap-around, MEAN finishing, argument checks, and the GANG_REDUCE_ISA
 * setting. The full dtype x op matrix is test_reduce.c. */
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
#include "reduce_ref.h"

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
  with_isa(nan_and_zeros_for);
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
  with_isa(half_rounding_for);
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
  with_isa(integers_for);
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
  with_isa(mean_for);
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
  int rc = ref_choose_isa(argc, argv);
  if (rc >= 0)
    return rc;
  /* The cases that do not depend on the instruction set run once, in the
   * baseline entry. */
  const struct CMUnitTest per_isa[] = {
      GT_TEST(test_nan_inf_zero),
      GT_TEST(test_half_rounding),
      GT_TEST(test_integers),
      GT_TEST(test_mean),
  };
  if (strcmp(ref_isa, "baseline") != 0)
    return cmocka_run_group_tests(per_isa, NULL, NULL);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_conversions),   GT_TEST(test_nan_inf_zero),
      GT_TEST(test_half_rounding), GT_TEST(test_integers),
      GT_TEST(test_mean),          GT_TEST(test_check),
      GT_TEST(test_isa_selection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
