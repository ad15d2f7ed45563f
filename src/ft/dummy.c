/* The dummy gang (gang/ft.h; torchft's ProcessGroupDummy): any rank and
 * size, collectives that move nothing. torchft uses it under DDP so that
 * DDP's own start-up broadcast and gradient hooks see a gang while the real
 * all_reduce goes through the manager. In place the buffer stays as it is;
 * out of place this rank's input lands where this rank's data goes (all
 * of an all_gather's slots). */
#include <string.h>

#include "core/error.h"
#include "ft_impl.h"

static gang_status dummy_post(gang_t *g, const gang__coll *c, gang_work *w) {
  size_t es = gang_dtype_size(c->dtype);
  size_t bytes = c->count * es;
  char *out = c->out;
  const char *in = c->in;
  switch (c->kind) {
  case GANG_COLL_BARRIER:
  case GANG_COLL_ALL_REDUCE:
  case GANG_COLL_BROADCAST:
    break;
  case GANG_COLL_ALL_GATHER:
    /* Every slot gets this rank's input, so no slot is left unwritten
     * (code that reads the gathered values, such as gang_split's, sees
     * this rank's everywhere, as on the fake gang). */
    for (int r = 0; bytes && r < g->size; r++)
      if (out + (size_t)r * bytes != in)
        memmove(out + (size_t)r * bytes, in, bytes);
    break;
  case GANG_COLL_ALL_GATHER_LIST:
    for (int r = 0; bytes && r < g->size; r++)
      if (c->outs[r] != in)
        memmove(c->outs[r], in, bytes);
    break;
  case GANG_COLL_REDUCE_SCATTER:
    /* This rank's block of its own input. */
    if (bytes && out != in + (size_t)g->rank * bytes)
      memmove(out, in + (size_t)g->rank * bytes, bytes);
    break;
  case GANG_COLL_ALL_TO_ALL:
    if (bytes && out + (size_t)g->rank * bytes != in + (size_t)g->rank * bytes)
      memmove(out + (size_t)g->rank * bytes, in + (size_t)g->rank * bytes,
              bytes);
    break;
  case GANG_COLL_ALL_TO_ALL_V: {
    size_t io = 0, oo = 0;
    for (int r = 0; r < g->rank; r++) {
      io += c->in_counts[r];
      oo += c->out_counts[r];
    }
    size_t n = c->in_counts[g->rank] < c->out_counts[g->rank]
                   ? c->in_counts[g->rank]
                   : c->out_counts[g->rank];
    if (n)
      memmove(out + oo * es, in + io * es, n * es);
    break;
  }
  case GANG_COLL_SEND:
  case GANG_COLL_RECV:
  case GANG_COLL_KIND_COUNT:
    gang__error(GANG_NOT_SUPPORTED, "the dummy gang has no peers to %s",
                c->kind == GANG_COLL_SEND ? "send to" : "receive from");
    gang__work_reject(w, GANG_NOT_SUPPORTED);
    return GANG_OK;
  }
  gang__work_complete(w, GANG_OK);
  return GANG_OK;
}

static gang_status dummy_subgang(gang_t *g, const int *ranks, int n, int index,
                                 gang_t **out) {
  (void)g, (void)ranks;
  if (index < 0) {
    *out = NULL;
    return GANG_OK;
  }
  return gang_create_dummy(index, n, out);
}

static void dummy_destroy(gang_t *g) { (void)g; }

static const gang__ops dummy_ops = {
    .name = "dummy",
    .simulated = true,
    .post = dummy_post,
    .subgang = dummy_subgang,
    .destroy = dummy_destroy,
};

gang_status gang_create_dummy(int rank, int size, gang_t **out) {
  const char *fn = "gang_create_dummy";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(size >= 1, fn, "size must be at least 1, but is %d", size);
  GANG_ARG_CHECK(rank >= 0 && rank < size, fn,
                 "rank must be in [0, %d), but is %d", size, rank);
  gang_device cpu = {GANG_DEVICE_CPU, 0};
  return gang__new(&dummy_ops, NULL, rank, size, cpu, 0, out);
}
