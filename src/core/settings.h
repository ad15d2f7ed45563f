/* The table of GANG_* settings (settings.def) and the raw lookup of their
 * text: the environment's value if set, else the default.
 *
 * A leaf on purpose: it reports no errors and logs nothing, so the logger
 * can read its own settings here while config.h's typed readers, which
 * report malformed values through error.h (and so through the logger),
 * sit above both. All functions are thread-safe as long as nobody changes
 * the environment at the same time. */
#ifndef GANG_CORE_SETTINGS_H
#define GANG_CORE_SETTINGS_H

#include <stdbool.h>

typedef enum gang__setting_id {
#define X(id, name, type, def, doc) GANG_SETTING_##id,
#include "settings.def"
#undef X
  GANG__SETTING_COUNT
} gang__setting_id;

typedef enum gang__setting_type {
  GANG__SETTING_INT,
  GANG__SETTING_SIZE,
  GANG__SETTING_DURATION,
  GANG__SETTING_BOOL,
  GANG__SETTING_STRING
} gang__setting_type;

/* One row of settings.def. */
typedef struct gang__setting {
  const char *name; /* the environment variable */
  gang__setting_type type;
  const char *def; /* default, as text */
  const char *doc;
} gang__setting;

/* The row of `id` (static storage). */
const gang__setting *gang__setting_get(gang__setting_id id);

/* Whether the environment sets this setting (so a default chosen at run
 * time must not override it). */
bool gang__setting_is_set(gang__setting_id id);

/* String value of a setting: the environment's if set, else the default.
 * Never NULL. The pointer is into the environment or static storage. */
const char *gang__setting_str(gang__setting_id id);

#endif
