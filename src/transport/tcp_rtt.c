/* The least round trip the kernel has measured on a TCP connection, for
 * the pacing of exchanges (fabric.c, send_limit). Apart from the fabric's
 * files: <linux/tcp.h>, which has tcpi_min_rtt, clashes with
 * <netinet/tcp.h>, which they use. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "fabric_internal.h"

uint32_t gang__tcp_min_rtt_us(int fd) {
  struct tcp_info ti;
  memset(&ti, 0, sizeof ti);
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_min_rtt) + sizeof ti.tcpi_min_rtt)
    return 0;
  return ti.tcpi_min_rtt == UINT32_MAX ? 0 : ti.tcpi_min_rtt;
}
