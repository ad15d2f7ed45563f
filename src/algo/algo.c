/* Helpers shared by the algorithms. */
#include "algo.h"

#include <stdlib.h>

#include "core/error.h"

static gang_status grow(algo_ctx *a, void **buf, size_t *cap, size_t bytes,
                        void **out) {
  if (*cap < bytes) {
    void *p = realloc(*buf, bytes);
    if (p == NULL)
      return gang__error(GANG_NO_MEMORY,
                         "%s: cannot allocate %zu bytes of scratch", a->what,
                         bytes);
    *buf = p;
    *cap = bytes;
  }
  *out = *buf;
  return GANG_OK;
}

gang_status gang__algo_scratch(algo_ctx *a, size_t bytes, void **out) {
  return grow(a, a->scratch, a->scratch_cap, bytes, out);
}

gang_status gang__algo_stage(algo_ctx *a, size_t bytes, void **out) {
  return grow(a, a->stage, a->stage_cap, bytes, out);
}

gang_status gang__algo_sendrecv(algo_ctx *a, int to, const void *sbuf,
                                size_t slen, int from, void *rbuf, size_t rlen,
                                uint32_t tag) {
  gang__xfer x[2];
  int n = 0;
  if (to >= 0)
    x[n++] = (gang__xfer){.peer = a->world[to],
                          .send = true,
                          .tag = tag,
                          .ctx = a->ctx,
                          .seq = a->seq,
                          .buf = (void *)sbuf,
                          .len = slen};
  if (from >= 0)
    x[n++] = (gang__xfer){.peer = a->world[from],
                          .send = false,
                          .tag = tag,
                          .ctx = a->ctx,
                          .seq = a->seq,
                          .buf = rbuf,
                          .len = rlen,
                          .owns_buf = true};
  if (n == 0)
    return GANG_OK;
  if (n == 2)
    x[0].pace = &x[1]; /* an exchange: lockstep pieces (fabric.h) */
  return gang__fabric_run(a->f, x, n, a->deadline, a->what);
}

void gang__algo_span(size_t count, int parts, int lo, int hi, size_t *off,
                     size_t *len) {
  size_t o, l, eo, el;
  gang__algo_block(count, parts, lo, &o, &l);
  gang__algo_block(count, parts, hi - 1, &eo, &el);
  *off = o;
  *len = eo + el - o;
}

void gang__algo_block(size_t count, int parts, int i, size_t *off,
                      size_t *len) {
  size_t base = count / (size_t)parts, extra = count % (size_t)parts;
  size_t ui = (size_t)i;
  *off = ui * base + (ui < extra ? ui : extra);
  *len = base + (ui < extra ? 1 : 0);
}
