/* AVX2 (+FMA, F16C) reduce kernels, 256-bit vectors. This file alone is
 * compiled with -mavx2 -mfma -mf16c (src/core/CMakeLists.txt); reduce.c only
 * calls into its table after checking the CPU, so the rest of the library
 * stays portable. Results equal reduce_scalar.c's bit for bit, including
 * NaN propagation and signed zeros in MIN/MAX (plain vminps/vmaxps return
 * the second operand when either is NaN or both are zero, so the blends
 * below fix both cases). */
#include <immintrin.h>

#include "reduce_impl.h"

/* ---- loads and stores (any alignment) ---- */
#define LD_PS(p) _mm256_loadu_ps((const float *)(const void *)(p))
#define ST_PS(p, v) _mm256_storeu_ps((float *)(void *)(p), (v))
#define LD_PD(p) _mm256_loadu_pd((const double *)(const void *)(p))
#define ST_PD(p, v) _mm256_storeu_pd((double *)(void *)(p), (v))
#define LD_SI(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define ST_SI(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define NT_PS(p, v) _mm256_stream_ps((float *)(void *)(p), (v))
#define NT_PD(p, v) _mm256_stream_pd((double *)(void *)(p), (v))
#define NT_SI(p, v) _mm256_stream_si256((__m256i *)(void *)(p), (v))
#define LD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define ST128(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

/* float16: 8 halves widen exactly; narrowing rounds to nearest even. */
#define LD_F16(p) _mm256_cvtph_ps(LD128(p))
#define ST_F16(p, v) ST128((p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))

/* bfloat16: widen by shifting into the high half. Narrow with integer
 * round-to-nearest-even (vcvtneps2bf16 would flush subnormals), NaN made
 * quiet, then pack the 32-bit lanes to 16 bits. */
#define LD_BF16(p)                                                             \
  _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(LD128(p)), 16))
static inline __m128i bf16_narrow(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb =
      _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  r = _mm256_srli_epi32(r, 16);
  __m256i q =
      _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, q, nan);
  /* Lanes hold 0..0xffff, so unsigned saturation is exact; packus works per
   * 128-bit half, hence the qword permute. */
  __m256i p = _mm256_packus_epi32(r, r);
  p = _mm256_permute4x64_epi64(p, 0x08);
  return _mm256_castsi256_si128(p);
}
#define ST_BF16(p, v) ST128((p), bf16_narrow(v))

/* ---- floating operations ---- */
static inline __m256 min_ps(__m256 a, __m256 b) {
  __m256 r = _mm256_min_ps(a, b);
  r = _mm256_blendv_ps(r, _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static inline __m256 max_ps(__m256 a, __m256 b) {
  __m256 r = _mm256_max_ps(a, b);
  r = _mm256_blendv_ps(r, _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static inline __m256d min_pd(__m256d a, __m256d b) {
  __m256d r = _mm256_min_pd(a, b);
  r = _mm256_blendv_pd(r, _mm256_or_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
  return _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}
static inline __m256d max_pd(__m256d a, __m256d b) {
  __m256d r = _mm256_max_pd(a, b);
  r = _mm256_blendv_pd(r, _mm256_and_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
  return _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}

/* ---- integer operations missing from AVX2 ---- */
/* 8-bit product: multiply even and odd bytes as 16-bit lanes; the low byte
 * of a 16-bit product depends only on the low bytes of the factors. */
static inline __m256i mul_epi8(__m256i a, __m256i b) {
  __m256i even = _mm256_mullo_epi16(a, b);
  __m256i odd =
      _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)),
                         _mm256_slli_epi16(odd, 8));
}
/* 64-bit product mod 2^64 from 32x32->64 pieces: lo*lo + (lo*hi + hi*lo)<<32.
 */
static inline __m256i mul_epi64(__m256i a, __m256i b) {
  __m256i lo = _mm256_mul_epu32(a, b);
  __m256i c1 = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
  __m256i c2 = _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(_mm256_add_epi64(c1, c2), 32));
}
static inline __m256i min_epi64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
}
static inline __m256i max_epi64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
}
/* Unsigned compare = signed compare after flipping the top bit. */
static inline __m256i gt_epu64(__m256i a, __m256i b) {
  const __m256i s = _mm256_set1_epi64x((long long)0x8000000000000000ULL);
  return _mm256_cmpgt_epi64(_mm256_xor_si256(a, s), _mm256_xor_si256(b, s));
}
static inline __m256i min_epu64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(a, b, gt_epu64(a, b));
}
static inline __m256i max_epu64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(b, a, gt_epu64(a, b));
}
/* bool: any nonzero byte is true; min with 1 turns "nonzero" into 1. */
static inline __m256i bool_or(__m256i a, __m256i b) {
  return _mm256_min_epu8(_mm256_or_si256(a, b), _mm256_set1_epi8(1));
}
static inline __m256i bool_and(__m256i a, __m256i b) {
  return _mm256_min_epu8(_mm256_min_epu8(a, b), _mm256_set1_epi8(1));
}

/* ---- kernels ---- */
#define FK(T, ES, W, VT, LD, ST, NT)                                           \
  GANG__VKERNEL(k_##T##_sum, ES, W, VT, LD, ST, _mm256_add_##T)                \
  GANG__VKERNEL(k_##T##_prod, ES, W, VT, LD, ST, _mm256_mul_##T)               \
  GANG__VKERNEL(k_##T##_min, ES, W, VT, LD, ST, min_##T)                       \
  GANG__VKERNEL(k_##T##_max, ES, W, VT, LD, ST, max_##T)                       \
  GANG__VKERNEL_NT(k_##T##_sum_nt, k_##T##_sum, ES, W, VT, LD, NT,             \
                   _mm256_add_##T)                                             \
  GANG__VKERNEL_NT(k_##T##_prod_nt, k_##T##_prod, ES, W, VT, LD, NT,           \
                   _mm256_mul_##T)                                             \
  GANG__VKERNEL_NT(k_##T##_min_nt, k_##T##_min, ES, W, VT, LD, NT, min_##T)    \
  GANG__VKERNEL_NT(k_##T##_max_nt, k_##T##_max, ES, W, VT, LD, NT, max_##T)
FK(ps, 4, 8, __m256, LD_PS, ST_PS, NT_PS)
FK(pd, 8, 4, __m256d, LD_PD, ST_PD, NT_PD)
GANG__VKERNEL(k_f16_sum, 2, 8, __m256, LD_F16, ST_F16, _mm256_add_ps)
GANG__VKERNEL(k_f16_prod, 2, 8, __m256, LD_F16, ST_F16, _mm256_mul_ps)
GANG__VKERNEL(k_f16_min, 2, 8, __m256, LD_F16, ST_F16, min_ps)
GANG__VKERNEL(k_f16_max, 2, 8, __m256, LD_F16, ST_F16, max_ps)
GANG__VKERNEL(k_bf16_sum, 2, 8, __m256, LD_BF16, ST_BF16, _mm256_add_ps)
GANG__VKERNEL(k_bf16_prod, 2, 8, __m256, LD_BF16, ST_BF16, _mm256_mul_ps)
GANG__VKERNEL(k_bf16_min, 2, 8, __m256, LD_BF16, ST_BF16, min_ps)
GANG__VKERNEL(k_bf16_max, 2, 8, __m256, LD_BF16, ST_BF16, max_ps)

#define IK(NAME, ES, OP)                                                       \
  GANG__VKERNEL(NAME, ES, 32 / (ES), __m256i, LD_SI, ST_SI, OP)                \
  GANG__VKERNEL_NT(NAME##_nt, NAME, ES, 32 / (ES), __m256i, LD_SI, NT_SI, OP)
IK(k_8_sum, 1, _mm256_add_epi8)
IK(k_8_prod, 1, mul_epi8)
IK(k_i8_min, 1, _mm256_min_epi8)
IK(k_i8_max, 1, _mm256_max_epi8)
IK(k_u8_min, 1, _mm256_min_epu8)
IK(k_u8_max, 1, _mm256_max_epu8)
IK(k_16_sum, 2, _mm256_add_epi16)
IK(k_16_prod, 2, _mm256_mullo_epi16)
IK(k_i16_min, 2, _mm256_min_epi16)
IK(k_i16_max, 2, _mm256_max_epi16)
IK(k_32_sum, 4, _mm256_add_epi32)
IK(k_32_prod, 4, _mm256_mullo_epi32)
IK(k_i32_min, 4, _mm256_min_epi32)
IK(k_i32_max, 4, _mm256_max_epi32)
IK(k_u32_min, 4, _mm256_min_epu32)
IK(k_u32_max, 4, _mm256_max_epu32)
IK(k_64_sum, 8, _mm256_add_epi64)
IK(k_64_prod, 8, mul_epi64)
IK(k_i64_min, 8, min_epi64)
IK(k_i64_max, 8, max_epi64)
IK(k_u64_min, 8, min_epu64)
IK(k_u64_max, 8, max_epu64)
IK(k_bool_or, 1, bool_or)
IK(k_bool_and, 1, bool_and)

#define SPLAT_PS(d) _mm256_set1_ps((float)(d))
#define SPLAT_PD(d) _mm256_set1_pd((double)(d))
GANG__VMEAN(m_f32, 4, 8, __m256, LD_PS, ST_PS, _mm256_div_ps, SPLAT_PS)
GANG__VMEAN(m_f64, 8, 4, __m256d, LD_PD, ST_PD, _mm256_div_pd, SPLAT_PD)
GANG__VMEAN(m_f16, 2, 8, __m256, LD_F16, ST_F16, _mm256_div_ps, SPLAT_PS)
GANG__VMEAN(m_bf16, 2, 8, __m256, LD_BF16, ST_BF16, _mm256_div_ps, SPLAT_PS)

const gang__reduce_table gang__reduce_table_avx2 = GANG__SIMD_TABLE("avx2");
