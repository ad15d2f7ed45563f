/* GANG_SOCKET_IFNAME: choosing the network interface the TCP fabric
 * listens on and publishes, in NCCL's syntax (NCCL_SOCKET_IFNAME):
 *
 *   eth,ib      interfaces whose names start with "eth" or "ib"
 *   ^docker,lo  every interface except those starting with "docker" or "lo"
 *   =eth0       exactly "eth0" (a comma list of exact names)
 *   ^=lo        every interface except exactly "lo"
 *
 * Thread-safe (no shared state); nothing here blocks. */
#ifndef GANG_TRANSPORT_IFNAME_H
#define GANG_TRANSPORT_IFNAME_H

#include <stdbool.h>
#include <stddef.h>

#include "gang/status.h"

/* Whether interface `name` is selected by `spec` (the syntax above). An
 * empty spec (or one of only "^" / "=" and commas) selects nothing unless
 * it excludes: "^" alone selects every interface. */
bool gang__ifname_match(const char *spec, const char *name);

/* The address (numeric text, no brackets) of the first up interface that
 * `spec` selects, in getifaddrs order, IPv4 before IPv6 and skipping IPv6
 * link-local addresses (they need a scope peers cannot use). When
 * `prefer` (an address, may be NULL) belongs to a selected interface it is
 * chosen, so the default route's address wins among several matches.
 * Writes the interface name to ifname (may be NULL) and the address to
 * out. Errors: GANG_INVALID_ARGUMENT naming GANG_SOCKET_IFNAME and the
 * interfaces there are when nothing matches; GANG_SYSTEM if getifaddrs
 * fails. */
gang_status gang__ifname_addr(const char *spec, const char *prefer, char *out,
                              size_t cap, char *ifname, size_t ifcap);

#endif
