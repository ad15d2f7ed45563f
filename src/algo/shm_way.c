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
 * their end, and keeps them as core/way.h says: way 0 is staged, 1 single
 * copy. A way's first call pays for what the other left in the caches
 * (single copy of 2 MiB blocks right after staging: 4.1 ms, then 531 us,
 * then about 150; of 512 KiB blocks, run in turn with staging, slower than
 * staging, run alone 1.3x faster), so it is not kept; the other way's two
 * calls in 128 cost at most 2-3 % more time where it is twice as slow. The
 * members agree in one flagged step before the call: any single copy
 * takes single copy on every member. All make the same calls and keep the
 * same times' count, so they try together.
 * Where every member's buffer is from gang_mem_alloc the staged way
 * stages nothing (its reads are the single copy, from the mapping): the
 * call takes it without a measure.
 *
 * Broadcasts below 64 KiB take 1-6 us, and the agreeing step would cost
 * about 0.7 of them and make the root wait for its reader where staging
 * lets it run a call ahead. They agree only when a choice is due
 * (gang__shm_way_sparse): the trials' ways, the retries' and the way
 * last agreed follow from the calls of the size class, which every member
 * has made alike, so only the first choice and every GANG__WAY_RETRY-th call
 * need the step. Their times run from each member's entry, its wait for
 * the others included. */
#include "core/clock.h"
#include "shm_algo.h"

_Atomic uint64_t gang__shm_way_taken[2];

/* In a member's byte of the agreeing step, beside its proposal: its
 * buffer would go direct. */
#define SHM_WAY_DIRECT_BIT 2u

/* The size class of a call of the kind. */
static int way_class(gang__shm_way_kind kind, size_t bytes) {
  size_t first = kind == GANG__SHM_WAY_ALL_REDUCE  ? (size_t)16 << 20
                 : kind == GANG__SHM_WAY_BROADCAST ? (size_t)8 << 10
                                                   : (size_t)16 << 10;
  return gang__way_class(first, bytes);
}

static gang_status agree(gang__shm_chan *c, gang__shm_way_kind kind,
                         size_t bytes, bool direct, bool retry, int *way) {
  int k = way_class(kind, bytes);
  unsigned char mine = (unsigned char)(gang__way_proposal(&c->way[kind], k,
                                                          retry) |
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
  *way = gang__way_due(&c->way[kind], k);
  if (*way < 0) {
    GANG_CHECK(agree(c, kind, bytes, false, false, way));
    gang__way_set_agreed(&c->way[kind], k, *way);
  }
  c->way_wall0 = gang__now_ns();
  return GANG_OK;
}

void gang__shm_way_learn(gang__shm_chan *c, gang__shm_way_kind kind, int way,
                         size_t bytes) {
  if (way == GANG__SHM_WAY_DIRECT)
    return; /* not measured */
  atomic_fetch_add_explicit(&gang__shm_way_taken[way], 1, memory_order_relaxed);
  gang__way_learn(&c->way[kind], way_class(kind, bytes), way,
                  gang__now_ns() - c->way_wall0, bytes);
}
