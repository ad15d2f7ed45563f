/* beat_floor: what receiving heartbeats costs this machine's kernel, with
 * no library: the floor under the lighthouse's CPU (bench/lh_scale).
 *
 *   beat_floor [--conns N] [--beat-ms MS] [--seconds S] [--udp]
 *              [--reply] [--nap-us US]
 *
 * A child process opens N loopback connections (TCP, or with --udp N
 * sockets sending datagrams to one) and sends 24 bytes on each every
 * --beat-ms, spread evenly over the period, from N / 10 threads. The
 * parent receives them in one thread: an edge-triggered epoll loop that
 * reads each connection until a short read (TCP), or recvmmsg (UDP); with
 * --reply it answers each beat with 16 bytes (a request/reply protocol);
 * with --nap-us it sleeps that long after each pass that found fewer than
 * 16 events, so that one wakeup takes many beats. It prints the receiving
 * thread's CPU (/proc/self/task/TID/schedstat) as a fraction of a core. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int conns = 1000, beat_ms = 100, seconds = 5, nap_us = 0;
static bool udp, reply;
static int port;
static int *fds;
static int nthreads;

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long thread_run_ns(void) {
  char path[96];
  snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat",
           (long)syscall(SYS_gettid));
  FILE *f = fopen(path, "r");
  long long ns = 0;
  if (f == NULL || fscanf(f, "%lld", &ns) != 1)
    ns = 0;
  if (f != NULL)
    fclose(f);
  return ns;
}

static void *send_main(void *arg) {
  int t = (int)(long)arg, mine = 0;
  for (int i = t; i < conns; i += nthreads)
    mine++;
  long long period = (long long)beat_ms * 1000000LL, t0 = now_ns();
  char msg[24] = "beat", ack[64];
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  for (long long k = 0;; k++) {
    int j = 0;
    for (int i = t; i < conns; i += nthreads, j++) {
      long long due = t0 + k * period + period * j / mine;
      struct timespec ts = {due / 1000000000LL, due % 1000000000LL};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
      if (udp)
        sendto(fds[i], msg, sizeof msg, 0, (struct sockaddr *)&to, sizeof to);
      else if (send(fds[i], msg, sizeof msg, MSG_NOSIGNAL) < 0)
        return NULL;
      if (reply && recv(fds[i], ack, sizeof ack, 0) <= 0)
        return NULL;
    }
  }
}

static void sender(void) {
  fds = calloc((size_t)conns, sizeof *fds);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  for (int i = 0; i < conns; i++) {
    fds[i] = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0);
    if (!udp && connect(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0) {
      perror("beat_floor: connect");
      exit(1);
    }
    int one = 1;
    if (!udp)
      setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  nthreads = conns / 10 > 0 ? conns / 10 : 1;
  for (int t = 0; t < nthreads; t++) {
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024);
    pthread_create(&th, &a, send_main, (void *)(long)t);
  }
  pause();
}

static void usage(void) {
  fprintf(stderr, "usage: beat_floor [--conns N] [--beat-ms MS] [--seconds S] "
                  "[--udp] [--reply] [--nap-us US]\n");
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--udp") == 0)
      udp = true;
    else if (strcmp(argv[i], "--reply") == 0)
      reply = true;
    else if (i + 1 < argc && strcmp(argv[i], "--conns") == 0)
      conns = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--beat-ms") == 0)
      beat_ms = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
      seconds = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--nap-us") == 0)
      nap_us = atoi(argv[++i]);
    else
      usage();
  }
  if (conns < 1 || beat_ms < 1 || seconds < 1 || (udp && reply))
    usage();
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  int lfd = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  socklen_t sl = sizeof sa;
  if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      (!udp && listen(lfd, 4096) != 0) ||
      getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
    perror("beat_floor: listen");
    return 1;
  }
  port = ntohs(sa.sin_port);
  pid_t child = fork();
  if (child == 0) {
    sender();
    _exit(0);
  }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN};
  ev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  int accepted = 0;
  while (!udp && accepted < conns) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    if (fd < 0)
      continue;
    struct epoll_event e = {.events = EPOLLIN | EPOLLET};
    e.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
    accepted++;
  }
  long long beats = 0, t0 = 0, c0 = 0, start = now_ns();
  struct epoll_event evs[256];
  char buf[4096];
  const char ack[16] = "ok";
  while (now_ns() - start < (long long)(seconds + 1) * 1000000000LL) {
    if (t0 == 0 && now_ns() - start > 1000000000LL) { /* 1 s to settle */
      t0 = now_ns();
      c0 = thread_run_ns();
      beats = 0;
    }
    int n = epoll_wait(ep, evs, 256, 100);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (udp) {
        struct mmsghdr m[64];
        struct iovec io[64];
        static char dg[64][64];
        for (int k = 0; k < 64; k++) {
          io[k] = (struct iovec){dg[k], sizeof dg[k]};
          m[k] =
              (struct mmsghdr){.msg_hdr = {.msg_iov = &io[k], .msg_iovlen = 1}};
        }
        int got;
        while ((got = recvmmsg(fd, m, 64, MSG_DONTWAIT, NULL)) > 0)
          beats += got;
        continue;
      }
      for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0)
          break;
        beats += r / 24;
        if (reply)
          send(fd, ack, sizeof ack, MSG_NOSIGNAL);
        if ((size_t)r < sizeof buf)
          break; /* a short read: the socket is empty */
      }
    }
    if (nap_us > 0 && n < 16)
      usleep((useconds_t)nap_us);
  }
  double wall = (now_ns() - t0) / 1e9;
  double cpu = (thread_run_ns() - c0) / 1e9;
  printf("beat_floor: %s%s, %d %s, a beat every %d ms each, nap %d us: %lld "
         "beats in %.1f s (%.0f/s); the receiving thread used %.2f %% of a "
         "core (%.1f us a beat)\n",
         udp ? "udp" : "tcp", reply ? " with replies" : "", conns,
         udp ? "senders" : "connections", beat_ms, nap_us, beats, wall,
         beats / wall, 100 * cpu / wall, beats ? 1e6 * cpu / beats : 0);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return 0;
}
