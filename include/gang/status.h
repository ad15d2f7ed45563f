/* gang/status.h: status codes and error detail.
 *
 * Every public function returns a gang_status (or a value that cannot fail).
 * Codes are grouped by what the caller can do about them. The names, numbers
 * and messages come from one X-macro so they never drift apart. */
#ifndef GANG_STATUS_H
#define GANG_STATUS_H

#include "gang/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, message) */
#define GANG_STATUS_LIST(X)                                                    \
  X(OK, 0, "success")                                                          \
  X(IN_PROGRESS, 1, "operation in progress")                                   \
  X(INVALID_ARGUMENT, 2, "invalid argument")                                   \
  X(INVALID_USAGE, 3, "invalid usage (wrong state or not a member)")           \
  X(NOT_SUPPORTED, 4, "not supported")                                         \
  X(TIMEOUT, 5, "deadline exceeded")                                           \
  X(PEER_LOST, 6, "peer lost (connection closed or reset)")                    \
  X(ABORTED, 7, "aborted")                                                     \
  X(MISMATCH, 8, "ranks disagree on the operation")                            \
  X(PROTOCOL, 9, "protocol error (malformed or unexpected bytes)")             \
  X(AUTH, 10, "authentication failed")                                         \
  X(NO_MEMORY, 11, "out of memory or over a configured cap")                   \
  X(SYSTEM, 12, "system call failed")                                          \
  X(INTERNAL, 13, "internal error")                                            \
  X(NOT_FOUND, 14, "not found")                                                \
  X(PEER_LEFT, 15, "peer left (it ended normally before this operation)")

typedef enum gang_status {
#define GANG__STATUS_ENUM(name, value, msg) GANG_##name = value,
  GANG_STATUS_LIST(GANG__STATUS_ENUM)
#undef GANG__STATUS_ENUM
} gang_status;

/* A short fixed message for `status`; "unknown status" for a value outside
 * the enum. Static storage; thread-safe; cannot fail. */
GANG_API const char *gang_strerror(gang_status status);

/* The enum name without the prefix ("PEER_LOST"), or "UNKNOWN". */
GANG_API const char *gang_status_name(gang_status status);

/* The detail text of the last failure reported in this thread: what failed
 * and where ("store get 'rank/3': deadline of 5000 ms exceeded"). Empty
 * string when no failure was reported. The pointer is thread-local and valid
 * until the next gang call in this thread. */
GANG_API const char *gang_last_error(void);

/* The status that went with gang_last_error(), GANG_OK if none. */
GANG_API gang_status gang_last_status(void);

/* Forget this thread's last error. */
GANG_API void gang_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
