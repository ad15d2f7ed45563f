/* Internal reduce kernels: element-wise dst = a (op) b for every dtype and
 * reduce op, vectorised with an instruction set chosen once at run time
 * (AVX-512, AVX2 or portable C; GANG_REDUCE_ISA overrides). docs/reduce.md
 * states the semantics in full; in short:
 *   - integers wrap modulo 2^bits (SUM, PRODUCT); MIN/MAX signed or unsigned
 *     by dtype;
 *   - float16/bfloat16 are computed in float32 and rounded to nearest even;
 *   - MIN/MAX propagate NaN and order -0 below +0;
 *   - bool (one byte, nonzero = true): SUM/MAX/MEAN = or, PRODUCT/MIN = and,
 *     results 0 or 1.
 * Buffers may have any byte alignment. dst may be the same address as a
 * source; partial overlap is not allowed. The kernels never fail and never
 * allocate; callers validate the (dtype, op) pair once with
 * gang__reduce_check (an invalid pair makes gang__reduce a no-op).
 * All functions are safe to call from any thread. */
#ifndef GANG_CORE_REDUCE_H
#define GANG_CORE_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"
#include "gang/types.h"

/* dst[i] = dst[i] (op) src[i] for i < count. MEAN reduces like SUM; the
 * caller divides once at the end with gang__reduce_mean_finish. Borrows
 * both buffers for the call. */
void gang__reduce(void *dst, const void *src, size_t count, gang_dtype dt,
                  gang_reduce_op op);

/* dst[i] = a[i] (op) b[i] for i < count; dst may be a or b (same address).
 * Saves collectives a copy when the result goes to a third buffer. */
void gang__reduce3(void *dst, const void *a, const void *b, size_t count,
                   gang_dtype dt, gang_reduce_op op);

/* Finishes a MEAN: buf[i] = buf[i] / n.
 *   float32/float16/bfloat16: one division in float32 (correctly rounded,
 *     halves then rounded to nearest even); float64: in double.
 *   integers: C division of the (wrapped) sum, i.e. truncation toward zero
 *     for signed types and floor for unsigned ones.
 *   bool: the reduction was a logical or; values are normalised to 0/1 and
 *     not divided.
 * n must be >= 1: otherwise GANG_INVALID_ARGUMENT and buf is unchanged, as
 * it is for an invalid dtype. n == 1 leaves numbers unchanged. */
gang_status gang__reduce_mean_finish(void *buf, size_t count, gang_dtype dt,
                                     int n);

/* GANG_OK if (dt, op) is a valid pair, else GANG_INVALID_ARGUMENT with a
 * detail naming the bad dtype or op (gang_last_error). Every valid dtype
 * supports every valid op. */
gang_status gang__reduce_check(gang_dtype dt, gang_reduce_op op);

/* Name of the kernel set in use: "avx512", "avx2" or "baseline". Selecting
 * it on first use reads GANG_REDUCE_ISA and logs the choice at INFO. */
const char *gang__reduce_isa(void);

/* Whether this CPU (and OS) can run the named kernel set. */
bool gang__reduce_isa_available(const char *name);

/* Switches every later call in the process to the named kernel set
 * ("avx512", "avx2", "baseline", or "auto" for the best available). Meant
 * for tests and benchmarks; calls already running finish on the old set,
 * and every set gives identical results. GANG_INVALID_ARGUMENT for an
 * unknown name, GANG_NOT_SUPPORTED if the CPU lacks it (unchanged then). */
gang_status gang__reduce_set_isa(const char *name);

/* Scalar float16/bfloat16 conversions with the kernels' exact rounding
 * (nearest even; NaN stays NaN, made quiet; overflow to infinity). */
float gang__f16_to_f32(uint16_t h);
uint16_t gang__f32_to_f16(float f);
float gang__bf16_to_f32(uint16_t h);
uint16_t gang__f32_to_bf16(float f);

#endif
