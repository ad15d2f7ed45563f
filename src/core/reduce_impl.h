/* Private to the reduce kernels (src/core/reduce*.c): the kernel table that
 * each instruction-set file fills in, the float16/bfloat16 scalar
 * conversions, the loop skeletons that the SIMD files instantiate with
 * their own vector operations, and the one list their tables come from.
 * Nothing here is for other modules; they use core/reduce.h. */
#ifndef GANG_CORE_REDUCE_IMPL_H
#define GANG_CORE_REDUCE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gang/types.h"

/* dst[i] = a[i] (op) b[i] for i < n; dst may be a or b (same address), no
 * other overlap; any byte alignment. */
typedef void (*gang__reduce_fn)(void *dst, const void *a, const void *b,
                                size_t n);
/* buf[i] = buf[i] / div in the dtype's compute type (floating types). */
typedef void (*gang__mean_fn)(void *buf, size_t n, int div);

/* Column of a table row; MEAN shares SUM's kernel. */
enum {
  GANG__ROP_SUM,
  GANG__ROP_PROD,
  GANG__ROP_MIN,
  GANG__ROP_MAX,
  GANG__ROP_N
};

typedef struct gang__reduce_table {
  const char *name;
  gang__reduce_fn fn[GANG_DTYPE_COUNT][GANG__ROP_N];
  /* Streaming-store variants for large out-of-place calls (see
   * GANG__REDUCE_NT_BYTES); NULL where a set has none. */
  gang__reduce_fn nt[GANG_DTYPE_COUNT][GANG__ROP_N];
  /* Only the four floating dtypes; integers are finished in reduce.c. */
  gang__mean_fn mean[GANG_DTYPE_COUNT];
} gang__reduce_table;

extern const gang__reduce_table gang__reduce_table_baseline;
#if defined(GANG_REDUCE_X86)
extern const gang__reduce_table gang__reduce_table_avx2;
extern const gang__reduce_table gang__reduce_table_avx512;
#endif

/* ---- float16 / bfloat16 <-> float32, scalar, exact IEEE behaviour ----
 * Widening is exact. Narrowing rounds to nearest, ties to even, overflows to
 * infinity, produces subnormals, and turns NaN into a quiet NaN keeping the
 * top payload bits and the sign: the same results as F16C's
 * vcvtph2ps/vcvtps2ph (imm 0), so the SIMD paths agree bit for bit. */

static inline uint32_t gang__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float gang__f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float gang__f16_to_f32_inl(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN made quiet */
    return gang__f32_of_bits(sign | 0x7f800000u | (man << 13) |
                             (man ? 0x400000u : 0));
  if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in float */
    float v = (float)man * 0x1p-24f;
    return gang__f32_of_bits(sign | gang__f32_bits(v));
  }
  return gang__f32_of_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t gang__f32_to_f16_inl(float f) {
  uint32_t u = gang__f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet, top 9 payload bits kept */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* >= 65520 (half-way above 65504): infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* normal half: round the 13 dropped bits */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  /* Subnormal half (or zero): result = round(|f| * 2^24). With |f| =
   * m * 2^(e-150), that is m >> (126 - e), rounded to nearest even. */
  uint32_t e = a >> 23;
  if (e < 102) /* shift > 24: below half of the smallest subnormal */
    return sign;
  uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126 - e;
  uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u)))
    q++;
  return (uint16_t)(sign | q);
}

static inline float gang__bf16_to_f32_inl(uint16_t h) {
  return gang__f32_of_bits((uint32_t)h << 16);
}

static inline uint16_t gang__f32_to_bf16_inl(float f) {
  uint32_t u = gang__f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
    return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- loop skeletons for the SIMD files ----
 * GANG__VKERNEL defines `static void NAME(dst, a, b, n)` from:
 *   ES  element size in bytes      W   elements per vector
 *   VT  vector (compute) type      LD(p) load W elements at byte pointer p
 *   ST(p, v) store W elements      OP(x, y) combine two vectors
 * Four vectors per iteration, then single vectors, then the tail through a
 * zero-filled stack block so that the tail goes through the very same vector
 * code (bit-identical results, no scalar twin to keep in sync). All loads of
 * an iteration precede its stores, so dst == a or dst == b is fine. */
#define GANG__VKERNEL(NAME, ES, W, VT, LD, ST, OP)                             \
  static void NAME(void *dst, const void *a, const void *b, size_t n) {        \
    unsigned char *d = dst;                                                    \
    const unsigned char *x = a, *y = b;                                        \
    const size_t v = (size_t)(W) * (ES);                                       \
    size_t i = 0;                                                              \
    for (; i + 4 * (size_t)(W) <= n; i += 4 * (size_t)(W)) {                   \
      const size_t o = i * (ES);                                               \
      VT a0 = LD(x + o), a1 = LD(x + o + v);                                   \
      VT a2 = LD(x + o + 2 * v), a3 = LD(x + o + 3 * v);                       \
      VT b0 = LD(y + o), b1 = LD(y + o + v);                                   \
      VT b2 = LD(y + o + 2 * v), b3 = LD(y + o + 3 * v);                       \
      ST(d + o, OP(a0, b0));                                                   \
      ST(d + o + v, OP(a1, b1));                                               \
      ST(d + o + 2 * v, OP(a2, b2));                                           \
      ST(d + o + 3 * v, OP(a3, b3));                                           \
    }                                                                          \
    for (; i + (W) <= n; i += (W)) {                                           \
      const size_t o = i * (ES);                                               \
      VT a0 = LD(x + o), b0 = LD(y + o);                                       \
      ST(d + o, OP(a0, b0));                                                   \
    }                                                                          \
    if (i < n) {                                                               \
      unsigned char ta[(W) * (ES)], tb[(W) * (ES)];                            \
      const size_t r = (n - i) * (ES);                                         \
      memset(ta, 0, sizeof ta);                                                \
      memset(tb, 0, sizeof tb);                                                \
      memcpy(ta, x + i * (ES), r);                                             \
      memcpy(tb, y + i * (ES), r);                                             \
      VT a0 = LD(ta), b0 = LD(tb);                                             \
      ST(ta, OP(a0, b0));                                                      \
      memcpy(d + i * (ES), ta, r);                                             \
    }                                                                          \
  }

/* Out-of-place calls whose destination is at least this large use
 * non-temporal stores: the result cannot stay in cache anyway, and streaming
 * it skips the read-for-ownership of every destination line (a third less
 * memory traffic: 3 streams instead of 4). */
#define GANG__REDUCE_NT_BYTES ((size_t)16 << 20)

/* GANG__VKERNEL_NT defines NAME like GANG__VKERNEL but with the body stored
 * by STNT (a non-temporal store needing 64-byte alignment); BASE (the
 * GANG__VKERNEL of the same operation) does the unaligned head and the tail.
 * dst must not be a or b. A dst that is not even element-aligned cannot
 * reach a 64-byte boundary in whole elements and goes to BASE entirely. */
#define GANG__VKERNEL_NT(NAME, BASE, ES, W, VT, LD, STNT, OP)                  \
  static void NAME(void *dst, const void *a, const void *b, size_t n) {        \
    unsigned char *d = dst;                                                    \
    const unsigned char *x = a, *y = b;                                        \
    const size_t v = (size_t)(W) * (ES);                                       \
    uintptr_t mis = (uintptr_t)d % 64;                                         \
    if (mis % (ES) != 0) {                                                     \
      BASE(dst, a, b, n);                                                      \
      return;                                                                  \
    }                                                                          \
    size_t i = mis ? (64 - mis) / (ES) : 0;                                    \
    if (i > n)                                                                 \
      i = n;                                                                   \
    BASE(d, x, y, i);                                                          \
    for (; i + 4 * (size_t)(W) <= n; i += 4 * (size_t)(W)) {                   \
      const size_t o = i * (ES);                                               \
      VT a0 = LD(x + o), a1 = LD(x + o + v);                                   \
      VT a2 = LD(x + o + 2 * v), a3 = LD(x + o + 3 * v);                       \
      VT b0 = LD(y + o), b1 = LD(y + o + v);                                   \
      VT b2 = LD(y + o + 2 * v), b3 = LD(y + o + 3 * v);                       \
      STNT(d + o, OP(a0, b0));                                                 \
      STNT(d + o + v, OP(a1, b1));                                             \
      STNT(d + o + 2 * v, OP(a2, b2));                                         \
      STNT(d + o + 3 * v, OP(a3, b3));                                         \
    }                                                                          \
    BASE(d + i * (ES), x + i * (ES), y + i * (ES), n - i);                     \
    _mm_sfence(); /* order the streamed stores before later ones */            \
  }

/* ---- the SIMD kernel set ----
 * One row per dtype: the kernels of its SUM, PROD, MIN and MAX columns, and
 * whether they have streaming-store twins (NAME_nt, GANG__VKERNEL_NT): NT or
 * NO_NT. Every SIMD file defines kernels of exactly these names, with its
 * own vector width and operations, plus the means m_f32, m_f64, m_f16 and
 * m_bf16; GANG__SIMD_TABLE fills its table from this one list, so the
 * instruction sets cannot disagree on which kernel serves which slot.
 * Signed and unsigned integers share SUM and PROD (both wrap alike in two's
 * complement); BOOL's SUM and MAX are OR, its PROD and MIN are AND. */
#define GANG__SIMD_KERNELS(X)                                                  \
  X(FLOAT32, k_ps_sum, k_ps_prod, k_ps_min, k_ps_max, NT)                      \
  X(FLOAT64, k_pd_sum, k_pd_prod, k_pd_min, k_pd_max, NT)                      \
  X(FLOAT16, k_f16_sum, k_f16_prod, k_f16_min, k_f16_max, NO_NT)               \
  X(BFLOAT16, k_bf16_sum, k_bf16_prod, k_bf16_min, k_bf16_max, NO_NT)          \
  X(INT8, k_8_sum, k_8_prod, k_i8_min, k_i8_max, NT)                           \
  X(UINT8, k_8_sum, k_8_prod, k_u8_min, k_u8_max, NT)                          \
  X(INT16, k_16_sum, k_16_prod, k_i16_min, k_i16_max, NT)                      \
  X(INT32, k_32_sum, k_32_prod, k_i32_min, k_i32_max, NT)                      \
  X(INT64, k_64_sum, k_64_prod, k_i64_min, k_i64_max, NT)                      \
  X(UINT32, k_32_sum, k_32_prod, k_u32_min, k_u32_max, NT)                     \
  X(UINT64, k_64_sum, k_64_prod, k_u64_min, k_u64_max, NT)                     \
  X(BOOL, k_bool_or, k_bool_and, k_bool_and, k_bool_or, NT)

#define GANG__SIMD_FN_ROW(DT, SUM, PROD, MIN, MAX, NT)                         \
  [GANG_##DT] = {SUM, PROD, MIN, MAX},
#define GANG__SIMD_NT_ROW(DT, SUM, PROD, MIN, MAX, NT)                         \
  GANG__SIMD_NT_ROW_##NT(DT, SUM, PROD, MIN, MAX)
#define GANG__SIMD_NT_ROW_NT(DT, SUM, PROD, MIN, MAX)                          \
  [GANG_##DT] = {SUM##_nt, PROD##_nt, MIN##_nt, MAX##_nt},
#define GANG__SIMD_NT_ROW_NO_NT(DT, SUM, PROD, MIN, MAX)

/* The initializer of a SIMD file's gang__reduce_table, named NAME. */
#define GANG__SIMD_TABLE(NAME)                                                 \
  {                                                                            \
    .name = (NAME), .fn = {GANG__SIMD_KERNELS(GANG__SIMD_FN_ROW)},             \
    .nt = {GANG__SIMD_KERNELS(GANG__SIMD_NT_ROW)},                             \
    .mean = {                                                                  \
        [GANG_FLOAT32] = m_f32,                                                \
        [GANG_FLOAT64] = m_f64,                                                \
        [GANG_FLOAT16] = m_f16,                                                \
        [GANG_BFLOAT16] = m_bf16,                                              \
    },                                                                         \
  }

/* GANG__VMEAN defines `static void NAME(buf, n, div)`: buf[i] /= div, with
 * DIV(v, dv) dividing a vector by the broadcast divisor SPLAT(div). */
#define GANG__VMEAN(NAME, ES, W, VT, LD, ST, DIV, SPLAT)                       \
  static void NAME(void *buf, size_t n, int div) {                             \
    unsigned char *p = buf;                                                    \
    const VT dv = SPLAT(div);                                                  \
    size_t i = 0;                                                              \
    for (; i + (W) <= n; i += (W)) {                                           \
      VT x0 = LD(p + i * (ES));                                                \
      ST(p + i * (ES), DIV(x0, dv));                                           \
    }                                                                          \
    if (i < n) {                                                               \
      unsigned char t[(W) * (ES)];                                             \
      const size_t r = (n - i) * (ES);                                         \
      memset(t, 0, sizeof t);                                                  \
      memcpy(t, p + i * (ES), r);                                              \
      VT x0 = LD(t);                                                           \
      ST(t, DIV(x0, dv));                                                      \
      memcpy(p + i * (ES), t, r);                                              \
    }                                                                          \
  }

#endif
