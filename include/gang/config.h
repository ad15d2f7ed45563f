/* gang/config.h: the settings read from GANG_* environment variables.
 *
 * Every setting is declared once, in one table inside the library, with its
 * name, type, default and documentation. This header lets tools (gang-info)
 * list them; the library itself reads them where they are used. */
#ifndef GANG_CONFIG_H
#define GANG_CONFIG_H

#include "gang/export.h"
#include "gang/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gang_setting_info {
  const char *name;          /* "GANG_TIMEOUT" */
  const char *type;          /* "duration", "size", "int", "bool", "string" */
  const char *default_value; /* as written in the table */
  const char *doc;           /* one sentence */
  const char *env_value;     /* the raw environment value, NULL when unset */
  char effective[128];       /* the value in force, in canonical form */
  gang_status parse_status;  /* GANG_INVALID_ARGUMENT when env_value is bad */
} gang_setting_info;

/* Number of settings in the table. Cannot fail. */
GANG_API int gang_setting_count(void);

/* Describes setting `index` (0 <= index < gang_setting_count()) into `out`.
 * Reads the environment now. Returns GANG_INVALID_ARGUMENT for a bad index
 * or NULL out; a malformed environment value is reported in
 * out->parse_status (and gang_last_error), not as the return value, so a
 * tool can still list every setting. Thread-safe. */
GANG_API gang_status gang_setting_describe(int index, gang_setting_info *out);

#ifdef __cplusplus
}
#endif
#endif
