/* The settings table itself: settings.def turned into rows, and the lookup
 * of a setting's text. Parsing the text into numbers, sizes and durations
 * is config.c's job (it can fail and report why; this file cannot). */
#include <stdlib.h>

#include "settings.h"

static const gang__setting settings[] = {
#define X(id, name, type, def, doc) {name, GANG__SETTING_##type, def, doc},
#include "settings.def"
#undef X
};

const gang__setting *gang__setting_get(gang__setting_id id) {
  return &settings[id];
}

bool gang__setting_is_set(gang__setting_id id) {
  return getenv(settings[id].name) != NULL;
}

const char *gang__setting_str(gang__setting_id id) {
  const char *v = getenv(settings[id].name);
  return v != NULL ? v : settings[id].def;
}
