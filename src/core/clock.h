/* Monotonic time and deadlines. A deadline is an absolute CLOCK_MONOTONIC
 * time in nanoseconds; GANG_DEADLINE_NONE means wait forever. */
#ifndef GANG_CORE_CLOCK_H
#define GANG_CORE_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define GANG_DEADLINE_NONE INT64_MAX

static inline int64_t gang__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A deadline `timeout_ms` from now; a negative timeout means none. */
static inline int64_t gang__deadline_in_ms(int64_t timeout_ms) {
  if (timeout_ms < 0 || timeout_ms > INT64_MAX / 2000000)
    return GANG_DEADLINE_NONE;
  return gang__now_ns() + timeout_ms * 1000000;
}

/* Milliseconds left until `deadline`, rounded up and clamped to what poll()
 * takes: -1 for no deadline, 0 when passed. */
static inline int gang__deadline_poll_ms(int64_t deadline) {
  if (deadline == GANG_DEADLINE_NONE)
    return -1;
  int64_t left = deadline - gang__now_ns();
  if (left <= 0)
    return 0;
  left = (left + 999999) / 1000000;
  return left > 0x7fffffff ? 0x7fffffff : (int)left;
}

static inline int gang__deadline_passed(int64_t deadline) {
  return deadline != GANG_DEADLINE_NONE && gang__now_ns() >= deadline;
}

/* Waits on `cv` (created with CLOCK_MONOTONIC) until signalled, `deadline`
 * or `slice_ns` from now, whichever comes first; callers re-check their
 * condition (and state nobody signals, such as an abort) each slice. */
static inline void gang__cond_wait_slice(pthread_cond_t *cv,
                                         pthread_mutex_t *mu, int64_t deadline,
                                         int64_t slice_ns) {
  int64_t wake = gang__now_ns() + slice_ns;
  if (deadline != GANG_DEADLINE_NONE && deadline < wake)
    wake = deadline;
  struct timespec ts = {(time_t)(wake / 1000000000), (long)(wake % 1000000000)};
  pthread_cond_timedwait(cv, mu, &ts);
}

#endif
