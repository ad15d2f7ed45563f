/* "host:port" text, parsed and formatted in one place for the store
 * address, the launcher's init_method and MASTER endpoint, and the tools.
 *
 * An IPv6 literal is written in brackets, "[::1]:29500": without them its
 * colons would make the port ambiguous, so an unbracketed host with a colon
 * is refused rather than guessed at. Functions here touch only their
 * arguments (thread-safe) and never block. */
#ifndef GANG_CORE_HOSTPORT_H
#define GANG_CORE_HOSTPORT_H

#include <stddef.h>

#include "gang/status.h"

/* Room for a DNS name (253 bytes) or any address literal, with its NUL. */
#define GANG__HOSTPORT_HOST_CAP 256

typedef struct gang__hostport {
  char host[GANG__HOSTPORT_HOST_CAP]; /* brackets removed; never empty */
  int port;                           /* -1 when the text has none */
} gang__hostport;

/* Flags of gang__hostport_parse. */
#define GANG__HOSTPORT_PORT_OPTIONAL 0x1u /* "host" or "[v6]" alone is fine */
#define GANG__HOSTPORT_PORT_ZERO 0x2u     /* port 0 ("any free port") is fine */
#define GANG__HOSTPORT_TAIL 0x4u          /* "/..." may follow the port */

/* Parses "host:port" or "[v6]:port" (and "host" or "[v6]" alone with
 * GANG__HOSTPORT_PORT_OPTIONAL) into *out. The port is a decimal number in
 * 1..65535 (0..65535 with GANG__HOSTPORT_PORT_ZERO). With
 * GANG__HOSTPORT_TAIL the port ends at a '/', and *tail (when tail is not
 * NULL) points at that '/', or at the terminating NUL when there is none;
 * without it, a '/' is part of the (then invalid) port.
 * Errors: GANG_INVALID_ARGUMENT with a detail saying what is wrong ("expected
 * host:port", "port 'x' is not in 1..65535", ...) but not naming the text
 * or where it came from: callers prepend that with gang__error_wrap. *out
 * and *tail are set only on success. */
gang_status gang__hostport_parse(const char *text, unsigned flags,
                                 gang__hostport *out, const char **tail);

/* Writes "host:port" into buf, or "[host]:port" when host is an IPv6
 * literal (contains a colon), so that gang__hostport_parse reads it back.
 * Returns the length, or -1 when it does not fit in cap bytes (buf then
 * holds a truncated string, NUL-terminated when cap > 0). */
int gang__hostport_format(char *buf, size_t cap, const char *host, int port);

#endif
