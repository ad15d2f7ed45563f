/* The file-backed store: the store operations on one file that many
 * processes (also on several hosts over a shared filesystem) open at once,
 * for "file:///path" rendezvous where no process can host a server.
 *
 * Format (docs/store-file.md): a 16-byte header ("GANGKVF1", u32 version,
 * u32 zero) followed by an append-only log of records. Each record is a
 * 24-byte header -- u8 op (SET, DEL, APPEND), three zero bytes, u32 key
 * length, u32 checksum (FNV-1a over the first 8 header bytes, the value
 * length, key and value), u32 zero, u64 value length -- then the key and the
 * value. Integers are little-endian. Nothing is rewritten in place, so a
 * reader never needs to undo what it has replayed.
 *
 * Every handle keeps an in-memory table of the log replayed up to `off`;
 * each call takes the file lock (flock: shared to read, exclusive to write),
 * replays what others appended since, then answers from the table or appends
 * its own records with one write. Its own records are replayed by the next
 * call like anyone else's, so the table is only ever a cache of the file.
 *
 * Lengths are checked against the caps and against the file size before any
 * allocation, so a corrupted or truncated file is GANG_PROTOCOL naming the
 * offset, never a crash or a huge allocation. Waiting calls poll with a
 * backoff (1 ms doubling to 50 ms), woken early by inotify when the writer is
 * on this host. Called with the handle's mutex held (store.c), so the table
 * needs no lock of its own. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "store_impl.h"

#define FS_MAGIC "GANGKVF1"
#define FS_VERSION 1u
#define FS_HDR 16u
#define REC_HDR 24u

#define FS_MAX_KEY (8u * 1024)            /* as the server's default */
#define FS_MAX_VALUE ((uint64_t)64 << 20) /* per record and per key */
#define FS_MAX_TOTAL ((uint64_t)1 << 30)  /* live keys + values */
#define FS_CACHE (64u * 1024)             /* read-ahead window */
#define FS_POLL_MIN_MS 1
#define FS_POLL_MAX_MS 50
#define FS_SHOW_KEYS 8 /* missing keys listed in a timeout */

enum { OP_SET = 1, OP_DEL = 2, OP_APPEND = 3 };

typedef struct fs_entry {
  struct fs_entry *next;
  uint64_t hash;
  char *key; /* NUL-terminated */
  size_t klen;
  uint8_t *val; /* NUL after the last byte */
  size_t vlen;
} fs_entry;

typedef struct fs_store {
  char *path;
  int fd;
  uint64_t off; /* bytes of the file replayed into the table */
  fs_entry **buckets;
  size_t nbuckets, nkeys;
  uint64_t live; /* bytes of live keys and values */
  uint8_t *cache;
  uint64_t cache_off;
  size_t cache_len;
} fs_store;

static fs_store *fs_of(gang_store *st) { return st->impl; }

/* ---- The table --------------------------------------------------------- */

static uint64_t fnv64(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static fs_entry **slot_of(fs_store *fs, const char *key, size_t klen,
                          uint64_t h) {
  fs_entry **pp = &fs->buckets[h & (fs->nbuckets - 1)];
  while (*pp && !((*pp)->hash == h && (*pp)->klen == klen &&
                  memcmp((*pp)->key, key, klen) == 0))
    pp = &(*pp)->next;
  return pp;
}

static fs_entry *lookup(fs_store *fs, const char *key) {
  size_t klen = strlen(key);
  return *slot_of(fs, key, klen, fnv64(key, klen));
}

static gang_status grow(fs_store *fs) {
  size_t n = fs->nbuckets * 2;
  fs_entry **nb = calloc(n, sizeof *nb);
  if (nb == NULL)
    return gang__error(GANG_NO_MEMORY, "store file '%s': out of memory",
                       fs->path);
  for (size_t i = 0; i < fs->nbuckets; i++)
    for (fs_entry *e = fs->buckets[i], *next; e; e = next) {
      next = e->next;
      e->next = nb[e->hash & (n - 1)];
      nb[e->hash & (n - 1)] = e;
    }
  free(fs->buckets);
  fs->buckets = nb;
  fs->nbuckets = n;
  return GANG_OK;
}

static void entry_free(fs_entry *e) {
  free(e->key);
  free(e->val);
  free(e);
}

/* Applies one replayed record. Takes ownership of key and val (val has room
 * for a NUL after vlen bytes). */
static gang_status apply(fs_store *fs, uint64_t at, int op, char *key,
                         size_t klen, uint8_t *val, size_t vlen) {
  uint64_t h = fnv64(key, klen);
  fs_entry **pp = slot_of(fs, key, klen, h), *e = *pp;
  if (op == OP_DEL) {
    if (e != NULL) {
      *pp = e->next;
      fs->live -= e->klen + e->vlen;
      fs->nkeys--;
      entry_free(e);
    }
    free(key);
    free(val);
    return GANG_OK;
  }
  uint64_t before = e ? e->klen + e->vlen : 0;
  uint64_t vnew = (op == OP_APPEND && e) ? e->vlen + vlen : vlen;
  if (vnew > FS_MAX_VALUE || fs->live - before + klen + vnew > FS_MAX_TOTAL) {
    free(key);
    free(val);
    return gang__error(GANG_PROTOCOL,
                       "store file '%s': record at offset %" PRIu64
                       " grows the data beyond the file store's caps "
                       "(value %" PRIu64 " bytes)",
                       fs->path, at, vnew);
  }
  if (op == OP_APPEND && e != NULL) {
    uint8_t *nv = realloc(e->val, e->vlen + vlen + 1);
    if (nv == NULL) {
      free(key);
      free(val);
      return gang__error(GANG_NO_MEMORY, "store file '%s': out of memory",
                         fs->path);
    }
    memcpy(nv + e->vlen, val, vlen);
    e->val = nv;
    e->vlen += vlen;
    e->val[e->vlen] = '\0';
    fs->live += vlen;
    free(key);
    free(val);
    return GANG_OK;
  }
  if (e != NULL) {
    free(key);
    free(e->val);
    fs->live -= e->vlen;
    e->val = val;
    e->vlen = vlen;
    fs->live += vlen;
    return GANG_OK;
  }
  if (fs->nkeys >= fs->nbuckets) {
    gang_status s = grow(fs);
    if (s != GANG_OK) {
      free(key);
      free(val);
      return s;
    }
    pp = slot_of(fs, key, klen, h);
  }
  e = calloc(1, sizeof *e);
  if (e == NULL) {
    free(key);
    free(val);
    return gang__error(GANG_NO_MEMORY, "store file '%s': out of memory",
                       fs->path);
  }
  e->hash = h;
  e->key = key;
  e->klen = klen;
  e->val = val;
  e->vlen = vlen;
  *pp = e;
  fs->nkeys++;
  fs->live += klen + vlen;
  return GANG_OK;
}

/* ---- Reading and replaying the log ------------------------------------- */

static gang_status pread_full(fs_store *fs, uint64_t off, void *dst,
                              size_t len) {
  uint8_t *p = dst;
  while (len > 0) {
    ssize_t r = pread(fs->fd, p, len, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return gang__error_errno(GANG_SYSTEM, errno,
                               "store file '%s': read at offset %" PRIu64,
                               fs->path, off);
    if (r == 0)
      return gang__error(GANG_PROTOCOL,
                         "store file '%s': ends at offset %" PRIu64
                         " inside a record (truncated while in use?)",
                         fs->path, off);
    p += r;
    off += (uint64_t)r;
    len -= (size_t)r;
  }
  return GANG_OK;
}

/* Reads [off, off+len) of a file that is `end` bytes long, through a
 * read-ahead window so that a run of small records costs one pread. */
static gang_status rd(fs_store *fs, uint64_t off, void *dst, size_t len,
                      uint64_t end) {
  if (len == 0)
    return GANG_OK;
  if (len > FS_CACHE / 2)
    return pread_full(fs, off, dst, len);
  if (off < fs->cache_off || off + len > fs->cache_off + fs->cache_len) {
    size_t want = end - off < FS_CACHE ? (size_t)(end - off) : FS_CACHE;
    fs->cache_len = 0;
    GANG_CHECK(pread_full(fs, off, fs->cache, want));
    fs->cache_off = off;
    fs->cache_len = want;
  }
  memcpy(dst, fs->cache + (off - fs->cache_off), len);
  return GANG_OK;
}

static uint32_t rec_sum(const uint8_t *hdr, const void *key, size_t klen,
                        const void *val, size_t vlen) {
  /* FNV-1a, 32 bit, over op..klen, the value length, the key and value. */
  uint32_t h = 0x811c9dc5u;
  const uint8_t *parts[4] = {hdr, hdr + 16, key, val};
  size_t lens[4] = {8, 8, klen, vlen};
  for (int k = 0; k < 4; k++)
    for (size_t i = 0; i < lens[k]; i++)
      h = (h ^ parts[k][i]) * 0x01000193u;
  return h;
}

static gang_status corrupt(fs_store *fs, uint64_t at, const char *why) {
  return gang__error(GANG_PROTOCOL,
                     "store file '%s': corrupted record at offset %" PRIu64
                     ": %s",
                     fs->path, at, why);
}

/* Replays the records appended since fs->off. Call with the lock held. */
static gang_status catch_up(fs_store *fs) {
  struct stat sb;
  if (fstat(fs->fd, &sb) != 0)
    return gang__error_errno(GANG_SYSTEM, errno, "store file '%s': fstat",
                             fs->path);
  uint64_t end = (uint64_t)sb.st_size;
  if (end < fs->off)
    return gang__error(GANG_PROTOCOL,
                       "store file '%s': shrank from %" PRIu64 " to %" PRIu64
                       " bytes while in use (truncated or replaced?)",
                       fs->path, fs->off, end);
  fs->cache_len = 0; /* others may have appended to the window's end */
  while (fs->off < end) {
    uint64_t at = fs->off;
    uint8_t h[REC_HDR];
    if (end - at < REC_HDR)
      return gang__error(GANG_PROTOCOL,
                         "store file '%s': %" PRIu64
                         " stray bytes at offset %" PRIu64
                         " (a truncated record; did a writer crash?)",
                         fs->path, end - at, at);
    GANG_CHECK(rd(fs, at, h, REC_HDR, end));
    int op = h[0];
    uint32_t klen = gang__get_u32(h + 4), sum = gang__get_u32(h + 8);
    uint64_t vlen = gang__get_u64(h + 16);
    if (op != OP_SET && op != OP_DEL && op != OP_APPEND)
      return corrupt(fs, at, "unknown operation");
    if (h[1] | h[2] | h[3] | gang__get_u32(h + 12))
      return corrupt(fs, at, "reserved bytes are not zero");
    if (klen == 0 || klen > FS_MAX_KEY)
      return corrupt(fs, at, "key length out of range");
    if (vlen > FS_MAX_VALUE || (op == OP_DEL && vlen != 0))
      return corrupt(fs, at, "value length out of range");
    if (end - at - REC_HDR < klen + vlen)
      return gang__error(GANG_PROTOCOL,
                         "store file '%s': record at offset %" PRIu64
                         " needs %" PRIu64 " bytes, the file has %" PRIu64
                         " (truncated record; did a writer crash?)",
                         fs->path, at, REC_HDR + klen + vlen, end - at);
    char *key = malloc(klen + 1);
    uint8_t *val = malloc(vlen + 1);
    if (key == NULL || val == NULL) {
      free(key);
      free(val);
      return gang__error(GANG_NO_MEMORY,
                         "store file '%s': out of memory replaying %" PRIu64
                         " bytes",
                         fs->path, vlen);
    }
    gang_status s = rd(fs, at + REC_HDR, key, klen, end);
    if (s == GANG_OK)
      s = rd(fs, at + REC_HDR + klen, val, (size_t)vlen, end);
    if (s == GANG_OK && rec_sum(h, key, klen, val, vlen) != sum)
      s = corrupt(fs, at, "checksum mismatch");
    if (s == GANG_OK && memchr(key, '\0', klen) != NULL)
      s = corrupt(fs, at, "NUL byte in key");
    if (s != GANG_OK) {
      free(key);
      free(val);
      return s;
    }
    key[klen] = '\0';
    val[vlen] = '\0';
    GANG_CHECK(apply(fs, at, op, key, klen, val, (size_t)vlen));
    fs->off = at + REC_HDR + klen + vlen;
  }
  return GANG_OK;
}

/* ---- Locking and writing ----------------------------------------------- */

/* flock rather than fcntl (POSIX) locks: POSIX locks belong to the process,
 * so two handles on one file in one process would not exclude each other
 * and closing either would drop both locks; flock locks belong to the open
 * file. On NFS, Linux implements flock with whole-file byte-range locks
 * (NLM or NFSv4 locks), so it excludes across hosts unless the filesystem is
 * mounted with "nolock" or "local_lock=flock". Taking the lock also makes
 * the NFS client revalidate its cache, so the fstat and reads that follow
 * see what other hosts wrote before they unlocked. */
static gang_status lock(fs_store *fs, int how) {
  while (flock(fs->fd, how) != 0) {
    if (errno != EINTR)
      return gang__error_errno(GANG_SYSTEM, errno, "store file '%s': flock",
                               fs->path);
  }
  return GANG_OK;
}

static void unlock(fs_store *fs) { flock(fs->fd, LOCK_UN); }

/* A growable buffer of records to append with one write. */
typedef struct recbuf {
  uint8_t *p;
  size_t len, cap;
} recbuf;

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

static gang_status rec_add(fs_store *fs, recbuf *b, int op, const char *key,
                           const void *val, size_t vlen) {
  size_t klen = strlen(key), need = REC_HDR + klen + vlen;
  if (b->cap - b->len < need) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < need)
      cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL)
      return gang__error(GANG_NO_MEMORY, "store file '%s': out of memory",
                         fs->path);
    b->p = p;
    b->cap = cap;
  }
  uint8_t *h = b->p + b->len;
  memset(h, 0, REC_HDR);
  h[0] = (uint8_t)op;
  gang__put_u32(h + 4, (uint32_t)klen);
  gang__put_u64(h + 16, vlen);
  memcpy(h + REC_HDR, key, klen);
  if (vlen)
    memcpy(h + REC_HDR + klen, val, vlen);
  gang__put_u32(h + 8, rec_sum(h, key, klen, val, vlen));
  b->len += need;
  return GANG_OK;
}

/* Appends the records at the end of the file in one write. Call with the
 * exclusive lock held, after catch_up (so fs->off is the file's end). A
 * failed write is cut off again so that no partial record stays behind. */
static gang_status rec_write(fs_store *fs, recbuf *b) {
  uint64_t at = fs->off;
  size_t done = 0;
  while (done < b->len) {
    ssize_t w = pwrite(fs->fd, b->p + done, b->len - done, (off_t)(at + done));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int err = w < 0 ? errno : ENOSPC;
      if (ftruncate(fs->fd, (off_t)at) != 0)
        GANG_WARN(STORE, "store file '%s': cannot cut a failed write back",
                  fs->path);
      return gang__error_errno(GANG_SYSTEM, err,
                               "store file '%s': write of %zu bytes", fs->path,
                               b->len);
    }
    done += (size_t)w;
  }
  return GANG_OK;
}

/* Writes the records in b and then replays them, so the table shows them. */
static gang_status commit(fs_store *fs, recbuf *b) {
  GANG_CHECK(rec_write(fs, b));
  return catch_up(fs);
}

/* ---- Operations --------------------------------------------------------- */

static uint8_t *dup_val(const void *v, size_t n) {
  uint8_t *p = malloc(n + 1);
  if (p != NULL) {
    if (n)
      memcpy(p, v, n);
    p[n] = '\0';
  }
  return p;
}

static gang_status fs_set(gang_store *st, const char *key, const void *value,
                          size_t len) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, len));
  recbuf b = {0};
  gang_status s = rec_add(fs, &b, OP_SET, key, value, len);
  if (s == GANG_OK && (s = lock(fs, LOCK_EX)) == GANG_OK) {
    s = catch_up(fs);
    if (s == GANG_OK)
      s = commit(fs, &b);
    unlock(fs);
  }
  free(b.p);
  return s;
}

/* Replays under the shared lock. */
static gang_status refresh(fs_store *fs) {
  GANG_CHECK(lock(fs, LOCK_SH));
  gang_status s = catch_up(fs);
  unlock(fs);
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
    if ((s = refresh(fs)) != GANG_OK)
      break;
    size_t missing = 0;
    for (size_t i = 0; i < n; i++)
      missing += lookup(fs, keys[i]) == NULL;
    if (missing == 0)
      break;
    if (gang__deadline_passed(deadline)) {
      char list[512];
      size_t o = 0, shown = 0;
      list[0] = '\0';
      for (size_t i = 0; i < n && o < sizeof list; i++) {
        if (lookup(fs, keys[i]) != NULL)
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
  fs_entry *e = lookup(fs, key);
  uint8_t *v = dup_val(e->val, e->vlen);
  if (v == NULL)
    return gang__error(GANG_NO_MEMORY, "store file '%s': get '%s': %zu bytes",
                       fs->path, key, e->vlen);
  *value = v;
  *len = e->vlen;
  return GANG_OK;
}

static gang_status fs_check(gang_store *st, const char *const *keys, size_t n,
                            bool *all_exist) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(refresh(fs));
  bool all = true;
  for (size_t i = 0; i < n && all; i++)
    all = lookup(fs, keys[i]) != NULL;
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
                          int64_t *new_value) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, 0));
  GANG_CHECK(lock(fs, LOCK_EX));
  gang_status s = catch_up(fs);
  int64_t cur = 0, nv = 0;
  recbuf b = {0};
  if (s == GANG_OK) {
    fs_entry *e = lookup(fs, key);
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
    s = rec_add(fs, &b, OP_SET, key, txt, (size_t)tl);
  }
  if (s == GANG_OK)
    s = commit(fs, &b);
  unlock(fs);
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
                                  void **current, size_t *clen) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, dlen));
  GANG_CHECK(lock(fs, LOCK_EX));
  gang_status s = catch_up(fs);
  recbuf b = {0};
  const void *now = NULL;
  size_t nlen = 0;
  uint8_t *copy = NULL;
  if (s == GANG_OK) {
    fs_entry *e = lookup(fs, key);
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
      s = rec_add(fs, &b, OP_SET, key, desired, dlen);
    if (s == GANG_OK && swap)
      s = commit(fs, &b);
  }
  unlock(fs);
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

static gang_status fs_del(gang_store *st, const char *key, bool *deleted) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(lock(fs, LOCK_EX));
  gang_status s = catch_up(fs);
  bool existed = false;
  recbuf b = {0};
  if (s == GANG_OK && (existed = lookup(fs, key) != NULL)) {
    s = rec_add(fs, &b, OP_DEL, key, NULL, 0);
    if (s == GANG_OK)
      s = commit(fs, &b);
  }
  unlock(fs);
  free(b.p);
  if (s == GANG_OK)
    *deleted = existed;
  return s;
}

static gang_status fs_num_keys(gang_store *st, int64_t *n) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(refresh(fs));
  *n = (int64_t)fs->nkeys;
  return GANG_OK;
}

static gang_status fs_append(gang_store *st, const char *key, const void *value,
                             size_t len) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(check_sizes(fs, key, len));
  GANG_CHECK(lock(fs, LOCK_EX));
  gang_status s = catch_up(fs);
  recbuf b = {0};
  if (s == GANG_OK) {
    fs_entry *e = lookup(fs, key);
    if (e != NULL && e->vlen + len > FS_MAX_VALUE)
      s = gang__error(GANG_INVALID_ARGUMENT,
                      "store file '%s': append to '%s' would make it %zu "
                      "bytes, over the cap of %" PRIu64,
                      fs->path, key, e->vlen + len, FS_MAX_VALUE);
  }
  if (s == GANG_OK)
    s = rec_add(fs, &b, OP_APPEND, key, value, len);
  if (s == GANG_OK)
    s = commit(fs, &b);
  unlock(fs);
  free(b.p);
  return s;
}

static gang_status fs_multi_get(gang_store *st, const char *const *keys,
                                size_t n, int64_t deadline, void **values,
                                size_t *lens) {
  fs_store *fs = fs_of(st);
  GANG_CHECK(wait_keys(fs, "multi_get", keys, n, deadline));
  for (size_t i = 0; i < n; i++) {
    fs_entry *e = lookup(fs, keys[i]);
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
                                size_t n) {
  fs_store *fs = fs_of(st);
  recbuf b = {0};
  gang_status s = GANG_OK;
  for (size_t i = 0; i < n && s == GANG_OK; i++) {
    s = check_sizes(fs, keys[i], lens[i]);
    if (s == GANG_OK)
      s = rec_add(fs, &b, OP_SET, keys[i], values[i], lens[i]);
  }
  if (s == GANG_OK && n > 0 && (s = lock(fs, LOCK_EX)) == GANG_OK) {
    s = catch_up(fs);
    if (s == GANG_OK)
      s = commit(fs, &b);
    unlock(fs);
  }
  free(b.p);
  return s;
}

static void fs_destroy(fs_store *fs) {
  if (fs == NULL)
    return;
  for (size_t i = 0; i < fs->nbuckets; i++)
    for (fs_entry *e = fs->buckets[i], *next; e; e = next) {
      next = e->next;
      entry_free(e);
    }
  free(fs->buckets);
  if (fs->fd >= 0)
    close(fs->fd);
  free(fs->cache);
  free(fs->path);
  free(fs);
}

static void fs_close(gang_store *st) { fs_destroy(fs_of(st)); }

/* Writes the header of a new (empty) file, or checks an existing one. Call
 * with the exclusive lock held, so two processes creating the file at once
 * write one header. */
static gang_status init_header(fs_store *fs) {
  struct stat sb;
  if (fstat(fs->fd, &sb) != 0)
    return gang__error_errno(GANG_SYSTEM, errno, "store file '%s': fstat",
                             fs->path);
  if (!S_ISREG(sb.st_mode))
    return gang__error(GANG_INVALID_ARGUMENT,
                       "store file '%s': not a regular file", fs->path);
  uint8_t h[FS_HDR];
  if (sb.st_size == 0) {
    memset(h, 0, sizeof h);
    memcpy(h, FS_MAGIC, 8);
    gang__put_u32(h + 8, FS_VERSION);
    recbuf b = {h, sizeof h, sizeof h};
    fs->off = 0;
    GANG_CHECK(rec_write(fs, &b));
    GANG_INFO(STORE, "store file '%s': created", fs->path);
  } else {
    if ((uint64_t)sb.st_size < FS_HDR)
      return gang__error(GANG_PROTOCOL,
                         "store file '%s': %lld bytes, too short for the "
                         "header (not a gang store file?)",
                         fs->path, (long long)sb.st_size);
    GANG_CHECK(pread_full(fs, 0, h, sizeof h));
    if (memcmp(h, FS_MAGIC, 8) != 0)
      return gang__error(GANG_PROTOCOL,
                         "store file '%s': bad magic (not a gang store file)",
                         fs->path);
    uint32_t v = gang__get_u32(h + 8);
    if (v != FS_VERSION || gang__get_u32(h + 12) != 0)
      return gang__error(GANG_PROTOCOL,
                         "store file '%s': format version %u, this library "
                         "reads version %u",
                         fs->path, v, FS_VERSION);
  }
  fs->off = FS_HDR;
  return GANG_OK;
}

static gang_status fs_open(const gang__store_target *at,
                           const gang_store_options *opts, int64_t timeout_ms,
                           void **impl) {
  (void)opts; /* the handle's timeout is all it would take from them */
  (void)timeout_ms;
  const char *path = at->path;
  fs_store *fs = calloc(1, sizeof *fs);
  if (fs == NULL)
    return gang__error(GANG_NO_MEMORY, "store file: out of memory");
  fs->fd = -1;
  fs->nbuckets = 16;
  fs->path = strdup(path);
  fs->buckets = calloc(fs->nbuckets, sizeof *fs->buckets);
  fs->cache = malloc(FS_CACHE);
  if (fs->path == NULL || fs->buckets == NULL || fs->cache == NULL) {
    fs_destroy(fs);
    return gang__error(GANG_NO_MEMORY, "store file '%s': out of memory", path);
  }
  gang_status s;
  fs->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
  if (fs->fd < 0) {
    s = gang__error_errno(errno == ENOENT || errno == EISDIR
                              ? GANG_INVALID_ARGUMENT
                              : GANG_SYSTEM,
                          errno, "store file '%s': open", path);
    fs_destroy(fs);
    return s;
  }
  /* Check the whole log now, so a corrupted file fails at open. */
  if ((s = lock(fs, LOCK_EX)) == GANG_OK) {
    s = init_header(fs);
    if (s == GANG_OK)
      s = catch_up(fs);
    unlock(fs);
  }
  if (s != GANG_OK) {
    fs_destroy(fs);
    return s;
  }
  GANG_INFO(STORE, "store file '%s': open, %zu keys in %" PRIu64 " bytes", path,
            fs->nkeys, fs->off);
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
