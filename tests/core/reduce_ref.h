/* What the two reduce kernel tests (test_reduce.c: the dtype x op matrix;
 * test_reduce_edges.c: conversions and edge cases) share: the instruction
 * sets and ops they run, the reference float16/bfloat16 conversions, and
 * running a check once per instruction set. */
#ifndef GANG_TESTS_CORE_REDUCE_REF_H
#define GANG_TESTS_CORE_REDUCE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/harness.h"

#include "core/reduce.h"
#include "gang/status.h"
#include "gang/types.h"

static const char *const isas[] = {"baseline", "avx2", "avx512"};
#define N_ISAS (sizeof isas / sizeof isas[0])

static const gang_reduce_op ops[] = {GANG_SUM, GANG_MEAN, GANG_PRODUCT,
                                     GANG_MIN, GANG_MAX};
#define N_OPS (sizeof ops / sizeof ops[0])

/* ---- reference conversions: a different algorithm from the library's
 * (double arithmetic with nearbyint in the default round-to-nearest-even
 * mode, instead of integer bit tricks). NaNs come out as a canonical NaN;
 * comparisons treat any NaN as equal to any NaN. ---- */

static inline float ref_f16_to_f32(uint16_t h) {
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

static inline uint16_t ref_f32_to_f16(float f) {
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

static inline float ref_bf16_to_f32(uint16_t h) {
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

static inline uint16_t ref_f32_to_bf16(float f) {
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

/* Runs f for every instruction set this CPU supports (at least baseline),
 * then restores the automatic choice. */
static inline void for_each_isa(void (*f)(const char *isa)) {
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

#endif
