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
 * their end. A call's time is its slowest member's: a staged call has no
 * closing step, so a member whose own copies are done early would find
 * staging faster than it is (at 4 members on 2 cores, 256 KiB blocks:
 * 46 us by one member's clock where the call took 59, against single
 * copy's 35). So the next agreeing step of the kind carries each
 * member's time of its last call, and every member keeps the slowest of
 * them as core/way.h says (way 0 is staged, 1 single copy): the books
 * stay alike, and every member's proposal from its own is everyone's. A
 * way's first call pays for what the other left in the caches (single
 * copy of 2 MiB blocks right after staging: 4.1 ms, then 531 us, then
 * about 150; of 512 KiB blocks, run in turn with staging, slower than
 * staging, run alone 1.3x faster), so it is not kept; the other way's two
 * calls in 128 cost at most 2-3 % more time where it is twice as slow.
 * Where every member's buffer is from gang_mem_alloc the staged way
 * stages nothing (its reads are the single copy, from the mapping): the
 * call takes it without a measure.
 *
 * Calls that cannot pay for the agreeing step each time agree only when a
 * choice is due (gang__shm_way_sparse): the trials' ways, the retries'
 * and the way last agreed follow from the calls of the size class, which
 * every member has made alike, so only the first choice and every
 * GANG__WAY_RETRY-th call need the step, where any single copy takes
 * single copy on every member. Their times run from each member's entry,
 * its wait for the others included, and each member keeps its own.
 * Broadcasts below 64 KiB are such: they take 1-6 us, and the step would
 * cost about 0.7 of them and make the root wait for its reader where
 * staging lets it run a call ahead. So is all_gather of more than two
 * members, where members share CPUs (select.c): the step waits for every
 * member to be scheduled (4 members on 2 cores, in place, 256 KiB: 36-63
 * us with a step each call, 32-44 without, single copy forced 32-45),
 * and all_to_all where members outnumber the CPUs. */
#include <stdbool.h>
#include <stdint.h>

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

/* The agreeing step's word from each member: its proposal and direct bit,
 * then its time of the kind's last call in ns (0: none), little end
 * first. */
#define SHM_WAY_WORD 5

static void put_u32(unsigned char *p, int64_t v) {
  uint32_t w = v <= 0 ? 0 : v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(w >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p) {
  uint32_t w = 0;
  for (int i = 0; i < 4; i++)
    w |= (uint32_t)p[i] << (8 * i);
  return w;
}

static gang_status agree(gang__shm_chan *c, gang__shm_way_kind kind,
                         size_t bytes, bool direct, bool retry, int *way) {
  int k = way_class(kind, bytes);
  struct gang__shm_way_last *last = &c->way_last[kind];
  unsigned char mine[SHM_WAY_WORD], theirs[SHM_WAY_WORD];
  mine[0] = (unsigned char)(gang__way_proposal(&c->way[kind], k, retry) |
                            (direct ? SHM_WAY_DIRECT_BIT : 0));
  put_u32(mine + 1, last->wall);
  uint64_t t;
  GANG_CHECK(gang__shm_ll_step(c, mine, sizeof mine, &t));
  bool single = false, all_direct = true, all_timed = true;
  uint32_t slowest = 0;
  for (int j = 0; j < c->size; j++) {
    gang__shm_ll_gather(theirs, c, j, t, sizeof theirs);
    single |= (theirs[0] & 1) == GANG__SHM_WAY_SINGLE_COPY;
    all_direct &= (theirs[0] & SHM_WAY_DIRECT_BIT) != 0;
    uint32_t w = get_u32(theirs + 1);
    all_timed &= w != 0;
    slowest = w > slowest ? w : slowest;
  }
  /* Where times are shared, every member keeps the same slowest time of
   * the last call, so the books stay alike and each member's proposal
   * from its own, now with that call, is everyone's. */
  bool learned = c->way_shared && all_timed;
  if (learned)
    gang__way_learn(&c->way[kind], way_class(kind, last->bytes), last->way,
                    (int64_t)slowest, last->bytes);
  last->wall = 0;
  *way = all_direct ? GANG__SHM_WAY_DIRECT
         : learned  ? gang__way_proposal(&c->way[kind], k, retry)
         : single   ? GANG__SHM_WAY_SINGLE_COPY
                    : GANG__SHM_WAY_STAGED;
  c->way_wall0 = gang__now_ns();
  return GANG_OK;
}

gang_status gang__shm_way_agree(gang__shm_chan *c, gang__shm_way_kind kind,
                                size_t bytes, bool direct, int *way) {
  c->way_shared = true;
  return agree(c, kind, bytes, direct, true, way);
}

gang_status gang__shm_way_sparse(gang__shm_chan *c, gang__shm_way_kind kind,
                                 size_t bytes, int *way) {
  int k = way_class(kind, bytes);
  c->way_shared = false;
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
  int64_t wall = gang__now_ns() - c->way_wall0;
  if (c->way_shared)
    c->way_last[kind] = (struct gang__shm_way_last){
        .wall = wall > 0 ? wall : 1, .bytes = bytes, .way = way};
  else
    gang__way_learn(&c->way[kind], way_class(kind, bytes), way, wall, bytes);
}
