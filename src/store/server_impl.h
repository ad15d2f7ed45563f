/* The store server's state, shared by its two files: server.c (start and
 * stop, limits, the epoll loop, accepting) and server_conn.c (one
 * connection: handshake, requests, replies). All of it is touched only by
 * the server's one thread, after start and before stop, so nothing is
 * locked, but for two atomics other threads read (server.h). */
#ifndef GANG_STORE_SERVER_IMPL_H
#define GANG_STORE_SERVER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "gang/store.h"
#include "kv.h"
#include "proto.h"

typedef enum { C_HELLO, C_AUTH, C_READY } conn_state;

typedef struct gang__store_conn gang__store_conn;
struct gang__store_conn {
  LIST_ENTRY(gang__store_conn) all_link;   /* every connection */
  TAILQ_ENTRY(gang__store_conn) hs_link;   /* handshake list (deadline order) */
  TAILQ_ENTRY(gang__store_conn) run_link;  /* runnable list */
  SLIST_ENTRY(gang__store_conn) dead_link; /* to free after the iteration */
  int fd;
  conn_state state;
  bool in_hs, parked, runnable, dead;
  int pk_pos; /* its place in s->parked while parked */
  /* A read got less than it asked for, so the socket was empty then (a
   * stream socket under edge-triggered epoll, epoll(7)): no read until
   * its next input event, which saves the read that would fail. */
  bool drained;
  bool started; /* the head request has begun (deadline fixed) */
  bool expired; /* ... and its deadline passed */
  int64_t hs_deadline, deadline;
  uint8_t hs[GANG_STORE_CLIENT_HELLO_BYTES];
  size_t hs_len;
  uint8_t nonce_c[GANG_STORE_NONCE_BYTES], nonce_s[GANG_STORE_NONCE_BYTES];
  gang__store_buf in, out;
  size_t out_off;
  size_t charged; /* in.cap + out.cap, as charged to the kv */
  size_t discard; /* bytes of a refused frame still to skip */
  size_t discard_total;
  gang__kv_park park;
  char peer[64];
  /* The rest of the watched key this connection last added to
   * (gang__store_server_watch), empty when none. */
  char watched[192];
};

/* gang__store_server_watch's prefix and log key. */
typedef struct store_watch {
  char prefix[64];
  char log_key[128];
} store_watch;

struct gang_store_server {
  pthread_t thread;
  int epfd, lfd, evfd;
  int port;
  char host[256];
  char *secret; /* NULL = no auth */
  gang__store_caps caps;
  int max_clients;
  int64_t hs_timeout_ms;
  gang__kv *kv;
  LIST_HEAD(, gang__store_conn) all;
  int nconns;
  TAILQ_HEAD(, gang__store_conn) hs; /* in accept order: deadline order */
  /* Parked connections, a binary min-heap by deadline, so that the
   * nearest deadline is found at once however many requests wait (a
   * lighthouse has one per replica's failure-notice watch). Room for
   * every connection is made when it opens, so parking cannot fail. */
  gang__store_conn **parked;
  int nparked_heap, parked_cap;
  TAILQ_HEAD(gang__store_runq, gang__store_conn) run;
  SLIST_HEAD(, gang__store_conn) dead;
  bool accept_paused;
  int64_t accept_resume;
  int64_t last_full_warn;
  /* For gang__store_server_wait_idle on other threads: requests parked
   * now, and when the last request was taken up. */
  atomic_int nparked;
  _Atomic int64_t last_request;
  atomic_int nclients;          /* nconns, for gang__store_server_clients */
  _Atomic(store_watch *) watch; /* set once; freed with the server */
  atomic_int coalesce_us;       /* gang__store_server_coalesce */
  int64_t rate_from;            /* the window events are counted in */
  int rate_events;
  bool busy;   /* the last window was over GANG__STORE_BUSY_RATE */
  int replied; /* requests taken up this pass that get an answer */
  /* Spinning for the next request after an answer (GANG_STORE_SPIN_US):
   * epoll_wait polls without sleeping until spin_until (0: not spinning). */
  gang__store_spin spin;
  int64_t spin_until;
  int spin_events; /* the most events a pass may have had to spin after */
  /* gang__store_server_retire: the owner gave the server up; it stops by
   * itself (and frees itself) once it has no client, or at retire_by. */
  atomic_bool retire;
  int64_t retire_by;       /* set before retire; GANG_DEADLINE_NONE: no limit */
  bool retired;            /* the loop took it up (server thread only) */
  struct retiree *retiree; /* its entry among the retired (server.c) */
};

/* Makes a connection of the accepted socket fd, which it owns from now on
 * (closed if the connection cannot be registered, with a WARN), and starts
 * its handshake deadline from `now`. */
void gang__store_conn_open(gang_store_server *s, int fd, int64_t now);

/* Advances a connection as far as it can go without blocking; yields to
 * others (via the runnable list) after a batch of requests. */
void gang__store_conn_run(gang_store_server *s, gang__store_conn *c);

/* Closes the socket, leaves every list and puts c on s->dead to be freed at
 * the end of the loop iteration. Safe on a closed connection. */
void gang__store_conn_close(gang_store_server *s, gang__store_conn *c);

/* The parked request's deadline passed: unparks it and makes it runnable,
 * to be answered TIMEOUT. */
void gang__store_conn_expire(gang_store_server *s, gang__store_conn *c);

/* The parked connection with the nearest deadline, NULL when none. */
gang__store_conn *gang__store_park_first(const gang_store_server *s);

/* The kv's wake callback (owner: the conn, ctx: the server). */
void gang__store_conn_on_wake(void *owner, void *ctx);

#endif
