/* The shared-memory transport's parts, shared by its files, which call
 * one way: shm_arena.c uses shm.c, never the reverse.
 *
 *   shm.c        waits and wake-ups (spin, move off a shared CPU, yield,
 *                futex sleep), failure of the arena, single copy
 *   shm_arena.c  setup: host identity, the memfd, agreement on single copy,
 *                room and chunk size; channels of gangs
 *   shm_mem.c    gang_mem_alloc's segments and the mappings of peers'
 *                segments (shm.c uses it, never the reverse)
 *
 * See shm.h for the whole design. */
#ifndef GANG_TRANSPORT_SHM_INTERNAL_H
#define GANG_TRANSPORT_SHM_INTERNAL_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shm.h"

#define ARENA_MAGIC 0x314d4853474e4147ull /* "GANGSHM1" */
#define ARENA_VERSION 3u /* 3: pub names a gang_mem_alloc segment */
#define NCHAN 256
#define CTL_SIZE ((sizeof(gang__shm_ctl) + 4095) / 4096 * 4096)
#define KEY_FREE 0ull
#define KEY_CLAIMING 1ull

/* A channel's directory entry. `use` holds two counts, changed together
 * so that a leaver and a late joiner always agree on who frees the entry:
 * the members attached now (low 32 bits) and those that ever attached
 * (high 32 bits). The entry stays, with its pages as the members left
 * them, until every member has joined and left, so a member that runs
 * ahead -- the root of small broadcasts never waits for its readers -- can
 * attach, publish and leave before a slow one attaches. */
typedef struct dir_entry {
  _Alignas(64) _Atomic uint64_t key;
  _Atomic uint64_t use;
  uint32_t members;
} dir_entry;

#define DIR_USE_ONE 1ull            /* one member attached now */
#define DIR_USE_JOINED (1ull << 32) /* one more member ever attached */
#define DIR_ATTACHED(u) ((uint32_t)(u))
#define DIR_JOINED(u) ((uint32_t)((u) >> 32))

/* The arena's first pages. */
typedef struct arena_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t n; /* local ranks */
  uint64_t chunk;
  uint64_t chan_size;
  uint64_t chan_off;
  uint64_t total;
  int32_t world_rank[GANG_SHM_MAX_LOCAL];
  int32_t pid[GANG_SHM_MAX_LOCAL];
  uint64_t probe[GANG_SHM_MAX_LOCAL]; /* address of a word in each process */
  /* The CPUs each local rank may run on (its affinity at setup). */
  uint64_t cpus[GANG_SHM_MAX_LOCAL][CPU_SETSIZE / 64];
  _Alignas(64) _Atomic int32_t fail_claim;
  _Atomic int32_t failed;
  char fail_text[512];
  dir_entry dir[NCHAN];
} arena_hdr;

struct gang__shm {
  arena_hdr *h;
  size_t map_len;
  int local; /* this rank's index */
  int n;     /* local ranks */
  int world_size;
  int *local_of; /* [world_size]: world rank -> local index or -1 */
  bool cma;
  bool cma_oversubscribed; /* GANG_SHM_CMA=1: single copy even then */
  bool oversubscribed;
  bool crowded; /* more than two local ranks per CPU */
  gang__fabric *fabric;
  uint64_t probe_word; /* read by peers to test single copy */
};

static inline unsigned char *gang__shm_chan_base(const gang__shm *s, int slot) {
  return (unsigned char *)s->h + s->h->chan_off +
         (size_t)slot * s->h->chan_size;
}

#endif
