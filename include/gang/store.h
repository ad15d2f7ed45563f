/* gang/store.h: the key-value rendezvous store.
 *
 * A store holds byte-string values under string keys. Ranks use it to find
 * each other (publish an address, wait for everyone's), to count arrivals
 * (add) and to agree on small facts (compare_set). Three kinds of handle
 * share one set of operations:
 *   - a TCP client of a store server (gang_store_connect), the server being
 *     embeddable (gang_store_server_start) or standalone (gang-store serve);
 *   - a file-backed store on a shared filesystem (gang_store_file_open);
 *   - a prefix view of another store (gang_store_prefix).
 *
 * Keys are non-empty strings. Values are arbitrary bytes. Counters written by
 * gang_store_add are stored as decimal ASCII (as torch's TCPStore does), so
 * gang_store_get of a counter returns e.g. "12".
 *
 * Every call that waits has a deadline: the handle's timeout (options,
 * GANG_STORE_TIMEOUT, gang_store_set_timeout) or an explicit one. Handles
 * are thread-safe: calls from several threads on one handle are serialised,
 * so a long wait on a handle delays other calls on that handle (open a
 * second handle for concurrent waits). */
#ifndef GANG_STORE_H
#define GANG_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/export.h"
#include "gang/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gang_store gang_store;
typedef struct gang_store_server gang_store_server;

/* ---- Server ------------------------------------------------------------ */

typedef struct gang_store_server_options {
  size_t size;            /* sizeof(gang_store_server_options) */
  const char *host;       /* bind address; NULL = "127.0.0.1" */
  int port;               /* 0 = any free port (see gang_store_server_port) */
  const char *secret;     /* NULL = GANG_STORE_SECRET; "" = no auth */
  int max_clients;        /* 0 = 8192 concurrent connections */
  size_t max_key_bytes;   /* 0 = 8 KiB */
  size_t max_value_bytes; /* 0 = 64 MiB */
  size_t max_total_bytes; /* 0 = 1 GiB of keys+values held by the server */
  int64_t handshake_timeout_ms; /* 0 = 10 s to complete hello (+auth) */
} gang_store_server_options;

#define GANG_STORE_SERVER_OPTIONS_INIT                                         \
  { sizeof(gang_store_server_options), NULL, 0, NULL, 0, 0, 0, 0, 0 }

/* Starts a store server on its own thread, listening on opts->host:port.
 * opts may be NULL for all defaults. On success *out owns the server; stop it
 * with gang_store_server_stop. Binding beyond loopback without a secret logs
 * a warning. Errors: GANG_INVALID_ARGUMENT (bad option), GANG_SYSTEM
 * (address in use, cannot bind; the detail names host:port). Thread-safe. */
GANG_API gang_status gang_store_server_start(
    const gang_store_server_options *opts, gang_store_server **out);

/* The port the server listens on (the real one when opts->port was 0). */
GANG_API int gang_store_server_port(const gang_store_server *srv);

/* Stops the server: closes every connection (clients see the server close),
 * joins its thread and frees everything. NULL is a no-op. */
GANG_API void gang_store_server_stop(gang_store_server *srv);

/* ---- Client handles ---------------------------------------------------- */

typedef struct gang_store_options {
  size_t size;                /* sizeof(gang_store_options) */
  int64_t timeout_ms;         /* 0 = GANG_STORE_TIMEOUT (default 5 min) */
  int64_t connect_timeout_ms; /* 0 = timeout_ms: how long to retry connect */
  const char *secret;         /* NULL = GANG_STORE_SECRET; "" = no auth */
} gang_store_options;

#define GANG_STORE_OPTIONS_INIT                                                \
  { sizeof(gang_store_options), 0, 0, NULL }

/* Connects to a store. `addr` is "host:port", "host:port/prefix",
 * "tcp://host:port[/prefix]" or "file:///path" (a file store). IPv6 hosts
 * are written in brackets ("[::1]:29500"). Retries refused connections with
 * backoff and jitter until connect_timeout_ms. With a prefix, the handle is a
 * prefix view over its own connection. opts may be NULL.
 * Errors: GANG_INVALID_ARGUMENT (malformed address, naming it), GANG_TIMEOUT
 * (unreachable: address and attempts in the detail), GANG_AUTH, GANG_PROTOCOL
 * (not a gang store, or another version), GANG_SYSTEM. */
GANG_API gang_status gang_store_connect(const char *addr,
                                        const gang_store_options *opts,
                                        gang_store **out);

/* Opens (creating if needed) a file-backed store at `path`. Processes that
 * open the same path share the store; advisory locks (flock) keep concurrent
 * updates atomic. Waiting calls poll the file. opts may be NULL. */
GANG_API gang_status gang_store_file_open(const char *path,
                                          const gang_store_options *opts,
                                          gang_store **out);

/* A view of `parent` in which every key is "prefix/key". Borrows parent:
 * parent must outlive the view; closing the view leaves parent open.
 * num_keys on a view counts the whole underlying store. */
GANG_API gang_status gang_store_prefix(gang_store *parent, const char *prefix,
                                       gang_store **out);

/* Closes a handle. NULL is a no-op. */
GANG_API void gang_store_close(gang_store *st);

/* Changes the handle's default deadline (milliseconds; < 0 = wait forever):
 * how long a call made on this handle waits for keys or for the server's
 * answer. On a prefix view it applies to the calls made through the view,
 * not to the handle it views. */
GANG_API gang_status gang_store_set_timeout(gang_store *st, int64_t timeout_ms);

/* ---- Operations -------------------------------------------------------- */

/* Sets key to value (len bytes; value may be NULL when len is 0). */
GANG_API gang_status gang_store_set(gang_store *st, const char *key,
                                    const void *value, size_t len);

/* Gets key's value, waiting until it exists or the handle's deadline
 * (GANG_TIMEOUT naming the key). On success *value is a malloc'd copy
 * (with a NUL after the last byte, for convenience) that the caller frees
 * with gang_store_free, and *len its length. */
GANG_API gang_status gang_store_get(gang_store *st, const char *key,
                                    void **value, size_t *len);

/* Sets *all_exist to whether every one of the n keys exists. No waiting. */
GANG_API gang_status gang_store_check(gang_store *st, const char *const *keys,
                                      size_t n, bool *all_exist);

/* Waits until all n keys exist. timeout_ms < 0 uses the handle's deadline.
 * GANG_TIMEOUT lists the keys still missing. */
GANG_API gang_status gang_store_wait(gang_store *st, const char *const *keys,
                                     size_t n, int64_t timeout_ms);

/* Atomically adds delta to the counter at key (a missing key counts as 0)
 * and sets *new_value (may be NULL) to the result. A key whose value is not
 * a decimal integer is GANG_INVALID_USAGE. */
GANG_API gang_status gang_store_add(gang_store *st, const char *key,
                                    int64_t delta, int64_t *new_value);

/* Atomically: if key's value equals `expected` (or the key is missing and
 * elen is 0), sets it to `desired`. Either way *current receives the value
 * now stored (malloc'd, free with gang_store_free) -- torch's compare_set.
 * current/clen may be NULL. */
GANG_API gang_status gang_store_compare_set(gang_store *st, const char *key,
                                            const void *expected, size_t elen,
                                            const void *desired, size_t dlen,
                                            void **current, size_t *clen);

/* Deletes key; *deleted (may be NULL) says whether it existed. */
GANG_API gang_status gang_store_delete(gang_store *st, const char *key,
                                       bool *deleted);

/* Number of keys in the store. */
GANG_API gang_status gang_store_num_keys(gang_store *st, int64_t *n);

/* Appends bytes to key's value (creating it if missing). */
GANG_API gang_status gang_store_append(gang_store *st, const char *key,
                                       const void *value, size_t len);

/* Gets n keys at once, waiting for all of them (handle's deadline). On
 * success values[i] (malloc'd, free each with gang_store_free) and lens[i]
 * are set for every i; on failure none is. */
GANG_API gang_status gang_store_multi_get(gang_store *st,
                                          const char *const *keys, size_t n,
                                          void **values, size_t *lens);

/* Sets n keys at once (atomically with respect to other clients). */
GANG_API gang_status gang_store_multi_set(gang_store *st,
                                          const char *const *keys,
                                          const void *const *values,
                                          const size_t *lens, size_t n);

/* Frees a value returned by gang_store_get / compare_set / multi_get. */
GANG_API void gang_store_free(void *value);

#ifdef __cplusplus
}
#endif
#endif
