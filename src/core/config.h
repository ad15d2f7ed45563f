/* Typed access to the settings table (settings.h) and the unit parsers
 * that the launcher and tools share. */
#ifndef GANG_CORE_CONFIG_H
#define GANG_CORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gang/config.h"
#include "gang/status.h"

#include "settings.h"

/* Integer value of an INT, SIZE (bytes), DURATION (milliseconds) or BOOL
 * (0/1) setting: the environment's if set, else the default. A malformed
 * value is GANG_INVALID_ARGUMENT naming the variable and the value. */
gang_status gang__setting_int(gang__setting_id id, int64_t *out);

/* Parsers shared by settings, the launcher and tools. Each returns
 * GANG_INVALID_ARGUMENT (with gang_last_error naming `what` and the text)
 * on malformed input, overflow or trailing garbage. */
gang_status gang__parse_int(const char *what, const char *text, int64_t *out);
gang_status gang__parse_size(const char *what, const char *text, int64_t *out);
gang_status gang__parse_duration_ms(const char *what, const char *text,
                                    int64_t *out);
gang_status gang__parse_bool(const char *what, const char *text, bool *out);

#endif
