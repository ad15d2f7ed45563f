/* The logger: one of the few process-wide things (see docs/settings.md).
 * Configuration is read lazily from the settings table; level and mask are
 * relaxed atomics read without a lock on every GANG_LOG, written under a
 * mutex together with the file and rank that only log_write reads. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "settings.h"

_Atomic int gang__log_level_v = -1;
_Atomic unsigned gang__log_mask_v = GANG_SUB_ALL;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;    /* NULL means stderr */
static int log_rank = -2; /* -2: not set, use RANK */
static char log_host[64];

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {
#define GANG__SUBSYS_NAME(name, bit) {#name, bit},
    GANG__SUBSYS_LIST(GANG__SUBSYS_NAME)
#undef GANG__SUBSYS_NAME
};

static unsigned parse_mask(const char *s) {
  if (s == NULL || *s == '\0' || strcasecmp(s, "ALL") == 0)
    return GANG_SUB_ALL;
  int exclude = (*s == '^');
  if (exclude)
    s++;
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (strcasecmp(tok, "ALL") == 0)
      mask |= GANG_SUB_ALL;
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0)
        mask |= subsys_names[i].bit;
  }
  return exclude ? (GANG_SUB_ALL & ~mask) : mask;
}

static int parse_level(const char *s) {
  if (s == NULL || *s == '\0')
    return GANG_LOG_WARN;
  if (strcasecmp(s, "NONE") == 0 || strcmp(s, "0") == 0)
    return GANG_LOG_NONE;
  if (strcasecmp(s, "INFO") == 0)
    return GANG_LOG_INFO;
  if (strcasecmp(s, "TRACE") == 0 || strcasecmp(s, "DEBUG") == 0)
    return GANG_LOG_TRACE;
  return GANG_LOG_WARN;
}

/* Expands %h and %p in GANG_DEBUG_FILE. */
static void expand_path(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = in; *p && o + 1 < cap; p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += (size_t)snprintf(out + o, cap - o, "%s", log_host);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += (size_t)snprintf(out + o, cap - o, "%d", (int)getpid());
      p++;
    } else {
      out[o++] = *p;
    }
    if (o >= cap)
      o = cap - 1;
  }
  out[o] = '\0';
}

static void configure_locked(void) {
  if (gethostname(log_host, sizeof log_host) != 0)
    snprintf(log_host, sizeof log_host, "unknown");
  log_host[sizeof log_host - 1] = '\0';
  if (log_file != NULL) {
    fclose(log_file);
    log_file = NULL;
  }
  const char *path = gang__setting_str(GANG_SETTING_DEBUG_FILE);
  if (path[0] != '\0') {
    char full[512];
    expand_path(path, full, sizeof full);
    log_file = fopen(full, "ae");
  }
  atomic_store_explicit(
      &gang__log_mask_v,
      parse_mask(gang__setting_str(GANG_SETTING_DEBUG_SUBSYS)),
      memory_order_relaxed);
  atomic_store_explicit(&gang__log_level_v,
                        parse_level(gang__setting_str(GANG_SETTING_DEBUG)),
                        memory_order_relaxed);
}

void gang__log_init(void) {
  pthread_mutex_lock(&log_mu);
  if (atomic_load_explicit(&gang__log_level_v, memory_order_relaxed) < 0)
    configure_locked();
  pthread_mutex_unlock(&log_mu);
}

void gang__log_reconfigure(void) {
  pthread_mutex_lock(&log_mu);
  configure_locked();
  pthread_mutex_unlock(&log_mu);
}

void gang__log_set_rank(int rank) {
  pthread_mutex_lock(&log_mu);
  log_rank = rank;
  pthread_mutex_unlock(&log_mu);
}

static const char *level_name(int level) {
  switch (level) {
  case GANG_LOG_WARN:
    return "WARN";
  case GANG_LOG_INFO:
    return "INFO";
  default:
    return "TRACE";
  }
}

static const char *subsys_name(unsigned subsys) {
  for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
    if (subsys == subsys_names[i].bit)
      return subsys_names[i].name;
  return "ALL";
}

void gang__log_write(int level, unsigned subsys, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  pthread_mutex_lock(&log_mu);
  int rank = log_rank;
  if (rank == -2) {
    const char *r = getenv("RANK");
    rank = r ? atoi(r) : -1;
  }
  char rank_s[24] = "";
  if (rank >= 0)
    snprintf(rank_s, sizeof rank_s, " rank %d", rank);
  FILE *out = log_file ? log_file : stderr;
  fprintf(out, "%s:%d%s [%s %s] %s\n", log_host, (int)getpid(), rank_s,
          level_name(level), subsys_name(subsys), msg);
  fflush(out);
  pthread_mutex_unlock(&log_mu);
}

void gang__log_raw(const char *text, size_t len) {
  if (atomic_load_explicit(&gang__log_level_v, memory_order_relaxed) < 0)
    gang__log_init();
  pthread_mutex_lock(&log_mu);
  FILE *out = log_file ? log_file : stderr;
  fwrite(text, 1, len, out);
  fflush(out);
  pthread_mutex_unlock(&log_mu);
}
