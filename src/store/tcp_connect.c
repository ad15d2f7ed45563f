/* The TCP store client: connecting (with retries while the server is not
 * up yet) and the handshake, with the secret's proofs when there is one
 * (auth.c). The calls are in tcp_client.c. */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "core/bytes.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/options.h"
#include "core/sock.h"
#include "proto.h"
#include "store_impl.h"

#include "tcp_client.h"

/* ---- Connection and handshake ------------------------------------------ */

static gang_status handshake(tcp_client *c, const char *secret,
                             int64_t deadline) {
  gang__store_client_hello ch;
  memset(&ch, 0, sizeof ch);
  ch.magic = GANG_STORE_MAGIC;
  ch.version = GANG_STORE_VERSION;
  ch.kind = GANG_STORE_KIND_CLIENT;
  ch.flags = secret ? GANG_STORE_HELLO_AUTH : 0;
  GANG_CHECK(gang__auth_random(ch.nonce, sizeof ch.nonce));
  uint8_t buf[GANG_STORE_SERVER_HELLO_BYTES];
  gang__store_client_hello_encode(&ch, buf);
  GANG_CHECK(gang__sock_write_full(c->fd, buf, GANG_STORE_CLIENT_HELLO_BYTES,
                                   deadline, -1, c->peer));
  GANG_CHECK(gang__sock_read_full(c->fd, buf, GANG_STORE_SERVER_HELLO_BYTES,
                                  deadline, -1, c->peer));
  gang__store_server_hello sh;
  gang__store_server_hello_decode(buf, &sh);
  if (sh.magic != GANG_STORE_MAGIC || sh.kind != GANG_STORE_KIND_SERVER)
    return gang__error(GANG_PROTOCOL,
                       "%s is not a gang store server (magic 0x%08x kind %u)",
                       c->peer, sh.magic, sh.kind);
  if (sh.version != GANG_STORE_VERSION ||
      sh.status == GANG_STORE_HELLO_BAD_VERSION)
    return gang__error(GANG_PROTOCOL,
                       "store server %s speaks protocol version %u; this "
                       "client speaks version %u",
                       c->peer, sh.version, GANG_STORE_VERSION);
  if (sh.status != GANG_STORE_HELLO_OK)
    return gang__error(GANG_PROTOCOL,
                       "store server %s refused the connection (status %u)",
                       c->peer, sh.status);
  if (sh.caps.max_key == 0 || sh.caps.max_value == 0 || sh.caps.max_keys == 0 ||
      sh.caps.max_frame < GANG_STORE_FRAME_HDR)
    return gang__error(GANG_PROTOCOL, "store server %s announced zero caps",
                       c->peer);
  c->caps = sh.caps;
  c->quiet = (sh.flags & GANG_STORE_HELLO_QUIET) != 0;
  bool server_auth = (sh.flags & GANG_STORE_HELLO_AUTH) != 0;
  if (server_auth && secret == NULL)
    return gang__error(GANG_AUTH,
                       "store server %s requires authentication and this "
                       "client has no secret (set GANG_STORE_SECRET or the "
                       "secret option)",
                       c->peer);
  if (!server_auth && secret != NULL)
    return gang__error(GANG_AUTH,
                       "this client has a secret but store server %s does not "
                       "authenticate (was it started without one?); refusing "
                       "to talk to an unauthenticated server",
                       c->peer);
  if (!server_auth)
    return GANG_OK;
  if (!gang__auth_check(secret, GANG_AUTH_SERVER_PROOF, ch.nonce, sh.nonce,
                        sh.proof))
    return gang__error(GANG_AUTH,
                       "store server %s could not prove it knows the secret "
                       "(the two sides have different secrets)",
                       c->peer);
  uint8_t proof[GANG_STORE_MAC_BYTES];
  GANG_CHECK(gang__auth_proof(secret, GANG_AUTH_CLIENT_PROOF, ch.nonce,
                              sh.nonce, proof));
  GANG_CHECK(
      gang__sock_write_full(c->fd, proof, sizeof proof, deadline, -1, c->peer));
  GANG_CHECK(gang__sock_read_full(c->fd, buf, GANG_STORE_AUTH_RESULT_BYTES,
                                  deadline, -1, c->peer));
  if (gang__get_u32(buf) != 0)
    return gang__error(GANG_AUTH,
                       "store server %s rejected this client's "
                       "secret",
                       c->peer);
  return GANG_OK;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

/* xorshift jitter: the connect backoff must differ between ranks that
 * start together, it need not be unpredictable. */
static uint64_t jitter_state(void) {
  return (uint64_t)gang__now_ns() ^ ((uint64_t)getpid() << 32);
}

/* Connects (retrying until the connect timeout) and shakes hands. */
gang_status gang__tcp_open(const gang__store_target *at,
                           const gang_store_options *opts, int64_t timeout_ms,
                           void **impl) {
  const char *host = at->host;
  int port = at->port;
  int64_t connect_ms =
      GANG__OPTS_GET(gang_store_options, opts, connect_timeout_ms, 0);
  const char *secret = GANG__OPTS_GET(gang_store_options, opts, secret, NULL);
  if (connect_ms == 0)
    connect_ms = timeout_ms;
  if (secret == NULL)
    secret = gang__setting_str(GANG_SETTING_STORE_SECRET);
  if (*secret == '\0')
    secret = NULL;

  int64_t spin_ns;
  GANG_CHECK(gang__store_spin_ns(&spin_ns));
  tcp_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return gang__error(GANG_NO_MEMORY, "store connect: no memory");
  pthread_mutex_init(&c->fd_mu, NULL);
  c->fd = -1;
  c->spin.ns = spin_ns;
  gang__sock_peer_name(host, port, c->peer, sizeof c->peer);

  int64_t start = gang__now_ns();
  int64_t deadline = gang__deadline_in_ms(connect_ms);
  int64_t backoff_ms = 10;
  uint64_t rnd = jitter_state() | 1;
  int attempts = 0;
  gang_status st;
  for (;;) {
    attempts++;
    int err = 0;
    st = gang__sock_connect(host, port, deadline, &c->fd, &err);
    if (st == GANG_OK) {
      st = handshake(c, secret, deadline);
      if (st == GANG_OK)
        break;
      close(c->fd);
      c->fd = -1;
      /* A server that is full or whose backlog overflowed closes or resets
       * us: that is worth another attempt. Auth and protocol errors are
       * not. */
      if (st != GANG_PEER_LOST && st != GANG_TIMEOUT)
        goto fail;
    } else if (st == GANG_INVALID_ARGUMENT) {
      goto fail; /* the name does not resolve */
    }
    if (gang__deadline_passed(deadline) || st == GANG_TIMEOUT) {
      char last[GANG_SOCK_PEER_CAP + 256];
      snprintf(last, sizeof last, "%s", gang_last_error());
      st = gang__error(
          GANG_TIMEOUT,
          "cannot reach store at %s after %d attempts over %" PRId64 " ms: %s",
          c->peer, attempts, (gang__now_ns() - start) / 1000000, last);
      goto fail;
    }
    GANG_TRACE(STORE, "store connect %s attempt %d: %s", c->peer, attempts,
               gang_last_error());
    rnd ^= rnd << 13;
    rnd ^= rnd >> 7;
    rnd ^= rnd << 17;
    /* Exponential backoff with +-50% jitter, capped at 1 s and at the
     * deadline: spreads a storm of ranks over time. */
    int64_t wait = backoff_ms / 2 + (int64_t)(rnd % (uint64_t)backoff_ms);
    int left = gang__deadline_poll_ms(deadline);
    if (left >= 0 && wait > left)
      wait = left;
    sleep_ms(wait);
    if (backoff_ms < 1000)
      backoff_ms *= 2;
  }
  GANG_INFO(STORE, "store client connected to %s after %d attempt(s)%s",
            c->peer, attempts, secret ? " (authenticated)" : "");
  *impl = c;
  return GANG_OK;
fail:
  if (c->fd >= 0)
    close(c->fd);
  pthread_mutex_destroy(&c->fd_mu);
  free(c);
  return st;
}

void gang__tcp_close(gang_store *st) {
  tcp_client *c = impl_of(st);
  if (c == NULL)
    return;
  if (c->fd >= 0)
    close(c->fd);
  gang__store_buf_free(&c->out);
  gang__store_buf_free(&c->in);
  pthread_mutex_destroy(&c->fd_mu);
  free(c);
  st->impl = NULL;
}
