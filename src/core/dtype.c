/* Element type and reduce-op names and sizes (X-macro in gang/types.h). */
#include "gang/types.h"

size_t gang_dtype_size(gang_dtype dtype) {
  switch (dtype) {
#define GANG__DTYPE_SIZE(name, value, str, size)                               \
  case GANG_##name:                                                            \
    return size;
    GANG_DTYPE_LIST(GANG__DTYPE_SIZE)
#undef GANG__DTYPE_SIZE
  case GANG_DTYPE_COUNT:
    break;
  }
  return 0;
}

const char *gang_dtype_name(gang_dtype dtype) {
  switch (dtype) {
#define GANG__DTYPE_NAME(name, value, str, size)                               \
  case GANG_##name:                                                            \
    return str;
    GANG_DTYPE_LIST(GANG__DTYPE_NAME)
#undef GANG__DTYPE_NAME
  case GANG_DTYPE_COUNT:
    break;
  }
  return "invalid";
}

const char *gang_reduce_op_name(gang_reduce_op op) {
  switch (op) {
  case GANG_SUM:
    return "sum";
  case GANG_MEAN:
    return "mean";
  case GANG_PRODUCT:
    return "product";
  case GANG_MIN:
    return "min";
  case GANG_MAX:
    return "max";
  }
  return "invalid";
}
