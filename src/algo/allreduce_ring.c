/* Ring all_reduce: a ring reduce_scatter followed by a ring all_gather.
 * Each of the 2(p-1) steps sends one block (count/p elements) to the next
 * rank while receiving one from the previous, so every link carries traffic
 * in both directions at once and each rank moves 2(p-1)/p of the buffer
 * each way: bandwidth-optimal, latency 2(p-1) alpha. */
#include "algo.h"

#include "core/error.h"
#include "core/reduce.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* reduce_scatter's ring reads its input where it is, without a copy:
 * step s sends block (r - s - 1) mod p -- at step 0 this rank's input of
 * it, later the partial sum it made at step s - 1 -- and receives the
 * partial sum of block (r - s - 2) mod p from the previous rank, adding
 * this rank's input of that block first: into the partial sum it sends
 * next, or at the last step (block r) into out. The blocks move in pieces
 * of at most RS_PIECE bytes, each reduced while in cache, so the scratch
 * holds one block for the partial sum (none with two ranks) and a piece.
 * Each block's operands are reduced in the same order as before, on the
 * rank the ring gives it to. */
#define RS_PIECE ((size_t)1 << 20)

gang_status gang__algo_reduce_scatter_ring(algo_ctx *a, const algo_call *k) {
  size_t es = gang_dtype_size(k->dtype);
  size_t bytes = k->count * es;
  int p = a->size, r = a->rank;
  const char *in = k->in;
  if (bytes == 0)
    return GANG_OK;
  if (p == 1) {
    if ((const char *)k->out != in)
      memmove(k->out, in, bytes);
    return GANG_OK;
  }
  size_t piece = RS_PIECE / es * es; /* whole elements */
  if (piece > bytes)
    piece = bytes;
  size_t partial = p > 2 ? bytes : 0;
  char *acc, *tmp;
  GANG_CHECK(gang__algo_scratch(a, partial + piece, (void **)&acc));
  tmp = acc + partial;
  int next = (r + 1) % p, prev = (r - 1 + p) % p;
  for (int s = 0; s < p - 1; s++) {
    int sb = ((r - s - 1) % p + p) % p;
    int rb = ((r - s - 2) % p + p) % p;
    const char *from = s == 0 ? in + (size_t)sb * bytes : acc;
    char *into = s == p - 2 ? (char *)k->out : acc;
    const char *mine = in + (size_t)rb * bytes;
    for (size_t done = 0; done < bytes; done += piece) {
      size_t n = bytes - done < piece ? bytes - done : piece;
      GANG_CHECK(gang__algo_sendrecv(a, next, from + done, n, prev, tmp, n,
                                     (uint32_t)s));
      gang__reduce3(into + done, mine + done, tmp, n / es, k->dtype, k->op);
    }
  }
  return GANG_OK;
}

/* The pipelined all_reduce: the same 2(p-1) ring steps, but each block is
 * cut into chunks and every chunk moves on by itself. Unit (s, k) is chunk
 * k of the block that step s sends; its send needs only unit (s-1, k) to
 * have arrived (and, in the reduce_scatter half, been reduced in), so the
 * reduce of chunk k overlaps the transfer of chunk k+1, the all_gather
 * starts while the reduce_scatter is still finishing, and both directions
 * of every link stay busy across step boundaries. Receives of the
 * reduce_scatter land in a window of W scratch slots; those of the
 * all_gather land in place.
 *
 * Why the all_gather may receive into a block this rank may still be
 * sending from: the bytes that arrive there were reduced from this rank's
 * own send of the same chunk, so every sendmsg reading it has returned. */
#define RING_WINDOW 4
/* A block up to RING_CHUNK_MAX moves whole; a larger one in chunks of
 * about that size. Smaller chunks measured slower on loopback (each frame
 * costs syscalls and, on a busy machine, a wake-up) while the reduce they
 * would hide runs 20-50x faster than the socket. */
#define RING_CHUNK_MIN 4096
#define RING_CHUNK_MAX (1 << 20)

typedef struct ring_unit {
  gang__xgroup grp;
  gang__xfer x;
} ring_unit;

typedef struct ring {
  algo_ctx *a;
  char *buf;
  size_t count, es;
  int p, r, rs_steps, units, nch, window;
  size_t chunk_elems;
  uint8_t *slots; /* window slots of chunk_elems elements */
  ring_unit *sends, *recvs;
  int posted_recvs;
} ring;

/* Element range [*off, *off + *len) of unit u's chunk on this rank's send
 * (send) or receive side. Step s < rs_steps belongs to the reduce_scatter
 * (send block r-s-1, receive r-s-2), the rest to the all_gather (send
 * r-t, receive r-t-1 for t = s - rs_steps); every rank cuts a block into
 * the same chunks. */
static void ring_locate(const ring *g, int u, bool send, size_t *off,
                        size_t *len) {
  int s = u / g->nch, k = u % g->nch;
  int b = s < g->rs_steps ? g->r - s - (send ? 1 : 2)
                          : g->r - (s - g->rs_steps) - (send ? 0 : 1);
  b = (b % g->p + g->p) % g->p;
  size_t boff, blen;
  gang__algo_block(g->count, g->p, b, &boff, &blen);
  size_t c = (size_t)k * g->chunk_elems;
  c = c < blen ? c : blen;
  *len = blen - c < g->chunk_elems ? blen - c : g->chunk_elems;
  *off = boff + c;
}

static uint8_t *ring_slot(const ring *g, int u) {
  return g->slots + (size_t)(u % g->window) * g->chunk_elems * g->es;
}

static gang_status ring_post(ring *g, int u, bool send) {
  size_t off, len;
  ring_locate(g, u, send, &off, &len);
  int p = g->p;
  ring_unit *x = send ? &g->sends[u] : &g->recvs[u];
  void *b = g->buf + off * g->es;
  if (!send && u / g->nch < g->rs_steps)
    b = ring_slot(g, u);
  x->x = (gang__xfer){
      .peer = g->a->world[send ? (g->r + 1) % p : (g->r - 1 + p) % p],
      .send = send,
      .tag = (uint32_t)u,
      .ctx = g->a->ctx,
      .seq = g->a->seq,
      .buf = b,
      .len = len * g->es,
      /* reduce_scatter receives land in window slots of their own; an
       * all_gather receive's block may still be read by a send. */
      .owns_buf = !send && u / g->nch < g->rs_steps};
  return gang__fabric_start(g->a->f, &x->x, 1, &x->grp, g->a->what);
}

/* Posts the receives that may be posted once units [0, done) have been
 * handled: reduce_scatter receives while a slot is free, then every
 * all_gather receive (they land in place). */
static gang_status ring_post_recvs(ring *g, int done) {
  int rs_units = g->rs_steps * g->nch;
  while (g->posted_recvs < g->units &&
         (g->posted_recvs >= rs_units || g->posted_recvs < done + g->window)) {
    GANG_CHECK(ring_post(g, g->posted_recvs, false));
    g->posted_recvs++;
  }
  return GANG_OK;
}

gang_status gang__algo_allreduce_ring(algo_ctx *a, const algo_call *k) {
  void *buf = k->out;
  size_t count = k->count;
  gang_dtype dt = k->dtype;
  gang_reduce_op op = k->op;
  int p = a->size;
  if (p == 1)
    return GANG_OK;
  ring g = {.a = a,
            .buf = buf,
            .count = count,
            .es = gang_dtype_size(dt),
            .p = p,
            .r = a->rank,
            .rs_steps = p - 1};
  size_t maxblk = (count + (size_t)p - 1) / (size_t)p; /* elements */
  size_t chunk = maxblk * g.es;
  chunk = chunk < RING_CHUNK_MIN   ? RING_CHUNK_MIN
          : chunk > RING_CHUNK_MAX ? RING_CHUNK_MAX
                                   : chunk;
  g.nch = (int)((maxblk * g.es + chunk - 1) / chunk);
  if (g.nch < 1)
    g.nch = 1;
  g.chunk_elems = (maxblk + (size_t)g.nch - 1) / (size_t)g.nch;
  g.units = 2 * g.rs_steps * g.nch;
  g.window = RING_WINDOW;
  /* One scratch allocation: the slots, then the sends and receives. */
  size_t slot_bytes = g.chunk_elems * g.es;
  size_t slots_bytes = (slot_bytes * (size_t)g.window + 63) & ~(size_t)63;
  void *scratch;
  GANG_CHECK(gang__algo_scratch(
      a, slots_bytes + sizeof(ring_unit) * (size_t)g.units * 2, &scratch));
  g.slots = scratch;
  g.sends = (ring_unit *)(void *)((uint8_t *)scratch + slots_bytes);
  g.recvs = g.sends + g.units;

  /* A failure anywhere fails the fabric, which completes and forgets every
   * registered transfer: returning at once is safe. */
  for (int k = 0; k < g.nch; k++)
    GANG_CHECK(ring_post(&g, k, true));
  GANG_CHECK(ring_post_recvs(&g, 0));
  int rs_units = g.rs_steps * g.nch;
  for (int u = 0; u < g.units; u++) {
    GANG_CHECK(gang__fabric_wait(a->f, &g.recvs[u].grp, &g.recvs[u].x, 1,
                                 a->deadline, a->what));
    if (u < rs_units) {
      size_t off, len;
      ring_locate(&g, u, false, &off, &len);
      gang__reduce(g.buf + off * g.es, ring_slot(&g, u), len, dt, op);
      GANG_CHECK(ring_post_recvs(&g, u + 1));
    }
    /* Unit u's chunk is final for this step: pass it on. */
    if (u + g.nch < g.units)
      GANG_CHECK(ring_post(&g, u + g.nch, true));
  }
  /* The sends read the caller's buffer: wait for all of them. */
  for (int u = 0; u < g.units; u++)
    GANG_CHECK(gang__fabric_wait(a->f, &g.sends[u].grp, &g.sends[u].x, 1,
                                 a->deadline, a->what));
  return GANG_OK;
}
