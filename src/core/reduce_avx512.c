/* AVX-512 (F, BW, DQ, VL) reduce kernels, 512-bit vectors. Compiled alone
 * with the matching -m flags (src/core/CMakeLists.txt) and only reached
 * after reduce.c has checked the CPU and the OS (ZMM state enabled). Results
 * equal reduce_scalar.c's bit for bit; MIN/MAX fix up NaNs and signed zeros
 * with mask blends because vminps/vmaxps alone return the second operand
 * when either input is NaN or both are zero. */
#include <immintrin.h>

#include "reduce_impl.h"

#define LD_PS(p) _mm512_loadu_ps((const void *)(p))
#define ST_PS(p, v) _mm512_storeu_ps((void *)(p), (v))
#define LD_PD(p) _mm512_loadu_pd((const void *)(p))
#define ST_PD(p, v) _mm512_storeu_pd((void *)(p), (v))
#define LD_SI(p) _mm512_loadu_si512((const void *)(p))
#define ST_SI(p, v) _mm512_storeu_si512((void *)(p), (v))
#define NT_PS(p, v) _mm512_stream_ps((void *)(p), (v))
#define NT_PD(p, v) _mm512_stream_pd((void *)(p), (v))
#define NT_SI(p, v) _mm512_stream_si512((void *)(p), (v))
#define LD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define ST256(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))

/* float16: 16 halves per vector; narrowing rounds to nearest even. */
#define LD_F16(p) _mm512_cvtph_ps(LD256(p))
#define ST_F16(p, v) ST256((p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))

/* bfloat16: widen by shifting; narrow by integer round-to-nearest-even with
 * quiet NaNs (vcvtneps2bf16 would flush subnormals), then vpmovdw. */
#define LD_BF16(p)                                                             \
  _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(LD256(p)), 16))
static inline __m256i bf16_narrow(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r =
      _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_srli_epi32(r, 16);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}
#define ST_BF16(p, v) ST256((p), bf16_narrow(v))

/* ---- floating operations ---- */
static inline __m512 min_ps(__m512 a, __m512 b) {
  __m512 r = _mm512_min_ps(a, b);
  r = _mm512_mask_or_ps(r, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), a, b);
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512 max_ps(__m512 a, __m512 b) {
  __m512 r = _mm512_max_ps(a, b);
  r = _mm512_mask_and_ps(r, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), a, b);
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512d min_pd(__m512d a, __m512d b) {
  __m512d r = _mm512_min_pd(a, b);
  r = _mm512_mask_or_pd(r, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), a, b);
  return _mm512_mask_mov_pd(r, _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512d max_pd(__m512d a, __m512d b) {
  __m512d r = _mm512_max_pd(a, b);
  r = _mm512_mask_and_pd(r, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), a, b);
  return _mm512_mask_mov_pd(r, _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
}

/* ---- integer operations ---- */
/* 8-bit product from two 16-bit products (even and odd bytes). */
static inline __m512i mul_epi8(__m512i a, __m512i b) {
  __m512i even = _mm512_mullo_epi16(a, b);
  __m512i odd =
      _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0xff)),
                         _mm512_slli_epi16(odd, 8));
}
static inline __m512i bool_or(__m512i a, __m512i b) {
  return _mm512_min_epu8(_mm512_or_si512(a, b), _mm512_set1_epi8(1));
}
static inline __m512i bool_and(__m512i a, __m512i b) {
  return _mm512_min_epu8(_mm512_min_epu8(a, b), _mm512_set1_epi8(1));
}

/* ---- kernels ---- */
#define FK(T, ES, W, VT, LD, ST, NT)                                           \
  GANG__VKERNEL(k_##T##_sum, ES, W, VT, LD, ST, _mm512_add_##T)                \
  GANG__VKERNEL(k_##T##_prod, ES, W, VT, LD, ST, _mm512_mul_##T)               \
  GANG__VKERNEL(k_##T##_min, ES, W, VT, LD, ST, min_##T)                       \
  GANG__VKERNEL(k_##T##_max, ES, W, VT, LD, ST, max_##T)                       \
  GANG__VKERNEL_NT(k_##T##_sum_nt, k_##T##_sum, ES, W, VT, LD, NT,             \
                   _mm512_add_##T)                                             \
  GANG__VKERNEL_NT(k_##T##_prod_nt, k_##T##_prod, ES, W, VT, LD, NT,           \
                   _mm512_mul_##T)                                             \
  GANG__VKERNEL_NT(k_##T##_min_nt, k_##T##_min, ES, W, VT, LD, NT, min_##T)    \
  GANG__VKERNEL_NT(k_##T##_max_nt, k_##T##_max, ES, W, VT, LD, NT, max_##T)
FK(ps, 4, 16, __m512, LD_PS, ST_PS, NT_PS)
FK(pd, 8, 8, __m512d, LD_PD, ST_PD, NT_PD)
GANG__VKERNEL(k_f16_sum, 2, 16, __m512, LD_F16, ST_F16, _mm512_add_ps)
GANG__VKERNEL(k_f16_prod, 2, 16, __m512, LD_F16, ST_F16, _mm512_mul_ps)
GANG__VKERNEL(k_f16_min, 2, 16, __m512, LD_F16, ST_F16, min_ps)
GANG__VKERNEL(k_f16_max, 2, 16, __m512, LD_F16, ST_F16, max_ps)
GANG__VKERNEL(k_bf16_sum, 2, 16, __m512, LD_BF16, ST_BF16, _mm512_add_ps)
GANG__VKERNEL(k_bf16_prod, 2, 16, __m512, LD_BF16, ST_BF16, _mm512_mul_ps)
GANG__VKERNEL(k_bf16_min, 2, 16, __m512, LD_BF16, ST_BF16, min_ps)
GANG__VKERNEL(k_bf16_max, 2, 16, __m512, LD_BF16, ST_BF16, max_ps)

#define IK(NAME, ES, OP)                                                       \
  GANG__VKERNEL(NAME, ES, 64 / (ES), __m512i, LD_SI, ST_SI, OP)                \
  GANG__VKERNEL_NT(NAME##_nt, NAME, ES, 64 / (ES), __m512i, LD_SI, NT_SI, OP)
IK(k_8_sum, 1, _mm512_add_epi8)
IK(k_8_prod, 1, mul_epi8)
IK(k_i8_min, 1, _mm512_min_epi8)
IK(k_i8_max, 1, _mm512_max_epi8)
IK(k_u8_min, 1, _mm512_min_epu8)
IK(k_u8_max, 1, _mm512_max_epu8)
IK(k_16_sum, 2, _mm512_add_epi16)
IK(k_16_prod, 2, _mm512_mullo_epi16)
IK(k_i16_min, 2, _mm512_min_epi16)
IK(k_i16_max, 2, _mm512_max_epi16)
IK(k_32_sum, 4, _mm512_add_epi32)
IK(k_32_prod, 4, _mm512_mullo_epi32)
IK(k_i32_min, 4, _mm512_min_epi32)
IK(k_i32_max, 4, _mm512_max_epi32)
IK(k_u32_min, 4, _mm512_min_epu32)
IK(k_u32_max, 4, _mm512_max_epu32)
IK(k_64_sum, 8, _mm512_add_epi64)
IK(k_64_prod, 8, _mm512_mullo_epi64)
IK(k_i64_min, 8, _mm512_min_epi64)
IK(k_i64_max, 8, _mm512_max_epi64)
IK(k_u64_min, 8, _mm512_min_epu64)
IK(k_u64_max, 8, _mm512_max_epu64)
IK(k_bool_or, 1, bool_or)
IK(k_bool_and, 1, bool_and)

#define SPLAT_PS(d) _mm512_set1_ps((float)(d))
#define SPLAT_PD(d) _mm512_set1_pd((double)(d))
GANG__VMEAN(m_f32, 4, 16, __m512, LD_PS, ST_PS, _mm512_div_ps, SPLAT_PS)
GANG__VMEAN(m_f64, 8, 8, __m512d, LD_PD, ST_PD, _mm512_div_pd, SPLAT_PD)
GANG__VMEAN(m_f16, 2, 16, __m512, LD_F16, ST_F16, _mm512_div_ps, SPLAT_PS)
GANG__VMEAN(m_bf16, 2, 16, __m512, LD_BF16, ST_BF16, _mm512_div_ps, SPLAT_PS)

const gang__reduce_table gang__reduce_table_avx512 = GANG__SIMD_TABLE("avx512");
