/* The loopback TCP floor that the fabric is measured against
 * (docs/performance.md): two processes, one TCP connection, no library.
 *
 *   tcp_floor pingpong [bytes] [iters]   round trip of one message each way,
 *                                        both sides busy-polling recv
 *   tcp_floor stream [bytes] [iters]     one direction, `bytes` per message
 *   tcp_floor duplex [bytes] [iters]     both directions at once (what a
 *                                        2-rank all_reduce does); sleeps in
 *                                        poll when stuck unless
 *                                        TCP_FLOOR_SPIN is set; with
 *                                        TCP_FLOOR_PIECE=n, as exchanges of
 *                                        at most n bytes in turn; with
 *                                        TCP_FLOOR_HDR=h (up to 4096), each
 *                                        exchange framed as gang's: h bytes
 *                                        of header before the payload, in
 *                                        the same sendmsg, read by a recv
 *                                        for the header and one for the
 *                                        payload, or with TCP_FLOOR_READ=
 *                                        scatter by one recvmsg into both,
 *                                        or with TCP_FLOOR_READ=stage by a
 *                                        recv of up to 32 KiB into a buffer
 *                                        the payload is copied out of;
 *                                        with TCP_FLOOR_REDUCE set, each
 *                                        exchange is followed by a float32
 *                                        sum of what arrived into what was
 *                                        sent (gang's kernel, the leader's
 *                                        operand first): the floor of a
 *                                        2-rank all_reduce done as one
 *                                        exchange and one reduce
 *
 * Socket buffers are left to the kernel unless TCP_FLOOR_BUF is set (bytes
 * for SO_SNDBUF and SO_RCVBUF), the congestion control to the system unless
 * TCP_FLOOR_CC names one (gang uses reno on this host's connections).
 * Prints the median over `iters` of the leader's time and, for pingpong and
 * duplex, of the slower side's time per iteration (how gang-bench times). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/reduce.h"
#include "floor_util.h"

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char *b = getenv("TCP_FLOOR_BUF");
  if (b != NULL) {
    int v = atoi(b);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  }
  const char *cc = getenv("TCP_FLOOR_CC");
  if (cc != NULL &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)))
    perror("TCP_CONGESTION");
}

/* Moves `out` bytes out and `in` bytes in at once, spinning on
 * non-blocking calls and sleeping in poll only when neither can move. With
 * hdr > 0, each direction is a frame as gang's: hdr bytes of header and
 * the payload, written by one sendmsg, the header read first. */
static int pump(int fd, const char *sbuf, size_t out, char *rbuf, size_t in,
                int spin, size_t hdr) {
  static char shdr[4096], rhdr[4096];
  static int scatter = -1, staged;
  if (scatter < 0) {
    const char *e = getenv("TCP_FLOOR_READ");
    scatter = e != NULL && strcmp(e, "scatter") == 0;
    staged = e != NULL && strcmp(e, "stage") == 0;
  }
  size_t sf = out ? out + hdr : 0, rf = in ? in + hdr : 0;
  size_t so = 0, ro = 0;
  while (so < sf || ro < rf) {
    int moved = 0;
    if (so < sf) {
      struct iovec iov[2];
      int n = 0;
      if (so < hdr)
        iov[n++] = (struct iovec){shdr + so, hdr - so};
      size_t po = so > hdr ? so - hdr : 0;
      iov[n++] = (struct iovec){(char *)sbuf + po, out - po};
      struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
      ssize_t w = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) {
        so += (size_t)w;
        moved = 1;
      } else if (w < 0 && errno != EAGAIN)
        return -1;
    }
    if (ro < rf && spin == 2) {
      struct pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 0) == 0)
        continue;
    }
    if (ro < rf) {
      ssize_t r;
      if (ro < hdr && scatter) {
        struct iovec iov[2] = {{rhdr + ro, hdr - ro}, {rbuf, in}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        r = recvmsg(fd, &mh, MSG_DONTWAIT);
      } else if (ro < hdr && staged) {
        /* As a stage does: header and payload in one read into a
         * buffer of its own, the payload copied out of it. */
        static char stage[32 * 1024];
        size_t want = rf - ro < sizeof stage ? rf - ro : sizeof stage;
        r = recv(fd, stage, want, MSG_DONTWAIT);
        if (r > 0) {
          size_t h = (size_t)r < hdr - ro ? (size_t)r : hdr - ro;
          memcpy(rhdr + ro, stage, h);
          memcpy(rbuf, stage + h, (size_t)r - h);
        }
      } else
        r = ro < hdr ? recv(fd, rhdr + ro, hdr - ro, MSG_DONTWAIT)
                     : recv(fd, rbuf + (ro - hdr), rf - ro, MSG_DONTWAIT);
      if (r > 0) {
        ro += (size_t)r;
        moved = 1;
      } else if (r == 0 || (r < 0 && errno != EAGAIN))
        return -1;
    }
    if (!moved && !spin) {
      struct pollfd p = {
          fd, (short)((ro < rf ? POLLIN : 0) | (so < sf ? POLLOUT : 0)), 0};
      poll(&p, 1, 1000);
    }
  }
  return 0;
}

/* Sends (out != 0) or receives len bytes at p over a blocking socket. */
static int move_all(int fd, void *p, size_t len, int out) {
  char *b = p;
  while (len > 0) {
    ssize_t r = out ? send(fd, b, len, 0) : recv(fd, b, len, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    b += r;
    len -= (size_t)r;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "pingpong";
  size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : 8;
  int iters = argc > 3 ? atoi(argv[3]) : 1000;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 1) ||
      getsockname(lfd, (struct sockaddr *)&sa, &sl)) {
    perror("listen");
    return 1;
  }
  pid_t child = fork();
  int fd;
  if (child == 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    tune(fd);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
      _exit(1);
  } else {
    fd = accept(lfd, NULL, NULL);
    tune(fd);
  }
  close(lfd);
  int leader = child != 0;
  char *sbuf = calloc(1, bytes + 1), *rbuf = calloc(1, bytes + 1);
  /* Written, so that sends read pages of their own as a library's do, not
   * calloc's shared zero page (no difference measured here, 2026-11-23). */
  if (sbuf != NULL)
    memset(sbuf, 0x5a, bytes + 1);
  double *t = calloc((size_t)iters, sizeof *t);
  int pp = strcmp(mode, "pingpong") == 0, duplex = strcmp(mode, "duplex") == 0;
  int warm = iters / 10 + 1;
  int spin = getenv("TCP_FLOOR_SPIN") ? atoi(getenv("TCP_FLOOR_SPIN")) : 0;
  int reduce = getenv("TCP_FLOOR_REDUCE") != NULL;
  for (int i = -warm; i < iters; i++) {
    double t0 = floor_now_us();
    int rc;
    if (pp) {
      int sp = spin ? spin : 1;
      rc = leader ? pump(fd, sbuf, bytes, NULL, 0, sp, 0) ||
                        pump(fd, NULL, 0, rbuf, bytes, sp, 0)
                  : pump(fd, NULL, 0, rbuf, bytes, sp, 0) ||
                        pump(fd, sbuf, bytes, NULL, 0, sp, 0);
    } else if (duplex) {
      /* TCP_FLOOR_PIECE: the same bytes as exchanges of at most that many
       * bytes, one after the other (each waits for the other side's).
       * TCP_FLOOR_HDR: each exchange a frame with a header that long. */
      size_t hdr = getenv("TCP_FLOOR_HDR")
                       ? strtoull(getenv("TCP_FLOOR_HDR"), NULL, 0)
                       : 0;
      if (hdr > 4096)
        hdr = 4096;
      size_t piece = getenv("TCP_FLOOR_PIECE")
                         ? strtoull(getenv("TCP_FLOOR_PIECE"), NULL, 0)
                         : 0;
      if (piece == 0 || piece > bytes)
        piece = bytes;
      rc = 0;
      for (size_t o = 0; o < bytes && rc == 0; o += piece) {
        size_t n = bytes - o < piece ? bytes - o : piece;
        rc = pump(fd, sbuf + o, n, rbuf + o, n, spin, hdr);
      }
      if (reduce && rc == 0)
        gang__reduce3(sbuf, leader ? sbuf : rbuf, leader ? rbuf : sbuf,
                      bytes / 4, GANG_FLOAT32, GANG_SUM);
    } else {
      rc = leader ? pump(fd, sbuf, bytes, NULL, 0, 0, 0)
                  : pump(fd, NULL, 0, rbuf, bytes, 0, 0);
      /* one byte back so the sender times delivery, not buffering */
      rc = rc || (leader ? pump(fd, NULL, 0, rbuf, 1, 1, 0)
                         : pump(fd, sbuf, 1, NULL, 0, 1, 0));
    }
    if (rc != 0) {
      perror("pump");
      return 1;
    }
    if (i >= 0)
      t[i] = floor_now_us() - t0;
  }
  /* Both sides time every exchange: the child hands its times over, and
   * the leader also reports the median of the slower side's time per
   * iteration, as gang-bench and the peers' programs time a collective. */
  double *slow = NULL;
  if (pp || duplex) {
    size_t len = (size_t)iters * sizeof *t;
    if (!leader) {
      if (move_all(fd, t, len, 1) != 0)
        perror("sending times");
    } else if ((slow = calloc((size_t)iters, sizeof *slow)) == NULL ||
               move_all(fd, slow, len, 0) != 0) {
      perror("receiving times");
      free(slow);
      slow = NULL;
    } else {
      for (int i = 0; i < iters; i++)
        if (t[i] > slow[i])
          slow[i] = t[i];
      qsort(slow, (size_t)iters, sizeof *slow, floor_cmp_double);
    }
  }
  if (leader) {
    qsort(t, (size_t)iters, sizeof *t, floor_cmp_double);
    double med = t[iters / 2];
    if (pp)
      printf("pingpong %zu B: round trip %.2f us, one way %.2f us", bytes, med,
             med / 2);
    else
      printf("%s %zu B: %.1f us, %.2f GB/s per direction", mode, bytes, med,
             (double)bytes / med / 1e3);
    if (slow != NULL)
      printf("; slower side %.2f us", slow[iters / 2]);
    printf("\n");
    waitpid(child, NULL, 0);
  }
  free(slow);
  close(fd);
  free(sbuf);
  free(rbuf);
  free(t);
  return 0;
}
