/* The host:port parser and formatter (hostport.h). Ports are read with
 * config.c's integer parser so that every port in the library accepts the
 * same spellings. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "hostport.h"

static gang_status parse_port(const char *p, size_t n, unsigned flags,
                              int *out) {
  if (n == 0)
    return gang__error(GANG_INVALID_ARGUMENT, "missing or bad port");
  int lo = (flags & GANG__HOSTPORT_PORT_ZERO) ? 0 : 1;
  char buf[16];
  int64_t v = -1;
  if (n < sizeof buf) {
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (gang__parse_int("port", buf, &v) != GANG_OK)
      v = -1;
  }
  if (v < lo || v > 65535)
    return gang__error(GANG_INVALID_ARGUMENT, "port '%.*s' is not in %d..65535",
                       (int)n, p, lo);
  *out = (int)v;
  return GANG_OK;
}

gang_status gang__hostport_parse(const char *text, unsigned flags,
                                 gang__hostport *out, const char **tail) {
  bool optional = (flags & GANG__HOSTPORT_PORT_OPTIONAL) != 0;
  /* The host:port part ends at the tail's '/', if tails are allowed. */
  const char *end = text + strlen(text);
  if (flags & GANG__HOSTPORT_TAIL) {
    const char *slash = strchr(text, '/');
    if (slash != NULL)
      end = slash;
  }
  const char *host = text, *hend, *port = NULL;
  if (*text == '[') {
    hend = memchr(text, ']', (size_t)(end - text));
    if (hend == NULL || !(hend[1] == ':' || (optional && hend + 1 == end)))
      return gang__error(GANG_INVALID_ARGUMENT, "expected [ipv6]:port");
    host = text + 1;
    if (hend[1] == ':')
      port = hend + 2;
  } else {
    hend = memchr(text, ':', (size_t)(end - text));
    if (hend != NULL && memchr(hend + 1, ':', (size_t)(end - hend - 1)))
      return gang__error(GANG_INVALID_ARGUMENT,
                         "expected host:port (an IPv6 address goes in "
                         "brackets: [ipv6]:port)");
    if (hend == NULL && !optional)
      return gang__error(GANG_INVALID_ARGUMENT, "expected host:port");
    if (hend == NULL)
      hend = end;
    else
      port = hend + 1;
  }
  size_t hlen = (size_t)(hend - host);
  if (hlen == 0 || hlen >= sizeof out->host)
    return gang__error(GANG_INVALID_ARGUMENT, "empty or overlong host");
  int portnum = -1;
  if (port != NULL)
    GANG_CHECK(parse_port(port, (size_t)(end - port), flags, &portnum));
  memcpy(out->host, host, hlen);
  out->host[hlen] = '\0';
  out->port = portnum;
  if (tail != NULL)
    *tail = end;
  return GANG_OK;
}

int gang__hostport_format(char *buf, size_t cap, const char *host, int port) {
  bool v6 = strchr(host, ':') != NULL;
  int n = snprintf(buf, cap, v6 ? "[%s]:%d" : "%s:%d", host, port);
  return n < 0 || (size_t)n >= cap ? -1 : n;
}
