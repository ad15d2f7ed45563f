/* The values each rank contributes and the results it must get back,
 * chosen so that every result is exact in every type.
 *
 * The values are small non-negative integers that depend on both the rank
 * and the element index (so a block delivered to the wrong place, a rank's
 * data counted twice or a stale buffer all show). They are bounded so that
 * the reduction over n ranks never leaves the range in which the type holds
 * integers exactly (2^24 for float, 2048 for half, 256 for bfloat16, the
 * type's maximum for integers): float sums are then exact and independent
 * of the order of additions, and results can be compared bit for bit. */
#include <stdint.h>
#include <string.h>

#include "bench.h"

/* The largest integer the type holds exactly (and without overflow). */
static int64_t exact_cap(bench_dtype dt) {
  switch (dt) {
  case BENCH_INT8:
    return INT8_MAX;
  case BENCH_UINT8:
    return UINT8_MAX;
  case BENCH_INT16:
    return INT16_MAX;
  case BENCH_INT32:
    return INT32_MAX;
  case BENCH_UINT32:
    return UINT32_MAX;
  case BENCH_INT64:
  case BENCH_UINT64:
    return INT64_MAX / 2;
  case BENCH_FLOAT:
    return 1 << 24;
  case BENCH_DOUBLE:
    return INT64_C(1) << 53;
  case BENCH_HALF:
    return 2048;
  case BENCH_BFLOAT16:
    return 256;
  default:
    return 1;
  }
}

/* The modulus of the index-dependent part: small enough that n of them
 * summed stay exact; never above 2^20 (larger values show nothing more). */
static int64_t modulus(bench_dtype dt, int n) {
  int64_t k = exact_cap(dt) / n;
  if (k > (1 << 20))
    k = 1 << 20;
  return k < 1 ? 1 : k;
}

int64_t bench_value(bench_dtype dt, bench_op op, int r, int n, size_t i) {
  uint64_t mix = (uint64_t)i * 3 + (uint64_t)r * 11 + 1;
  switch (op) {
  case BENCH_PROD:
    /* One rank per element contributes 1, 2 or 3, the others 1: the
     * product stays tiny whatever n is. */
    return (i % (size_t)n == (size_t)r) ? 1 + (int64_t)((i / (size_t)n) % 3)
                                        : 1;
  case BENCH_AVG: {
    /* Every rank gives c(i), one rank gives c(i) + n: the sum is
     * n * (c(i) + 1), so the mean is exact even for integer types. */
    int64_t k = exact_cap(dt) / n - 1;
    int64_t c = k < 1 ? 0 : (int64_t)(((uint64_t)i * 3 + 1) % (uint64_t)k);
    return c + (i % (size_t)n == (size_t)r ? n : 0);
  }
  case BENCH_MIN:
  case BENCH_MAX:
    return (int64_t)(mix % (uint64_t)modulus(dt, 1));
  case BENCH_SUM:
  default:
    return (int64_t)(mix % (uint64_t)modulus(dt, n));
  }
}

int64_t bench_reduced(bench_dtype dt, bench_op op, int n, size_t i) {
  int64_t acc = bench_value(dt, op, 0, n, i);
  for (int r = 1; r < n; r++) {
    int64_t v = bench_value(dt, op, r, n, i);
    switch (op) {
    case BENCH_PROD:
      acc *= v;
      break;
    case BENCH_MIN:
      acc = v < acc ? v : acc;
      break;
    case BENCH_MAX:
      acc = v > acc ? v : acc;
      break;
    default:
      acc += v;
      break;
    }
  }
  return op == BENCH_AVG ? acc / n : acc;
}

/* IEEE half from a non-negative integer <= 2048 (exact by construction). */
static uint16_t half_from_int(int64_t v) {
  if (v <= 0)
    return 0;
  int e = 63 - __builtin_clzll((unsigned long long)v); /* 2^e <= v */
  uint16_t mant = (uint16_t)(((uint64_t)v << (10 - e)) & 0x3ff);
  return (uint16_t)(((e + 15) << 10) | mant);
}

/* Stores integer v (exactly representable) as element i of buf. */
static void store(void *buf, size_t i, bench_dtype dt, int64_t v) {
  switch (dt) {
  case BENCH_INT8:
  case BENCH_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case BENCH_INT16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  case BENCH_INT32:
  case BENCH_UINT32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  case BENCH_INT64:
  case BENCH_UINT64:
    ((uint64_t *)buf)[i] = (uint64_t)v;
    break;
  case BENCH_FLOAT:
    ((float *)buf)[i] = (float)v;
    break;
  case BENCH_DOUBLE:
    ((double *)buf)[i] = (double)v;
    break;
  case BENCH_HALF:
    ((uint16_t *)buf)[i] = half_from_int(v);
    break;
  case BENCH_BFLOAT16: {
    /* bfloat16 is the top half of a float; small integers lose nothing. */
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
    break;
  }
  default:
    break;
  }
}

void bench_fill(void *buf, size_t count, bench_dtype dt, bench_op op, int r,
                int n, size_t base) {
  for (size_t k = 0; k < count; k++)
    store(buf, k, dt, bench_value(dt, op, r, n, base + k));
}

size_t bench_count_wrong(const void *buf, size_t count, bench_dtype dt,
                         bench_op op, int n, int reduced, int src,
                         size_t base) {
  size_t es = bench_dtype_size(dt), wrong = 0;
  unsigned char want[8];
  for (size_t k = 0; k < count; k++) {
    int64_t v = reduced ? bench_reduced(dt, op, n, base + k)
                        : bench_value(dt, op, src, n, base + k);
    store(want, 0, dt, v);
    if (memcmp(want, (const unsigned char *)buf + k * es, es) != 0)
      wrong++;
  }
  return wrong;
}

void bench_guard_set(void *buf, size_t used) {
  memset((unsigned char *)buf + used, BENCH_GUARD_BYTE, BENCH_GUARD);
}

size_t bench_guard_count(const void *buf, size_t used) {
  const unsigned char *g = (const unsigned char *)buf + used;
  size_t changed = 0;
  for (size_t k = 0; k < BENCH_GUARD; k++)
    changed += g[k] != BENCH_GUARD_BYTE;
  return changed;
}
