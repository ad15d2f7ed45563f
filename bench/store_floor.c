/* store_floor: the most request/reply operations per second this machine's
 * kernel allows over loopback TCP, with no store behind them: the floor
 * under `gang-store bench` (docs/store-benchmark.md).
 *
 *   store_floor [--clients N] [--ops N] [--spin-us US] [--no-reply]
 *
 * One server thread answers each 32-byte request with a 5-byte reply from
 * an epoll loop that reads every ready connection once; N client threads,
 * each with its own connection, send a request and read its reply in a
 * loop (--ops is the total). With --spin-us both sides poll without
 * sleeping that long before they block (the server after each answer,
 * the client after each request), as gang's store does by default. With
 * --no-reply the clients only send (torch's TCPStore set is such a
 * request) and end with one round trip, so the time covers the requests
 * the server has read. Prints one JSON line with ops/s. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQ 32
#define REP 5

static int nclients = 1, spin_us = 0;
static long long total_ops = 100000;
static bool no_reply;
static int lfd, epfd;
static volatile bool stop;

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

/* A connection's unread bytes: requests may arrive split or batched. */
typedef struct conn {
  int fd;
  int have; /* bytes of the current request read so far */
} conn;

static void serve_conn(conn *c) {
  char buf[REQ * 64];
  for (;;) {
    ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r <= 0)
      return; /* EAGAIN, or the client left */
    /* A request ends where the bytes so far reach a multiple of REQ; its
     * last byte says whether it wants a reply ('r'). */
    char rep[REP] = {0};
    for (ssize_t j = 0; j < r; j++) {
      if (++c->have < REQ)
        continue;
      c->have = 0;
      if ((!no_reply || buf[j] == 'r') &&
          send(c->fd, rep, REP, MSG_NOSIGNAL) != REP)
        return;
    }
    if ((size_t)r < sizeof buf)
      return;
  }
}

static void *server(void *arg) {
  (void)arg;
  struct epoll_event ev[256];
  long long spin_until = 0;
  while (!stop) {
    int ms = 100;
    if (spin_until != 0 && now_ns() < spin_until)
      ms = 0;
    else
      spin_until = 0;
    int n = epoll_wait(epfd, ev, 256, ms);
    for (int i = 0; i < n; i++) {
      if (ev[i].data.ptr == NULL) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (fd < 0)
          continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn *c = calloc(1, sizeof *c);
        c->fd = fd;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
        continue;
      }
      serve_conn(ev[i].data.ptr);
    }
    if (n > 0 && spin_us > 0)
      spin_until = now_ns() + spin_us * 1000LL;
  }
  return NULL;
}

static void read_reply(int fd) {
  char rep[REP];
  int got = 0;
  long long until = spin_us > 0 ? now_ns() + spin_us * 1000LL : 0;
  while (got < REP) {
    ssize_t r = recv(fd, rep + got, REP - got, MSG_DONTWAIT);
    if (r > 0) {
      got += (int)r;
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR))
      die("recv");
    if (until != 0 && now_ns() < until)
      continue;
    struct pollfd p = {fd, POLLIN, 0};
    poll(&p, 1, -1);
  }
}

typedef struct client {
  pthread_t th;
  int fd;
  long long ops;
  pthread_barrier_t *go;
} client;

static void *client_main(void *arg) {
  client *c = arg;
  char req[REQ];
  memset(req, 'q', sizeof req);
  pthread_barrier_wait(c->go);
  for (long long i = 0; i < c->ops; i++) {
    req[REQ - 1] = no_reply && i + 1 < c->ops ? 'q' : 'r';
    if (send(c->fd, req, REQ, MSG_NOSIGNAL) != REQ)
      die("send");
    if (req[REQ - 1] == 'r')
      read_reply(c->fd);
  }
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
      nclients = atoi(argv[++i]);
    else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc)
      total_ops = atoll(argv[++i]);
    else if (strcmp(argv[i], "--spin-us") == 0 && i + 1 < argc)
      spin_us = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-reply") == 0)
      no_reply = true;
    else {
      fprintf(stderr,
              "usage: store_floor [--clients N] [--ops N] [--spin-us US] "
              "[--no-reply]\n");
      return 2;
    }
  }
  if (nclients < 1 || total_ops < nclients || spin_us < 0) {
    fprintf(stderr, "store_floor: need clients >= 1, ops >= clients\n");
    return 2;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(lfd, 4096) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &len) != 0)
    die("listen");
  epfd = epoll_create1(0);
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &e);
  pthread_t srv;
  pthread_create(&srv, NULL, server, NULL);

  client *cl = calloc((size_t)nclients, sizeof *cl);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)nclients + 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 128 * 1024);
  for (int i = 0; i < nclients; i++) {
    cl[i].fd = socket(AF_INET, SOCK_STREAM, 0);
    if (cl[i].fd < 0 ||
        connect(cl[i].fd, (struct sockaddr *)&sa, sizeof sa) != 0)
      die("connect");
    int one = 1;
    setsockopt(cl[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    cl[i].ops = total_ops / nclients + (i < total_ops % nclients);
    cl[i].go = &go;
    if (pthread_create(&cl[i].th, &attr, client_main, &cl[i]) != 0)
      die("pthread_create");
  }
  long long t0 = now_ns();
  pthread_barrier_wait(&go);
  for (int i = 0; i < nclients; i++)
    pthread_join(cl[i].th, NULL);
  double secs = (double)(now_ns() - t0) / 1e9;
  stop = true;
  pthread_join(srv, NULL);
  printf(
      "{\"impl\": \"floor\", \"op\": \"%s\", \"clients\": %d, \"ops\": %lld, "
      "\"spin_us\": %d, \"seconds\": %.4f, \"ops_per_s\": %.0f}\n",
      no_reply ? "no-reply" : "round-trip", nclients, total_ops, spin_us, secs,
      (double)total_ops / secs);
  return 0;
}
