/* Raw-socket helpers for store tests that speak (or abuse) the wire
 * protocol by hand. Blocking sockets with receive timeouts; test-only. */
#ifndef GANG_TESTS_STORE_RAW_H
#define GANG_TESTS_STORE_RAW_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/clock.h"
#include "store/proto.h"

static inline int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

static inline bool raw_send(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0)
      return false;
    b += w;
    n -= (size_t)w;
  }
  return true;
}

/* Reads exactly n bytes within timeout_ms; false on EOF, error or timeout. */
static inline bool raw_recv(int fd, void *p, size_t n, int timeout_ms) {
  uint8_t *b = p;
  int64_t deadline = gang__deadline_in_ms(timeout_ms);
  while (n > 0) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, gang__deadline_poll_ms(deadline)) <= 0)
      return false;
    ssize_t r = recv(fd, b, n, 0);
    if (r <= 0)
      return false;
    b += r;
    n -= (size_t)r;
  }
  return true;
}

/* True when the server closes fd (EOF or reset) within timeout_ms,
 * discarding whatever it sends first. */
static inline bool raw_closed_within(int fd, int timeout_ms) {
  int64_t deadline = gang__deadline_in_ms(timeout_ms);
  for (;;) {
    struct pollfd pf = {fd, POLLIN, 0};
    int rc = poll(&pf, 1, gang__deadline_poll_ms(deadline));
    if (rc <= 0)
      return false;
    uint8_t buf[4096];
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
      return true;
  }
}

/* Sends a client hello (version, kind, flags, nonce) and reads the server
 * hello. */
static inline bool raw_hello(int fd, uint16_t version, uint32_t flags,
                             const uint8_t nonce[32],
                             gang__store_server_hello *sh) {
  gang__store_client_hello ch;
  memset(&ch, 0, sizeof ch);
  ch.magic = GANG_STORE_MAGIC;
  ch.version = version;
  ch.kind = GANG_STORE_KIND_CLIENT;
  ch.flags = flags;
  if (nonce)
    memcpy(ch.nonce, nonce, 32);
  uint8_t b[GANG_STORE_SERVER_HELLO_BYTES];
  gang__store_client_hello_encode(&ch, b);
  if (!raw_send(fd, b, GANG_STORE_CLIENT_HELLO_BYTES))
    return false;
  if (!raw_recv(fd, b, GANG_STORE_SERVER_HELLO_BYTES, 5000))
    return false;
  gang__store_server_hello_decode(b, sh);
  return true;
}

/* Sends one request frame built by the encoder with generous caps. */
static inline bool raw_request(int fd, gang__store_req *r) {
  gang__store_caps caps = {1u << 30, 1u << 30, 1u << 30, 0xffffffffu};
  gang__store_buf b = {0};
  bool ok = gang__store_req_encode(r, &caps, &b) == GANG_OK &&
            raw_send(fd, b.p, b.len);
  gang__store_buf_free(&b);
  return ok;
}

/* Reads one reply frame header; returns its status or -1. Body discarded
 * (up to 64 KiB). */
static inline int raw_reply_rc(int fd, int timeout_ms) {
  uint8_t hdr[5];
  if (!raw_recv(fd, hdr, 5, timeout_ms))
    return -1;
  uint32_t len = gang__get_u32(hdr);
  if (len < 1 || len > 65536)
    return -1;
  uint8_t body[65536];
  if (len > 1 && !raw_recv(fd, body, len - 1, timeout_ms))
    return -1;
  return hdr[4];
}

static inline void raw_set_req(gang__store_req *r, const char *key,
                               const char *val) {
  memset(r, 0, sizeof *r);
  r->op = GANG_STORE_OP_SET;
  r->nkeys = 1;
  r->keys = &r->key1_;
  r->vals = r->val2_;
  r->keys[0].p = (const uint8_t *)key;
  r->keys[0].len = (uint32_t)strlen(key);
  r->vals[0].p = (const uint8_t *)val;
  r->vals[0].len = (uint32_t)strlen(val);
}

/* ThreadSanitizer starts a helper thread of its own when the process
 * creates its first thread; the leak check would count it against the
 * first test that starts a server. Creating one thread up front, before
 * the tests run, keeps the counts honest in every build. */
static inline void *store_test_noop(void *arg) { return arg; }
static inline void store_test_prime_threads(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, store_test_noop, NULL) == 0)
    pthread_join(t, NULL);
}

#endif
