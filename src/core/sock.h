/* Socket helpers shared by the store and the TCP transport.
 *
 * Every socket made here is close-on-exec and non-blocking; TCP sockets get
 * TCP_NODELAY (rendezvous and control traffic are small request/reply
 * messages where Nagle's delay would dominate). Blocking behaviour is built
 * on poll() with an absolute deadline (core/clock.h) and an optional abort
 * fd: when abort_fd >= 0 becomes readable, the wait ends with GANG_ABORTED.
 *
 * Errors go through gang__error naming the peer as "host:port". No function
 * here logs above TRACE: callers decide what is worth a warning.
 * All functions are thread-safe (they touch only their arguments). */
#ifndef GANG_CORE_SOCK_H
#define GANG_CORE_SOCK_H

#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"

/* Enough for "[ipv6%scope]:port" and most host names with a port. */
#define GANG_SOCK_PEER_CAP 300

/* Formats "host:port" (brackets around IPv6 literals) into buf, as
 * gang__hostport_format does, with "*" for a NULL or empty host. */
void gang__sock_peer_name(const char *host, int port, char *buf, size_t cap);

/* Listens on host:port (host NULL or "" = all interfaces of both families;
 * port 0 = an ephemeral port) with SO_REUSEADDR and the given backlog
 * (<= 0: SOMAXCONN, which Linux caps at net.core.somaxconn). On success *fd
 * is a non-blocking listening socket owned by the caller (close() it) and
 * *bound_port the real port. Errors: GANG_SYSTEM naming host:port (address
 * in use, cannot resolve, ...). */
gang_status gang__sock_listen(const char *host, int port, int backlog, int *fd,
                              int *bound_port);

/* Accepts one connection from a non-blocking listener. Returns GANG_OK with
 * *fd (non-blocking, CLOEXEC, NODELAY; caller owns it), GANG_IN_PROGRESS
 * when nothing is pending, or GANG_SYSTEM with *err set to the errno (EMFILE
 * and ENFILE are the ones a server must handle). */
gang_status gang__sock_accept(int lfd, int *fd, int *err);

/* One connection attempt to host:port, trying each resolved address until
 * `deadline`. On success *fd is a connected non-blocking socket. On failure
 * returns GANG_SYSTEM / GANG_TIMEOUT with the detail set and *err (may be
 * NULL) set to the last errno, so callers can decide whether to retry
 * (ECONNREFUSED, ETIMEDOUT, ...). Name resolution failures set *err to 0
 * and return GANG_INVALID_ARGUMENT (a host that does not resolve). */
gang_status gang__sock_connect(const char *host, int port, int64_t deadline,
                               int *fd, int *err);

/* Reads exactly n bytes. Errors: GANG_PEER_LOST (EOF or reset: "<peer>
 * closed the connection"), GANG_TIMEOUT (deadline), GANG_ABORTED (abort_fd
 * readable), GANG_SYSTEM. `peer` names the other side in the detail. On
 * error, how many bytes were read is unspecified. */
gang_status gang__sock_read_full(int fd, void *buf, size_t n, int64_t deadline,
                                 int abort_fd, const char *peer);

/* Like gang__sock_read_full but returns as soon as at least one byte was
 * read (up to n); *got receives the count. */
gang_status gang__sock_read_some(int fd, void *buf, size_t n, int64_t deadline,
                                 int abort_fd, const char *peer, size_t *got);

/* Waits until fd is readable (data, EOF or an error to read) by the
 * deadline: for a caller that knows nothing has arrived yet, one poll
 * instead of a read that fails with EAGAIN first. Same errors as
 * gang__sock_read_full, but never GANG_PEER_LOST (the read after says). */
gang_status gang__sock_wait_readable(int fd, int64_t deadline, int abort_fd,
                                     const char *peer);

/* Writes exactly n bytes (MSG_NOSIGNAL: a closed peer is GANG_PEER_LOST, not
 * SIGPIPE). Same errors as gang__sock_read_full. */
gang_status gang__sock_write_full(int fd, const void *buf, size_t n,
                                  int64_t deadline, int abort_fd,
                                  const char *peer);

/* setsockopt wrapper; returns 0 or -1 with errno set. */
int gang__sock_set_nodelay(int fd);

#endif
