/* What the two reduce kernel tests (test_reduce.c: the dtype x op matrix;
 * test_reduce_edges.c: conversions and edge cases) share: the instruction
 * sets and ops they run, the reference float16/bfloat16 conversions, and
 * choosing the instruction set a run checks.
 *
 * Each test runs once per instruction set, as a ctest entry of its own
 * (main's "--isa NAME"; baseline without it): test_reduce_avx2,
 * test_reduce_avx512 and so on. An entry whose kernels this CPU cannot
 * run is skipped (exit 77, listed by ctest as not run); one whose kernels
 * the CPU can run by the test's own reading of cpuid, but which the
 * library does not offer, fails: the product claims the best kernels the
 * CPU supports, so they must be the ones checked against the reference
 * here, not skipped. */
#ifndef GANG_TESTS_CORE_REDUCE_REF_H
#define GANG_TESTS_CORE_REDUCE_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/* The instruction set this run checks (ref_choose_isa). */
static const char *ref_isa = "baseline";

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
/* What the kernels of `isa` need (src/core/reduce_avx2.c and
 * reduce_avx512.c are built with these -m flags), read here rather than
 * asked of the library. __builtin_cpu_supports also checks that the OS
 * saves the vector registers. */
static inline bool ref_cpu_runs(const char *isa) {
  unsigned a, b, c, d;
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
              __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  if (strcmp(isa, "avx2") == 0)
    return avx2;
  if (strcmp(isa, "avx512") == 0)
    return avx2 && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  return strcmp(isa, "baseline") == 0;
}
#else
static inline bool ref_cpu_runs(const char *isa) {
  return strcmp(isa, "baseline") == 0;
}
#endif

/* For main: takes "--isa NAME" from argv into ref_isa. Returns -1 to go
 * on, or main's exit status: 77 (skipped) when this CPU cannot run NAME's
 * kernels, 1 when it can but the library does not offer them, 2 for a
 * bad argument. */
static inline int ref_choose_isa(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--isa") != 0)
    return -1;
  if (argc < 3) {
    fprintf(stderr, "usage: %s [--isa baseline|avx2|avx512]\n", argv[0]);
    return 2;
  }
  ref_isa = argv[2];
  bool known = false;
  for (size_t k = 0; k < N_ISAS; k++)
    known = known || strcmp(isas[k], ref_isa) == 0;
  if (!known) {
    fprintf(stderr, "%s: unknown instruction set '%s'\n", argv[0], ref_isa);
    return 2;
  }
  bool cpu = ref_cpu_runs(ref_isa);
  gang_status st = gang__reduce_set_isa(ref_isa);
  if (st == GANG_OK && cpu)
    return -1;
  if (cpu) {
    printf("FAIL: this CPU can run %s kernels, but the library does not "
           "offer them: %s\n",
           ref_isa, gang_last_error());
    return 1;
  }
  if (st == GANG_OK) {
    printf("FAIL: the library offers %s kernels, which this CPU cannot "
           "run\n",
           ref_isa);
    return 1;
  }
  printf("SKIP: this CPU cannot run %s kernels\n", ref_isa);
  return 77;
}

/* Runs f with the kernels of the instruction set this run checks, then
 * restores the automatic choice. */
static inline void with_isa(void (*f)(const char *isa)) {
  assert_gang_ok(gang__reduce_set_isa(ref_isa));
  assert_string_equal(gang__reduce_isa(), ref_isa);
  f(ref_isa);
  assert_gang_ok(gang__reduce_set_isa("auto"));
}

#endif
