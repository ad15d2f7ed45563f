/* The store's backend interface. Each backend (the TCP client in
 * tcp_client.c, the file store in file_store.c) exports one const table of
 * operations, its `open` included; store.c builds every handle from such a
 * table, and a prefix view is a handle over another handle's backend. The
 * dependency goes one way: store.c calls backends through their tables,
 * and backends use only this header, never store.c.
 *
 * store.c validates arguments at the API boundary, applies prefixes,
 * serialises calls with the handle's mutex and turns timeouts into absolute
 * deadlines before calling a backend. Backends see full keys and valid
 * arguments, and report failures with gang__error. */
#ifndef GANG_STORE_IMPL_H
#define GANG_STORE_IMPL_H

#include <pthread.h>

#include "gang/store.h"

/* Where a backend opens: a path for the file store, a host and port for
 * the TCP client. */
typedef struct gang__store_target {
  const char *path;
  const char *host;
  int port;
} gang__store_target;

typedef struct gang__store_ops {
  const char *kind; /* "tcp", "file" */
  /* Makes the backend's state for a new handle (connects, opens the file).
   * `timeout_ms` is the handle's default deadline, already taken from opts
   * or GANG_STORE_TIMEOUT. On success *impl is the state, which close frees;
   * on failure nothing is left behind. */
  gang_status (*open)(const gang__store_target *at,
                      const gang_store_options *opts, int64_t timeout_ms,
                      void **impl);
  /* Every operation gets the deadline of the call (absolute gang__now_ns
   * time, or GANG_DEADLINE_NONE), from the timeout of the handle it was
   * made on, which may be a prefix view with a timeout of its own. get,
   * wait and multi_get wait for keys until then; the others must have
   * their answer by then. */
  gang_status (*set)(gang_store *st, const char *key, const void *value,
                     size_t len, int64_t deadline);
  gang_status (*get)(gang_store *st, const char *key, int64_t deadline,
                     void **value, size_t *len);
  gang_status (*check)(gang_store *st, const char *const *keys, size_t n,
                       int64_t deadline, bool *all_exist);
  gang_status (*wait)(gang_store *st, const char *const *keys, size_t n,
                      int64_t deadline);
  gang_status (*add)(gang_store *st, const char *key, int64_t delta,
                     int64_t deadline, int64_t *new_value);
  gang_status (*compare_set)(gang_store *st, const char *key,
                             const void *expected, size_t elen,
                             const void *desired, size_t dlen, int64_t deadline,
                             void **current, size_t *clen);
  gang_status (*del)(gang_store *st, const char *key, int64_t deadline,
                     bool *deleted);
  gang_status (*num_keys)(gang_store *st, int64_t deadline, int64_t *n);
  gang_status (*append)(gang_store *st, const char *key, const void *value,
                        size_t len, int64_t deadline);
  gang_status (*multi_get)(gang_store *st, const char *const *keys, size_t n,
                           int64_t deadline, void **values, size_t *lens);
  /* Optional: whether the server closed the connection, without
   * blocking (gang__store_probe). */
  gang_status (*probe)(gang_store *st);
  /* Optional: an add with no reply (gang__store_add_quiet). */
  gang_status (*add_quiet)(gang_store *st, const char *key, int64_t delta,
                           int64_t deadline);
  /* Optional: multi_get that does not wait; a missing key gets NULL
   * (gang__store_peek; without it, a get per key). */
  gang_status (*peek)(gang_store *st, const char *const *keys, size_t n,
                      void **values, size_t *lens);
  gang_status (*multi_set)(gang_store *st, const char *const *keys,
                           const void *const *values, const size_t *lens,
                           size_t n, int64_t deadline);
  /* Frees the backend's state; the generic part frees the handle. */
  void (*close)(gang_store *st);
  /* Optional: ends the connection now, from any thread and without the
   * handle's lock; the call in flight and every later one fail
   * (gang__store_interrupt). */
  void (*interrupt)(gang_store *st, const char *why);
  /* Optional: whether the connection failed for good (gang__store_broken).
   * Under the handle's lock. */
  bool (*broken)(gang_store *st);
} gang__store_ops;

struct gang_store {
  const gang__store_ops *ops;
  pthread_mutex_t mu; /* serialises calls on this handle */
  int64_t timeout_ms; /* default deadline; < 0 = none */
  char *prefix;       /* "a/b/" applied by store.c, or NULL */
  gang_store *inner;  /* prefix view: the store it views */
  bool owns_inner;    /* "host:port/prefix" handles own their connection */
  void *impl;         /* backend state */
};

/* The backends, one table each, defined in their own files. */
extern const gang__store_ops gang__store_tcp_ops;   /* tcp_client.c */
extern const gang__store_ops gang__store_file_ops;  /* file_store.c */
extern const gang__store_ops gang__store_torch_ops; /* torch_client.c */

#endif
