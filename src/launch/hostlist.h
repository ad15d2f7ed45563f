/* Slurm hostlist expressions ("node[01-04,07],gpu3") and Slurm's compressed
 * tasks-per-node lists ("4(x2),3"). Internal to the launch layer; the
 * grammar is in docs/launcher.md. */
#ifndef GANG_LAUNCH_HOSTLIST_H
#define GANG_LAUNCH_HOSTLIST_H

#include <stddef.h>

#include "gang/status.h"

/* Most hosts an expression may expand to; more is GANG_INVALID_ARGUMENT
 * (protects against "n[0-999999999]"). */
#define GANG__HOSTLIST_MAX 65536
/* Longest host name produced (RFC 1035 limit for a full name). */
#define GANG__HOST_NAME_MAX 255

/* An expanded list: n names, each a NUL-terminated string. */
typedef struct gang__hostlist {
  size_t n;
  char **hosts;
} gang__hostlist;

/* Expands `expr` (what = the variable name for messages) into *out, which
 * the caller frees with gang__hostlist_free. Surrounding whitespace is
 * ignored. Malformed input (unbalanced or nested brackets, empty names or
 * ranges, a reversed range, a non-number in brackets, a name over 255
 * characters, more than max_hosts names) is GANG_INVALID_ARGUMENT naming
 * `what` and saying where; out of memory is GANG_NO_MEMORY. max_hosts of 0
 * means GANG__HOSTLIST_MAX. On error *out is untouched. */
gang_status gang__hostlist_expand(const char *what, const char *expr,
                                  size_t max_hosts, gang__hostlist *out);

void gang__hostlist_free(gang__hostlist *list);

/* Copies the first host of `expr` to buf (cap bytes). Validates the whole
 * expression but only expands the first name. */
gang_status gang__hostlist_first(const char *what, const char *expr, char *buf,
                                 size_t cap);

/* Slurm's tasks-per-node list: "2(x3),1" means 2,2,2,1. Sets *count to the
 * entry for node `index` (0-based). GANG_INVALID_ARGUMENT on malformed text
 * or an index past the end. */
gang_status gang__tasks_per_node(const char *what, const char *text, int index,
                                 int *count);

#endif
