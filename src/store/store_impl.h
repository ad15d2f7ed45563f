/* The store's backend interface. gang_store handles of every kind (TCP
 * client, file store, prefix view) are a const table of operations plus
 * common state; store.c validates arguments at the API boundary, applies
 * prefixes, serialises calls with the handle's mutex and turns timeouts into
 * absolute deadlines before calling a backend. Backends see full keys and
 * valid arguments, and report failures with gang__error. */
#ifndef GANG_STORE_IMPL_H
#define GANG_STORE_IMPL_H

#include <pthread.h>

#include "gang/store.h"

typedef struct gang__store_ops {
  const char *kind; /* "tcp", "file", "prefix": used in error details */
  gang_status (*set)(gang_store *st, const char *key, const void *value,
                     size_t len);
  /* Waits until `deadline` (absolute gang__now_ns time, or
   * GANG_DEADLINE_NONE). */
  gang_status (*get)(gang_store *st, const char *key, int64_t deadline,
                     void **value, size_t *len);
  gang_status (*check)(gang_store *st, const char *const *keys, size_t n,
                       bool *all_exist);
  gang_status (*wait)(gang_store *st, const char *const *keys, size_t n,
                      int64_t deadline);
  gang_status (*add)(gang_store *st, const char *key, int64_t delta,
                     int64_t *new_value);
  gang_status (*compare_set)(gang_store *st, const char *key,
                             const void *expected, size_t elen,
                             const void *desired, size_t dlen, void **current,
                             size_t *clen);
  gang_status (*del)(gang_store *st, const char *key, bool *deleted);
  gang_status (*num_keys)(gang_store *st, int64_t *n);
  gang_status (*append)(gang_store *st, const char *key, const void *value,
                        size_t len);
  gang_status (*multi_get)(gang_store *st, const char *const *keys, size_t n,
                           int64_t deadline, void **values, size_t *lens);
  gang_status (*multi_set)(gang_store *st, const char *const *keys,
                           const void *const *values, const size_t *lens,
                           size_t n);
  /* Frees the backend's state; the generic part frees the handle. */
  void (*close)(gang_store *st);
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

/* Allocates a handle for a backend, with the timeout from opts or
 * GANG_STORE_TIMEOUT. */
gang_status gang__store_new(const gang__store_ops *ops, void *impl,
                            const gang_store_options *opts, gang_store **out);

/* Backends that the generic layer dispatches to by address. */
gang_status gang__store_tcp_connect(const char *host, int port,
                                    const gang_store_options *opts,
                                    gang_store **out);
gang_status gang__store_file_create(const char *path,
                                    const gang_store_options *opts,
                                    gang_store **out);

#endif
