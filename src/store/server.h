/* Internal calls on a store server (gang/store.h's gang_store_server) and
 * on a client of one, for the layers above the store: a gang's world
 * hosts one on rank 0 when no launcher does (src/gang/pg_world.c), and
 * keeps it while its peers need it (src/gang/pg_exit.c). */
#ifndef GANG_STORE_SERVER_H
#define GANG_STORE_SERVER_H

#include <stdint.h>

#include "gang/store.h"

/* Waits until srv has no parked request (a get or wait for keys that do
 * not exist yet) and has taken up no request for quiet_ms, or until
 * limit_ms has passed. Lets a server about to stop serve clients still in
 * the middle of an exchange with it. NULL returns at once. Any thread. */
void gang__store_server_wait_idle(gang_store_server *srv, int64_t quiet_ms,
                                  int64_t limit_ms);

/* Departures: once set, a connection that ADDs a positive number to a
 * key starting with `prefix` is remembered by the rest of that key (the last
 * one it added to), and when that connection closes -- its process died, or it
 * left
 * -- the rest and a newline are APPENDed to `log_key`, waking whoever
 * waits on it. The lighthouse watches its heartbeat counters so: a replica
 * killed in any phase is suspected the moment its connections drop. Set
 * once, before clients come; strings copied. Any thread. */
/* Coalescing: while the server takes more than GANG__STORE_BUSY_RATE
 * events a second and a pass of its loop finds fewer than 16, none of
 * them a request that is answered (ADD_QUIET only), it sleeps `us`
 * microseconds after the pass, so that the next one takes many requests
 * at one wakeup (a thread woken per request costs this kind of machine as
 * much again as the request). A request then waits up to `us` longer;
 * below the rate nothing changes. For a server of many clients
 * that send often and wait little (the lighthouse's heartbeats); 0 turns
 * it off (the default). Any thread. */
#define GANG__STORE_BUSY_RATE 5000
void gang__store_server_coalesce(gang_store_server *srv, int us);

gang_status gang__store_server_watch(gang_store_server *srv, const char *prefix,
                                     const char *log_key);

/* How many client connections srv has open now (handshakes included).
 * Any thread. */
int gang__store_server_clients(gang_store_server *srv);

/* The owner gives srv up: when no client is connected it stops it at
 * once (gang_store_server_stop); otherwise the server closes its listener
 * (no new clients; the port is free at once), serves the clients it has
 * until the last one leaves, or limit_ms from now (< 0: no limit), then
 * stops and frees itself on its own thread. srv must not be used after.
 * Any thread. */
void gang__store_server_retire(gang_store_server *srv, int64_t limit_ms);

/* Waits until every retired server of this process has stopped, or until
 * `deadline` (gang__now_ns time, GANG_DEADLINE_NONE: no limit). Returns
 * how many still run. A process that exits calls it (pg_exit.c). */
int gang__store_server_wait_retired(int64_t deadline);

/* Ends st's connection to its server now, keeping the handle: a call in
 * flight on it (a wait for a key, say) fails at once, and so does every
 * later one, with GANG_ABORTED quoting `why`. The process that hosts the
 * server takes its own client off the server's count this way before it
 * waits for the others to leave (src/gang/pg_exit.c), and an aborted gang
 * creation stops waiting for its peers' keys (src/gang/pg_world.c).
 * Nothing for a store without a connection (the file store). Any thread,
 * without waiting; st must not be closed meanwhile. */
void gang__store_interrupt(gang_store *st, const char *why);

/* Whether st's connection failed (the server closed it, or stayed silent
 * past a call's deadline and grace): every later call on st fails at once,
 * so its owner must open a new handle. A timeout that the server answered
 * leaves it usable. False for a store without a connection. */
bool gang__store_broken(gang_store *st);

/* Adds delta to key's counter without waiting for the server's answer
 * (one write; an error of the server's is only in its log). Over a
 * connection to a server that has no such request, and on other stores,
 * a gang_store_add. For what is sent often and needs no answer: the
 * lighthouse's heartbeats. */
gang_status gang__store_add_quiet(gang_store *st, const char *key,
                                  int64_t delta);

/* GANG_PEER_LOST when the server has closed st's connection (or the
 * connection failed earlier), found without blocking; GANG_OK otherwise,
 * and for stores without a connection. For a caller that sends without
 * asking (the lighthouse's heartbeat datagrams) and would otherwise not
 * see its server go. */
gang_status gang__store_probe(gang_store *st);

/* Gets the n keys that exist now, without waiting for the others: on
 * success values[i] is a malloc'd copy (gang_store_free) and lens[i] its
 * length, or NULL and 0 for a key that is missing. One request for them
 * all over a connection (two when some are missing); a get per key
 * elsewhere. The lighthouse reads every replica's counter and join so. */
gang_status gang__store_peek(gang_store *st, const char *const *keys, size_t n,
                             void **values, size_t *lens);

#endif
