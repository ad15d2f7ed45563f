/* Heartbeats by datagram (lh_beats.h): a thread of the lighthouse reads
 * them from a UDP socket on its store's address and counts them per
 * replica, in a table of the replicas the tick knows (registered over the
 * store, lh/ids), which the tick reads beside the store's counters.
 *
 * Why: a TCP segment costs its receiver a wakeup, a read and an ACK; at
 * 1000 replicas beating every 100 ms that was 11 % of a core of this
 * machine's kernel alone (bench/beat_floor), where datagrams read 64 at a
 * time after a short nap cost 2 %. A lost datagram is a missed beat, which
 * the heartbeat timeout (many beats) absorbs.
 *
 * A datagram (little-endian):
 *   0  4  magic "GLHB"
 *   4  1  version (1)
 *   5  1  id length L, 1..GANG_LH_ID_MAX-1
 *   6  2  zero
 *   8  8  the lighthouse's incarnation (read by the client at connect)
 *   16 8  sequence: the sender's realtime clock in ns; only a higher one
 *         than the last counted for the id counts (a replay does not)
 *   24 L  the replica id
 *   then, when the lighthouse has a secret, 16 bytes: the first half of
 *   HMAC-SHA256(secret, "gang lighthouse beat v1" || bytes 0..24+L).
 * Anything else -- short, long, another incarnation, a bad tag, an id the
 * lighthouse does not know -- is dropped without a word (it is counted for
 * the log). */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "lh_beats.h"
#include "lh_impl.h"
#include "store/auth.h"

#define MAGIC "GLHB"
#define VERSION 1
#define HDR 24
#define TAG 16
#define LABEL "gang lighthouse beat v1"
#define BATCH 64
#define NAP_NS 5000000 /* after a read of few datagrams: let more come */
#define SLOTS GANG__LH_INDEX_SLOTS

typedef struct slot {
  char id[GANG_LH_ID_MAX];
  int64_t count;
  uint64_t seq;
  uint8_t state; /* 0 empty, 1 used, 2 removed */
} slot;

struct gang__lh_beats {
  int fd, evfd;
  int port;
  gang__auth_key *key; /* NULL: datagrams carry no tag */
  uint64_t incarnation;
  pthread_t thread;
  pthread_mutex_t mu; /* the table and the counters below */
  slot *slots;
  int used, removed;
  int64_t dropped; /* datagrams not counted, for the log */
  int64_t logged;  /* dropped at the last log line */
};

static uint32_t id_hash(const char *id, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ (uint8_t)id[i]) * 16777619u;
  return h;
}

/* The slot holding id[0..n), or NULL. Called with mu held. */
static slot *lookup(gang__lh_beats *b, const char *id, size_t n) {
  for (uint32_t h = id_hash(id, n), k = 0; k < SLOTS; h++, k++) {
    slot *s = &b->slots[h & (SLOTS - 1)];
    if (s->state == 0)
      return NULL;
    if (s->state == 1 && strncmp(s->id, id, n) == 0 && s->id[n] == '\0')
      return s;
  }
  return NULL;
}

/* Rehashes the used slots when removals have piled up (mu held). */
static void compact(gang__lh_beats *b) {
  slot *old = b->slots, *fresh = calloc(SLOTS, sizeof *fresh);
  if (fresh == NULL)
    return; /* lookups stay correct, only longer */
  for (int k = 0; k < SLOTS; k++) {
    if (old[k].state != 1)
      continue;
    uint32_t h = id_hash(old[k].id, strlen(old[k].id));
    while (fresh[h & (SLOTS - 1)].state != 0)
      h++;
    fresh[h & (SLOTS - 1)] = old[k];
  }
  b->slots = fresh;
  b->removed = 0;
  free(old);
}

void gang__lh_beats_add(gang__lh_beats *b, const char *id) {
  if (b == NULL)
    return;
  size_t n = strlen(id);
  pthread_mutex_lock(&b->mu);
  if (lookup(b, id, n) == NULL && b->used < GANG__LH_MAX_REPLICAS) {
    uint32_t h = id_hash(id, n);
    while (b->slots[h & (SLOTS - 1)].state == 1)
      h++;
    slot *s = &b->slots[h & (SLOTS - 1)];
    b->removed -= s->state == 2;
    memset(s, 0, sizeof *s);
    memcpy(s->id, id, n + 1);
    s->state = 1;
    b->used++;
  }
  pthread_mutex_unlock(&b->mu);
}

void gang__lh_beats_remove(gang__lh_beats *b, const char *id) {
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  slot *s = lookup(b, id, strlen(id));
  if (s != NULL) {
    s->state = 2;
    b->used--;
    if (++b->removed > SLOTS / 4)
      compact(b);
  }
  pthread_mutex_unlock(&b->mu);
}

void gang__lh_beats_read(gang__lh_beats *b, const char *ids, size_t stride,
                         int n, int64_t *counts) {
  if (b == NULL) {
    memset(counts, 0, (size_t)n * sizeof *counts);
    return;
  }
  pthread_mutex_lock(&b->mu);
  for (int i = 0; i < n; i++) {
    const char *id = ids + (size_t)i * stride;
    slot *s = lookup(b, id, strlen(id));
    counts[i] = s != NULL ? s->count : 0;
  }
  pthread_mutex_unlock(&b->mu);
}

int gang__lh_beats_port(const gang__lh_beats *b) { return b ? b->port : -1; }

/* ---- The datagram ----------------------------------------------------------
 */

size_t gang__lh_beat_encode(uint8_t *buf, size_t cap, uint64_t incarnation,
                            uint64_t seq, const char *id, gang__auth_key *key) {
  size_t n = strlen(id);
  bool tag = key != NULL;
  if (n == 0 || n >= GANG_LH_ID_MAX || cap < HDR + n + (tag ? TAG : 0))
    return 0;
  memcpy(buf, MAGIC, 4);
  buf[4] = VERSION;
  buf[5] = (uint8_t)n;
  buf[6] = buf[7] = 0;
  gang__put_u64(buf + 8, incarnation);
  gang__put_u64(buf + 16, seq);
  memcpy(buf + HDR, id, n);
  if (!tag)
    return HDR + n;
  uint8_t mac[GANG_STORE_MAC_BYTES];
  if (gang__auth_mac(key, LABEL, buf, HDR + n, mac) != GANG_OK)
    return 0;
  memcpy(buf + HDR + n, mac, TAG);
  return HDR + n + TAG;
}

/* Counts one datagram if it is one (mu held). */
static void take(gang__lh_beats *b, const uint8_t *p, size_t len) {
  size_t n = len >= HDR ? p[5] : 0;
  size_t want = HDR + n + (b->key ? TAG : 0);
  slot *s = NULL;
  if (n > 0 && n < GANG_LH_ID_MAX && len == want && memcmp(p, MAGIC, 4) == 0 &&
      p[4] == VERSION && gang__get_u64(p + 8) == b->incarnation)
    s = lookup(b, (const char *)p + HDR, n);
  if (s != NULL && b->key != NULL) {
    uint8_t mac[GANG_STORE_MAC_BYTES];
    if (gang__auth_mac(b->key, LABEL, p, HDR + n, mac) != GANG_OK ||
        !gang__auth_equal(mac, p + HDR + n, TAG))
      s = NULL;
  }
  uint64_t seq = len >= HDR ? gang__get_u64(p + 16) : 0;
  if (s == NULL || seq <= s->seq) {
    b->dropped++;
    return;
  }
  s->seq = seq;
  s->count++;
}

/* Counts every datagram waiting in the socket; how many there were. */
static int drain(gang__lh_beats *b) {
  uint8_t bufs[BATCH][HDR + GANG_LH_ID_MAX + TAG + 1];
  struct mmsghdr m[BATCH];
  struct iovec io[BATCH];
  int total = 0;
  for (;;) {
    for (int k = 0; k < BATCH; k++) {
      io[k] = (struct iovec){bufs[k], sizeof bufs[k]};
      memset(&m[k], 0, sizeof m[k]);
      m[k].msg_hdr.msg_iov = &io[k];
      m[k].msg_hdr.msg_iovlen = 1;
    }
    /* Read and counted under the lock: a drain from the tick that gets
     * the lock after this read sees these counted. */
    pthread_mutex_lock(&b->mu);
    int got = recvmmsg(b->fd, m, BATCH, MSG_DONTWAIT, NULL);
    if (got <= 0) {
      pthread_mutex_unlock(&b->mu);
      return total;
    }
    for (int k = 0; k < got; k++)
      take(b, bufs[k], m[k].msg_len);
    int64_t dropped = b->dropped;
    bool log = dropped >= 2 * b->logged + 100;
    if (log)
      b->logged = dropped;
    pthread_mutex_unlock(&b->mu);
    if (log)
      GANG_INFO(FT,
                "lighthouse: %" PRId64 " heartbeat datagrams dropped so far "
                "(malformed, another lighthouse's, a bad tag, a replay or an "
                "unknown id)",
                dropped);
    total += got;
    if (got < BATCH)
      return total;
  }
}

void gang__lh_beats_drain(gang__lh_beats *b) {
  if (b != NULL)
    drain(b);
}

static void *beats_main(void *arg) {
  gang__lh_beats *b = arg;
  pthread_setname_np(pthread_self(), "gang-lh-beats");
  for (;;) {
    struct pollfd pf[2] = {{b->fd, POLLIN, 0}, {b->evfd, POLLIN, 0}};
    if (poll(pf, 2, -1) < 0 && errno != EINTR)
      break;
    if (pf[1].revents != 0)
      break;
    if (drain(b) < BATCH / 4) {
      /* Few came: let more gather, so that a wakeup reads many. */
      struct timespec ts = {0, NAP_NS};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

/* ---- Start / stop
 * ------------------------------------------------------------ */

static int bind_udp(const char *host, int port) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_DGRAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  if (getaddrinfo(*host ? host : NULL, ps, &hints, &res) != 0)
    return -1;
  int fd = -1;
  for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                a->ai_protocol);
    if (fd >= 0 && bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) { /* room for a burst of 1000 replicas' beats */
    int sz = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  }
  return fd;
}

gang_status gang__lh_beats_start(const char *host, int port, const char *secret,
                                 uint64_t incarnation, gang__lh_beats **out) {
  *out = NULL;
  gang__lh_beats *b = calloc(1, sizeof *b);
  if (b == NULL || (b->slots = calloc(SLOTS, sizeof *b->slots)) == NULL) {
    free(b);
    return gang__error(GANG_NO_MEMORY, "lighthouse beats: no memory");
  }
  b->fd = b->evfd = -1;
  b->incarnation = incarnation;
  b->port = port;
  pthread_mutex_init(&b->mu, NULL);
  gang_status s = GANG_OK;
  if (secret != NULL && *secret != '\0')
    s = gang__auth_key_new(secret, &b->key);
  if (s == GANG_OK && (b->fd = bind_udp(host, port)) < 0)
    s = gang__error_errno(GANG_SYSTEM, errno,
                          "lighthouse beats: no UDP socket on %s port %d",
                          *host ? host : "*", port);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (s == GANG_OK && getsockname(b->fd, (struct sockaddr *)&ss, &sl) == 0)
    b->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
  if (s == GANG_OK && (b->evfd = eventfd(0, EFD_CLOEXEC)) < 0)
    s = gang__error_errno(GANG_SYSTEM, errno, "lighthouse beats: eventfd");
  int rc = s == GANG_OK ? pthread_create(&b->thread, NULL, beats_main, b) : 0;
  if (rc != 0)
    s = gang__error_errno(GANG_SYSTEM, rc, "lighthouse beats: a thread");
  if (s != GANG_OK) {
    if (b->fd >= 0)
      close(b->fd);
    if (b->evfd >= 0)
      close(b->evfd);
    b->fd = b->evfd = -1; /* no thread to stop */
    gang__lh_beats_stop(b);
    return s;
  }
  *out = b;
  return GANG_OK;
}

void gang__lh_beats_stop(gang__lh_beats *b) {
  if (b == NULL)
    return;
  if (b->evfd >= 0) {
    uint64_t one = 1;
    (void)!write(b->evfd, &one, sizeof one);
    pthread_join(b->thread, NULL);
    close(b->evfd);
    close(b->fd);
  }
  gang__auth_key_free(b->key);
  pthread_mutex_destroy(&b->mu);
  free(b->slots);
  free(b);
}
