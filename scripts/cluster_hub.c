/* The cluster in a box's delay hub (scripts/cluster up --delay): an
 * Ethernet switch in user space between TAP devices, one per host, that
 * holds every frame for a fixed one-way delay and serializes the frames
 * to each port at a given rate -- what netem and tbf would do, for
 * kernels without netem.
 *
 *   cluster_hub --delay-us D [--rate-bps R] [--queue-bytes Q]
 *               [--ready FILE] TAP...
 *
 * Each TAP is attached by name (it must exist, `ip tuntap add mode tap`)
 * before scripts/cluster moves it into its host's namespace; the hub's
 * file descriptors stay attached to the devices wherever they go. FILE is
 * created once every TAP is attached. A frame
 * from port i goes to the port its destination MAC was last seen on, or to
 * every other port when unknown or broadcast; it leaves at
 *   max(arrival + D, when the port's previous frame has gone out) + size / R
 * and is dropped when more than Q bytes wait for its port (a switch's
 * buffer). Runs until SIGTERM or SIGINT; exit 1 on a setup error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 256
/* The virtio-net header before every frame (struct virtio_net_hdr), then
 * the frame: up to 64 KiB of segments and their Ethernet header. */
#define VNET_HDR 10
#define FRAME_MAX (VNET_HDR + 65536 + 14)
#define MACS 1024

typedef struct frame {
  struct frame *next;
  int64_t due; /* ns, CLOCK_MONOTONIC */
  size_t len;
  unsigned char data[];
} frame;

typedef struct port {
  int fd;
  frame *head, *tail;
  size_t queued;    /* bytes waiting */
  int64_t free_at;  /* when the port's last frame has gone out */
  uint64_t dropped; /* frames dropped for a full queue */
} port;

typedef struct mac_entry {
  unsigned char mac[6];
  int port; /* -1: empty */
} mac_entry;

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int attach(const char *name) {
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    perror("cluster_hub: /dev/net/tun");
    return -1;
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (strlen(name) >= sizeof ifr.ifr_name) {
    fprintf(stderr, "cluster_hub: interface name too long: %s\n", name);
    close(fd);
    return -1;
  }
  memcpy(ifr.ifr_name, name, strlen(name) + 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    fprintf(stderr, "cluster_hub: attaching to %s: %s\n", name,
            strerror(errno));
    close(fd);
    return -1;
  }
  /* The hub takes frames as a NIC with segmentation offload would hand
   * them to the wire's far end: up to 64 KiB, each behind a virtio-net
   * header saying how it is to be cut and checksummed, and gives them to
   * the other port as they came. One read and one write per 64 KiB
   * instead of per 1500 bytes; the hosts' TCP sees a 1500-byte MTU all
   * the same. */
  int hdr = VNET_HDR;
  if (ioctl(fd, TUNSETVNETHDRSZ, &hdr) != 0 ||
      ioctl(fd, TUNSETOFFLOAD,
            TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) != 0) {
    fprintf(stderr, "cluster_hub: offloads on %s: %s\n", name, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

/* A small open-addressed table of where each MAC was last seen. */
static mac_entry macs[MACS];
static unsigned mac_slot(const unsigned char *m) {
  unsigned h = 2166136261u;
  for (int i = 0; i < 6; i++)
    h = (h ^ m[i]) * 16777619u;
  return h % MACS;
}
static void learn(const unsigned char *m, int p) {
  if (m[0] & 1)
    return; /* a group address is never a source */
  unsigned s = mac_slot(m);
  for (unsigned k = 0; k < MACS; k++, s = (s + 1) % MACS) {
    if (macs[s].port < 0 || memcmp(macs[s].mac, m, 6) == 0) {
      memcpy(macs[s].mac, m, 6);
      macs[s].port = p;
      return;
    }
  }
}
static int lookup(const unsigned char *m) {
  if (m[0] & 1)
    return -1; /* broadcast or multicast: flood */
  unsigned s = mac_slot(m);
  for (unsigned k = 0; k < MACS; k++, s = (s + 1) % MACS) {
    if (macs[s].port < 0)
      return -1;
    if (memcmp(macs[s].mac, m, 6) == 0)
      return macs[s].port;
  }
  return -1;
}

static int64_t delay_ns, rate_bps, queue_cap = 4 << 20;
static const char *ready;

/* Frames are pooled, never given back: a malloc'd frame per packet let
 * the heap grow for a burst and shrink after it, and the hub spent a
 * quarter of its time faulting the pages in again (perf, 8 hosts
 * exchanging 1 MiB each at once), so a burst cost more per byte the
 * larger it was, which no switch does. */
static frame *pool;

static frame *frame_get(void) {
  frame *f = pool;
  if (f != NULL) {
    pool = f->next;
    return f;
  }
  return malloc(sizeof *f + FRAME_MAX);
}

static void frame_put(frame *f) {
  f->next = pool;
  pool = f;
}

/* Queues f (len bytes, arrived then) for port p, or drops it. */
static void enqueue(port *p, frame *f, size_t len, int64_t arrived) {
  if (p->queued + len > (size_t)queue_cap) {
    p->dropped++;
    frame_put(f);
    return;
  }
  int64_t start = arrived + delay_ns;
  if (start < p->free_at)
    start = p->free_at;
  int64_t wire = rate_bps > 0 ? (int64_t)len * 8 * 1000000000 / rate_bps : 0;
  f->due = start + wire;
  p->free_at = f->due;
  f->len = len;
  f->next = NULL;
  if (p->tail != NULL)
    p->tail->next = f;
  else
    p->head = f;
  p->tail = f;
  p->queued += len;
}

/* Sends what is due; returns the earliest due time left (INT64_MAX: none). */
static int64_t flush(port *ports, int n, int64_t now) {
  int64_t next = INT64_MAX;
  for (int i = 0; i < n; i++) {
    port *p = &ports[i];
    while (p->head != NULL && p->head->due <= now) {
      frame *f = p->head;
      /* A full device queue (EAGAIN) or a device that is down (EIO)
       * loses the frame, as a wire would. */
      if (write(p->fd, f->data, f->len) < 0 && errno != EAGAIN &&
          errno != EIO && errno != EINTR)
        p->dropped++;
      p->head = f->next;
      if (p->head == NULL)
        p->tail = NULL;
      p->queued -= f->len;
      frame_put(f);
    }
    if (p->head != NULL && p->head->due < next)
      next = p->head->due;
  }
  return next;
}

static int64_t parse(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0) {
    fprintf(stderr, "cluster_hub: %s wants a number >= 0, not '%s'\n", flag, v);
    exit(1);
  }
  return x;
}

int main(int argc, char **argv) {
  int a = 1;
  for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
    if (strcmp(argv[a], "--delay-us") == 0)
      delay_ns = parse(argv[a], argv[a + 1]) * 1000;
    else if (strcmp(argv[a], "--rate-bps") == 0)
      rate_bps = parse(argv[a], argv[a + 1]);
    else if (strcmp(argv[a], "--queue-bytes") == 0)
      queue_cap = parse(argv[a], argv[a + 1]);
    else if (strcmp(argv[a], "--ready") == 0)
      ready = argv[a + 1];
    else
      break;
  }
  int n = argc - a;
  if (n < 2 || n > MAX_PORTS || argv[a][0] == '-') {
    fprintf(stderr, "usage: cluster_hub --delay-us D [--rate-bps R] "
                    "[--queue-bytes Q] [--ready FILE] TAP TAP...\n");
    return 1;
  }
  static port ports[MAX_PORTS];
  struct pollfd pfd[MAX_PORTS];
  for (int i = 0; i < MACS; i++)
    macs[i].port = -1;
  for (int i = 0; i < n; i++) {
    ports[i].fd = attach(argv[a + i]);
    if (ports[i].fd < 0)
      return 1;
    pfd[i].fd = ports[i].fd;
    pfd[i].events = POLLIN;
  }
  if (ready != NULL) {
    int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      perror("cluster_hub: --ready");
      return 1;
    }
    close(fd);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  while (!stop) {
    int64_t now = now_ns();
    int64_t next = flush(ports, n, now);
    struct timespec ts, *tp = NULL;
    if (next != INT64_MAX) {
      int64_t wait = next - now_ns();
      if (wait < 0)
        wait = 0;
      ts.tv_sec = wait / 1000000000;
      ts.tv_nsec = wait % 1000000000;
      tp = &ts;
    }
    int r = ppoll(pfd, (nfds_t)n, tp, NULL);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      perror("cluster_hub: ppoll");
      return 1;
    }
    now = now_ns();
    for (int i = 0; i < n && r > 0; i++) {
      if (!(pfd[i].revents & POLLIN))
        continue;
      /* A bounded batch per port per pass, so one sender cannot starve
       * the others. */
      for (int k = 0; k < 64; k++) {
        frame *f = frame_get();
        if (f == NULL)
          break; /* out of memory: the device queue holds the frame */
        ssize_t len = read(ports[i].fd, f->data, FRAME_MAX);
        if (len < VNET_HDR + 14) {
          frame_put(f);
          break;
        }
        const unsigned char *eth = f->data + VNET_HDR;
        learn(eth + 6, i);
        int to = lookup(eth);
        if (to >= 0 && to != i) {
          enqueue(&ports[to], f, (size_t)len, now);
          continue;
        }
        for (int j = 0; j < n; j++) /* flooded: a copy for each port */
          if (j != i && to < 0) {
            frame *c = frame_get();
            if (c == NULL) {
              ports[j].dropped++;
              continue;
            }
            memcpy(c->data, f->data, (size_t)len);
            enqueue(&ports[j], c, (size_t)len, now);
          }
        frame_put(f);
      }
    }
  }
  return 0;
}
