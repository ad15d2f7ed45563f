/* Status names and messages (from the X-macro in gang/status.h), the
 * per-thread error detail, and the version functions. */
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gang/status.h"
#include "gang/version.h"

#include "error.h"
#include "log.h"

#define GANG__DETAIL_CAP 1024

static _Thread_local char tls_detail[GANG__DETAIL_CAP];
static _Thread_local gang_status tls_status;

const char *gang_strerror(gang_status status) {
  switch (status) {
#define GANG__STATUS_MSG(name, value, msg)                                     \
  case GANG_##name:                                                            \
    return msg;
    GANG_STATUS_LIST(GANG__STATUS_MSG)
#undef GANG__STATUS_MSG
  }
  return "unknown status";
}

const char *gang_status_name(gang_status status) {
  switch (status) {
#define GANG__STATUS_NAME(name, value, msg)                                    \
  case GANG_##name:                                                            \
    return #name;
    GANG_STATUS_LIST(GANG__STATUS_NAME)
#undef GANG__STATUS_NAME
  }
  return "UNKNOWN";
}

const char *gang_last_error(void) { return tls_detail; }
gang_status gang_last_status(void) { return tls_status; }

void gang_clear_error(void) {
  tls_detail[0] = '\0';
  tls_status = GANG_OK;
}

static gang_status record(gang_status st, int err, const char *fmt,
                          va_list ap) {
  /* Format into a scratch buffer first: callers may pass gang_last_error()
   * itself as an argument. */
  char buf[GANG__DETAIL_CAP];
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  if (n < 0)
    n = 0;
  if (err != 0 && (size_t)n < sizeof buf) {
    char ebuf[128];
    const char *es = strerror_r(err, ebuf, sizeof ebuf);
    snprintf(buf + n, sizeof buf - (size_t)n, ": %s (errno %d)", es, err);
  }
  /* Passing an error up unchanged is not a new failure: log it once. */
  bool again = st == tls_status && strcmp(buf, tls_detail) == 0;
  memcpy(tls_detail, buf, sizeof buf);
  tls_status = st;
  if (!again)
    GANG_LOG(GANG_LOG_INFO, GANG_SUB_ALL, "error %s: %s", gang_status_name(st),
             tls_detail);
  return st;
}

gang_status gang__error(gang_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(st, 0, fmt, ap);
  va_end(ap);
  return st;
}

gang_status gang__error_errno(gang_status st, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(st, err, fmt, ap);
  va_end(ap);
  return st;
}

gang_status gang__arg_error(const char *fn, const char *fmt, ...) {
  char what[GANG__DETAIL_CAP - 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return gang__error(GANG_INVALID_ARGUMENT, "%s: %s", fn, what);
}

gang_status gang__error_wrap(gang_status st, const char *fmt, ...) {
  char ctx[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  /* Truncation is intended here: the newest context wins the space. */
  char buf[GANG__DETAIL_CAP];
  size_t c = strlen(ctx), d = strlen(tls_detail);
  if (c + 2 + d >= sizeof buf)
    d = sizeof buf - 1 - (c + 2 < sizeof buf ? c + 2 : sizeof buf - 1);
  memcpy(buf, ctx, c);
  memcpy(buf + c, ": ", 2);
  memcpy(buf + c + 2, tls_detail, d);
  buf[c + 2 + d] = '\0';
  memcpy(tls_detail, buf, sizeof buf);
  tls_status = st;
  return st;
}

int gang_version(void) {
  return GANG_VERSION_MAJOR * 10000 + GANG_VERSION_MINOR * 100 +
         GANG_VERSION_PATCH;
}

#define GANG__STR2(x) #x
#define GANG__STR(x) GANG__STR2(x)
const char *gang_version_string(void) {
  return GANG__STR(GANG_VERSION_MAJOR) "." GANG__STR(
      GANG_VERSION_MINOR) "." GANG__STR(GANG_VERSION_PATCH);
}
