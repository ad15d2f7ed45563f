/* Staged chunks or single copy, chosen by measuring both (shm_algo.h,
 * "Measured ways").
 *
 * No rule held on the 2-core machine of the figures. all_reduce of 64 MiB,
 * idle in its fast memory state: staged chunks 7-8 ms against 17-19 single
 * copy; idle in its slow state 32 against 19; beside four shell loops of
 * `sleep 0.001` staged 20-24 ms against 29-36 in the fast state and 77-87
 * against 27-28 in the slow one (each staged chunk is two steps at which
 * both members must run; single copy has three in all, and copies the
 * bytes once fewer). all_gather of 2 MiB blocks in place: staged 1.1-1.6x
 * faster in one state, 4-5x slower (420-490 us against 85-88) in another.
 *
 * Each member times its calls from the end of the step that agrees on the
 * way (everyone has arrived then; late arrivals are the application's) to
 * their end, and keeps the last five per kind of call, size class and way.
 * It keeps a time only when the call before it of that kind and class took
 * the same way: a way's first call pays for what is cold or what the
 * other way left in the caches (single copy of 2 MiB blocks right after
 * staging: 4.1 ms, then 531 us, then about 150; of 512 KiB blocks, run in
 * turn with staging, slower than staging, run alone 1.3x faster). So it
 * runs SHM_WAY_TRIALS + 1 calls staged, then as many by single copy, then
 * proposes the way whose times have the lower median (one slow call must
 * not decide), and the other again in two calls in SHM_WAY_RETRY, as the
 * machine's state changes (two in 128: at most 2-3 % more time where the
 * other way is twice as slow). The members agree in one flagged step before
 * the call: any single copy takes single copy on every member. All make
 * the same calls and keep the same times' count, so they try together.
 * Where every member's buffer is from gang_mem_alloc the staged way
 * stages nothing (its reads are the single copy, from the mapping): the
 * call takes it without a measure.
 *
 * Broadcasts below 64 KiB take 1-6 us, and the agreeing step would cost
 * about 0.7 of them and make the root wait for its reader where staging
 * lets it run a call ahead. They agree only when a choice is due
 * (gang__shm_way_sparse): the trials' ways, the retries' and the way
 * last agreed follow from the calls of the size class, which every member
 * has made alike, so only the first choice and every SHM_WAY_RETRY-th call
 * need the step. Their times run from each member's entry, its wait for
 * the others included. */
#include "core/clock.h"
#include "shm_algo.h"

_Atomic uint64_t gang__shm_way_taken[2];

#define SHM_WAY_RETRY 128
/* In a member's byte of the agreeing step, beside its proposal: its
 * buffer would go direct. */
#define SHM_WAY_DIRECT_BIT 2u
/* Times of each way before the first choice. */
#define SHM_WAY_TRIALS 3

/* The size class of a call: the kind's first class, then each doubling,
 * the last holding everything above. */
static int way_class(gang__shm_way_kind kind, size_t bytes) {
  size_t first = kind == GANG__SHM_WAY_ALL_REDUCE  ? (size_t)16 << 20
                 : kind == GANG__SHM_WAY_BROADCAST ? (size_t)8 << 10
                                                   : (size_t)16 << 10;
  int k = 0;
  for (size_t b = bytes / first / 2; b != 0 && k < GANG__SHM_WAY_CLASSES - 1;
       b >>= 1)
    k++;
  return k;
}

/* The median of a way's times (ns per MiB), 0 when there are none. */
static double way_typical(const gang__shm_chan *c, gang__shm_way_kind kind,
                          int k, int way) {
  int n = c->way_n[kind][k][way];
  float v[GANG__SHM_WAY_SAMPLES];
  for (int i = 0; i < n; i++)
    v[i] = c->way_ns_mib[kind][k][way][i];
  for (int i = 1; i < n; i++) /* insertion sort of at most 5 */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      float x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return n == 0 ? 0 : v[n / 2];
}

/* This member's proposal; `retry`: the other way on the retry calls. */
static int way_proposal(const gang__shm_chan *c, gang__shm_way_kind kind,
                        size_t bytes, bool retry) {
  int k = way_class(kind, bytes);
  int ns = c->way_n[kind][k][GANG__SHM_WAY_STAGED],
      nc = c->way_n[kind][k][GANG__SHM_WAY_SINGLE_COPY];
  if (ns < SHM_WAY_TRIALS)
    return GANG__SHM_WAY_STAGED;
  if (nc < SHM_WAY_TRIALS)
    return GANG__SHM_WAY_SINGLE_COPY;
  double staged = way_typical(c, kind, k, GANG__SHM_WAY_STAGED),
         single = way_typical(c, kind, k, GANG__SHM_WAY_SINGLE_COPY);
  int best = single < staged ? GANG__SHM_WAY_SINGLE_COPY : GANG__SHM_WAY_STAGED;
  return retry && c->way_calls[kind] % SHM_WAY_RETRY >= SHM_WAY_RETRY - 2
             ? 1 - best
             : best;
}

static gang_status agree(gang__shm_chan *c, gang__shm_way_kind kind,
                         size_t bytes, bool direct, bool retry, int *way) {
  unsigned char mine = (unsigned char)(way_proposal(c, kind, bytes, retry) |
                                       (direct ? SHM_WAY_DIRECT_BIT : 0)),
                theirs;
  uint64_t t;
  GANG_CHECK(gang__shm_ll_step(c, &mine, 1, &t));
  bool single = false, all_direct = true;
  for (int j = 0; j < c->size; j++) {
    gang__shm_ll_gather(&theirs, c, j, t, 1);
    single |= (theirs & 1) == GANG__SHM_WAY_SINGLE_COPY;
    all_direct &= (theirs & SHM_WAY_DIRECT_BIT) != 0;
  }
  *way = all_direct ? GANG__SHM_WAY_DIRECT
         : single   ? GANG__SHM_WAY_SINGLE_COPY
                    : GANG__SHM_WAY_STAGED;
  c->way_wall0 = gang__now_ns();
  return GANG_OK;
}

gang_status gang__shm_way_agree(gang__shm_chan *c, gang__shm_way_kind kind,
                                size_t bytes, bool direct, int *way) {
  return agree(c, kind, bytes, direct, true, way);
}

gang_status gang__shm_way_sparse(gang__shm_chan *c, gang__shm_way_kind kind,
                                 size_t bytes, int *way) {
  int k = way_class(kind, bytes);
  int ns = c->way_n[kind][k][GANG__SHM_WAY_STAGED],
      nc = c->way_n[kind][k][GANG__SHM_WAY_SINGLE_COPY];
  uint32_t phase = c->way_class_calls[kind][k] % SHM_WAY_RETRY;
  uint8_t *agreed = &c->way_agreed[kind][k];
  if (ns < SHM_WAY_TRIALS) {
    *way = GANG__SHM_WAY_STAGED;
  } else if (nc < SHM_WAY_TRIALS) {
    *way = GANG__SHM_WAY_SINGLE_COPY;
  } else if (*agreed == 0 || phase == 0) {
    GANG_CHECK(agree(c, kind, bytes, false, false, way));
    *agreed = (uint8_t)(*way + 1);
  } else if (phase >= SHM_WAY_RETRY - 2) {
    *way = 1 - (*agreed - 1); /* the other way, again */
  } else {
    *way = *agreed - 1;
  }
  c->way_wall0 = gang__now_ns();
  return GANG_OK;
}

void gang__shm_way_learn(gang__shm_chan *c, gang__shm_way_kind kind, int way,
                         size_t bytes) {
  if (way == GANG__SHM_WAY_DIRECT)
    return; /* not measured */
  int64_t wall = gang__now_ns() - c->way_wall0;
  c->way_calls[kind]++;
  atomic_fetch_add_explicit(&gang__shm_way_taken[way], 1, memory_order_relaxed);
  if (bytes == 0)
    return;
  int k = way_class(kind, bytes);
  c->way_class_calls[kind][k]++;
  /* The first call after the other way (or the first at this size:
   * 11-13 ms against 0.5-1.3 for 8 MiB blocks) is not kept. */
  bool after_same = c->way_prev[kind][k] == way + 1;
  c->way_prev[kind][k] = (uint8_t)(way + 1);
  if (!after_same)
    return;
  uint8_t *n = &c->way_n[kind][k][way];
  float *v = c->way_ns_mib[kind][k][way];
  if (*n == GANG__SHM_WAY_SAMPLES) { /* drop the oldest */
    memmove(v, v + 1, (GANG__SHM_WAY_SAMPLES - 1) * sizeof *v);
    (*n)--;
  }
  v[(*n)++] = (float)((double)wall / ((double)bytes / 1048576.0));
}
