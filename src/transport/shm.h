/* The shared-memory transport: one arena per world per host, in which each
 * gang whose ranks all sit on this host gets a channel. A channel is, per
 * member, a control page (a ring of step lines, each with a step counter,
 * the call's signature and a few bytes of inline data; a small-message
 * slot per line; buffer addresses published for single copy) and two
 * staging buffers. Collectives over a channel (src/algo/shm_*.c) are
 * sequences of steps: a member writes its data for the step, publishes the
 * step number, waits until the members it reads from have published it,
 * then reads. Every member publishes exactly once per step, so after the
 * same sequence of collectives all members agree on the step count without
 * talking.
 *
 * Rules that keep reuse safe, which every algorithm keeps:
 *   1. a step that writes a staging buffer (parity t&1) or the published
 *      addresses begins once every member has published t-1
 *      (gang__shm_begin);
 *   1'. a step that writes nothing but its line or small slot begins once
 *      every member has published t - GANG_SHM_LINES + 1
 *      (gang__shm_begin_line), so small steps need not run in lockstep;
 *   1''. a step that writes only its slot of a staging buffer (an eighth
 *      of the buffer of t's parity, slot (t >> 1) & 7) begins once every
 *      member has published t - GANG_SHM_LINES + 1 and has read the last
 *      step of t's parity that may have written the whole buffer
 *      (gang__shm_begin_slot): so a root of mid-sized broadcasts runs as
 *      far ahead as a small one;
 *   2. a member finishes reading step t's data before it publishes t+1.
 * So members are never GANG_SHM_LINES or more steps apart, and a step's
 * line holds that step while anyone waits for it.
 *
 * Waiting spins briefly, then sleeps on a futex in the shared page (so 16
 * ranks on 2 cores progress); while asleep it wakes every few milliseconds
 * to look at the fabric (a dead peer's TCP connection ends, which is how a
 * kill -9 is noticed), the deadline and the arena's failure word, which any
 * local rank sets (and rings every bell) when its fabric fails.
 *
 * The arena is a memfd made by the host's lowest world rank; the others
 * open it through /proc/<pid>/fd/<n>, so it has no name in any filesystem
 * and nothing is left behind by a crash. docs/shm.md has the whole story. */
#ifndef GANG_TRANSPORT_SHM_H
#define GANG_TRANSPORT_SHM_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/way.h"
#include "gang/status.h"
#include "gang/store.h"
#include "transport/fabric.h"

/* Most ranks of one world on one host that share an arena. */
#define GANG_SHM_MAX_LOCAL 128
/* Kinds of call that measure staged chunks against single copy
 * (src/algo/shm_way.c). */
#define GANG__SHM_WAY_KINDS 6
/* Step lines per member, a ring: step t uses line GANG_SHM_LINE(t). A
 * step that writes nothing but its line or its small slot of that step
 * (a barrier, a small broadcast or all_reduce) may run that many steps minus
 * one ahead of the slowest member, so a root of small broadcasts is not held to
 * every reader's pace. */
#define GANG_SHM_LINES 16
#define GANG_SHM_LINE(t) ((t) & (GANG_SHM_LINES - 1))
/* Bytes of inline data in a step line. */
#define GANG_SHM_INLINE 40
/* Bytes of a small-message slot: each member has one per step line, so a
 * message up to this size moves with begin_line's slack, like inline
 * data, at the cost of a second cache line per 64 bytes. */
#define GANG_SHM_SMALL 1024

typedef struct gang__shm gang__shm;

/* A member's step line: one cache line. seq is the last step it published
 * on this line; sig the signature of the collective that step belongs to,
 * so members that disagree on the call fail instead of reading each
 * other's bytes wrongly; opseq that collective's number in the gang, so
 * an error names how far behind a member is in the user's calls. */
typedef struct gang__shm_line {
  _Alignas(64) _Atomic uint64_t seq;
  uint64_t sig;
  unsigned char data[GANG_SHM_INLINE];
  uint64_t opseq;
} gang__shm_line;

_Static_assert(sizeof(gang__shm_line) == 64, "a step line is a cache line");

/* Members asleep waiting for a member count themselves in its sleepers
 * and sleep on its bell (a futex). cpu is the CPU the member last noted
 * it ran on, plus one (0: not yet known), and tid the thread that noted
 * it, so that a member waiting for it can tell when spinning would only
 * keep it off the CPU it needs (gang__shm_wait_slow). */
typedef struct gang__shm_wake {
  _Alignas(64) _Atomic uint32_t sleepers;
  _Atomic uint32_t bell;
  _Atomic int32_t cpu;
  _Atomic int32_t tid; /* the thread that last noted it (0: none yet) */
} gang__shm_wake;

/* A collective's signature: kind, dtype, reduce op, root and bytes (40
 * bits), decoded for error messages by gang__shm_mismatch. */
static inline uint64_t gang__shm_sig(int kind, int dtype, int op, int root,
                                     uint64_t bytes) {
  return (uint64_t)(kind & 31) << 59 | (uint64_t)(dtype & 31) << 54 |
         (uint64_t)(op & 7) << 51 | (uint64_t)(root & 2047) << 40 |
         (bytes & ((1ull << 40) - 1));
}

/* A segment of gang_mem_alloc (shm_mem.c) as its owner publishes it: the
 * memfd's number and inode, and where the owner mapped it (head page
 * included). len 0: none. */
typedef struct gang__mem_ref {
  uint64_t fd, ino, base, len;
} gang__mem_ref;

/* What a member publishes for single-copy readers (process_vm_readv, or
 * loads from `seg` when `in` lies in a gang_mem_alloc segment). */
typedef struct gang__shm_pub {
  _Alignas(64) uint64_t in; /* address of its input (or in-place buffer) */
  uint64_t out;             /* address of its output */
  uint64_t bytes;           /* size of its input */
  gang__mem_ref seg;        /* the segment `in` lies in, or len 0 */
} gang__shm_pub;

/* A member's control page. `offs` holds per-destination byte offsets for
 * all_to_all_v (offs[q+1] - offs[q] bytes go to member q). */
typedef struct gang__shm_ctl {
  gang__shm_line line[GANG_SHM_LINES];
  gang__shm_wake wake;
  gang__shm_pub pub;
  _Alignas(64) uint64_t offs[GANG_SHM_MAX_LOCAL + 1];
  _Alignas(64) unsigned char small[GANG_SHM_LINES][GANG_SHM_SMALL];
} gang__shm_ctl;

/* One gang's view of its channel. */
typedef struct gang__shm_chan {
  gang__shm *arena;
  int slot;        /* directory entry */
  int rank, size;  /* in the gang */
  uint64_t step;   /* steps this member has published */
  uint64_t synced; /* every member is known to have published this */
  size_t chunk;    /* bytes per staging buffer */
  /* Rule 1'': the last step this member knows wrote no staging buffer
   * (slotted, or lines only) and the last that may have (0: none). */
  uint64_t lean_last, bulk_last;
  bool cma;                /* single-copy reads allowed */
  bool oversubscribed;     /* more local ranks than CPUs: spin little */
  bool cma_oversubscribed; /* ... and single copy anyway (GANG_SHM_CMA=1) */
  bool crowded;            /* more than two local ranks per CPU */
  gang__shm_ctl **ctl;     /* [size]: each member's control page */
  unsigned char **stage;   /* [size]: each member's staging (2 * chunk) */
  pid_t *pid;              /* [size]: each member's process */
  int *world;              /* [size]: each member's world (fabric) rank */
  /* This host's part of a gang over several hosts (pg_hier.c): members are
   * numbered per host, so errors name them by world rank. */
  bool host_part;
  gang__fabric *fabric; /* watched while sleeping */
  int64_t deadline;     /* of the running collective */
  int64_t next_poke;    /* when a sleeping wait next pokes the fabric */
  int64_t next_move;    /* when a wait may next move off a shared CPU */
  int short_spins;      /* waits left that spin briefly (shm.c) */
  /* How two members choose between staged chunks and single copy where
   * they measure both (src/algo/shm_way.c): the clock when all arrived,
   * and per kind of call what this member has timed (core/way.h). */
  int64_t way_wall0;
  gang__way_book way[GANG__SHM_WAY_KINDS];
  /* Per kind, this member's time of its last call, kept at the next
   * agreeing step as every member's slowest (wall 0: none), where every
   * call agrees (way_shared); sparse calls keep their own at once. */
  bool way_shared;
  struct gang__shm_way_last {
    int64_t wall;
    size_t bytes;
    int way;
  } way_last[GANG__SHM_WAY_KINDS];
  int64_t timeout_ms; /* of the running collective; with deadline 0, the
                         first wait that sleeps sets the deadline (the
                         spin before it, under 1 ms, is not counted) */
  const char *op;     /* name of the running collective, for errors */
  uint64_t sig;       /* its signature (gang__shm_sig) */
  const char *(*kind_name)(int kind); /* names a signature's kind */
  uint64_t opseq;                     /* its sequence number in the gang */
  unsigned char *scratch; /* private, grown on demand, never shrunk */
  size_t scratch_cap;
} gang__shm_chan;

/* Joins (or makes) the arena of this host for a world: exchanges host
 * identities through `store` (GANG_HOST_ID overrides the boot id, host name
 * and network namespace), and when two or more world ranks share this host
 * and GANG_SHM_DISABLE is not set, maps the arena. Collective over the
 * world. *out stays NULL (GANG_OK) when this rank has no local peer or
 * shared memory cannot be used (logged at INFO with the reason); hosts[]
 * (world size, caller's memory) receives each world rank's host: the
 * lowest world rank on that host (so hosts[i] == i for a host's first
 * rank); *everywhere says whether every rank of the
 * world either has an arena or is alone on its host (the condition for
 * hierarchical collectives, the same answer on every rank); *kernel (may
 * be NULL) how many world ranks run on this kernel -- the same boot,
 * whatever their host names and namespaces (containers, or the network
 * namespaces of a cluster in a box, hosts GANG_HOST_ID makes), so they
 * share its CPUs. */
gang_status gang__shm_create(gang_store *store, int rank, int size,
                             gang__fabric *fabric, int64_t deadline, int *hosts,
                             int *kernel, gang__shm **out, bool *everywhere);

/* Whether the arena's local ranks outnumber the CPUs they may run on
 * between them (agreed by every local rank at setup). */
bool gang__shm_oversubscribed(const gang__shm *s);

/* Unmaps the arena. Channels must be detached. */
void gang__shm_destroy(gang__shm *s);

/* World rank -> index in the arena, or -1 when not on this host. */
int gang__shm_local_index(const gang__shm *s, int world_rank);

/* Attaches the channel of a gang whose members (world ranks `world[0..n)`,
 * all on this host) share the context id `ctx`; `rank` is this member's
 * gang rank. Local: members find the same channel by (ctx, world[0]). */
gang_status gang__shm_chan_attach(gang__shm *s, uint64_t ctx, const int *world,
                                  int n, int rank, gang__shm_chan **out);
void gang__shm_chan_detach(gang__shm_chan *c);

/* Fails the arena (every local rank's waits end with st). Called from the
 * fabric's failure hook. */
void gang__shm_fail(gang__shm *s, gang_status st, const char *reason);

/* ---- Steps (used by the algorithms) ---- */

/* One pause of a spinning wait. */
static inline void gang__shm_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void gang__shm_ring(gang__shm_wake *w);

/* Notes in this member's wake line the CPU it runs on and the thread that
 * waits (stores only what changed) and returns the CPU. */
int gang__shm_note_cpu(gang__shm_chan *c);

/* Whether `member` last noted CPU `cpu`: then, if it has not published
 * what we wait for, it is most likely runnable on our CPU and waiting for
 * us to give it up. */
static inline bool gang__shm_shares_cpu(const gang__shm_chan *c, int member,
                                        int cpu) {
  return cpu >= 0 && atomic_load_explicit(&c->ctl[member]->wake.cpu,
                                          memory_order_relaxed) == cpu + 1;
}

/* Publishes step `seq` (release) and wakes sleepers. */
static inline void gang__shm_publish(gang__shm_chan *c, uint64_t seq) {
  gang__shm_ctl *me = c->ctl[c->rank];
  gang__shm_line *l = &me->line[GANG_SHM_LINE(seq)];
  l->sig = c->sig;
  l->opseq = c->opseq;
  atomic_store_explicit(&l->seq, seq, memory_order_seq_cst);
  if (atomic_load_explicit(&me->wake.sleepers, memory_order_seq_cst) != 0)
    gang__shm_ring(&me->wake);
}

gang_status gang__shm_wait_slow(gang__shm_chan *c, int member, uint64_t seq);
gang_status gang__shm_mismatch(gang__shm_chan *c, int member, uint64_t seq);

/* Waits until `member` has published `seq` (acquire). */
static inline gang_status gang__shm_wait_seq(gang__shm_chan *c, int member,
                                             uint64_t seq) {
  if (atomic_load_explicit(&c->ctl[member]->line[GANG_SHM_LINE(seq)].seq,
                           memory_order_acquire) >= seq)
    return GANG_OK;
  return gang__shm_wait_slow(c, member, seq);
}

/* Waits until `member` has published `seq`, a step of the running
 * collective, and checks that its step belongs to the same call as ours. */
static inline gang_status gang__shm_wait(gang__shm_chan *c, int member,
                                         uint64_t seq) {
  gang_status st = gang__shm_wait_seq(c, member, seq);
  if (st == GANG_OK && c->ctl[member]->line[GANG_SHM_LINE(seq)].sig != c->sig)
    return gang__shm_mismatch(c, member, seq);
  return st;
}

/* Waits until every member has published `seq`; with `same_call`, also
 * that each published it for the running collective (its signature). */
static inline gang_status
gang__shm_all_published(gang__shm_chan *c, uint64_t seq, bool same_call) {
  if (c->synced >= seq)
    return GANG_OK;
  for (int m = 0; m < c->size; m++) {
    if (m == c->rank)
      continue;
    gang_status st =
        same_call ? gang__shm_wait(c, m, seq) : gang__shm_wait_seq(c, m, seq);
    if (st != GANG_OK)
      return st;
  }
  c->synced = seq;
  return GANG_OK;
}

/* Waits until every member has published `seq`, a step of the running
 * collective. */
static inline gang_status gang__shm_wait_all(gang__shm_chan *c, uint64_t seq) {
  return gang__shm_all_published(c, seq, true);
}

/* Waits until every member has published `seq`, whatever collective it
 * belongs to (no signature check). */
static inline gang_status gang__shm_reach_all(gang__shm_chan *c, uint64_t seq) {
  return gang__shm_all_published(c, seq, false);
}

/* Starts step t: returns once this member may write its buffers of t's
 * parity (rule 1: every member has published t-1, which may be a step of
 * the previous collective). */
static inline gang_status gang__shm_begin(gang__shm_chan *c, uint64_t t) {
  return gang__shm_reach_all(c, t - 1);
}

/* Counts step t as one that writes no whole staging buffer; every step
 * between the last such and t may have. */
static inline void gang__shm_note_lean(gang__shm_chan *c, uint64_t t) {
  if (c->lean_last + 1 != t)
    c->bulk_last = t - 1;
  c->lean_last = t;
}

/* Starts step t that writes nothing but this member's step line or small
 * slot: those are reused every GANG_SHM_LINES steps, so every member must
 * have published t - GANG_SHM_LINES + 1. */
static inline gang_status gang__shm_begin_line(gang__shm_chan *c, uint64_t t) {
  gang__shm_note_lean(c, t);
  return gang__shm_reach_all(c,
                             t < GANG_SHM_LINES ? 0 : t - GANG_SHM_LINES + 1);
}

/* Slots per staging buffer for slotted steps (rule 1''): a step's data
 * fits one when it is at most chunk / GANG_SHM_SLOTS bytes. */
#define GANG_SHM_SLOTS 8
/* A slot comes back with the step line: every GANG_SHM_LINES steps. */
_Static_assert(2 * GANG_SHM_SLOTS == GANG_SHM_LINES,
               "slots per buffer must cycle with the step lines");

/* Member's slot of slotted step t. */
static inline unsigned char *gang__shm_slot_of(gang__shm_chan *c, int member,
                                               uint64_t t) {
  return c->stage[member] + (t & 1) * c->chunk +
         ((t >> 1) & (GANG_SHM_SLOTS - 1)) * (c->chunk / GANG_SHM_SLOTS);
}

/* Starts slotted step t (rule 1''). Step b, the last that may have
 * written a whole buffer: if it has t's parity every member must have
 * published b + 1, after reading it; if not, b, after reading b - 1.
 * Step t - GANG_SHM_LINES used the same slot and line. */
static inline gang_status gang__shm_begin_slot(gang__shm_chan *c, uint64_t t) {
  gang__shm_note_lean(c, t);
  uint64_t b = c->bulk_last,
           need = t < GANG_SHM_LINES ? 0 : t - GANG_SHM_LINES + 1;
  if (b != 0 && need < b + ((b & 1) == (t & 1)))
    need = b + ((b & 1) == (t & 1));
  return gang__shm_reach_all(c, need);
}

/* Where member's data of step t lives when `bytes` fits a step line or a
 * small slot (bytes <= GANG_SHM_SMALL). */
static inline unsigned char *gang__shm_slot(gang__shm_chan *c, int member,
                                            uint64_t t, size_t bytes) {
  gang__shm_ctl *x = c->ctl[member];
  return bytes <= GANG_SHM_INLINE ? x->line[GANG_SHM_LINE(t)].data
                                  : x->small[GANG_SHM_LINE(t)];
}

/* Private scratch of at least `bytes` (kept for the channel's life). */
gang_status gang__shm_scratch(gang__shm_chan *c, size_t bytes, void **out);

/* Member's staging buffer of step t's parity. */
static inline unsigned char *gang__shm_buf(gang__shm_chan *c, int member,
                                           uint64_t t) {
  return c->stage[member] + (t & 1) * c->chunk;
}

/* Copies `len` bytes at address `remote` of member `member` into `dst`
 * (loads from the mapping when the member's published input lies in a
 * gang_mem_alloc segment that holds them, else process_vm_readv). Fails with
 * GANG_SYSTEM (and disables single copy for this channel) when the kernel
 * refuses; callers then fall back. */
gang_status gang__shm_read_remote(gang__shm_chan *c, int member, void *dst,
                                  uint64_t remote, size_t len);

/* Copies `len` bytes from `src` to address `remote` of member `member`
 * (process_vm_writev); errors like gang__shm_read_remote. */
gang_status gang__shm_write_remote(gang__shm_chan *c, int member,
                                   uint64_t remote, const void *src,
                                   size_t len);

/* Publishes `p` as this member's input for single-copy readers, with the
 * gang_mem_alloc segment it lies in, if any. */
void gang__shm_pub_in(gang__shm_chan *c, const void *p);

/* ---- Direct steps: staged algorithms that skip the staging ----
 *
 * A member whose buffer lies in a gang_mem_alloc segment need not stage
 * it: in a staged step it writes, in its step line's inline bytes, where
 * the step's data is in its own address space and the segment, and the
 * others read from their mapping of that segment (process_vm_readv where
 * they cannot map it). Every member sees every member's lines, so all
 * know alike whether any step of the call was direct: then the call ends
 * with one more step, published after the last read, which keeps each
 * owner's buffer in place until every member has read it. */
typedef struct gang__shm_direct {
  uint64_t addr;     /* the data of the step in its owner's address space */
  gang__mem_ref seg; /* len 0: staged */
} gang__shm_direct;

_Static_assert(sizeof(gang__shm_direct) <= GANG_SHM_INLINE,
               "a direct step's descriptor fits the line's inline bytes");

/* Whether [p, p + len) of this process lies in one gang_mem_alloc
 * segment, which goes to *seg. */
bool gang__shm_direct_mine(const void *p, size_t len, gang__mem_ref *seg);

/* Step t (begun, not yet published) is direct from `base` in `seg`, or,
 * with seg NULL, staged. */
void gang__shm_set_direct(gang__shm_chan *c, uint64_t t, const void *base,
                          const gang__mem_ref *seg);

/* Member's step t (published), into *d: true when direct. */
bool gang__shm_get_direct(gang__shm_chan *c, int member, uint64_t t,
                          gang__shm_direct *d);

/* len bytes at `off` from a direct step's base: *out points into the
 * mapped segment (hold *token until gang__mem_peer_put), or to `spare`
 * (len bytes, filled by process_vm_readv; *token NULL). */
gang_status gang__shm_peek_direct(gang__shm_chan *c, int member,
                                  const gang__shm_direct *d, size_t off,
                                  size_t len, void *spare, const void **out,
                                  void **token);

/* ---- gang_mem_alloc's segments (shm_mem.c) ---- */

/* The segment of this process that holds `p`, into *ref. */
bool gang__mem_find(const void *p, gang__mem_ref *ref);

/* The segment `ref` of process `pid` mapped here (its start), or NULL when
 * it cannot be (no permission, gone): the caller then copies with
 * process_vm_readv. Hold it with *token until gang__mem_peer_put. */
unsigned char *gang__mem_peer_get(pid_t pid, const gang__mem_ref *ref,
                                  void **token);
void gang__mem_peer_put(void *token);

/* Peers' segments mapped in this process after dropping those freed or of
 * exited owners (tests). */
int gang__mem_peer_mapped(void);

/* Single copies made with loads and stores from mapped segments (tests). */
extern _Atomic uint64_t gang__mem_copies;

/* Calls a measured way ran (src/algo/shm_way.c), staged then single copy
 * (tests). */
extern _Atomic uint64_t gang__shm_way_taken[2];

/* The arena's failure, GANG_OK while healthy. */
gang_status gang__shm_failed(const gang__shm *s);

#endif
