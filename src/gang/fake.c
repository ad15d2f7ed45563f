/* The fake gang: one process simulating rank `rank` of `size` ranks that all
 * hold the same data as this one (fairseq2's FakeGang, extended).
 *
 * Every collective therefore has a defined result computed locally:
 * all_reduce SUM is the sum of `size` copies (computed by doubling: x*size
 * up to rounding), PRODUCT the product of `size` copies (square and
 * multiply), MEAN, MIN and MAX leave the data unchanged; all_gather copies
 * the input into every slot; broadcast from any source leaves the data
 * unchanged; reduce_scatter reduces `size` copies of this rank's block;
 * all_to_all gives every slot this rank's block; barrier returns. fairseq2
 * raises for MEAN/MIN/MAX and for a foreign broadcast source; we do not,
 * because under the "same data everywhere" model those results are well
 * defined and code written for a real gang should run unchanged on a fake
 * one (docs/gang.md). Point-to-point send/recv has no such model and is
 * GANG_NOT_SUPPORTED. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reduce.h"
#include "gang_impl.h"

/* buf = buf (op) buf (op) ... `size` copies, for SUM and PRODUCT, in
 * O(log size) kernel passes: binary expansion of size over a doubling
 * power (buf^(2^k) or buf*2^k). */
static gang_status combine_copies(void *buf, size_t count, gang_dtype dtype,
                                  gang_reduce_op op, int size) {
  if (size == 1 || count == 0)
    return GANG_OK;
  size_t bytes = count * gang_dtype_size(dtype);
  void *power = malloc(bytes), *acc = malloc(bytes);
  if (power == NULL || acc == NULL) {
    free(power);
    free(acc);
    return gang__error(GANG_NO_MEMORY,
                       "fake gang: cannot allocate %zu bytes of scratch",
                       bytes);
  }
  memcpy(power, buf, bytes);
  int have = 0;
  for (unsigned n = (unsigned)size; n != 0; n >>= 1) {
    if (n & 1u) {
      if (have)
        gang__reduce(acc, power, count, dtype, op);
      else
        memcpy(acc, power, bytes);
      have = 1;
    }
    if (n > 1)
      gang__reduce(power, power, count, dtype, op);
  }
  memcpy(buf, acc, bytes);
  free(power);
  free(acc);
  return GANG_OK;
}

static gang_status reduce_copies(void *buf, size_t count, gang_dtype dtype,
                                 gang_reduce_op op, int size) {
  switch (op) {
  case GANG_SUM:
  case GANG_PRODUCT:
    return combine_copies(buf, count, dtype, op, size);
  case GANG_MEAN:
  case GANG_MIN:
  case GANG_MAX:
    return GANG_OK; /* the same value on every rank */
  }
  return gang__error(GANG_INTERNAL, "fake gang: unknown op %d", (int)op);
}

static gang_status fake_post(gang_t *g, const gang__coll *c, gang_work *w) {
  size_t es = gang_dtype_size(c->dtype);
  size_t block = c->count * es;
  gang_status st = GANG_OK;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
  case GANG_COLL_BROADCAST:
    break;
  case GANG_COLL_ALL_REDUCE:
    st = reduce_copies(c->out, c->count, c->dtype, c->op, g->size);
    break;
  case GANG_COLL_ALL_GATHER:
    for (int i = 0; i < g->size && block; i++) {
      char *dst = (char *)c->out + (size_t)i * block;
      if (dst != c->in)
        memmove(dst, c->in, block);
    }
    break;
  case GANG_COLL_ALL_GATHER_LIST:
    for (int i = 0; i < g->size && block; i++)
      if (c->outs[i] != c->in)
        memmove(c->outs[i], c->in, block);
    break;
  case GANG_COLL_REDUCE_SCATTER:
    if (block) {
      memmove(c->out, (const char *)c->in + (size_t)g->rank * block, block);
      st = reduce_copies(c->out, c->count, c->dtype, c->op, g->size);
    }
    break;
  case GANG_COLL_ALL_TO_ALL:
    /* Rank j sends us its block number `rank`; all ranks hold our data. */
    for (int i = 0; i < g->size && block; i++)
      memcpy((char *)c->out + (size_t)i * block,
             (const char *)c->in + (size_t)g->rank * block, block);
    break;
  case GANG_COLL_ALL_TO_ALL_V: {
    /* Every simulated peer sends us its block number `rank`, which is
     * in_counts[rank] elements long (all ranks hold our data), so each
     * out_counts[j] must be that. */
    size_t off = 0;
    for (int i = 0; i < g->rank; i++)
      off += c->in_counts[i];
    size_t n = c->in_counts[g->rank];
    for (int j = 0; j < g->size; j++)
      if (c->out_counts[j] != n) {
        gang__error(GANG_MISMATCH,
                    "gang_all_to_all_v: on a fake gang every peer sends %zu "
                    "elements (in_counts[%d]) but out_counts[%d] is %zu",
                    n, g->rank, j, c->out_counts[j]);
        gang__work_reject(w, GANG_MISMATCH);
        return GANG_OK;
      }
    for (int j = 0; j < g->size && n; j++)
      memcpy((char *)c->out + (size_t)j * n * es,
             (const char *)c->in + off * es, n * es);
    break;
  }
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
    /* Not a failure of the gang: nothing is broken, the call is unusable. */
    gang__error(GANG_NOT_SUPPORTED,
                "gang_%s: a fake gang has no peer to exchange messages with",
                gang__coll_name(c->kind));
    gang__work_reject(w, GANG_NOT_SUPPORTED);
    return GANG_OK;
  case GANG_COLL_KIND_COUNT:
    st = gang__error(GANG_INTERNAL, "fake gang: bad collective");
    break;
  }
  gang__work_complete(w, st);
  return GANG_OK;
}

static gang_status fake_subgang(gang_t *g, const int *ranks, int n, int index,
                                gang_t **out) {
  (void)ranks;
  if (index < 0) {
    *out = NULL;
    return GANG_OK;
  }
  gang_t *sub;
  GANG_CHECK(gang_create_fake(g->device, index, n, &sub));
  sub->timeout_ms = g->timeout_ms;
  *out = sub;
  return GANG_OK;
}

static const gang__ops fake_ops = {
    .name = "fake",
    .simulated = true,
    .post = fake_post,
    .wait = NULL,
    .test = NULL,
    .subgang = fake_subgang,
    .abort = NULL,
    .destroy = NULL,
};

gang_status gang_create_fake(gang_device device, int rank, int size,
                             gang_t **out) {
  const char *fn = "gang_create_fake";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(size >= 1, fn, "size must be at least 1, but is %d", size);
  GANG_ARG_CHECK(rank >= 0 && rank < size, fn,
                 "rank must be in [0, %d), but is %d", size, rank);
  GANG_ARG_CHECK(
      device.type == GANG_DEVICE_CPU || device.type == GANG_DEVICE_CUDA, fn,
      "device type %d is neither CPU nor CUDA", (int)device.type);
  return gang__new(&fake_ops, NULL, rank, size, device, 0, out);
}
