/* gang/types.h: element types, reduce operations and devices. */
#ifndef GANG_TYPES_H
#define GANG_TYPES_H

#include <stddef.h>

#include "gang/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Values are part of the ABI (and of the wire format of the
 * signature check): append only. */
#define GANG_DTYPE_LIST(X)                                                     \
  X(FLOAT32, 0, "float32", 4)                                                  \
  X(FLOAT64, 1, "float64", 8)                                                  \
  X(FLOAT16, 2, "float16", 2)                                                  \
  X(BFLOAT16, 3, "bfloat16", 2)                                                \
  X(INT8, 4, "int8", 1)                                                        \
  X(UINT8, 5, "uint8", 1)                                                      \
  X(INT16, 6, "int16", 2)                                                      \
  X(INT32, 7, "int32", 4)                                                      \
  X(INT64, 8, "int64", 8)                                                      \
  X(UINT32, 9, "uint32", 4)                                                    \
  X(UINT64, 10, "uint64", 8)                                                   \
  X(BOOL, 11, "bool", 1)

typedef enum gang_dtype {
#define GANG__DTYPE_ENUM(name, value, str, size) GANG_##name = value,
  GANG_DTYPE_LIST(GANG__DTYPE_ENUM)
#undef GANG__DTYPE_ENUM
      GANG_DTYPE_COUNT
} gang_dtype;

/* Reduce operations; the values are fairseq2's ReduceOperation values. */
typedef enum gang_reduce_op {
  GANG_SUM = 1,
  GANG_MEAN = 2,
  GANG_PRODUCT = 3,
  GANG_MIN = 4,
  GANG_MAX = 5
} gang_reduce_op;

typedef enum gang_device_type {
  GANG_DEVICE_CPU = 0,
  GANG_DEVICE_CUDA = 1
} gang_device_type;

typedef struct gang_device {
  gang_device_type type;
  int index;
} gang_device;

/* Size in bytes of one element; 0 for a value outside the enum. */
GANG_API size_t gang_dtype_size(gang_dtype dtype);

/* "float32", ...; "invalid" for a value outside the enum. */
GANG_API const char *gang_dtype_name(gang_dtype dtype);

/* "sum", "mean", "product", "min", "max"; "invalid" otherwise. */
GANG_API const char *gang_reduce_op_name(gang_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif
