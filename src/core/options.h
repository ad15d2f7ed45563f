/* Reading a caller's options struct. Every public options struct starts
 * with `size_t size` (set by its ..._OPTIONS_INIT) and only ever grows by
 * appending fields, so a program built
 * against an older header passes a smaller size: a field exists for that
 * caller only if its struct reaches past the field's last byte. Reading a
 * field without this check would read past the caller's struct. */
#ifndef GANG_CORE_OPTIONS_H
#define GANG_CORE_OPTIONS_H

#include <stddef.h>

/* Whether the options `opts` (a non-NULL pointer to TYPE) include `field`. */
#define GANG__OPTS_HAS(TYPE, opts, field)                                      \
  ((opts)->size >= offsetof(TYPE, field) + sizeof((opts)->field))

/* opts->field, or `def` when opts is NULL or too old to have the field. */
#define GANG__OPTS_GET(TYPE, opts, field, def)                                 \
  ((opts) != NULL && GANG__OPTS_HAS(TYPE, opts, field) ? (opts)->field : (def))

/* In a public call `fn`: fails with GANG_INVALID_ARGUMENT when opts is
 * not NULL and its size cannot even hold `size` (a struct not initialised
 * with its ..._OPTIONS_INIT, named by init_name). Needs core/error.h. */
#define GANG__OPTS_CHECK(fn, opts, init_name)                                  \
  GANG_ARG_CHECK((opts) == NULL || (opts)->size >= sizeof(size_t), fn,         \
                 "opts->size is %zu: initialise with " init_name,              \
                 (opts) != NULL ? (opts)->size : 0)

#endif
