/* The file-backed store: the store operations on one file that many
 * processes (also on several hosts over a shared filesystem) open at once,
 * for "file:///path" rendezvous where no process can host a server. This
 * file is the gang__store_ops backend (gang__store_file_ops, at the end);
 * file_store_log.c keeps the file and the table each call reads or appends
 * to under the file lock.
 *
 * Waiting calls poll with a backoff (1 ms doubling to 50 ms), woken early
 * by inotify when the writer is on this host. Called with the handle's
 * mutex held (store.c), so the table needs no lock of its own. */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "file_store.h"
#include "store_impl.h"

#define FS_POLL_MIN_MS 1
#define FS_POLL_MAX_MS 50
#define FS_SHOW_KEYS 8 /* missing keys listed in a timeout */

static fs_store *fs_of(gang_store *st) { return st->impl; }

/* ---- Operations --------------------------------------------------------- */

static gang_status check_sizes(fs_store *fs, const char *key, size_t vlen) {
  size_t klen = strlen(key);
  if (klen > FS_MAX_KEY)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store file '%s': key of %zu bytes exceeds the cap of "
                       "%u",
                       fs->path, klen, FS_MAX_KEY);
  if (vlen > FS_MAX_VALUE)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store file '%s': value of %zu bytes for '%s' exceeds "
                       "the cap of %" PRIu64,
                       fs->path, vlen, key, FS_MAX_VALUE);
  return GANG_OK;
}

static uint8_t *dup_val(const void *v, size_t n) {
  uint8_t *p = malloc(n + 1);
  if (p != NULL) {
    if (n)
      memcpy(p, v, n);
    p[n] = '\0';
  }
  return p;
}

/* Operations that do not wait for keys take no deadline here: they wait
 * only for the file's lock, which no process holds for long. */
static gang_status fs_set(gang_store *st, const char *key, const void *value,
                          size_t len, int64_t deadline) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, len));
  recbuf b = {0};
  gang_status s = gang__fs_rec_add(fs, &b, OP_SET, key, value, len);
  if (s == GANG_OK && (s = gang__fs_lock(fs, LOCK_EX)) == GANG_OK) {
    s = gang__fs_catch_up(fs);
    if (s == GANG_OK)
      s = gang__fs_commit(fs, &b);
    gang__fs_unlock(fs);
  }
  free(b.p);
  return s;
}

/* Sleeps until the file may have changed: up to ms milliseconds, less when
 * inotify reports a write on this host. ino < 0 means plain polling. */
static void wait_change(int ino, int ms) {
  struct pollfd p = {.fd = ino, .events = POLLIN};
  if (poll(&p, ino >= 0 ? 1 : 0, ms) > 0) {
    char buf[4096];
    while (read(ino, buf, sizeof buf) > 0) {
    }
  }
}

/* Waits until every key is in the table (replaying the file as it grows) or
 * the deadline passes; `what` names the call in the timeout message. */
static gang_status wait_keys(fs_store *fs, const char *what,
                             const char *const *keys, size_t n,
                             int64_t deadline) {
  int64_t start = gang__now_ns();
  int interval = FS_POLL_MIN_MS, ino = -1;
  gang_status s;
  for (;;) {
    if ((s = gang__fs_refresh(fs)) != GANG_OK)
      break;
    size_t missing = 0;
    for (size_t i = 0; i < n; i++)
      missing += gang__fs_lookup(fs, keys[i]) == NULL;
    if (missing == 0)
      break;
    if (gang__deadline_passed(deadline)) {
      char list[512];
      size_t o = 0, shown = 0;
      list[0] = '\0';
      for (size_t i = 0; i < n && o < sizeof list; i++) {
        if (gang__fs_lookup(fs, keys[i]) != NULL)
          continue;
        if (shown++ == FS_SHOW_KEYS) {
          o += (size_t)snprintf(list + o, sizeof list - o, ", ...");
          break;
        }
        o += (size_t)snprintf(list + o, sizeof list - o, "%s'%s'",
                              shown > 1 ? ", " : "", keys[i]);
      }
      s = gang__error(GANG_TIMEOUT,
                      "store file '%s': %s timed out after %" PRId64
                      " ms; %zu of %zu key(s) missing: %s",
                      fs->path, what, (gang__now_ns() - start) / 1000000,
                      missing, n, list);
      break;
    }
    /* inotify wakes us as soon as a process on this host appends; writers
     * on other hosts (NFS) are only seen by polling. Made per wait, not per
     * handle: the per-user inotify instance limit is small (128). */
    if (ino == -1) {
      ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
      if (ino >= 0 && inotify_add_watch(ino, fs->path, IN_MODIFY) < 0) {
        close(ino);
        ino = -1;
      }
      if (ino < 0)
        ino = -2; /* no inotify: poll only, don't try again in this wait */
      if (ino >= 0)
        continue; /* re-check: a write may have come before the watch */
    }
    int left = gang__deadline_poll_ms(deadline);
    wait_change(ino, left >= 0 && left < interval ? left : interval);
    interval = interval * 2 > FS_POLL_MAX_MS ? FS_POLL_MAX_MS : interval * 2;
  }
  if (ino >= 0)
    close(ino);
  return s;
}

static gang_status fs_get(gang_store *st, const char *key, int64_t deadline,
                          void **value, size_t *len) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(wait_keys(fs, "get", &key, 1, deadline));
  fs_entry *e = gang__fs_lookup(fs, key);
  uint8_t *v = dup_val(e->val, e->vlen);
  if (v == NULL)
    return gang__error(GANG_NO_MEMORY, "store file '%s': get '%s': %zu bytes",
                       fs->path, key, e->vlen);
  *value = v;
  *len = e->vlen;
  return GANG_OK;
}

static gang_status fs_check(gang_store *st, const char *const *keys, size_t n,
                            int64_t deadline, bool *all_exist) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(gang__fs_refresh(fs));
  bool all = true;
  for (size_t i = 0; i < n && all; i++)
    all = gang__fs_lookup(fs, keys[i]) != NULL;
  *all_exist = all;
  return GANG_OK;
}

static gang_status fs_wait(gang_store *st, const char *const *keys, size_t n,
                           int64_t deadline) {
  return wait_keys(fs_of(st), "wait", keys, n, deadline);
}

/* Decimal int64 as gang_store_add writes it; false for anything else. */
static bool parse_i64(const uint8_t *v, size_t n, int64_t *out) {
  size_t i = (n > 0 && v[0] == '-');
  if (i == n || n > 20)
    return false;
  uint64_t mag = 0;
  for (; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return false;
    mag = mag * 10 + (uint64_t)(v[i] - '0');
    if (mag > (uint64_t)INT64_MAX + 1)
      return false;
  }
  if (v[0] != '-' && mag > (uint64_t)INT64_MAX)
    return false;
  *out = v[0] == '-' ? (int64_t)(0 - mag) : (int64_t)mag;
  return true;
}

static gang_status fs_add(gang_store *st, const char *key, int64_t delta,
                          int64_t deadline, int64_t *new_value) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, 0));
  GANG_CHECK(gang__fs_lock(fs, LOCK_EX));
  gang_status s = gang__fs_catch_up(fs);
  int64_t cur = 0, nv = 0;
  recbuf b = {0};
  if (s == GANG_OK) {
    fs_entry *e = gang__fs_lookup(fs, key);
    if (e != NULL && !parse_i64(e->val, e->vlen, &cur))
      s = gang__error(GANG_INVALID_USAGE,
                      "store file '%s': add '%s': the value (%zu bytes) is "
                      "not a decimal integer",
                      fs->path, key, e->vlen);
    else if (__builtin_add_overflow(cur, delta, &nv))
      s = gang__error(GANG_INVALID_USAGE,
                      "store file '%s': add '%s': %" PRId64 " + %" PRId64
                      " overflows int64",
                      fs->path, key, cur, delta);
  }
  if (s == GANG_OK) {
    char txt[24];
    int tl = snprintf(txt, sizeof txt, "%" PRId64, nv);
    s = gang__fs_rec_add(fs, &b, OP_SET, key, txt, (size_t)tl);
  }
  if (s == GANG_OK)
    s = gang__fs_commit(fs, &b);
  gang__fs_unlock(fs);
  free(b.p);
  if (s == GANG_OK)
    *new_value = nv;
  return s;
}

/* torch's compareSet, as the server does it: a missing key with an empty
 * `expected` takes `desired`; a missing key with a non-empty `expected`
 * stays missing and `expected` is returned; a present key equal to
 * `expected` takes `desired`; otherwise the stored value is returned. */
static gang_status fs_compare_set(gang_store *st, const char *key,
                                  const void *expected, size_t elen,
                                  const void *desired, size_t dlen,
                                  int64_t deadline, void **current,
                                  size_t *clen) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, dlen));
  GANG_CHECK(gang__fs_lock(fs, LOCK_EX));
  gang_status s = gang__fs_catch_up(fs);
  recbuf b = {0};
  const void *now = NULL;
  size_t nlen = 0;
  uint8_t *copy = NULL;
  if (s == GANG_OK) {
    fs_entry *e = gang__fs_lookup(fs, key);
    bool swap = e ? (e->vlen == elen &&
                     (elen == 0 || memcmp(e->val, expected, elen) == 0))
                  : elen == 0;
    now = swap ? desired : e ? (const void *)e->val : expected;
    nlen = swap ? dlen : e ? e->vlen : elen;
    /* Copy before commit: replaying may free e->val. */
    if (current != NULL && (copy = dup_val(now, nlen)) == NULL)
      s = gang__error(GANG_NO_MEMORY, "store file '%s': out of memory",
                      fs->path);
    if (s == GANG_OK && swap)
      s = gang__fs_rec_add(fs, &b, OP_SET, key, desired, dlen);
    if (s == GANG_OK && swap)
      s = gang__fs_commit(fs, &b);
  }
  gang__fs_unlock(fs);
  free(b.p);
  if (s != GANG_OK) {
    free(copy);
    return s;
  }
  if (current != NULL) {
    *current = copy;
    *clen = nlen;
  }
  return GANG_OK;
}

static gang_status fs_del(gang_store *st, const char *key, int64_t deadline,
                          bool *deleted) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(gang__fs_lock(fs, LOCK_EX));
  gang_status s = gang__fs_catch_up(fs);
  bool existed = false;
  recbuf b = {0};
  if (s == GANG_OK && (existed = gang__fs_lookup(fs, key) != NULL)) {
    s = gang__fs_rec_add(fs, &b, OP_DEL, key, NULL, 0);
    if (s == GANG_OK)
      s = gang__fs_commit(fs, &b);
  }
  gang__fs_unlock(fs);
  free(b.p);
  if (s == GANG_OK)
    *deleted = existed;
  return s;
}

static gang_status fs_num_keys(gang_store *st, int64_t deadline, int64_t *n) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(gang__fs_refresh(fs));
  *n = (int64_t)fs->nkeys;
  return GANG_OK;
}

static gang_status fs_append(gang_store *st, const char *key, const void *value,
                             size_t len, int64_t deadline) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, len));
  GANG_CHECK(gang__fs_lock(fs, LOCK_EX));
  gang_status s = gang__fs_catch_up(fs);
  recbuf b = {0};
  if (s == GANG_OK) {
    fs_entry *e = gang__fs_lookup(fs, key);
    if (e != NULL && e->vlen + len > FS_MAX_VALUE)
      s = gang__error(GANG_INVALID_ARGUMENT,
                      "store file '%s': append to '%s' would make it %zu "
                      "bytes, over the cap of %" PRIu64,
                      fs->path, key, e->vlen + len, FS_MAX_VALUE);
  }
  if (s == GANG_OK)
    s = gang__fs_rec_add(fs, &b, OP_APPEND, key, value, len);
  if (s == GANG_OK)
    s = gang__fs_commit(fs, &b);
  gang__fs_unlock(fs);
  free(b.p);
  return s;
}

static gang_status fs_multi_get(gang_store *st, const char *const *keys,
                                size_t n, int64_t deadline, void **values,
                                size_t *lens) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(wait_keys(fs, "multi_get", keys, n, deadline));
  for (size_t i = 0; i < n; i++) {
    fs_entry *e = gang__fs_lookup(fs, keys[i]);
    values[i] = dup_val(e->val, e->vlen);
    if (values[i] == NULL) {
      for (size_t j = 0; j < i; j++) {
        free(values[j]);
        values[j] = NULL;
      }
      return gang__error(GANG_NO_MEMORY,
                         "store file '%s': multi_get: out of memory", fs->path);
    }
    lens[i] = e->vlen;
  }
  return GANG_OK;
}

/* One write of every record under the exclusive lock: readers take the lock
 * too, so they see all of the keys or none. */
static gang_status fs_multi_set(gang_store *st, const char *const *keys,
                                const void *const *values, const size_t *lens,
                                size_t n, int64_t deadline) {
  (void)deadline;
  fs_store *fs = fs_of(st);
  recbuf b = {0};
  gang_status s = GANG_OK;
  for (size_t i = 0; i < n && s == GANG_OK; i++) {
    s = check_sizes(fs, keys[i], lens[i]);
    if (s == GANG_OK)
      s = gang__fs_rec_add(fs, &b, OP_SET, keys[i], values[i], lens[i]);
  }
  if (s == GANG_OK && n > 0 && (s = gang__fs_lock(fs, LOCK_EX)) == GANG_OK) {
    s = gang__fs_catch_up(fs);
    if (s == GANG_OK)
      s = gang__fs_commit(fs, &b);
    gang__fs_unlock(fs);
  }
  free(b.p);
  return s;
}

static void fs_close(gang_store *st) { gang__fs_destroy(fs_of(st)); }

static gang_status fs_open(const gang__store_target *at,
                           const gang_store_options *opts, int64_t timeout_ms,
                           void **impl) {
  (void)opts; /* the handle's timeout is all it would take from them */
  (void)timeout_ms;
  fs_store *fs;
  GANG_CHECK(gang__fs_log_open(at->path, &fs));
  GANG_INFO(STORE, "store file '%s': open, %zu keys in %" PRIu64 " bytes",
            at->path, fs->nkeys, fs->off);
  *impl = fs;
  return GANG_OK;
}

const gang__store_ops gang__store_file_ops = {
    .kind = "file",
    .open = fs_open,
    .set = fs_set,
    .get = fs_get,
    .check = fs_check,
    .wait = fs_wait,
    .add = fs_add,
    .compare_set = fs_compare_set,
    .del = fs_del,
    .num_keys = fs_num_keys,
    .append = fs_append,
    .multi_get = fs_multi_get,
    .multi_set = fs_multi_set,
    .close = fs_close,
};
