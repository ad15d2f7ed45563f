/* The settings' parsers, typed reads of settings.h's table, and the public
 * listing used by gang-info. Values are read from the environment when asked
 * for: the caller decides when a setting takes effect (usually at creation of
 * the object it configures). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "error.h"

static const char *type_names[] = {[GANG__SETTING_INT] = "int",
                                   [GANG__SETTING_SIZE] = "size",
                                   [GANG__SETTING_DURATION] = "duration",
                                   [GANG__SETTING_BOOL] = "bool",
                                   [GANG__SETTING_STRING] = "string"};

/* Parses a leading signed integer and returns the rest of the text;
 * `kind` names what the value should be, with examples, for the error. */
static gang_status parse_prefix(const char *what, const char *text,
                                const char *kind, int64_t *out,
                                const char **rest) {
  if (text == NULL || *text == '\0')
    return gang__error(GANG_INVALID_ARGUMENT, "%s: empty value", what);
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  if (!(isdigit((unsigned char)*p) ||
        ((*p == '-' || *p == '+') && isdigit((unsigned char)p[1]))))
    return gang__error(GANG_INVALID_ARGUMENT, "%s: '%s' is not %s", what, text,
                       kind);
  errno = 0;
  char *end;
  long long v = strtoll(p, &end, 10);
  if (errno == ERANGE)
    return gang__error(GANG_INVALID_ARGUMENT, "%s: '%s' is out of range", what,
                       text);
  *out = v;
  *rest = end;
  return GANG_OK;
}

static int only_space(const char *s) {
  while (isspace((unsigned char)*s))
    s++;
  return *s == '\0';
}

gang_status gang__parse_int(const char *what, const char *text, int64_t *out) {
  int64_t v;
  const char *rest;
  GANG_CHECK(parse_prefix(what, text, "a number (e.g. 4)", &v, &rest));
  if (!only_space(rest))
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: '%s' has trailing characters '%s'", what, text,
                       rest);
  *out = v;
  return GANG_OK;
}

static gang_status scale(const char *what, const char *text, int64_t v,
                         int64_t mul, int64_t *out) {
  if (v < 0)
    return gang__error(GANG_INVALID_ARGUMENT, "%s: '%s' is negative", what,
                       text);
  if (mul != 0 && v > INT64_MAX / mul)
    return gang__error(GANG_INVALID_ARGUMENT, "%s: '%s' is out of range", what,
                       text);
  *out = v * mul;
  return GANG_OK;
}

gang_status gang__parse_size(const char *what, const char *text, int64_t *out) {
  int64_t v;
  const char *rest;
  GANG_CHECK(
      parse_prefix(what, text, "a size (e.g. 512k, 64M, 1G)", &v, &rest));
  while (isspace((unsigned char)*rest))
    rest++;
  int64_t mul = 1;
  switch (tolower((unsigned char)*rest)) {
  case '\0':
    break;
  case 'k':
    mul = 1024;
    rest++;
    break;
  case 'm':
    mul = 1024 * 1024;
    rest++;
    break;
  case 'g':
    mul = 1024LL * 1024 * 1024;
    rest++;
    break;
  case 't':
    mul = 1024LL * 1024 * 1024 * 1024;
    rest++;
    break;
  case 'b':
    break;
  default:
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: '%s' has an unknown size unit (use k, M, G, T)",
                       what, text);
  }
  /* Accept "8k", "8kB", "8KiB", "8b". */
  if (mul != 1 && (*rest == 'i' || *rest == 'I'))
    rest++;
  if (*rest == 'b' || *rest == 'B')
    rest++;
  if (!only_space(rest))
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: '%s' has trailing characters '%s'", what, text,
                       rest);
  return scale(what, text, v, mul, out);
}

gang_status gang__parse_duration_ms(const char *what, const char *text,
                                    int64_t *out) {
  int64_t v;
  const char *rest;
  GANG_CHECK(
      parse_prefix(what, text, "a duration (e.g. 10s, 500ms, 15m)", &v, &rest));
  while (isspace((unsigned char)*rest))
    rest++;
  static const struct {
    const char *unit;
    int64_t ms;
  } units[] = {{"ms", 1},      {"s", 1000},    {"sec", 1000}, {"m", 60000},
               {"min", 60000}, {"h", 3600000}, {"", 1000}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    size_t n = strlen(units[i].unit);
    if (strncasecmp(rest, units[i].unit, n) == 0 && only_space(rest + n))
      return scale(what, text, v, units[i].ms, out);
  }
  return gang__error(GANG_INVALID_ARGUMENT,
                     "%s: '%s' has an unknown time unit (use ms, s, m, h)",
                     what, text);
}

gang_status gang__parse_bool(const char *what, const char *text, bool *out) {
  static const char *yes[] = {"1", "true", "yes", "on"};
  static const char *no[] = {"0", "false", "no", "off"};
  if (text != NULL) {
    for (int i = 0; i < 4; i++) {
      if (strcasecmp(text, yes[i]) == 0) {
        *out = true;
        return GANG_OK;
      }
      if (strcasecmp(text, no[i]) == 0) {
        *out = false;
        return GANG_OK;
      }
    }
  }
  return gang__error(GANG_INVALID_ARGUMENT,
                     "%s: '%s' is not a boolean (use 1/0, true/false, "
                     "yes/no, on/off)",
                     what, text ? text : "(null)");
}

static gang_status parse_typed(const gang__setting *s, const char *text,
                               int64_t *out) {
  switch (s->type) {
  case GANG__SETTING_INT:
    return gang__parse_int(s->name, text, out);
  case GANG__SETTING_SIZE:
    return gang__parse_size(s->name, text, out);
  case GANG__SETTING_DURATION:
    return gang__parse_duration_ms(s->name, text, out);
  case GANG__SETTING_BOOL: {
    bool b;
    GANG_CHECK(gang__parse_bool(s->name, text, &b));
    *out = b;
    return GANG_OK;
  }
  case GANG__SETTING_STRING:
    break;
  }
  return gang__error(GANG_INTERNAL, "%s is a string setting", s->name);
}

gang_status gang__setting_int(gang__setting_id id, int64_t *out) {
  const gang__setting *s = gang__setting_get(id);
  const char *v = getenv(s->name);
  if (v != NULL)
    return parse_typed(s, v, out);
  return parse_typed(s, s->def, out);
}

int gang_setting_count(void) { return (int)GANG__SETTING_COUNT; }

gang_status gang_setting_describe(int index, gang_setting_info *out) {
  if (out == NULL)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_setting_describe: out is NULL");
  if (index < 0 || index >= (int)GANG__SETTING_COUNT)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_setting_describe: index %d is not in [0, %d)",
                       index, (int)GANG__SETTING_COUNT);
  const gang__setting *s = gang__setting_get((gang__setting_id)index);
  memset(out, 0, sizeof *out);
  out->name = s->name;
  out->type = type_names[s->type];
  out->default_value = s->def;
  out->doc = s->doc;
  out->env_value = getenv(s->name);
  out->parse_status = GANG_OK;
  const char *text = out->env_value ? out->env_value : s->def;
  if (s->type == GANG__SETTING_STRING) {
    snprintf(out->effective, sizeof out->effective, "%s", text);
    return GANG_OK;
  }
  int64_t v;
  gang_status st = parse_typed(s, text, &v);
  if (st != GANG_OK) {
    out->parse_status = st;
    snprintf(out->effective, sizeof out->effective, "(invalid)");
    return GANG_OK;
  }
  switch (s->type) {
  case GANG__SETTING_DURATION:
    snprintf(out->effective, sizeof out->effective, "%" PRId64 " ms", v);
    break;
  case GANG__SETTING_SIZE:
    snprintf(out->effective, sizeof out->effective, "%" PRId64 " bytes", v);
    break;
  case GANG__SETTING_BOOL:
    snprintf(out->effective, sizeof out->effective, "%s", v ? "true" : "false");
    break;
  default:
    snprintf(out->effective, sizeof out->effective, "%" PRId64, v);
  }
  return GANG_OK;
}
