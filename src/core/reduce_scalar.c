/* The portable ("baseline") reduce kernels: plain C11, any architecture.
 * They define the semantics that the SIMD files (reduce_avx2.c,
 * reduce_avx512.c) reproduce bit for bit, and they are what runs when the
 * CPU has neither AVX2 nor AVX-512 or GANG_REDUCE_ISA=baseline.
 *
 * Elements are moved with memcpy so any byte alignment is valid (it compiles
 * to plain loads and stores). Integers are combined in unsigned arithmetic,
 * so SUM and PRODUCT wrap modulo 2^bits without undefined behaviour. Loops
 * work on blocks of 8 elements held in locals so the compiler can vectorise
 * them with the baseline ISA (SSE2 on x86-64) despite possible aliasing. */

#include "reduce_impl.h"

/* ---- scalar operations ---- */

/* NaN-propagating min/max with -0 < +0: a NaN operand wins (a's if both);
 * equal operands merge bits so min(+0,-0) = -0 and max(+0,-0) = +0 in either
 * order. The SIMD files implement exactly this. */
static inline float f32_min(float a, float b) {
  if (a != a)
    return a;
  if (b != b)
    return b;
  if (a < b)
    return a;
  if (b < a)
    return b;
  return gang__f32_of_bits(gang__f32_bits(a) | gang__f32_bits(b));
}

static inline float f32_max(float a, float b) {
  if (a != a)
    return a;
  if (b != b)
    return b;
  if (a > b)
    return a;
  if (b > a)
    return b;
  return gang__f32_of_bits(gang__f32_bits(a) & gang__f32_bits(b));
}

static inline uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static inline double f64_of_bits(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static inline double f64_min(double a, double b) {
  if (a != a)
    return a;
  if (b != b)
    return b;
  if (a < b)
    return a;
  if (b < a)
    return b;
  return f64_of_bits(f64_bits(a) | f64_bits(b));
}

static inline double f64_max(double a, double b) {
  if (a != a)
    return a;
  if (b != b)
    return b;
  if (a > b)
    return a;
  if (b > a)
    return b;
  return f64_of_bits(f64_bits(a) & f64_bits(b));
}

#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))
#define LT_MIN(a, b) ((b) < (a) ? (b) : (a))
#define GT_MAX(a, b) ((b) > (a) ? (b) : (a))

/* Half-precision types: widen, combine in float, round back. */
#define F16_OP(F)                                                              \
  static inline uint16_t f16_##F(uint16_t a, uint16_t b) {                     \
    return gang__f32_to_f16_inl(                                               \
        F(gang__f16_to_f32_inl(a), gang__f16_to_f32_inl(b)));                  \
  }                                                                            \
  static inline uint16_t bf16_##F(uint16_t a, uint16_t b) {                    \
    return gang__f32_to_bf16_inl(                                              \
        F(gang__bf16_to_f32_inl(a), gang__bf16_to_f32_inl(b)));                \
  }
static inline float fadd(float a, float b) { return a + b; }
static inline float fmul(float a, float b) { return a * b; }
F16_OP(fadd)
F16_OP(fmul)
F16_OP(f32_min)
F16_OP(f32_max)

/* Unsigned wrap-around for the narrow types: widen to unsigned int first so
 * uint16 * uint16 cannot overflow a (signed) int. */
#define U8_ADD(a, b) ((uint8_t)((unsigned)(a) + (unsigned)(b)))
#define U8_MUL(a, b) ((uint8_t)((unsigned)(a) * (unsigned)(b)))
#define U16_ADD(a, b) ((uint16_t)((unsigned)(a) + (unsigned)(b)))
#define U16_MUL(a, b) ((uint16_t)((unsigned)(a) * (unsigned)(b)))
#define U32_ADD(a, b) ((uint32_t)((uint32_t)(a) + (uint32_t)(b)))
#define U32_MUL(a, b) ((uint32_t)((uint32_t)(a) * (uint32_t)(b)))
#define U64_ADD(a, b) ((uint64_t)(a) + (uint64_t)(b))
#define U64_MUL(a, b) ((uint64_t)(a) * (uint64_t)(b))

/* bool: any nonzero byte is true; results are 0 or 1. */
#define B_OR(a, b) ((uint8_t)(((a) | (b)) != 0))
#define B_AND(a, b) ((uint8_t)((a) != 0 && (b) != 0))

/* Block-of-8 kernel over element type T (storage) with OP on T values. */
#define SKERNEL(NAME, T, OP)                                                   \
  static void NAME(void *dst, const void *a, const void *b, size_t n) {        \
    unsigned char *d = dst;                                                    \
    const unsigned char *x = a, *y = b;                                        \
    size_t i = 0;                                                              \
    for (; i + 8 <= n; i += 8) {                                               \
      T va[8], vb[8];                                                          \
      memcpy(va, x + i * sizeof(T), sizeof va);                                \
      memcpy(vb, y + i * sizeof(T), sizeof vb);                                \
      for (int k = 0; k < 8; k++)                                              \
        va[k] = OP(va[k], vb[k]);                                              \
      memcpy(d + i * sizeof(T), va, sizeof va);                                \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      T p, q;                                                                  \
      memcpy(&p, x + i * sizeof(T), sizeof p);                                 \
      memcpy(&q, y + i * sizeof(T), sizeof q);                                 \
      p = OP(p, q);                                                            \
      memcpy(d + i * sizeof(T), &p, sizeof p);                                 \
    }                                                                          \
  }

SKERNEL(k_f32_sum, float, ADD)
SKERNEL(k_f32_prod, float, MUL)
SKERNEL(k_f32_min, float, f32_min)
SKERNEL(k_f32_max, float, f32_max)
SKERNEL(k_f64_sum, double, ADD)
SKERNEL(k_f64_prod, double, MUL)
SKERNEL(k_f64_min, double, f64_min)
SKERNEL(k_f64_max, double, f64_max)
SKERNEL(k_f16_sum, uint16_t, f16_fadd)
SKERNEL(k_f16_prod, uint16_t, f16_fmul)
SKERNEL(k_f16_min, uint16_t, f16_f32_min)
SKERNEL(k_f16_max, uint16_t, f16_f32_max)
SKERNEL(k_bf16_sum, uint16_t, bf16_fadd)
SKERNEL(k_bf16_prod, uint16_t, bf16_fmul)
SKERNEL(k_bf16_min, uint16_t, bf16_f32_min)
SKERNEL(k_bf16_max, uint16_t, bf16_f32_max)
SKERNEL(k_u8_sum, uint8_t, U8_ADD)
SKERNEL(k_u8_prod, uint8_t, U8_MUL)
SKERNEL(k_u8_min, uint8_t, LT_MIN)
SKERNEL(k_u8_max, uint8_t, GT_MAX)
SKERNEL(k_i8_min, int8_t, LT_MIN)
SKERNEL(k_i8_max, int8_t, GT_MAX)
SKERNEL(k_u16_sum, uint16_t, U16_ADD)
SKERNEL(k_u16_prod, uint16_t, U16_MUL)
SKERNEL(k_i16_min, int16_t, LT_MIN)
SKERNEL(k_i16_max, int16_t, GT_MAX)
SKERNEL(k_u32_sum, uint32_t, U32_ADD)
SKERNEL(k_u32_prod, uint32_t, U32_MUL)
SKERNEL(k_u32_min, uint32_t, LT_MIN)
SKERNEL(k_u32_max, uint32_t, GT_MAX)
SKERNEL(k_i32_min, int32_t, LT_MIN)
SKERNEL(k_i32_max, int32_t, GT_MAX)
SKERNEL(k_u64_sum, uint64_t, U64_ADD)
SKERNEL(k_u64_prod, uint64_t, U64_MUL)
SKERNEL(k_u64_min, uint64_t, LT_MIN)
SKERNEL(k_u64_max, uint64_t, GT_MAX)
SKERNEL(k_i64_min, int64_t, LT_MIN)
SKERNEL(k_i64_max, int64_t, GT_MAX)
SKERNEL(k_bool_or, uint8_t, B_OR)
SKERNEL(k_bool_and, uint8_t, B_AND)

/* MEAN finish for the floating types: one correctly rounded division in the
 * compute type (float for f16/bf16/f32, double for f64). */
#define SMEAN(NAME, T, LOADF, STOREF, CT)                                      \
  static void NAME(void *buf, size_t n, int div) {                             \
    unsigned char *p = buf;                                                    \
    const CT dv = (CT)div;                                                     \
    for (size_t i = 0; i < n; i++) {                                           \
      T v;                                                                     \
      memcpy(&v, p + i * sizeof(T), sizeof v);                                 \
      v = STOREF(LOADF(v) / dv);                                               \
      memcpy(p + i * sizeof(T), &v, sizeof v);                                 \
    }                                                                          \
  }
#define IDENT(x) (x)
SMEAN(m_f32, float, IDENT, IDENT, float)
SMEAN(m_f64, double, IDENT, IDENT, double)
SMEAN(m_f16, uint16_t, gang__f16_to_f32_inl, gang__f32_to_f16_inl, float)
SMEAN(m_bf16, uint16_t, gang__bf16_to_f32_inl, gang__f32_to_bf16_inl, float)

/* Signed and unsigned integers share SUM and PRODUCT (same bits). */
const gang__reduce_table gang__reduce_table_baseline = {
    .name = "baseline",
    .fn =
        {
            [GANG_FLOAT32] = {k_f32_sum, k_f32_prod, k_f32_min, k_f32_max},
            [GANG_FLOAT64] = {k_f64_sum, k_f64_prod, k_f64_min, k_f64_max},
            [GANG_FLOAT16] = {k_f16_sum, k_f16_prod, k_f16_min, k_f16_max},
            [GANG_BFLOAT16] = {k_bf16_sum, k_bf16_prod, k_bf16_min, k_bf16_max},
            [GANG_INT8] = {k_u8_sum, k_u8_prod, k_i8_min, k_i8_max},
            [GANG_UINT8] = {k_u8_sum, k_u8_prod, k_u8_min, k_u8_max},
            [GANG_INT16] = {k_u16_sum, k_u16_prod, k_i16_min, k_i16_max},
            [GANG_INT32] = {k_u32_sum, k_u32_prod, k_i32_min, k_i32_max},
            [GANG_INT64] = {k_u64_sum, k_u64_prod, k_i64_min, k_i64_max},
            [GANG_UINT32] = {k_u32_sum, k_u32_prod, k_u32_min, k_u32_max},
            [GANG_UINT64] = {k_u64_sum, k_u64_prod, k_u64_min, k_u64_max},
            [GANG_BOOL] = {k_bool_or, k_bool_and, k_bool_and, k_bool_or},
        },
    .mean =
        {
            [GANG_FLOAT32] = m_f32,
            [GANG_FLOAT64] = m_f64,
            [GANG_FLOAT16] = m_f16,
            [GANG_BFLOAT16] = m_bf16,
        },
};
