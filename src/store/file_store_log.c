/* The file store's log: replaying the file into the in-memory table,
 * locking it, and appending records (file_store.h has the format).
 *
 * Every handle keeps an in-memory table of the log replayed up to `off`;
 * each call takes the file lock (flock: shared to read, exclusive to write),
 * replays what others appended since, then answers from the table or appends
 * its own records with one write. Its own records are replayed by the next
 * call like anyone else's, so the table is only ever a cache of the file.
 *
 * Lengths are checked against the caps and against the file size before any
 * allocation, so a corrupted or truncated file is GANG_PROTOCOL naming the
 * offset, never a crash or a huge allocation. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "file_store.h"

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

fs_entry *gang__fs_lookup(fs_store *fs, const char *key) {
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
gang_status gang__fs_catch_up(fs_store *fs) {
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
gang_status gang__fs_lock(fs_store *fs, int how) {
  while (flock(fs->fd, how) != 0) {
    if (errno != EINTR)
      return gang__error_errno(GANG_SYSTEM, errno, "store file '%s': flock",
                               fs->path);
  }
  return GANG_OK;
}

void gang__fs_unlock(fs_store *fs) { flock(fs->fd, LOCK_UN); }

gang_status gang__fs_rec_add(fs_store *fs, recbuf *b, int op, const char *key,
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
gang_status gang__fs_commit(fs_store *fs, recbuf *b) {
  GANG_CHECK(rec_write(fs, b));
  return gang__fs_catch_up(fs);
}

/* Replays under the shared lock. */
gang_status gang__fs_refresh(fs_store *fs) {
  GANG_CHECK(gang__fs_lock(fs, LOCK_SH));
  gang_status s = gang__fs_catch_up(fs);
  gang__fs_unlock(fs);
  return s;
}

void gang__fs_destroy(fs_store *fs) {
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

gang_status gang__fs_log_open(const char *path, fs_store **out) {
  fs_store *fs = calloc(1, sizeof *fs);
  if (fs == NULL)
    return gang__error(GANG_NO_MEMORY, "store file: out of memory");
  fs->fd = -1;
  fs->nbuckets = 16;
  fs->path = strdup(path);
  fs->buckets = calloc(fs->nbuckets, sizeof *fs->buckets);
  fs->cache = malloc(FS_CACHE);
  if (fs->path == NULL || fs->buckets == NULL || fs->cache == NULL) {
    gang__fs_destroy(fs);
    return gang__error(GANG_NO_MEMORY, "store file '%s': out of memory", path);
  }
  gang_status s;
  fs->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
  if (fs->fd < 0) {
    s = gang__error_errno(errno == ENOENT || errno == EISDIR
                              ? GANG_INVALID_ARGUMENT
                              : GANG_SYSTEM,
                          errno, "store file '%s': open", path);
    gang__fs_destroy(fs);
    return s;
  }
  /* Check the whole log now, so a corrupted file fails at open. */
  if ((s = gang__fs_lock(fs, LOCK_EX)) == GANG_OK) {
    s = init_header(fs);
    if (s == GANG_OK)
      s = gang__fs_catch_up(fs);
    gang__fs_unlock(fs);
  }
  if (s != GANG_OK) {
    gang__fs_destroy(fs);
    return s;
  }
  *out = fs;
  return GANG_OK;
}
