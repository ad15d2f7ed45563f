/* Variable-size payloads (gang_broadcast_bytes, gang_all_gather_bytes):
 * the sizes first, then the bytes, over the gang's own broadcast and
 * all_gather, so every backend has them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gang_impl.h"

gang_status gang_broadcast_bytes(gang_t *g, void **data, size_t *len,
                                 int source_rank) {
  const char *fn = "gang_broadcast_bytes";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(data != NULL && len != NULL, fn, "data or len is NULL");
  GANG_CHECK(gang__check_rank_arg(fn, "source_rank", source_rank, g));
  int is_source = g->rank == source_rank;
  if (!is_source && g->ops->simulated)
    return gang__error(GANG_NOT_SUPPORTED,
                       "%s: rank %d of a fake gang cannot receive from "
                       "source %d: the payload exists only on the source",
                       fn, g->rank, source_rank);
  if (is_source)
    GANG_ARG_CHECK(*data != NULL || *len == 0, fn,
                   "*data is NULL with *len %zu on the source", *len);
  uint64_t n = is_source ? (uint64_t)*len : 0;
  GANG_CHECK(gang_broadcast(g, &n, 1, GANG_UINT64, source_rank));
  if (is_source)
    return gang_broadcast(g, *data, (size_t)n, GANG_UINT8, source_rank);
  if (n > SIZE_MAX - 1)
    return gang__fail(g, gang__error(GANG_PROTOCOL,
                                     "%s: source announced %llu bytes", fn,
                                     (unsigned long long)n));
  void *buf = malloc((size_t)n + 1);
  if (buf == NULL)
    return gang__fail(g, gang__error(GANG_NO_MEMORY,
                                     "%s: cannot allocate %llu bytes", fn,
                                     (unsigned long long)n));
  gang_status st = gang_broadcast(g, buf, (size_t)n, GANG_UINT8, source_rank);
  if (st != GANG_OK) {
    free(buf);
    return st;
  }
  ((char *)buf)[n] = '\0';
  *data = buf;
  *len = (size_t)n;
  return GANG_OK;
}

gang_status gang_all_gather_bytes(gang_t *g, const void *data, size_t len,
                                  void ***outs, size_t **lens) {
  const char *fn = "gang_all_gather_bytes";
  GANG_ARG_CHECK(g != NULL, fn, "gang is NULL");
  GANG_ARG_CHECK(data != NULL || len == 0, fn, "data is NULL with len %zu",
                 len);
  GANG_ARG_CHECK(outs != NULL && lens != NULL, fn, "outs or lens is NULL");
  size_t n = (size_t)g->size;
  uint64_t mine = len;
  uint64_t *all = calloc(n, sizeof *all);
  void **blobs = calloc(n, sizeof *blobs);
  size_t *sizes = calloc(n, sizeof *sizes);
  uint8_t *padded = NULL, *gathered = NULL;
  gang_status st = GANG_OK;
  if (all == NULL || blobs == NULL || sizes == NULL) {
    st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
    goto fail;
  }
  st = gang_all_gather(g, all, &mine, 1, GANG_UINT64);
  if (st != GANG_OK)
    goto fail;
  /* Every rank contributes a slot of the largest length: one all_gather,
   * no fixed maximum (fairseq's all_gather_list had one). */
  uint64_t max = 0;
  for (size_t i = 0; i < n; i++)
    max = all[i] > max ? all[i] : max;
  if (max > SIZE_MAX / n - 1) {
    st = gang__fail(g, gang__error(GANG_NO_MEMORY,
                                   "%s: %zu ranks x %llu bytes is too much", fn,
                                   n, (unsigned long long)max));
    goto fail;
  }
  padded = calloc(1, (size_t)max + 1);
  gathered = malloc(n * (size_t)max + 1);
  if (padded == NULL || gathered == NULL) {
    st = gang__fail(g, gang__error(GANG_NO_MEMORY,
                                   "%s: cannot allocate %zu x %llu bytes", fn,
                                   n, (unsigned long long)max));
    goto fail;
  }
  if (len)
    memcpy(padded, data, len);
  st = gang_all_gather(g, gathered, padded, (size_t)max, GANG_UINT8);
  if (st != GANG_OK)
    goto fail;
  for (size_t i = 0; i < n; i++) {
    blobs[i] = malloc((size_t)all[i] + 1);
    if (blobs[i] == NULL) {
      st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
      goto fail;
    }
    memcpy(blobs[i], gathered + i * max, (size_t)all[i]);
    ((char *)blobs[i])[all[i]] = '\0';
    sizes[i] = (size_t)all[i];
  }
  free(all);
  free(padded);
  free(gathered);
  *outs = blobs;
  *lens = sizes;
  return GANG_OK;
fail:
  for (size_t i = 0; blobs != NULL && i < n; i++)
    free(blobs[i]);
  free(all);
  free(blobs);
  free(sizes);
  free(padded);
  free(gathered);
  return st;
}

void gang_bytes_free(gang_t *g, void **outs, size_t *lens) {
  if (outs != NULL && g != NULL)
    for (int i = 0; i < g->size; i++)
      free(outs[i]);
  free(outs);
  free(lens);
}
