/* Helpers that training loops call on a gang: broadcast_flag and all_sum
 * (fairseq2) and all_reduce_dict (fairseq), built from the gang's public
 * collectives so they work on every backend, fake gangs included. */
#include "gang/topology.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

gang_status gang_broadcast_flag(gang_t *g, int *flag, int source_rank) {
  const char *fn = "gang_broadcast_flag";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(flag != NULL, fn, "flag is NULL");
  /* Non-sources' values are not read, only overwritten. */
  uint8_t b = *flag != 0;
  GANG_CHECK(gang_broadcast(g, &b, 1, GANG_UINT8, source_rank));
  *flag = b != 0;
  return GANG_OK;
}

gang_status gang_all_sum(gang_t *g, int64_t *value) {
  const char *fn = "gang_all_sum";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(value != NULL, fn, "value is NULL");
  return gang_all_reduce(g, value, 1, GANG_INT64, GANG_SUM);
}

gang_status gang_all_sum_f64(gang_t *g, double *value) {
  const char *fn = "gang_all_sum_f64";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(value != NULL, fn, "value is NULL");
  return gang_all_reduce(g, value, 1, GANG_FLOAT64, GANG_SUM);
}

/* FNV-1a over the count and the names, each with its terminator, so
 * ("ab") and ("a", "b") differ. */
static uint64_t names_hash(const char *const *names, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  uint64_t count = n;
  for (int i = 0; i < 8; i++) {
    h ^= (count >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  for (size_t i = 0; i < n; i++) {
    const unsigned char *s = (const unsigned char *)names[i];
    do {
      h ^= *s;
      h *= 0x100000001b3ull;
    } while (*s++ != 0);
  }
  return h;
}

/* The names as one blob: each string with its terminator. */
static char *names_pack(const char *const *names, size_t n, size_t *len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += strlen(names[i]) + 1;
  char *p = malloc(total ? total : 1);
  if (p == NULL)
    return NULL;
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(names[i]) + 1;
    memcpy(p + off, names[i], l);
    off += l;
  }
  *len = total;
  return p;
}

/* The i-th name of a packed blob, or NULL past its end. */
static const char *blob_name(const char *blob, size_t len, size_t i) {
  size_t off = 0;
  for (size_t k = 0; off < len; k++) {
    if (k == i)
      return blob + off;
    off += strnlen(blob + off, len - off) + 1;
  }
  return NULL;
}

/* Every rank saw the same differing hashes, so every rank runs this
 * (another collective) and reports the same first difference. */
static gang_status describe_mismatch(gang_t *g, const char *const *names,
                                     size_t n, const uint64_t *hashes,
                                     const char *fn) {
  int size = gang_size(g), bad = 1;
  while (bad < size && hashes[bad] == hashes[0])
    bad++;
  size_t len = 0;
  char *mine = names_pack(names, n, &len);
  if (mine == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  void **blobs = NULL;
  size_t *lens = NULL;
  gang_status st = gang_all_gather_bytes(g, mine, len, &blobs, &lens);
  free(mine);
  if (st != GANG_OK)
    return st;
  const char *a = blobs[0], *b = blobs[bad];
  size_t i = 0;
  const char *x, *y;
  for (;; i++) {
    x = blob_name(a, lens[0], i);
    y = blob_name(b, lens[bad], i);
    if (x == NULL || y == NULL || strcmp(x, y) != 0)
      break;
  }
  char xs[80], ys[80];
  snprintf(xs, sizeof xs, x ? "'%s'" : "%s", x ? x : "(no more names)");
  snprintf(ys, sizeof ys, y ? "'%s'" : "%s", y ? y : "(no more names)");
  st = gang__error(GANG_MISMATCH,
                   "%s: ranks pass different names: at index %zu rank 0 has "
                   "%s and rank %d has %s",
                   fn, i, xs, bad, ys);
  gang_bytes_free(g, blobs, lens);
  return st;
}

gang_status gang_all_reduce_dict(gang_t *g, const char *const *names,
                                 double *values, size_t n, gang_reduce_op op) {
  const char *fn = "gang_all_reduce_dict";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(n == 0 || (names != NULL && values != NULL), fn,
                 "names or values is NULL with n = %zu", n);
  for (size_t i = 0; i < n; i++)
    GANG_ARG_CHECK(names[i] != NULL, fn, "names[%zu] is NULL", i);
  int size = gang_size(g);
  uint64_t *hashes = malloc(sizeof *hashes * (size_t)size);
  if (hashes == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  uint64_t h = names_hash(names, n);
  gang_status st = gang_all_gather(g, hashes, &h, 1, GANG_UINT64);
  bool same = true;
  for (int r = 1; st == GANG_OK && r < size; r++)
    same &= hashes[r] == hashes[0];
  if (st == GANG_OK && !same)
    st = describe_mismatch(g, names, n, hashes, fn);
  free(hashes);
  if (st != GANG_OK || n == 0)
    return st;
  /* One collective for all values, as fairseq reduces one bucket. */
  return gang_all_reduce(g, values, n, GANG_FLOAT64, op);
}
