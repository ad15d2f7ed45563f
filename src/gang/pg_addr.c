/* The address this rank's fabric listens on, which its peers connect to. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "core/hostport.h"
#include "pg_internal.h"
#include "transport/ifname.h"

/* The local address peers can reach this rank at: the one the kernel would
 * use to reach the store's host (a UDP "connect" sends nothing). Loopback
 * stays loopback. */
static void addr_toward(const char *store_addr, char *out, size_t cap) {
  snprintf(out, cap, "127.0.0.1");
  const char *p = store_addr;
  if (strncmp(p, "tcp://", 6) == 0)
    p += 6;
  gang__hostport hp;
  if (gang__hostport_parse(p,
                           GANG__HOSTPORT_PORT_OPTIONAL |
                               GANG__HOSTPORT_PORT_ZERO | GANG__HOSTPORT_TAIL,
                           &hp, NULL) != GANG_OK) {
    gang_clear_error(); /* the store's own parse reports it */
    return;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
  if (getaddrinfo(hp.host, "9", &hints, &res) != 0 || res == NULL)
    return;
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    const void *a =
        ss.ss_family == AF_INET
            ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
            : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    char buf[INET6_ADDRSTRLEN];
    if (inet_ntop(ss.ss_family, a, buf, sizeof buf) != NULL)
      snprintf(out, cap, "%s", buf);
  }
  if (fd >= 0)
    close(fd);
  freeaddrinfo(res);
}

gang_status gang__pg_listen_addr(const char *store_addr, const char *want,
                                 char *out, size_t cap) {
  if (want != NULL) {
    snprintf(out, cap, "%s", want);
    return GANG_OK;
  }
  addr_toward(store_addr, out, cap);
  /* GANG_SOCKET_IFNAME narrows the choice to named interfaces; the default
   * route's address still wins when it is on one of them. */
  const char *ifspec = gang__setting_str(GANG_SETTING_SOCKET_IFNAME);
  if (*ifspec == '\0')
    return GANG_OK;
  char route[INET6_ADDRSTRLEN + 8];
  snprintf(route, sizeof route, "%s", out);
  return gang__ifname_addr(ifspec, route, out, cap, NULL, 0);
}
