/* GANG_SOCKET_IFNAME (see ifname.h): NCCL's interface list syntax and the
 * choice of a listening address among the machine's interfaces. */
#include "ifname.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/error.h"

bool gang__ifname_match(const char *spec, const char *name) {
  bool exclude = false, exact = false;
  if (*spec == '^') {
    exclude = true;
    spec++;
  }
  if (*spec == '=') {
    exact = true;
    spec++;
  }
  size_t nl = strlen(name);
  for (const char *p = spec; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0 && (exact ? len == nl && memcmp(p, name, len) == 0
                          : len <= nl && memcmp(p, name, len) == 0))
      return !exclude;
    p += len;
    if (*p == ',')
      p++;
  }
  return exclude;
}

/* The numeric text of an interface address, or false for one peers cannot
 * use (not IP, IPv6 link-local). */
static bool addr_text(const struct sockaddr *sa, char *buf, size_t cap) {
  const void *a;
  if (sa->sa_family == AF_INET) {
    a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
  } else if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a6 =
        &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (IN6_IS_ADDR_LINKLOCAL(a6))
      return false;
    a = a6;
  } else {
    return false;
  }
  return inet_ntop(sa->sa_family, a, buf, (socklen_t)cap) != NULL;
}

gang_status gang__ifname_addr(const char *spec, const char *prefer, char *out,
                              size_t cap, char *ifname, size_t ifcap) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0)
    return gang__error_errno(GANG_SYSTEM, errno,
                             "GANG_SOCKET_IFNAME: getifaddrs");
  const struct ifaddrs *best = NULL;
  int best_rank = 3; /* 0: the preferred address, 1: IPv4, 2: IPv6 */
  char text[INET6_ADDRSTRLEN], seen[256] = "";
  size_t so = 0;
  for (const struct ifaddrs *i = all; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP) ||
        !addr_text(i->ifa_addr, text, sizeof text))
      continue;
    /* For the error: each interface name once. */
    if (strstr(seen, i->ifa_name) == NULL &&
        so + strlen(i->ifa_name) + 3 < sizeof seen)
      so += (size_t)snprintf(seen + so, sizeof seen - so, "%s%s",
                             so ? ", " : "", i->ifa_name);
    if (!gang__ifname_match(spec, i->ifa_name))
      continue;
    int rank = prefer != NULL && strcmp(prefer, text) == 0 ? 0
               : i->ifa_addr->sa_family == AF_INET         ? 1
                                                           : 2;
    if (rank < best_rank) {
      best = i;
      best_rank = rank;
    }
  }
  gang_status st = GANG_OK;
  if (best == NULL) {
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "GANG_SOCKET_IFNAME='%s': no interface that is up "
                     "matches (interfaces: %s)",
                     spec, so ? seen : "none");
  } else {
    addr_text(best->ifa_addr, out, cap);
    if (ifname != NULL)
      snprintf(ifname, ifcap, "%s", best->ifa_name);
  }
  freeifaddrs(all);
  return st;
}
