/* Internal error reporting: set the thread's detail text and return the
 * status, so a failure is described once, where it is detected. */
#ifndef GANG_CORE_ERROR_H
#define GANG_CORE_ERROR_H

#include "gang/export.h"
#include "gang/status.h"

/* Records `st` with a formatted detail in this thread and returns `st`.
 * The detail is also logged at INFO (subsystem ALL), so GANG_DEBUG=INFO
 * shows every failure where it was first detected. */
gang_status gang__error(gang_status st, const char *fmt, ...) GANG_PRINTF(2, 3);

/* Like gang__error, appending ": <strerror(err)> (errno N)". */
gang_status gang__error_errno(gang_status st, int err, const char *fmt, ...)
    GANG_PRINTF(3, 4);

/* Prepends "<context>: " to this thread's current detail and returns `st`;
 * for callers that add where to what a callee already said. */
gang_status gang__error_wrap(gang_status st, const char *fmt, ...)
    GANG_PRINTF(2, 3);

#define GANG_CHECK(expr)                                                       \
  do {                                                                         \
    gang_status gang__st_ = (expr);                                            \
    if (gang__st_ != GANG_OK)                                                  \
      return gang__st_;                                                        \
  } while (0)

#define GANG_CHECK_GOTO(expr, st, label)                                       \
  do {                                                                         \
    (st) = (expr);                                                             \
    if ((st) != GANG_OK)                                                       \
      goto label;                                                              \
  } while (0)

/* Records GANG_INVALID_ARGUMENT with the detail "<fn>: <fmt...>". */
gang_status gang__arg_error(const char *fn, const char *fmt, ...)
    GANG_PRINTF(2, 3);

/* Validation at the API boundary: names the function and the argument. */
#define GANG_ARG_CHECK(cond, fn, ...)                                          \
  do {                                                                         \
    if (!(cond))                                                               \
      return gang__arg_error((fn), __VA_ARGS__);                               \
  } while (0)

#endif
