/* The public store API: argument checks, addresses, prefix views and
 * per-handle locking, in front of the backends (tcp_client.c, file_store.c)
 * described in store_impl.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/hostport.h"
#include "core/options.h"
#include "server.h"
#include "store_impl.h"

/* A handle on a backend: its default timeout from opts or
 * GANG_STORE_TIMEOUT, then the backend's own state. */
static gang_status store_open(const gang__store_ops *ops,
                              const gang__store_target *at,
                              const gang_store_options *opts,
                              gang_store **out) {
  int64_t timeout_ms = GANG__OPTS_GET(gang_store_options, opts, timeout_ms, 0);
  if (timeout_ms == 0)
    GANG_CHECK(gang__setting_int(GANG_SETTING_STORE_TIMEOUT, &timeout_ms));
  gang_store *st = calloc(1, sizeof *st);
  if (st == NULL)
    return gang__error(GANG_NO_MEMORY, "store: cannot allocate a handle");
  gang_status s = ops->open(at, opts, timeout_ms, &st->impl);
  if (s != GANG_OK) {
    free(st);
    return s;
  }
  pthread_mutex_init(&st->mu, NULL);
  st->ops = ops;
  st->timeout_ms = timeout_ms;
  *out = st;
  return GANG_OK;
}

gang_status gang_store_connect(const char *addr, const gang_store_options *opts,
                               gang_store **out) {
  GANG_ARG_CHECK(addr != NULL && *addr != '\0', "gang_store_connect",
                 "addr is empty");
  GANG_ARG_CHECK(out != NULL, "gang_store_connect", "out is NULL");
  if (strncmp(addr, "file://", 7) == 0)
    return gang_store_file_open(addr + 7, opts, out);
  /* torch:// is a torch TCPStore (torchrun's agent store): its protocol,
   * not ours (torch_client.c). */
  const gang__store_ops *ops = &gang__store_tcp_ops;
  if (strncmp(addr, "torch://", 8) == 0) {
    ops = &gang__store_torch_ops;
    addr += 8;
  } else if (strncmp(addr, "tcp://", 6) == 0) {
    addr += 6;
  }
  gang__hostport hp;
  const char *tail;
  gang_status s = gang__hostport_parse(addr, GANG__HOSTPORT_TAIL, &hp, &tail);
  if (s != GANG_OK)
    return gang__error_wrap(s, "store address '%s'", addr);
  /* "host:port/prefix" is a prefix view over its own connection. */
  const char *prefix = tail[0] == '/' && tail[1] != '\0' ? tail + 1 : NULL;
  gang__store_target at = {.host = hp.host, .port = hp.port};
  gang_store *st;
  GANG_CHECK(store_open(ops, &at, opts, &st));
  if (prefix == NULL) {
    *out = st;
    return GANG_OK;
  }
  gang_store *view;
  s = gang_store_prefix(st, prefix, &view);
  if (s != GANG_OK) {
    gang_store_close(st);
    return s;
  }
  view->owns_inner = true;
  *out = view;
  return GANG_OK;
}

gang_status gang_store_file_open(const char *path,
                                 const gang_store_options *opts,
                                 gang_store **out) {
  GANG_ARG_CHECK(path != NULL && *path != '\0', "gang_store_file_open",
                 "path is empty");
  GANG_ARG_CHECK(out != NULL, "gang_store_file_open", "out is NULL");
  gang__store_target at = {.path = path};
  return store_open(&gang__store_file_ops, &at, opts, out);
}

gang_status gang_store_prefix(gang_store *parent, const char *prefix,
                              gang_store **out) {
  GANG_ARG_CHECK(parent != NULL, "gang_store_prefix", "parent is NULL");
  GANG_ARG_CHECK(prefix != NULL && *prefix != '\0', "gang_store_prefix",
                 "prefix is empty");
  GANG_ARG_CHECK(out != NULL, "gang_store_prefix", "out is NULL");
  const char *outer = parent->prefix ? parent->prefix : "";
  size_t n = strlen(outer) + strlen(prefix) + 2;
  gang_store *v = calloc(1, sizeof *v);
  char *full = malloc(n);
  if (v == NULL || full == NULL) {
    free(v);
    free(full);
    return gang__error(GANG_NO_MEMORY, "gang_store_prefix: out of memory");
  }
  snprintf(full, n, "%s%s/", outer, prefix);
  pthread_mutex_init(&v->mu, NULL);
  v->prefix = full;
  /* A view of a view views the same backend with the prefixes joined. */
  v->inner = parent->inner ? parent->inner : parent;
  v->timeout_ms = parent->timeout_ms;
  *out = v;
  return GANG_OK;
}

void gang_store_close(gang_store *st) {
  if (st == NULL)
    return;
  if (st->inner != NULL) {
    if (st->owns_inner)
      gang_store_close(st->inner);
  } else if (st->ops != NULL && st->ops->close != NULL) {
    st->ops->close(st);
  }
  pthread_mutex_destroy(&st->mu);
  free(st->prefix);
  free(st);
}

gang_status gang_store_set_timeout(gang_store *st, int64_t timeout_ms) {
  GANG_ARG_CHECK(st != NULL, "gang_store_set_timeout", "store is NULL");
  st->timeout_ms = timeout_ms;
  return GANG_OK;
}

void gang_store_free(void *value) { free(value); }

/* ---- Dispatch helpers -------------------------------------------------- */

typedef struct keyset {
  const char **keys; /* full keys */
  char *storage;
} keyset;

static gang_status check_key(const char *fn, const char *key) {
  if (key == NULL || *key == '\0')
    return gang__error(GANG_INVALID_ARGUMENT, "%s: key is NULL or empty", fn);
  return GANG_OK;
}

/* Builds the full keys (prefix applied) of one call. */
static gang_status keys_build(const char *fn, const gang_store *st,
                              const char *const *keys, size_t n, keyset *ks) {
  ks->keys = NULL;
  ks->storage = NULL;
  if (n > 0 && keys == NULL)
    return gang__error(GANG_INVALID_ARGUMENT, "%s: keys is NULL", fn);
  size_t plen = st->prefix ? strlen(st->prefix) : 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    GANG_CHECK(check_key(fn, keys[i]));
    total += plen + strlen(keys[i]) + 1;
  }
  ks->keys = calloc(n ? n : 1, sizeof *ks->keys);
  ks->storage = malloc(total ? total : 1);
  if (ks->keys == NULL || ks->storage == NULL) {
    free(ks->keys);
    free(ks->storage);
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  }
  char *p = ks->storage;
  for (size_t i = 0; i < n; i++) {
    ks->keys[i] = p;
    if (plen)
      memcpy(p, st->prefix, plen);
    strcpy(p + plen, keys[i]);
    p += plen + strlen(keys[i]) + 1;
  }
  return GANG_OK;
}

static void keys_free(keyset *ks) {
  free(ks->keys);
  free(ks->storage);
}

static gang_store *backend(gang_store *st) {
  return st->inner ? st->inner : st;
}

void gang__store_interrupt(gang_store *st, const char *why) {
  if (st == NULL)
    return;
  gang_store *b = backend(st);
  if (b->ops != NULL && b->ops->interrupt != NULL)
    b->ops->interrupt(b, why);
}

bool gang__store_broken(gang_store *st) {
  if (st == NULL)
    return false;
  gang_store *b = backend(st);
  if (b->ops == NULL || b->ops->broken == NULL)
    return false;
  pthread_mutex_lock(&b->mu);
  bool broken = b->ops->broken(b);
  pthread_mutex_unlock(&b->mu);
  return broken;
}

static int64_t deadline_of(const gang_store *st, int64_t timeout_ms) {
  return gang__deadline_in_ms(timeout_ms < 0 ? st->timeout_ms : timeout_ms);
}

/* Runs `call` on the backend under its lock with the one full key. */
#define ONE_KEY_CALL(fn, st, key, call)                                        \
  do {                                                                         \
    GANG_ARG_CHECK((st) != NULL, fn, "store is NULL");                         \
    keyset ks_;                                                                \
    GANG_CHECK(keys_build(fn, (st), &(key), 1, &ks_));                         \
    gang_store *b_ = backend(st);                                              \
    const char *full = ks_.keys[0];                                            \
    pthread_mutex_lock(&b_->mu);                                               \
    gang_status s_ = (call);                                                   \
    pthread_mutex_unlock(&b_->mu);                                             \
    keys_free(&ks_);                                                           \
    return s_;                                                                 \
  } while (0)

gang_status gang_store_set(gang_store *st, const char *key, const void *value,
                           size_t len) {
  GANG_ARG_CHECK(value != NULL || len == 0, "gang_store_set",
                 "value is NULL with len %zu", len);
  ONE_KEY_CALL("gang_store_set", st, key,
               b_->ops->set(b_, full, value, len, deadline_of(st, -1)));
}

gang_status gang_store_get(gang_store *st, const char *key, void **value,
                           size_t *len) {
  GANG_ARG_CHECK(value != NULL && len != NULL, "gang_store_get",
                 "value or len is NULL");
  ONE_KEY_CALL("gang_store_get", st, key,
               b_->ops->get(b_, full, deadline_of(st, -1), value, len));
}

gang_status gang_store_add(gang_store *st, const char *key, int64_t delta,
                           int64_t *new_value) {
  int64_t ignored;
  ONE_KEY_CALL("gang_store_add", st, key,
               b_->ops->add(b_, full, delta, deadline_of(st, -1),
                            new_value ? new_value : &ignored));
}

gang_status gang_store_compare_set(gang_store *st, const char *key,
                                   const void *expected, size_t elen,
                                   const void *desired, size_t dlen,
                                   void **current, size_t *clen) {
  GANG_ARG_CHECK(expected != NULL || elen == 0, "gang_store_compare_set",
                 "expected is NULL with elen %zu", elen);
  GANG_ARG_CHECK(desired != NULL || dlen == 0, "gang_store_compare_set",
                 "desired is NULL with dlen %zu", dlen);
  GANG_ARG_CHECK((current == NULL) == (clen == NULL), "gang_store_compare_set",
                 "current and clen must both be set or both be NULL");
  ONE_KEY_CALL("gang_store_compare_set", st, key,
               b_->ops->compare_set(b_, full, expected, elen, desired, dlen,
                                    deadline_of(st, -1), current, clen));
}

gang_status gang_store_delete(gang_store *st, const char *key, bool *deleted) {
  bool ignored;
  ONE_KEY_CALL("gang_store_delete", st, key,
               b_->ops->del(b_, full, deadline_of(st, -1),
                            deleted ? deleted : &ignored));
}

gang_status gang_store_append(gang_store *st, const char *key,
                              const void *value, size_t len) {
  GANG_ARG_CHECK(value != NULL || len == 0, "gang_store_append",
                 "value is NULL with len %zu", len);
  ONE_KEY_CALL("gang_store_append", st, key,
               b_->ops->append(b_, full, value, len, deadline_of(st, -1)));
}

gang_status gang_store_num_keys(gang_store *st, int64_t *n) {
  GANG_ARG_CHECK(st != NULL, "gang_store_num_keys", "store is NULL");
  GANG_ARG_CHECK(n != NULL, "gang_store_num_keys", "n is NULL");
  gang_store *b = backend(st);
  pthread_mutex_lock(&b->mu);
  gang_status s = b->ops->num_keys(b, deadline_of(st, -1), n);
  pthread_mutex_unlock(&b->mu);
  return s;
}

/* Runs `call` on the backend under its lock with the n full keys. */
#define MULTI_KEY_CALL(fn, st, keys, n, call)                                  \
  do {                                                                         \
    GANG_ARG_CHECK((st) != NULL, fn, "store is NULL");                         \
    keyset ks_;                                                                \
    GANG_CHECK(keys_build(fn, (st), (keys), (n), &ks_));                       \
    gang_store *b_ = backend(st);                                              \
    const char *const *full = ks_.keys;                                        \
    pthread_mutex_lock(&b_->mu);                                               \
    gang_status s_ = (call);                                                   \
    pthread_mutex_unlock(&b_->mu);                                             \
    keys_free(&ks_);                                                           \
    return s_;                                                                 \
  } while (0)

gang_status gang_store_check(gang_store *st, const char *const *keys, size_t n,
                             bool *all_exist) {
  GANG_ARG_CHECK(all_exist != NULL, "gang_store_check", "all_exist is NULL");
  MULTI_KEY_CALL("gang_store_check", st, keys, n,
                 b_->ops->check(b_, full, n, deadline_of(st, -1), all_exist));
}

gang_status gang_store_wait(gang_store *st, const char *const *keys, size_t n,
                            int64_t timeout_ms) {
  MULTI_KEY_CALL("gang_store_wait", st, keys, n,
                 b_->ops->wait(b_, full, n, deadline_of(st, timeout_ms)));
}

gang_status gang_store_multi_get(gang_store *st, const char *const *keys,
                                 size_t n, void **values, size_t *lens) {
  GANG_ARG_CHECK(n == 0 || (values != NULL && lens != NULL),
                 "gang_store_multi_get", "values or lens is NULL");
  MULTI_KEY_CALL(
      "gang_store_multi_get", st, keys, n,
      b_->ops->multi_get(b_, full, n, deadline_of(st, -1), values, lens));
}

gang_status gang_store_multi_set(gang_store *st, const char *const *keys,
                                 const void *const *values, const size_t *lens,
                                 size_t n) {
  GANG_ARG_CHECK(n == 0 || (values != NULL && lens != NULL),
                 "gang_store_multi_set", "values or lens is NULL");
  for (size_t i = 0; i < n; i++)
    GANG_ARG_CHECK(values[i] != NULL || lens[i] == 0, "gang_store_multi_set",
                   "values[%zu] is NULL with len %zu", i, lens[i]);
  MULTI_KEY_CALL(
      "gang_store_multi_set", st, keys, n,
      b_->ops->multi_set(b_, full, values, lens, n, deadline_of(st, -1)));
}

/* gang__store_peek on a backend without its own: a get per key with a
 * deadline of now. */
static gang_status peek_each(gang_store *b, const char *const *keys, size_t n,
                             void **values, size_t *lens) {
  gang_status s = GANG_OK;
  for (size_t i = 0; i < n; i++) {
    values[i] = NULL;
    lens[i] = 0;
  }
  for (size_t i = 0; s == GANG_OK && i < n; i++) {
    s = b->ops->get(b, keys[i], gang__now_ns(), &values[i], &lens[i]);
    if (s == GANG_TIMEOUT) {
      values[i] = NULL;
      lens[i] = 0;
      s = GANG_OK;
    }
  }
  for (size_t i = 0; s != GANG_OK && i < n; i++) {
    free(values[i]);
    values[i] = NULL;
  }
  return s;
}

gang_status gang__store_peek(gang_store *st, const char *const *keys, size_t n,
                             void **values, size_t *lens) {
  GANG_ARG_CHECK(n == 0 || (values != NULL && lens != NULL), "gang__store_peek",
                 "values or lens is NULL");
  MULTI_KEY_CALL("gang__store_peek", st, keys, n,
                 b_->ops->peek != NULL
                     ? b_->ops->peek(b_, full, n, values, lens)
                     : peek_each(b_, full, n, values, lens));
}

gang_status gang__store_add_quiet(gang_store *st, const char *key,
                                  int64_t delta) {
  int64_t ignored;
  ONE_KEY_CALL(
      "gang__store_add_quiet", st, key,
      b_->ops->add_quiet != NULL
          ? b_->ops->add_quiet(b_, full, delta, deadline_of(st, -1))
          : b_->ops->add(b_, full, delta, deadline_of(st, -1), &ignored));
}

gang_status gang__store_probe(gang_store *st) {
  GANG_ARG_CHECK(st != NULL, "gang__store_probe", "store is NULL");
  gang_store *b = backend(st);
  if (b->ops->probe == NULL)
    return GANG_OK;
  pthread_mutex_lock(&b->mu);
  gang_status s = b->ops->probe(b);
  pthread_mutex_unlock(&b->mu);
  return s;
}
