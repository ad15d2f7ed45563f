/* The lighthouse (gang/ft.h; torchft's Lighthouse): an embedded store
 * server that replicas speak through, and one thread that turns what they
 * wrote into quorums. The thread is an ordinary store client of its own
 * server, so the lighthouse has no protocol of its own: framing, HMAC,
 * caps and deadlines are the store's (lighthouse.h has the keys).
 *
 * Every quorum_tick_ms the thread runs a tick (lh_tick.c): heartbeats,
 * joins, failure notices, gang__lh_compute, and the quorum written back.
 * A failed store call ends the tick and the connection is replaced at the
 * next one, so a lighthouse keeps going through anything a client did.
 *
 * Between ticks the thread waits on a condition variable (stop wakes it),
 * except while every member of the last quorum is alive: then it waits in
 * the store for their joins, so that torchft's fast quorum forms one round
 * trip after the last join (torchft computes on every quorum request)
 * instead of up to a tick later. The status page is served by a thread of its
 * own (lh_http.c) because this one blocks in store calls, and because no HTTP
 * client must be able to delay a quorum. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/options.h"
#include "core/settings.h"
#include "core/sock.h"
#include "gang/store.h"
#include "lh_impl.h"
#include "store/server.h"
#include "store/auth.h"

/* The store's value cap. Records are a few hundred bytes and replica
 * gangs' rendezvous values are addresses; a small cap bounds what one
 * client can make the server hold. */
#define MAX_VALUE (1 << 20)

/* ---- Store calls ----------------------------------------------------------
 */

static gang_status self_connect(gang_lighthouse *L) {
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = GANG__LH_CALL_MS;
  so.connect_timeout_ms = GANG__LH_CALL_MS;
  so.secret = L->secret;
  return gang_store_connect(L->self, &so, &L->st);
}

/* A failed store call ends the tick; the handle may be broken, so it is
 * replaced at the next one. Warned about once per 10 s at most. */
static void tick_failed(gang_lighthouse *L, const char *what) {
  int64_t now = gang__lh_now_ms();
  if (now - L->last_warn_ms >= 10000) {
    GANG_WARN(FT,
              "lighthouse: %s failed: %s -- not fatal: it drops that "
              "connection to its own store, opens a new one and retries "
              "every tick (this warning at most every 10 s)",
              what, gang_last_error());
    L->last_warn_ms = now;
  }
  gang_store_close(L->st);
  L->st = NULL;
}

static void wait_next(gang_lighthouse *L, int64_t until_ms) {
  int64_t now = gang__lh_now_ms();
  char *keys = NULL;
  int k = L->st && until_ms > now ? gang__lh_fast_keys(L, now, &keys) : 0;
  const char **ptrs = k > 0 ? malloc((size_t)k * sizeof *ptrs) : NULL;
  if (ptrs != NULL) {
    for (int i = 0; i < k; i++)
      ptrs[i] = keys + (size_t)i * GANG__LH_KEY_CAP;
    /* A whole tick rather than what is left of it: a wait that times out
     * records the same error text every tick of a round, which is logged
     * once instead of every tick. */
    int64_t t0 = gang__lh_now_ms();
    gang_status s = gang_store_wait(L->st, ptrs, (size_t)k, L->tick_ms);
    if (s != GANG_OK && s != GANG_TIMEOUT) {
      tick_failed(L, "waiting for joins");
    } else if (s == GANG_TIMEOUT && gang__lh_now_ms() - t0 > L->tick_ms + 900) {
      /* No answer at all from its own server, in this very process: the
       * process was stopped. The connection is broken by that; a new one
       * is made at the next tick, without a warning. */
      GANG_INFO(FT,
                "lighthouse: stalled for %" PRId64 " ms (stopped?): "
                "reconnecting to its own store",
                gang__lh_now_ms() - t0);
      gang_store_close(L->st);
      L->st = NULL;
    }
    free(ptrs);
    free(keys);
    return;
  }
  free(keys);
  int64_t deadline = until_ms * 1000000;
  pthread_mutex_lock(&L->mu);
  while (!L->stop && gang__now_ns() < deadline)
    gang__cond_wait_slice(&L->cv, &L->mu, deadline, 1000000000LL);
  pthread_mutex_unlock(&L->mu);
}

static void *lh_main(void *arg) {
  gang_lighthouse *L = arg;
  pthread_setname_np(pthread_self(), "gang-lh-tick");
  for (;;) {
    pthread_mutex_lock(&L->mu);
    bool stop = L->stop;
    pthread_mutex_unlock(&L->mu);
    if (stop)
      break;
    int64_t t0 = gang__lh_now_ms();
    if (L->st == NULL && self_connect(L) != GANG_OK)
      tick_failed(L, "reconnecting to its own store");
    if (L->st != NULL && gang__lh_tick(L) != GANG_OK)
      tick_failed(L, "a quorum tick");
    gang__lh_publish_status(L);
    wait_next(L, t0 + L->tick_ms);
  }
  return NULL;
}

/* ---- Start / stop ---------------------------------------------------------
 */

#define OPT(o, field, def)                                                     \
  GANG__OPTS_GET(gang_lighthouse_options, o, field, def)

/* The address the thread reaches its own server at: loopback when the
 * server listens on every interface. */
static void self_addr(const char *host, int port, char *buf, size_t cap) {
  if (*host == '\0' || strcmp(host, "0.0.0.0") == 0)
    host = "127.0.0.1";
  else if (strcmp(host, "::") == 0)
    host = "::1";
  gang__sock_peer_name(host, port, buf, cap);
}

static gang_status init_store(gang_lighthouse *L) {
  /* Ordered by start time, so that commits under different lighthouses
   * compare (gang__lh_member.commit_inc); the random low bits keep two
   * lighthouses started in one millisecond apart. */
  uint8_t r[2];
  GANG_CHECK(gang__auth_random(r, sizeof r));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  L->incarnation = (ms & 0xffffffffffffull) << 16 | (uint64_t)r[0] << 8 | r[1];
  char inc[17];
  snprintf(inc, sizeof inc, "%016" PRIx64, L->incarnation);
  /* lh/ids and lh/suspects exist from the start so that reading them
   * never waits. */
  GANG_CHECK(gang_store_set(L->st, GANG__LH_KEY_IDS, "", 0));
  GANG_CHECK(gang_store_set(L->st, GANG__LH_KEY_SUSPECTS, "", 0));
  GANG_CHECK(gang_store_add(L->st, GANG__LH_KEY_ROUND, 0, &L->round));
  return gang_store_set(L->st, GANG__LH_KEY_INCARNATION, inc, 16);
}

static void lh_free(gang_lighthouse *L) {
  gang__lh_http_stop(L->http);
  gang__lh_beats_stop(L->beats);
  gang_store_close(L->st);
  gang_store_server_stop(L->srv);
  gang__lh_status_fini(&L->status);
  gang__lh_quorum_fini(&L->prev);
  if (L->secret) {
    memset(L->secret, 0, strlen(L->secret));
    free(L->secret);
  }
  pthread_cond_destroy(&L->cv);
  pthread_mutex_destroy(&L->mu);
  free(L->reps);
  free(L->ext);
  free(L->index);
  free(L);
}

gang_status gang_lighthouse_start(const gang_lighthouse_options *opts,
                                  gang_lighthouse **out) {
  static const char fn[] = "gang_lighthouse_start";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG__OPTS_CHECK(fn, opts, "GANG_LIGHTHOUSE_OPTIONS_INIT");
  const char *host = OPT(opts, host, NULL);
  const char *http_host = OPT(opts, http_host, NULL);
  const char *secret = OPT(opts, secret, NULL);
  int port = OPT(opts, port, 0), http_port = OPT(opts, http_port, 0);
  gang__lh_config cfg = {OPT(opts, min_replicas, 0),
                         OPT(opts, join_timeout_ms, 0),
                         OPT(opts, heartbeat_timeout_ms, 0)};
  int64_t tick = OPT(opts, quorum_tick_ms, 0);
  /* Zero means the default, as in every options struct. */
  if (cfg.min_replicas == 0)
    cfg.min_replicas = 1;
  if (cfg.join_timeout_ms == 0)
    cfg.join_timeout_ms = 60000;
  if (cfg.heartbeat_timeout_ms == 0)
    cfg.heartbeat_timeout_ms = 5000;
  if (tick == 0)
    tick = 100;
  GANG_ARG_CHECK(port >= 0 && port <= 65535, fn, "port %d is outside 0..65535",
                 port);
  GANG_ARG_CHECK(http_port >= -1 && http_port <= 65535, fn,
                 "http_port %d is outside -1..65535", http_port);
  GANG_ARG_CHECK(cfg.min_replicas >= 1 && cfg.min_replicas <= 65536, fn,
                 "min_replicas %d is outside 1..65536", cfg.min_replicas);
  GANG_ARG_CHECK(cfg.join_timeout_ms > 0 && cfg.join_timeout_ms <= 86400000, fn,
                 "join_timeout_ms %" PRId64 " is outside 1..86400000",
                 cfg.join_timeout_ms);
  GANG_ARG_CHECK(cfg.heartbeat_timeout_ms > 0 &&
                     cfg.heartbeat_timeout_ms <= 86400000,
                 fn, "heartbeat_timeout_ms %" PRId64 " is outside 1..86400000",
                 cfg.heartbeat_timeout_ms);
  GANG_ARG_CHECK(tick > 0 && tick <= 60000, fn,
                 "quorum_tick_ms %" PRId64 " is outside 1..60000", tick);
  if (host == NULL)
    host = "0.0.0.0";
  if (http_host == NULL)
    http_host = host;

  gang_lighthouse *L = calloc(1, sizeof *L);
  if (L == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: no memory", fn);
  pthread_mutex_init(&L->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&L->cv, &ca);
  pthread_condattr_destroy(&ca);
  gang__lh_status_init(&L->status);
  L->cfg = cfg;
  L->tick_ms = tick;
  L->last_warn_ms = INT64_MIN / 2;
  gang_status st = GANG_OK;
  L->reps = calloc(GANG__LH_MAX_REPLICAS, sizeof *L->reps);
  L->ext = calloc(GANG__LH_MAX_REPLICAS, sizeof *L->ext);
  L->index = malloc(GANG__LH_INDEX_SLOTS * sizeof *L->index);
  L->index_stale = true;
  if (L->reps == NULL || L->ext == NULL || L->index == NULL ||
      (secret != NULL && (L->secret = strdup(secret)) == NULL)) {
    st = gang__error(GANG_NO_MEMORY, "%s: no memory", fn);
    goto fail;
  }
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  so.host = host;
  so.port = port;
  so.secret = secret;
  so.max_value_bytes = MAX_VALUE;
  GANG_CHECK_GOTO(gang_store_server_start(&so, &L->srv), st, fail);
  /* A replica's connections that beat and then drop (its process died) are
   * logged as suspects at once, in any phase of its step (lh_tick.c). */
  /* Many replicas beat 10 times a second each: when that is thousands of
   * requests a second, 1 ms more for a request costs nothing here and
   * takes most of the server's wakeups away (docs/fault-tolerance.md). */
  gang__store_server_coalesce(L->srv, 1000);
  GANG_CHECK_GOTO(gang__store_server_watch(L->srv, GANG__LH_KEY_HB_PREFIX,
                                           GANG__LH_KEY_SUSPECTS),
                  st, fail);
  self_addr(host, gang_store_server_port(L->srv), L->self, sizeof L->self);
  GANG_CHECK_GOTO(self_connect(L), st, fail);
  GANG_CHECK_GOTO(init_store(L), st, fail);
  /* Heartbeats by datagram on the same address: without them (no UDP
   * socket there), replicas beat over the store. */
  int port_now = gang_store_server_port(L->srv);
  if (gang__lh_beats_start(
          host, port_now,
          secret ? secret : gang__setting_str(GANG_SETTING_STORE_SECRET),
          L->incarnation, &L->beats) != GANG_OK)
    GANG_WARN(FT, "lighthouse: heartbeats by datagram are off: %s",
              gang_last_error());
  else
    GANG_CHECK_GOTO(gang_store_set(L->st, GANG__LH_KEY_BEAT, "udp", 3), st,
                    fail);
  gang__lh_status *s = &L->status;
  s->incarnation = L->incarnation;
  s->min_replicas = cfg.min_replicas;
  s->join_timeout_ms = cfg.join_timeout_ms;
  s->heartbeat_timeout_ms = cfg.heartbeat_timeout_ms;
  s->quorum_tick_ms = tick;
  s->allow_kill = OPT(opts, allow_kill, false);
  snprintf(L->why, sizeof L->why, "no replica has joined yet");
  gang__lh_publish_status(L);
  if (http_port >= 0)
    GANG_CHECK_GOTO(gang__lh_http_start(http_host, http_port, s, &L->http), st,
                    fail);
  int rc = pthread_create(&L->thread, NULL, lh_main, L);
  if (rc != 0) {
    st = gang__error_errno(GANG_SYSTEM, rc, "%s: cannot start its thread", fn);
    goto fail;
  }
  L->running = true;
  GANG_INFO(FT,
            "lighthouse %016" PRIx64 " on %s:%d (status page: %d), "
            "min_replicas %d, join timeout %" PRId64 " ms, tick %" PRId64
            " ms, heartbeat timeout %" PRId64 " ms",
            L->incarnation, host, gang_store_server_port(L->srv),
            gang__lh_http_port(L->http), cfg.min_replicas, cfg.join_timeout_ms,
            tick, cfg.heartbeat_timeout_ms);
  *out = L;
  return GANG_OK;
fail:
  lh_free(L);
  return gang__error_wrap(st, "%s", fn);
}

int gang_lighthouse_port(const gang_lighthouse *lh) {
  return lh ? gang_store_server_port(lh->srv) : -1;
}

int gang_lighthouse_http_port(const gang_lighthouse *lh) {
  return lh ? gang__lh_http_port(lh->http) : -1;
}

void gang_lighthouse_stop(gang_lighthouse *lh) {
  if (lh == NULL)
    return;
  if (lh->running) {
    pthread_mutex_lock(&lh->mu);
    lh->stop = true;
    pthread_cond_broadcast(&lh->cv);
    pthread_mutex_unlock(&lh->mu);
    /* At most a tick: the thread's longest store wait ends by then. */
    pthread_join(lh->thread, NULL);
  }
  GANG_INFO(FT, "lighthouse %016" PRIx64 " stopped after quorum %" PRId64,
            lh->incarnation, lh->quorum_id);
  lh_free(lh);
}
