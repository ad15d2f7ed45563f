/* Socket helpers: listen/accept/connect with deadlines and full reads and
 * writes over non-blocking sockets. See sock.h. */
#include "sock.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "hostport.h"
#include "log.h"

void gang__sock_peer_name(const char *host, int port, char *buf, size_t cap) {
  gang__hostport_format(buf, cap, host != NULL && *host != '\0' ? host : "*",
                        port);
}

int gang__sock_set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static gang_status resolve(const char *host, int port, bool passive,
                           struct addrinfo **res) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : AI_ADDRCONFIG);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  const char *h = (host == NULL || *host == '\0') ? NULL : host;
  int rc = getaddrinfo(h, ps, &hints, res);
  if (rc == EAI_ADDRFAMILY || (rc == EAI_NONAME && h != NULL && !passive)) {
    /* AI_ADDRCONFIG hides loopback-only families on hosts without other
     * interfaces (containers): retry without it before giving up. */
    hints.ai_flags &= ~AI_ADDRCONFIG;
    rc = getaddrinfo(h, ps, &hints, res);
  }
  if (rc != 0) {
    char peer[GANG_SOCK_PEER_CAP];
    gang__sock_peer_name(host, port, peer, sizeof peer);
    if (rc == EAI_SYSTEM)
      return gang__error_errno(GANG_SYSTEM, errno, "cannot resolve %s", peer);
    return gang__error(rc == EAI_AGAIN ? GANG_SYSTEM : GANG_INVALID_ARGUMENT,
                       "cannot resolve %s: %s", peer, gai_strerror(rc));
  }
  return GANG_OK;
}

static int sockaddr_port(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
  if (ss->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
  return -1;
}

gang_status gang__sock_listen(const char *host, int port, int backlog, int *fd,
                              int *bound_port) {
  char peer[GANG_SOCK_PEER_CAP];
  gang__sock_peer_name(host, port, peer, sizeof peer);
  struct addrinfo *res;
  GANG_CHECK(resolve(host, port, true, &res));
  /* With no host, prefer the IPv6 wildcard (dual-stack) over 0.0.0.0. */
  struct addrinfo *order[2] = {NULL, NULL};
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET6 && order[0] == NULL)
      order[0] = ai;
    else if (order[1] == NULL)
      order[1] = ai;
  }
  if (host != NULL && *host != '\0') {
    order[0] = res;
    order[1] = NULL;
  }
  int err = EADDRNOTAVAIL;
  for (int i = 0; i < 2; i++) {
    struct addrinfo *ai = order[i];
    if (ai == NULL)
      continue;
    int s =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
               ai->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6 && (host == NULL || *host == '\0'))
      setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 ||
        listen(s, backlog > 0 ? backlog : SOMAXCONN) != 0) {
      err = errno;
      close(s);
      continue;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(s, (struct sockaddr *)&ss, &sl) != 0) {
      err = errno;
      close(s);
      continue;
    }
    freeaddrinfo(res);
    *fd = s;
    *bound_port = sockaddr_port(&ss);
    return GANG_OK;
  }
  freeaddrinfo(res);
  return gang__error_errno(GANG_SYSTEM, err, "cannot listen on %s", peer);
}

gang_status gang__sock_accept(int lfd, int *fd, int *err) {
  for (;;) {
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s >= 0) {
      (void)gang__sock_set_nodelay(s);
      *fd = s;
      return GANG_OK;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return GANG_IN_PROGRESS;
    *err = errno;
    return gang__error_errno(GANG_SYSTEM, errno, "accept");
  }
}

/* Polls fd for `events` (and abort_fd for input) until the deadline.
 * Returns GANG_OK when fd is ready. */
static gang_status wait_fd(int fd, short events, int64_t deadline, int abort_fd,
                           const char *peer, const char *what) {
  for (;;) {
    struct pollfd p[2] = {{fd, events, 0}, {abort_fd, POLLIN, 0}};
    int np = abort_fd >= 0 ? 2 : 1;
    int rc = poll(p, (nfds_t)np, gang__deadline_poll_ms(deadline));
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      return gang__error_errno(GANG_SYSTEM, errno, "%s %s: poll", what, peer);
    }
    if (np == 2 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
      return gang__error(GANG_ABORTED, "%s %s: aborted", what, peer);
    if (p[0].revents != 0)
      return GANG_OK;
    if (rc == 0 && gang__deadline_passed(deadline))
      return gang__error(GANG_TIMEOUT, "%s %s: deadline exceeded", what, peer);
  }
}

gang_status gang__sock_connect(const char *host, int port, int64_t deadline,
                               int *fd, int *err) {
  char peer[GANG_SOCK_PEER_CAP];
  gang__sock_peer_name(host, port, peer, sizeof peer);
  int dummy;
  if (err == NULL)
    err = &dummy;
  *err = 0;
  struct addrinfo *res;
  GANG_CHECK(resolve(host, port, false, &res));
  gang_status st = GANG_SYSTEM;
  int last = ECONNREFUSED;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int s =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
               ai->ai_protocol);
    if (s < 0) {
      last = errno;
      continue;
    }
    int rc = connect(s, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
      last = errno;
      close(s);
      continue;
    }
    if (rc != 0) {
      gang_status w = wait_fd(s, POLLOUT, deadline, -1, peer, "connect to");
      if (w != GANG_OK) {
        close(s);
        freeaddrinfo(res);
        *err = w == GANG_TIMEOUT ? ETIMEDOUT : 0;
        return w;
      }
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
      if (soerr != 0) {
        last = soerr;
        close(s);
        continue;
      }
    }
    (void)gang__sock_set_nodelay(s);
    freeaddrinfo(res);
    *fd = s;
    return GANG_OK;
  }
  freeaddrinfo(res);
  *err = last;
  return gang__error_errno(st, last, "connect to %s", peer);
}

static bool lost_errno(int e) {
  return e == ECONNRESET || e == EPIPE || e == ENOTCONN || e == ECONNABORTED ||
         e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH;
}

gang_status gang__sock_read_some(int fd, void *buf, size_t n, int64_t deadline,
                                 int abort_fd, const char *peer, size_t *got) {
  for (;;) {
    ssize_t r = recv(fd, buf, n, 0);
    if (r > 0) {
      *got = (size_t)r;
      return GANG_OK;
    }
    if (r == 0)
      return gang__error(GANG_PEER_LOST, "%s closed the connection", peer);
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      GANG_CHECK(wait_fd(fd, POLLIN, deadline, abort_fd, peer, "read from"));
      continue;
    }
    if (lost_errno(errno))
      return gang__error_errno(GANG_PEER_LOST, errno,
                               "%s closed the connection", peer);
    return gang__error_errno(GANG_SYSTEM, errno, "read from %s", peer);
  }
}

gang_status gang__sock_wait_readable(int fd, int64_t deadline, int abort_fd,
                                     const char *peer) {
  return wait_fd(fd, POLLIN, deadline, abort_fd, peer, "read from");
}

gang_status gang__sock_read_full(int fd, void *buf, size_t n, int64_t deadline,
                                 int abort_fd, const char *peer) {
  uint8_t *p = buf;
  while (n > 0) {
    size_t got;
    GANG_CHECK(gang__sock_read_some(fd, p, n, deadline, abort_fd, peer, &got));
    p += got;
    n -= got;
  }
  return GANG_OK;
}

gang_status gang__sock_write_full(int fd, const void *buf, size_t n,
                                  int64_t deadline, int abort_fd,
                                  const char *peer) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GANG_CHECK(wait_fd(fd, POLLOUT, deadline, abort_fd, peer, "write to"));
      continue;
    }
    if (w < 0 && lost_errno(errno))
      return gang__error_errno(GANG_PEER_LOST, errno,
                               "%s closed the connection", peer);
    return gang__error_errno(GANG_SYSTEM, errno, "write to %s", peer);
  }
  return GANG_OK;
}
