/* Options structs start with their size (STYLE.md 5): a caller built
 * against an older header passes a smaller struct, whose missing fields
 * read as defaults. */
#ifndef GANG_CORE_OPTIONS_H
#define GANG_CORE_OPTIONS_H

#include <stddef.h>

/* Whether the options `o` (a pointer to `type`, may be NULL) are large
 * enough to hold `field`. */
#define GANG_OPTIONS_HAS(o, type, field)                                       \
  ((o) != NULL &&                                                              \
   (o)->size >= offsetof(type, field) + sizeof(((type *)0)->field))

#endif
