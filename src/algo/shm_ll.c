/* Flagged lines (shm_algo.h): a step whose data rides in cache lines that
 * each end in a flag, so a reader polls every line of every member at once
 * and waits for one cache-line transfer whatever the size. */
#include <string.h>

#include "shm_algo.h"

/* From this many lines a pass reads a member's first flag alone until it
 * is there, and only then every line (ll_poll). */
#define SHM_LL_LEAD_LINES 3

/* Every line of one member is loaded in one pass (no early exit), so the
 * loads go out together and the lines cross in parallel. */
static bool ll_ready(const shm_ll_line *l, size_t lines, uint64_t flag) {
  bool ok = true;
  for (size_t k = 0; k < lines; k++)
    ok &= atomic_load_explicit(&l[k].flag, memory_order_acquire) == flag;
  return ok;
}

/* Polls the other members' lines for a while; false if some are still
 * missing. A pass stops at the first member not complete and the next
 * starts there, so with many members a pass costs one member's lines
 * while one is late, and the spin stays as short as a step-line wait's.
 *
 * From SHM_LL_LEAD_LINES lines a pass reads only the member's first flag
 * until it is there: the member writes its lines in order, so the rest
 * follow it. Reading every line while they are being written took longer
 * in the far placement from three lines up (docs/shm.md): 256 B
 * 0.53-0.54 against 0.47-0.48 us, 504 B 0.60-0.62 against 0.50-0.52; at two
 * lines it was 0.01 us slower. The complete check still reads every flag, so
 * nothing relies on the order for correctness. */
static bool ll_poll(gang__shm_chan *c, uint64_t t, size_t lines,
                    uint64_t flag) {
  /* Oversubscribed: hardly at all, as a step-line wait (shm.c). In a
   * host's part of a gang over several hosts, a few microseconds: a longer
   * wait is for a leader's network step, and the step-line wait yields
   * the CPU during it (shm.c). */
  int spins = c->oversubscribed ? 4 : c->host_part ? 256 : 4096;
  int m = c->rank == 0 ? 1 : 0;
  bool lead = lines >= SHM_LL_LEAD_LINES;
  for (int i = 0; i < spins; i++) {
    while (m < c->size) {
      const shm_ll_line *l = shm_ll_slot(c, m, t);
      if (lead && atomic_load_explicit(&l->flag, memory_order_relaxed) != flag)
        break;
      if (!ll_ready(l, lines, flag))
        break;
      m = m + 1 == c->rank ? m + 2 : m + 1;
    }
    if (m >= c->size)
      return true;
    gang__shm_relax();
    /* A member that last ran on our CPU needs it: leave the spin to the
     * step-line wait, which yields (shm.c). */
    if (i % 64 == 63 && gang__shm_shares_cpu(c, m, gang__shm_note_cpu(c)))
      return false;
  }
  return false;
}

gang_status gang__shm_ll_step(gang__shm_chan *c, const void *src, size_t bytes,
                              uint64_t *step) {
  const unsigned char *s = src;
  size_t lines = (bytes + SHM_LL_DATA - 1) / SHM_LL_DATA;
  uint64_t t = ++c->step;
  *step = t;
  GANG_CHECK(gang__shm_begin_line(c, t));
  uint64_t flag = shm_ll_flag(t, c->sig);
  shm_ll_line *mine = shm_ll_slot(c, c->rank, t);
  for (size_t k = 0, off = 0; k < lines; k++, off += SHM_LL_DATA) {
    memcpy(mine[k].data, s + off,
           bytes - off < SHM_LL_DATA ? bytes - off : SHM_LL_DATA);
    atomic_store_explicit(&mine[k].flag, flag, memory_order_release);
  }
  /* The step line still goes out: later steps' begin rules and the
   * fallback below read it. */
  gang__shm_publish(c, t);
  if (ll_poll(c, t, lines, flag))
    return GANG_OK;
  /* Not there yet: wait on the step lines, which sleeps, keeps the
   * deadline and names a member that runs another call. A member's step
   * line goes out after its flagged lines, so they are complete then. */
  return gang__shm_wait_all(c, t);
}

void gang__shm_ll_gather(void *dst, gang__shm_chan *c, int member, uint64_t t,
                         size_t bytes) {
  unsigned char *d = dst;
  const shm_ll_line *l = shm_ll_slot(c, member, t);
  for (size_t off = 0; off < bytes; off += SHM_LL_DATA, l++)
    memcpy(d + off, l->data,
           bytes - off < SHM_LL_DATA ? bytes - off : SHM_LL_DATA);
}
