/* The store server: one thread, one epoll loop, every socket non-blocking.
 * This file starts and stops it, applies its limits, runs the loop and
 * accepts connections; server_conn.c moves one connection along
 * (handshake, requests, replies), and server_impl.h has the state both use.
 *
 * Sockets are registered edge-triggered for input, output and peer
 * hang-up, once, so pausing a connection costs no epoll_ctl; resuming one
 * means running it (it reads until EAGAIN). Closed connections are freed at
 * the end of the loop iteration, after every event that may name them.
 * Handshake deadlines and parked requests' deadlines are checked after
 * every epoll_wait, which sleeps no longer than the nearest of them (the
 * handshakes are in deadline order, the parked requests in a heap). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/cpus.h"
#include "core/error.h"
#include "core/log.h"
#include "core/options.h"
#include "core/sock.h"
#include "kv.h"
#include "proto.h"
#include "server.h"
#include "server_impl.h"

/* epoll user data for the two non-connection fds. */
static int tag_listener, tag_stop;

/* ---- Accept ------------------------------------------------------------- */

static void accept_some(gang_store_server *s, int64_t now) {
  for (int i = 0; i < 64; i++) {
    int fd, err = 0;
    gang_status st = gang__sock_accept(s->lfd, &fd, &err);
    if (st == GANG_IN_PROGRESS)
      return;
    if (st != GANG_OK) {
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        /* Out of descriptors: stop accepting for a moment rather than spin
         * on a listener that stays readable. */
        GANG_WARN(STORE,
                  "store server: accept: %s (%d connections): pausing "
                  "accept for 100 ms",
                  strerror(err), s->nconns);
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
        s->accept_paused = true;
        s->accept_resume = now + 100 * 1000000LL;
      } else {
        GANG_INFO(STORE, "store server: %s", gang_last_error());
      }
      return;
    }
    if (s->nconns >= s->max_clients) {
      if (now - s->last_full_warn > 1000000000LL) {
        GANG_WARN(STORE,
                  "store server: %d connections, the max_clients cap: "
                  "refusing new ones",
                  s->nconns);
        s->last_full_warn = now;
      }
      close(fd);
      continue;
    }
    gang__store_conn_open(s, fd, now);
  }
}

/* ---- Loop --------------------------------------------------------------- */

static int next_timeout_ms(gang_store_server *s, int64_t now) {
  if (!TAILQ_EMPTY(&s->run))
    return 0;
  int64_t next = s->retired ? s->retire_by : GANG_DEADLINE_NONE;
  gang__store_conn *first = TAILQ_FIRST(&s->hs);
  if (first != NULL && first->hs_deadline < next)
    next = first->hs_deadline;
  gang__store_conn *c = gang__store_park_first(s);
  if (c != NULL && c->deadline < next)
    next = c->deadline;
  if (s->accept_paused && s->accept_resume < next)
    next = s->accept_resume;
  if (next == GANG_DEADLINE_NONE)
    return -1;
  int64_t ms = (next - now + 999999) / 1000000;
  return ms <= 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
}

static void expire(gang_store_server *s, int64_t now) {
  for (gang__store_conn *c;
       (c = TAILQ_FIRST(&s->hs)) != NULL && c->hs_deadline <= now;) {
    GANG_INFO(STORE,
              "store server: %s did not finish the handshake within %" PRId64
              " ms: dropped",
              c->peer, s->hs_timeout_ms);
    gang__store_conn_close(s, c);
  }
  for (gang__store_conn *c;
       (c = gang__store_park_first(s)) != NULL && c->deadline <= now;)
    gang__store_conn_expire(s, c);
  if (s->accept_paused && s->accept_resume <= now) {
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.ptr = &tag_listener;
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) == 0)
      s->accept_paused = false;
    else
      s->accept_resume = now + 100 * 1000000LL;
  }
}

/* ---- Retired servers ------------------------------------------------------
 *
 * A server whose owner gave it up while clients still use it (the rank
 * that hosts a world's store leaving before its peers, src/gang/pg.c and
 * pg_exit.c) serves them until the last one closes its connection, or its
 * time is up, then frees itself. How many such servers still run is the
 * one process-wide thing of this layer: a process that exits waits for
 * them (gang__store_server_wait_retired), and joins their threads, so
 * that none is still ending (its thread-local state, OpenSSL's included,
 * being torn down) when the process's exit handlers free what it used. */
typedef struct retiree {
  pthread_t thread;
  bool done; /* its loop ended and it freed its server */
  struct retiree *next;
} retiree;

static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
static retiree *retirees;
static pid_t retired_pid; /* whose they are: a forked child has none */

/* Joins the retired servers' threads that are done; how many still run.
 * Called with retired_mu held. */
static int reap_locked(void) {
  if (retired_pid != getpid()) {
    retirees = NULL; /* a forked child: the threads are its parent's */
    retired_pid = getpid();
  }
  int running = 0;
  for (retiree **p = &retirees; *p != NULL;) {
    retiree *r = *p;
    if (!r->done) {
      running++;
      p = &r->next;
      continue;
    }
    *p = r->next;
    pthread_join(r->thread, NULL);
    free(r);
  }
  return running;
}

static void server_free(gang_store_server *s);

/* The owner's request came: no new clients (the listener closes, so the
 * port is free at once), and stop when the last one leaves. */
static void take_up_retire(gang_store_server *s) {
  s->retired = true;
  if (s->lfd >= 0) {
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
    close(s->lfd);
    s->lfd = -1;
    s->accept_paused = false;
  }
  GANG_INFO(STORE,
            "store server on port %d: its owner left; it serves its %d "
            "client(s) until they leave",
            s->port, s->nconns);
}

/* gang__store_server_coalesce: counts events in 100 ms windows, and
 * while the last one was busy, naps after a pass that found few events
 * and answered nothing: nobody waits on such a pass (the lighthouse's
 * own tick, which asks its store a thousand things in a row after each
 * quorum, never sleeps behind it). */
static void coalesce(gang_store_server *s, int n, int64_t now, bool stop,
                     bool replied) {
  int us = atomic_load_explicit(&s->coalesce_us, memory_order_relaxed);
  if (us <= 0 || n <= 0)
    return;
  s->rate_events += n;
  if (now - s->rate_from >= 100 * 1000000LL) {
    s->busy = s->rate_events >= GANG__STORE_BUSY_RATE / 10;
    s->rate_events = 0;
    s->rate_from = now;
  }
  if (s->busy && n < 16 && !replied && !stop && TAILQ_EMPTY(&s->run))
    usleep((useconds_t)us);
}

void gang__store_server_coalesce(gang_store_server *srv, int us) {
  if (srv != NULL)
    atomic_store_explicit(&srv->coalesce_us, us < 0 ? 0 : us,
                          memory_order_relaxed);
}

/* The timeout of the next epoll_wait: 0 while a spin window is open (the
 * client that was just answered is likely to ask again within
 * microseconds, and a sleeping thread's wakeup costs more than that). A
 * window that ends with no event counts as a missed spin
 * (gang__store_spin_missed). */
static int wait_ms(gang_store_server *s) {
  int64_t now = gang__now_ns();
  int ms = next_timeout_ms(s, now);
  if (s->spin_until == 0 || ms == 0)
    return ms;
  if (now < s->spin_until)
    return 0;
  s->spin_until = 0;
  gang__store_spin_missed(&s->spin);
  return ms;
}

/* After a pass of n events that answered something, opens a spin window
 * unless the server coalesces (the lighthouse), or the pass saw more
 * events than there are other CPUs: then clients are many, answers reach
 * them as fast as they get a CPU, and a spinning server only takes one of
 * the CPUs they need (64 clients on 2 cores: 8-10 % fewer operations). */
static void arm_spin(gang_store_server *s, int n, bool replied) {
  if (!replied || n > s->spin_events ||
      atomic_load_explicit(&s->coalesce_us, memory_order_relaxed) > 0)
    return;
  if (gang__store_spin_now(&s->spin))
    s->spin_until = gang__now_ns() + s->spin.ns;
}

static void *server_main(void *arg) {
  gang_store_server *s = arg;
  pthread_setname_np(pthread_self(), "gang-store"); /* for top -H, perf */
  struct epoll_event evs[256];
  bool stop = false;
  while (!stop) {
    int n = epoll_wait(s->epfd, evs, 256, wait_ms(s));
    if (n < 0 && errno != EINTR) {
      GANG_WARN(STORE, "store server: epoll_wait: %s", strerror(errno));
      break;
    }
    if (n > 0 && s->spin_until != 0) {
      s->spin_until = 0; /* the window paid; an answer opens the next */
      gang__store_spin_paid(&s->spin);
    }
    int64_t now = gang__now_ns();
    for (int i = 0; i < n; i++) {
      void *p = evs[i].data.ptr;
      if (p == &tag_stop) {
        uint64_t v;
        (void)!read(s->evfd, &v, sizeof v);
        if (atomic_load(&s->retire) && !s->retired)
          take_up_retire(s);
        else
          stop = true;
      } else if (p == &tag_listener) {
        accept_some(s, now);
      } else {
        gang__store_conn *c = p;
        if (c->dead)
          continue;
        if (evs[i].events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
          /* The peer is gone (or half-closed, which a client never does):
           * a parked request would otherwise wait for its deadline. */
          GANG_TRACE(STORE, "store server: %s hung up", c->peer);
          gang__store_conn_close(s, c);
          continue;
        }
        if (evs[i].events & EPOLLIN)
          c->drained = false;
        gang__store_conn_run(s, c);
      }
    }
    expire(s, now);
    /* Run what became runnable, including what runs during this pass
     * (a set waking a waiter): the list is consumed from the head. */
    for (gang__store_conn *c; (c = TAILQ_FIRST(&s->run)) != NULL;) {
      TAILQ_REMOVE(&s->run, c, run_link);
      c->runnable = false;
      gang__store_conn_run(s, c);
      if (c->runnable && c == TAILQ_LAST(&s->run, gang__store_runq))
        break; /* yielded after its budget: let epoll have a turn */
    }
    /* A closed connection still on the runnable list (the pass above
     * stopped early) is freed once it has left the list. */
    SLIST_HEAD(, gang__store_conn) keep = SLIST_HEAD_INITIALIZER(keep);
    for (gang__store_conn *c; (c = SLIST_FIRST(&s->dead)) != NULL;) {
      SLIST_REMOVE_HEAD(&s->dead, dead_link);
      if (c->runnable)
        SLIST_INSERT_HEAD(&keep, c, dead_link);
      else
        free(c);
    }
    for (gang__store_conn *c; (c = SLIST_FIRST(&keep)) != NULL;) {
      SLIST_REMOVE_HEAD(&keep, dead_link);
      SLIST_INSERT_HEAD(&s->dead, c, dead_link);
    }
    bool replied = s->replied > 0;
    s->replied = 0;
    coalesce(s, n, now, stop, replied);
    arm_spin(s, n, replied);
    if (s->retired && (s->nconns == 0 || (s->retire_by != GANG_DEADLINE_NONE &&
                                          gang__now_ns() >= s->retire_by)))
      stop = true;
  }
  if (s->retired) {
    if (s->nconns > 0)
      GANG_WARN(STORE,
                "store server on port %d: %d client(s) still connected when "
                "its time after its owner left ran out (GANG_STORE_LINGER): "
                "they lose the store",
                s->port, s->nconns);
    GANG_INFO(STORE, "store server on port %d stopped", s->port);
    retiree *me = s->retiree;
    server_free(s);
    pthread_mutex_lock(&retired_mu);
    me->done = true;
    pthread_mutex_unlock(&retired_mu);
  }
  return NULL;
}

/* ---- Start / stop ------------------------------------------------------- */

static bool is_loopback(const char *host) {
  return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
         strcmp(host, "::1") == 0;
}

/* Makes room for max_clients descriptors: raises the soft RLIMIT_NOFILE
 * toward the hard limit (never lowers it). A process-wide change, made
 * because a rendezvous server that runs out of descriptors at 1024 ranks
 * is a well-known failure; logged at INFO. */
static void raise_nofile(int max_clients) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  rlim_t want = (rlim_t)max_clients + 256;
  if (rl.rlim_cur >= want)
    return;
  rlim_t old = rl.rlim_cur;
  rl.rlim_cur =
      rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
  if (rl.rlim_cur > old && setrlimit(RLIMIT_NOFILE, &rl) == 0)
    GANG_INFO(STORE, "store server: raised RLIMIT_NOFILE from %llu to %llu",
              (unsigned long long)old, (unsigned long long)rl.rlim_cur);
  if (rl.rlim_cur < want)
    GANG_WARN(STORE,
              "store server: the descriptor limit (%llu) is below max_clients "
              "(%d) + 256: raise ulimit -n for that many clients",
              (unsigned long long)rl.rlim_cur, max_clients);
}

/* A field of the caller's options, or 0 (= the default) when it has none. */
#define OPT(o, field) GANG__OPTS_GET(gang_store_server_options, o, field, 0)

static gang_status size_opt(const char *name, size_t v, gang__setting_id id,
                            uint64_t lo, uint64_t hi, uint32_t *out) {
  int64_t x = (int64_t)v;
  if (v == 0)
    GANG_CHECK(gang__setting_int(id, &x));
  if (x < (int64_t)lo || (uint64_t)x > hi)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_store_server_start: %s = %" PRId64
                       " is outside %" PRIu64 "..%" PRIu64,
                       name, x, lo, hi);
  *out = (uint32_t)x;
  return GANG_OK;
}

static void server_free(gang_store_server *s) {
  if (s->kv) {
    for (gang__store_conn *c; (c = LIST_FIRST(&s->all)) != NULL;)
      gang__store_conn_close(s, c); /* leaves the list */
    for (gang__store_conn *c; (c = SLIST_FIRST(&s->dead)) != NULL;) {
      SLIST_REMOVE_HEAD(&s->dead, dead_link);
      free(c);
    }
    gang__kv_destroy(s->kv);
  }
  if (s->lfd >= 0)
    close(s->lfd);
  if (s->evfd >= 0)
    close(s->evfd);
  if (s->epfd >= 0)
    close(s->epfd);
  if (s->secret) {
    memset(s->secret, 0, strlen(s->secret));
    free(s->secret);
  }
  free(atomic_load_explicit(&s->watch, memory_order_relaxed));
  free(s->parked);
  free(s);
}

gang_status gang_store_server_start(const gang_store_server_options *opts,
                                    gang_store_server **out) {
  GANG_ARG_CHECK(out != NULL, "gang_store_server_start", "out is NULL");
  GANG__OPTS_CHECK("gang_store_server_start", opts,
                   "GANG_STORE_SERVER_OPTIONS_INIT");
  const char *host = OPT(opts, host);
  int port = OPT(opts, port);
  const char *secret = OPT(opts, secret);
  GANG_ARG_CHECK(port >= 0 && port <= 65535, "gang_store_server_start",
                 "port %d is outside 0..65535", port);
  GANG_ARG_CHECK(OPT(opts, max_clients) >= 0, "gang_store_server_start",
                 "max_clients %d is negative", OPT(opts, max_clients));
  if (host == NULL)
    host = "127.0.0.1";
  GANG_ARG_CHECK(strlen(host) < 256, "gang_store_server_start",
                 "host is longer than 255 bytes");
  if (secret == NULL)
    secret = gang__setting_str(GANG_SETTING_STORE_SECRET);

  gang_store_server *s = calloc(1, sizeof *s);
  if (s == NULL)
    return gang__error(GANG_NO_MEMORY, "gang_store_server_start: no memory");
  LIST_INIT(&s->all);
  TAILQ_INIT(&s->hs);
  TAILQ_INIT(&s->run);
  SLIST_INIT(&s->dead);
  s->lfd = s->epfd = s->evfd = -1;
  atomic_init(&s->nparked, 0);
  atomic_init(&s->last_request, gang__now_ns());
  atomic_init(&s->nclients, 0);
  atomic_init(&s->coalesce_us, 0);
  atomic_init(&s->retire, false);
  snprintf(s->host, sizeof s->host, "%s", host);
  gang_status st;
  uint32_t max_key, max_value, max_clients;
  int64_t total = (int64_t)OPT(opts, max_total_bytes);
  GANG_CHECK_GOTO(size_opt("max_key_bytes", OPT(opts, max_key_bytes),
                           GANG_SETTING_STORE_MAX_KEY, 1, 1u << 20, &max_key),
                  st, fail);
  GANG_CHECK_GOTO(size_opt("max_value_bytes", OPT(opts, max_value_bytes),
                           GANG_SETTING_STORE_MAX_VALUE, 1, 1u << 30,
                           &max_value),
                  st, fail);
  GANG_CHECK_GOTO(size_opt("max_clients", (size_t)OPT(opts, max_clients),
                           GANG_SETTING_STORE_MAX_CLIENTS, 1, 1u << 20,
                           &max_clients),
                  st, fail);
  if (total == 0)
    GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_STORE_MAX_TOTAL, &total), st,
                    fail);
  if (total < 4096) {
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "gang_store_server_start: max_total_bytes = %" PRId64
                     " is below 4096",
                     total);
    goto fail;
  }
  GANG_CHECK_GOTO(gang__store_spin_ns(&s->spin.ns), st, fail);
  s->spin_events = gang__cpus_available() - 1;
  s->hs_timeout_ms = OPT(opts, handshake_timeout_ms);
  if (s->hs_timeout_ms == 0)
    GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_STORE_HANDSHAKE_TIMEOUT,
                                      &s->hs_timeout_ms),
                    st, fail);
  s->caps.max_key = max_key;
  s->caps.max_value = max_value;
  s->caps.max_keys = GANG_STORE_DEFAULT_MAX_KEYS;
  s->caps.max_frame = gang__store_frame_cap(max_key, max_value);
  s->max_clients = (int)max_clients;
  if (*secret != '\0' && (s->secret = strdup(secret)) == NULL) {
    st = gang__error(GANG_NO_MEMORY, "gang_store_server_start: no memory");
    goto fail;
  }
  s->kv = gang__kv_create(&s->caps, (size_t)total, gang__store_conn_on_wake, s);
  if (s->kv == NULL) {
    st = gang__error(GANG_NO_MEMORY,
                     "gang_store_server_start: cannot create the table");
    goto fail;
  }
  raise_nofile(s->max_clients);
  GANG_CHECK_GOTO(gang__sock_listen(host, port, 0, &s->lfd, &s->port), st,
                  fail);
  s->epfd = epoll_create1(EPOLL_CLOEXEC);
  s->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->epfd < 0 || s->evfd < 0) {
    st = gang__error_errno(GANG_SYSTEM, errno,
                           "gang_store_server_start: epoll/eventfd");
    goto fail;
  }
  struct epoll_event ev = {.events = EPOLLIN};
  ev.data.ptr = &tag_listener;
  struct epoll_event ev2 = {.events = EPOLLIN};
  ev2.data.ptr = &tag_stop;
  if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) != 0 ||
      epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &ev2) != 0) {
    st = gang__error_errno(GANG_SYSTEM, errno,
                           "gang_store_server_start: epoll_ctl");
    goto fail;
  }
  int rc = pthread_create(&s->thread, NULL, server_main, s);
  if (rc != 0) {
    st = gang__error_errno(GANG_SYSTEM, rc,
                           "gang_store_server_start: cannot start its thread");
    goto fail;
  }
  char name[GANG_SOCK_PEER_CAP];
  gang__sock_peer_name(host, s->port, name, sizeof name);
  if (s->secret == NULL && !is_loopback(host))
    GANG_WARN(STORE,
              "store server on %s is reachable beyond loopback without a "
              "secret: anyone who can connect can read and change the store "
              "(set GANG_STORE_SECRET)",
              name);
  GANG_INFO(STORE, "store server listening on %s (%s, max %d clients)", name,
            s->secret ? "authenticated" : "no authentication", s->max_clients);
  *out = s;
  return GANG_OK;
fail:
  server_free(s);
  return st;
}

int gang_store_server_port(const gang_store_server *srv) {
  return srv ? srv->port : -1;
}

void gang__store_server_wait_idle(gang_store_server *srv, int64_t quiet_ms,
                                  int64_t limit_ms) {
  if (srv == NULL)
    return;
  int64_t limit = gang__deadline_in_ms(limit_ms);
  while (!gang__deadline_passed(limit)) {
    int64_t last =
        atomic_load_explicit(&srv->last_request, memory_order_relaxed);
    int64_t quiet_for = gang__now_ns() - last;
    if (atomic_load_explicit(&srv->nparked, memory_order_relaxed) == 0 &&
        quiet_for >= quiet_ms * 1000000)
      return;
    /* Nothing to wait on: the server's thread signals nobody. The state
     * is looked at every few milliseconds until it holds or the limit. */
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

gang_status gang__store_server_watch(gang_store_server *srv, const char *prefix,
                                     const char *log_key) {
  const char *fn = "gang__store_server_watch";
  GANG_ARG_CHECK(srv != NULL && prefix != NULL && log_key != NULL, fn,
                 "a NULL argument");
  GANG_ARG_CHECK(*prefix != '\0' && strlen(prefix) < 64 && *log_key != '\0' &&
                     strlen(log_key) < 128,
                 fn, "prefix '%s' (1..63 bytes) or log key '%s' (1..127)",
                 prefix, log_key);
  store_watch *w = calloc(1, sizeof *w);
  if (w == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
  snprintf(w->log_key, sizeof w->log_key, "%s", log_key);
  store_watch *none = NULL;
  if (!atomic_compare_exchange_strong(&srv->watch, &none, w)) {
    free(w);
    return gang__error(GANG_INVALID_USAGE, "%s: the server watches already",
                       fn);
  }
  return GANG_OK;
}

int gang__store_server_clients(gang_store_server *srv) {
  return srv == NULL
             ? 0
             : atomic_load_explicit(&srv->nclients, memory_order_relaxed);
}

void gang__store_server_retire(gang_store_server *srv, int64_t limit_ms) {
  if (srv == NULL)
    return;
  if (gang__store_server_clients(srv) == 0) {
    gang_store_server_stop(srv);
    return;
  }
  retiree *r = calloc(1, sizeof *r);
  if (r == NULL) { /* nowhere to note it: stop it now instead */
    gang_store_server_stop(srv);
    return;
  }
  r->thread = srv->thread;
  srv->retiree = r;
  srv->retire_by =
      limit_ms < 0 ? GANG_DEADLINE_NONE : gang__deadline_in_ms(limit_ms);
  pthread_mutex_lock(&retired_mu);
  (void)reap_locked();
  r->next = retirees;
  retirees = r;
  pthread_mutex_unlock(&retired_mu);
  atomic_store(&srv->retire, true);
  uint64_t one = 1;
  ssize_t w;
  do
    w = write(srv->evfd, &one, sizeof one);
  while (w < 0 && errno == EINTR);
}

int gang__store_server_wait_retired(int64_t deadline) {
  for (;;) {
    pthread_mutex_lock(&retired_mu);
    int n = reap_locked();
    pthread_mutex_unlock(&retired_mu);
    if (n == 0 || gang__deadline_passed(deadline))
      return n;
    /* They tell nobody when they stop: look every few milliseconds. */
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

void gang_store_server_stop(gang_store_server *srv) {
  if (srv == NULL)
    return;
  uint64_t one = 1;
  ssize_t w;
  do
    w = write(srv->evfd, &one, sizeof one);
  while (w < 0 && errno == EINTR);
  pthread_join(srv->thread, NULL);
  GANG_INFO(STORE, "store server on port %d stopped (%d connections closed)",
            srv->port, srv->nconns);
  server_free(srv);
}
