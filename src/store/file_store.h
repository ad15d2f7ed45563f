/* The file store's log (file_store_log.c), shared with its operations
 * (file_store.c): the on-disk format, the in-memory table a handle replays
 * the log into, the file lock, and appending records.
 *
 * Format (docs/store-file.md): a 16-byte header ("GANGKVF1", u32 version,
 * u32 zero) followed by an append-only log of records. Each record is a
 * 24-byte header -- u8 op (SET, DEL, APPEND), three zero bytes, u32 key
 * length, u32 checksum (FNV-1a over the first 8 header bytes, the value
 * length, key and value), u32 zero, u64 value length -- then the key and the
 * value. Integers are little-endian. Nothing is rewritten in place, so a
 * reader never needs to undo what it has replayed.
 *
 * None of this locks in memory: a handle is used under its mutex (store.c).
 * Errors name the file and, for a bad record, its offset. */
#ifndef GANG_STORE_FILE_STORE_H
#define GANG_STORE_FILE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"

#define FS_MAGIC "GANGKVF1"
#define FS_VERSION 1u
#define FS_HDR 16u
#define REC_HDR 24u

#define FS_MAX_KEY (8u * 1024)            /* as the server's default */
#define FS_MAX_VALUE ((uint64_t)64 << 20) /* per record and per key */
#define FS_MAX_TOTAL ((uint64_t)1 << 30)  /* live keys + values */
#define FS_CACHE (64u * 1024)             /* read-ahead window */

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

/* A growable buffer of records to append with one write. */
typedef struct recbuf {
  uint8_t *p;
  size_t len, cap;
} recbuf;

/* Opens (creating if needed) the file at path and replays all of it, so a
 * corrupted file fails here. On success *out is the caller's, freed with
 * fs_destroy. */
gang_status gang__fs_log_open(const char *path, fs_store **out);

/* Closes the file and frees the table. Safe on a half-built store. */
void gang__fs_destroy(fs_store *fs);

/* The table's entry for key, or NULL. Borrowed: replaying may free it. */
fs_entry *gang__fs_lookup(fs_store *fs, const char *key);

/* flock(2) on the file, LOCK_SH to read or LOCK_EX to write (retrying
 * EINTR); blocks until granted. */
gang_status gang__fs_lock(fs_store *fs, int how);
void gang__fs_unlock(fs_store *fs);

/* Replays the records appended since the table was last brought up to
 * date. Call with the lock held. */
gang_status gang__fs_catch_up(fs_store *fs);

/* gang__fs_catch_up under the shared lock. */
gang_status gang__fs_refresh(fs_store *fs);

/* Adds a record (op OP_SET, OP_DEL or OP_APPEND) to b. */
gang_status gang__fs_rec_add(fs_store *fs, recbuf *b, int op, const char *key,
                             const void *val, size_t vlen);

/* Appends b's records with one write and replays them, so the table shows
 * them. Call with the exclusive lock held, after fs_catch_up. */
gang_status gang__fs_commit(fs_store *fs, recbuf *b);

#endif
