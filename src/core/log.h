/* Internal logger. Configured once per process from GANG_DEBUG,
 * GANG_DEBUG_SUBSYS and GANG_DEBUG_FILE (read through settings.h, never
 * through config.h: config reports errors, and errors are logged); the level
 * and subsystem are checked before any formatting, so a disabled log line
 * costs one load and a branch. Lines look like
 * "host:pid rank N [LEVEL SUBSYS] message". */
#ifndef GANG_CORE_LOG_H
#define GANG_CORE_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "gang/export.h"

typedef enum gang__log_level {
  GANG_LOG_NONE = 0,
  GANG_LOG_WARN = 1,
  GANG_LOG_INFO = 2,
  GANG_LOG_TRACE = 3
} gang__log_level;

/* Subsystems are bits so GANG_DEBUG_SUBSYS can select several. */
#define GANG__SUBSYS_LIST(X)                                                   \
  X(INIT, 0x01)                                                                \
  X(STORE, 0x02)                                                               \
  X(TCP, 0x04)                                                                 \
  X(SHM, 0x08)                                                                 \
  X(COLL, 0x10)                                                                \
  X(FT, 0x20)                                                                  \
  X(LAUNCH, 0x40)                                                              \
  X(ENV, 0x80)

typedef enum gang__subsys {
#define GANG__SUBSYS_ENUM(name, bit) GANG_SUB_##name = bit,
  GANG__SUBSYS_LIST(GANG__SUBSYS_ENUM)
#undef GANG__SUBSYS_ENUM
      GANG_SUB_ALL = 0xff
} gang__subsys;

/* Level (-1 until the first use configures it) and subsystem mask, read
 * without a lock by every thread on every GANG_LOG. Relaxed: nothing else is
 * published through them, and a line racing a reconfiguration may be
 * filtered by the old or the new value. */
extern _Atomic int gang__log_level_v;
extern _Atomic unsigned gang__log_mask_v;
void gang__log_init(void);

static inline bool gang__log_on(int level, unsigned subsys) {
  int on = atomic_load_explicit(&gang__log_level_v, memory_order_relaxed);
  if (on < 0) {
    gang__log_init();
    on = atomic_load_explicit(&gang__log_level_v, memory_order_relaxed);
  }
  return level <= on &&
         (subsys &
          atomic_load_explicit(&gang__log_mask_v, memory_order_relaxed)) != 0;
}

void gang__log_write(int level, unsigned subsys, const char *fmt, ...)
    GANG_PRINTF(3, 4);

/* Writes `text` (whole lines) to the log's file or stderr as it is, at any
 * level, in one piece between other threads' lines (the flight recorder's
 * dumps). */
void gang__log_raw(const char *text, size_t len);

/* Sets the rank shown in the line prefix (-1 hides it). The launcher's RANK
 * variable is used until this is called. */
void gang__log_set_rank(int rank);

/* Re-reads the GANG_DEBUG* variables (tests change them at run time). */
void gang__log_reconfigure(void);

#define GANG_LOG(level, sub, ...)                                              \
  do {                                                                         \
    if (gang__log_on((level), (sub)))                                          \
      gang__log_write((level), (sub), __VA_ARGS__);                            \
  } while (0)
#define GANG_WARN(sub, ...) GANG_LOG(GANG_LOG_WARN, GANG_SUB_##sub, __VA_ARGS__)
#define GANG_INFO(sub, ...) GANG_LOG(GANG_LOG_INFO, GANG_SUB_##sub, __VA_ARGS__)
#define GANG_TRACE(sub, ...)                                                   \
  GANG_LOG(GANG_LOG_TRACE, GANG_SUB_##sub, __VA_ARGS__)

#endif
