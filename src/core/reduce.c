/* Reduce entry points and run-time kernel selection.
 *
 * The kernels live in one table per instruction set (reduce_scalar.c,
 * reduce_avx2.c, reduce_avx512.c). On first use this file picks the best
 * table the CPU supports, or the one GANG_REDUCE_ISA names, and publishes it
 * through one atomic pointer; each call then costs a load and an indirect
 * call. That pointer is the only process-wide state here, documented in
 * reduce.h; gang__reduce_set_isa changes it for tests and benchmarks.
 *
 * MEAN finishing for integers and bool is done here in scalar code (one
 * integer division per element; MEAN of integers is rare and the division
 * does not vectorise on x86); floats use the tables' vector kernels. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "log.h"
#include "reduce.h"
#include "reduce_impl.h"

#if defined(GANG_REDUCE_X86)
#include <cpuid.h>
#endif

static _Atomic(const gang__reduce_table *) active;
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

#if defined(GANG_REDUCE_X86)
static bool cpu_has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

/* __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state
 * (XCR0), so a feature the kernel disabled is reported missing. */
static bool cpu_has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         cpu_has_f16c();
}

static bool cpu_has_avx512(void) {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}
#endif

/* The table for `name` if the CPU can run it; NULL otherwise. "auto" is
 * the best one available. *known says whether the name means anything. */
static const gang__reduce_table *table_for(const char *name, bool *known) {
  *known = true;
  if (strcmp(name, "baseline") == 0)
    return &gang__reduce_table_baseline;
#if defined(GANG_REDUCE_X86)
  if (strcmp(name, "avx2") == 0)
    return cpu_has_avx2() ? &gang__reduce_table_avx2 : NULL;
  if (strcmp(name, "avx512") == 0)
    return cpu_has_avx512() ? &gang__reduce_table_avx512 : NULL;
  if (strcmp(name, "auto") == 0 || name[0] == '\0') {
    if (cpu_has_avx512())
      return &gang__reduce_table_avx512;
    if (cpu_has_avx2())
      return &gang__reduce_table_avx2;
    return &gang__reduce_table_baseline;
  }
#else
  if (strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0)
    return NULL;
  if (strcmp(name, "auto") == 0 || name[0] == '\0')
    return &gang__reduce_table_baseline;
#endif
  *known = false;
  return NULL;
}

static void select_table(void) {
  const char *want = gang__setting_str(GANG_SETTING_REDUCE_ISA);
  bool known;
  const gang__reduce_table *t = table_for(want, &known);
  if (t == NULL) {
    GANG_WARN(INIT, "GANG_REDUCE_ISA='%s' %s; using the best available instead",
              want,
              known ? "is not supported by this CPU"
                    : "is not one of auto, avx512, avx2, baseline");
    t = table_for("auto", &known);
  }
  GANG_INFO(INIT, "reduce kernels: %s (GANG_REDUCE_ISA=%s)", t->name, want);
  atomic_store_explicit(&active, t, memory_order_release);
}

static const gang__reduce_table *table(void) {
  const gang__reduce_table *t =
      atomic_load_explicit(&active, memory_order_acquire);
  if (t == NULL) {
    pthread_once(&select_once, select_table);
    t = atomic_load_explicit(&active, memory_order_acquire);
  }
  return t;
}

const char *gang__reduce_isa(void) { return table()->name; }

bool gang__reduce_isa_available(const char *name) {
  bool known;
  return name != NULL && table_for(name, &known) != NULL;
}

gang_status gang__reduce_set_isa(const char *name) {
  GANG_ARG_CHECK(name != NULL, "reduce set_isa", "name is NULL");
  bool known;
  const gang__reduce_table *t = table_for(name, &known);
  if (!known)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "reduce set_isa: unknown instruction set '%s' (auto, "
                       "avx512, avx2 or baseline)",
                       name);
  if (t == NULL)
    return gang__error(GANG_NOT_SUPPORTED,
                       "reduce set_isa: this CPU cannot run '%s' kernels",
                       name);
  /* Run the lazy selection first so it cannot overwrite this choice. */
  pthread_once(&select_once, select_table);
  atomic_store_explicit(&active, t, memory_order_release);
  return GANG_OK;
}

/* Table column of `op`, or -1 when op is not a gang_reduce_op. */
static int op_column(gang_reduce_op op) {
  switch (op) {
  case GANG_SUM:
  case GANG_MEAN:
    return GANG__ROP_SUM;
  case GANG_PRODUCT:
    return GANG__ROP_PROD;
  case GANG_MIN:
    return GANG__ROP_MIN;
  case GANG_MAX:
    return GANG__ROP_MAX;
  }
  return -1;
}

gang_status gang__reduce_check(gang_dtype dt, gang_reduce_op op) {
  if ((unsigned)dt >= (unsigned)GANG_DTYPE_COUNT)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "reduce: invalid dtype %d (valid: 0..%d)", (int)dt,
                       (int)GANG_DTYPE_COUNT - 1);
  if (op_column(op) < 0)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "reduce: invalid reduce op %d for dtype %s (valid: "
                       "sum=1, mean=2, product=3, min=4, max=5)",
                       (int)op, gang_dtype_name(dt));
  return GANG_OK;
}

void gang__reduce3(void *dst, const void *a, const void *b, size_t count,
                   gang_dtype dt, gang_reduce_op op) {
  int col = op_column(op);
  if (count == 0 || col < 0 || (unsigned)dt >= (unsigned)GANG_DTYPE_COUNT)
    return;
  const gang__reduce_table *t = table();
  /* Large out-of-place results are streamed past the cache (reduce_impl.h
   * says why); in place, the destination lines are read anyway. */
  if (dst != a && dst != b && t->nt[dt][col] != NULL &&
      count >= GANG__REDUCE_NT_BYTES / gang_dtype_size(dt)) {
    t->nt[dt][col](dst, a, b, count);
    return;
  }
  t->fn[dt][col](dst, a, b, count);
}

void gang__reduce(void *dst, const void *src, size_t count, gang_dtype dt,
                  gang_reduce_op op) {
  gang__reduce3(dst, dst, src, count, dt, op);
}

/* Integer MEAN finish: C division (truncation toward zero when signed). The
 * divisor is converted to the element's type; n >= 1 fits every type when
 * unsigned, and signed division by n >= 1 cannot overflow. Narrow types are
 * divided in int, which holds every value and n. */
#define IMEAN(T, DT)                                                           \
  static void mean_##T(void *buf, size_t count, int n) {                       \
    unsigned char *p = buf;                                                    \
    for (size_t i = 0; i < count; i++) {                                       \
      T v;                                                                     \
      memcpy(&v, p + i * sizeof v, sizeof v);                                  \
      v = (T)(v / (DT)n);                                                      \
      memcpy(p + i * sizeof v, &v, sizeof v);                                  \
    }                                                                          \
  }
IMEAN(int8_t, int)
IMEAN(uint8_t, int)
IMEAN(int16_t, int)
IMEAN(int32_t, int32_t)
IMEAN(int64_t, int64_t)
IMEAN(uint32_t, uint32_t)
IMEAN(uint64_t, uint64_t)

static void mean_bool(void *buf, size_t count) {
  unsigned char *p = buf;
  for (size_t i = 0; i < count; i++)
    p[i] = p[i] != 0;
}

gang_status gang__reduce_mean_finish(void *buf, size_t count, gang_dtype dt,
                                     int n) {
  GANG_CHECK(gang__reduce_check(dt, GANG_MEAN));
  if (n < 1)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "reduce mean_finish: n=%d, the number of contributions "
                       "must be >= 1",
                       n);
  if (count == 0)
    return GANG_OK;
  switch (dt) {
  case GANG_FLOAT32:
  case GANG_FLOAT64:
  case GANG_FLOAT16:
  case GANG_BFLOAT16:
    if (n > 1)
      table()->mean[dt](buf, count, n);
    break;
  case GANG_INT8:
    mean_int8_t(buf, count, n);
    break;
  case GANG_UINT8:
    mean_uint8_t(buf, count, n);
    break;
  case GANG_INT16:
    mean_int16_t(buf, count, n);
    break;
  case GANG_INT32:
    mean_int32_t(buf, count, n);
    break;
  case GANG_INT64:
    mean_int64_t(buf, count, n);
    break;
  case GANG_UINT32:
    mean_uint32_t(buf, count, n);
    break;
  case GANG_UINT64:
    mean_uint64_t(buf, count, n);
    break;
  case GANG_BOOL:
    mean_bool(buf, count);
    break;
  case GANG_DTYPE_COUNT:
    break;
  }
  return GANG_OK;
}

float gang__f16_to_f32(uint16_t h) { return gang__f16_to_f32_inl(h); }
uint16_t gang__f32_to_f16(float f) { return gang__f32_to_f16_inl(f); }
float gang__bf16_to_f32(uint16_t h) { return gang__bf16_to_f32_inl(h); }
uint16_t gang__f32_to_bf16(float f) { return gang__f32_to_bf16_inl(f); }
