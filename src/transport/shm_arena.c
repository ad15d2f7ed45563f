/* The shared-memory arena of a world on one host: setup (host identity,
 * the memfd, agreement on single copy, room and chunk size) and channels
 * for gangs. The waits are in shm.c. See shm.h. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/cpus.h"
#include "core/error.h"
#include "core/log.h"
#include "core/mix.h"
#include "shm_internal.h"

/* The fabric failed: every local rank must stop waiting. */
static void on_fabric_fail(void *arg, gang_status st, const char *reason) {
  gang__shm_fail(arg, st, reason);
}

/* ---- Setup --------------------------------------------------------------- */

static void read_line(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *fp = fopen(path, "re");
  if (fp == NULL)
    return;
  if (fgets(out, (int)cap, fp) == NULL)
    out[0] = '\0';
  fclose(fp);
  out[strcspn(out, "\n")] = '\0';
}

static unsigned long long ns_inode(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (unsigned long long)sb.st_ino : 0ull;
}

/* What makes two ranks able to share memory: the same kernel boot, host
 * name, network namespace (where the TCP addresses live) and pid namespace
 * (process_vm_readv and /proc/<pid> name processes by pid). */
static void host_identity(char *out, size_t cap) {
  const char *forced = gang__setting_str(GANG_SETTING_HOST_ID);
  char boot[64], host[256];
  read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  if (forced[0] != '\0') { /* the boot still first: see same_kernel */
    snprintf(out, cap, "%s|forced:%s", boot, forced);
    return;
  }
  if (gethostname(host, sizeof host) != 0)
    host[0] = '\0';
  host[sizeof host - 1] = '\0';
  snprintf(out, cap, "%s|%s|net:%llu|pid:%llu", boot, host,
           ns_inode("/proc/self/ns/net"), ns_inode("/proc/self/ns/pid"));
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* This process's affinity as CPU_SETSIZE bits (all set when unknown). */
static void note_cpus(uint64_t *bits) {
  cpu_set_t set;
  bool known = sched_getaffinity(0, sizeof set, &set) == 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (!known || CPU_ISSET(c, &set))
      bits[c / 64] |= 1ull << (c % 64);
}

/* CPUs that at least one of the n local ranks may run on. */
static int cpus_between(const arena_hdr *h, int n) {
  int count = 0;
  for (int w = 0; w < CPU_SETSIZE / 64; w++) {
    uint64_t any = 0;
    for (int i = 0; i < n; i++)
      any |= h->cpus[i][w];
    count += __builtin_popcountll(any);
  }
  return count;
}

/* Staging bytes per buffer: large enough to amortise a step's
 * synchronisation, small enough that every member's two buffers stay in
 * cache. Two members take 1 MiB: on the 2-core machine of the figures
 * (AMD EPYC, 1 MiB of L2 per core) a reader of data that its writer's L2
 * still holds got 7-8 GB/s, and of data that had left it 20+, so
 * 256 KiB chunks made a 2-rank all_reduce of 1 MiB take 137-169 us
 * against 50-56 with 1 MiB chunks, and 64 MiB 10.6-10.9 ms against
 * 7.6-7.8 (A/B alternated, in the machine's fast state; in its slow state
 * 1 MiB chunks were 0-25 % faster; 512 KiB and 2-4 MiB were in between or
 * no better). With more ranks than CPUs a step costs context switches, not
 * cache misses: fewer, larger steps win (8 ranks on 2 cores, 256 KiB
 * all_reduce: 1.6 ms with 32 KiB chunks, 0.4-0.5 ms with 128-512 KiB; 4
 * ranks, 1 MiB: 170-214 us with 1 MiB chunks against 260-365 with
 * 256 KiB). GANG_SHM_CHUNK overrides. */
static gang_status choose_chunk(int n, bool oversubscribed, size_t *out) {
  int64_t forced = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_SHM_CHUNK, &forced));
  size_t c;
  if (forced > 0)
    c = (size_t)forced;
  else
    c = n <= 2   ? 1024 * 1024
        : n <= 4 ? 128 * 1024
        : n <= 8 ? 32 * 1024
                 : 16 * 1024;
  if (forced <= 0 && oversubscribed)
    c = 1024 * 1024;
  if (c < 4096)
    c = 4096;
  if (c > 64 * 1024 * 1024)
    c = 64 * 1024 * 1024;
  *out = round_up(c, 4096);
  return GANG_OK;
}

/* GANG_SHM_CMA: auto (allowed where it pays), 1 (allowed wherever the
 * probe passes, forced) or 0 (never). */
static gang_status cma_setting(bool *allowed, bool *forced) {
  const char *v = gang__setting_str(GANG_SETTING_SHM_CMA);
  *allowed = true;
  *forced = false;
  if (strcasecmp(v, "auto") == 0 || *v == '\0')
    return GANG_OK;
  bool b;
  if (gang__parse_bool("GANG_SHM_CMA", v, &b) != GANG_OK)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "GANG_SHM_CMA='%s': expected auto, 1 (on) or 0 (off)",
                       v);
  *allowed = b;
  *forced = b;
  return GANG_OK;
}

/* Gets the n keys "<prefix>/<world rank>" of the local ranks. values[i] is
 * freed by the caller with gang_store_free. */
static gang_status get_local_keys(gang_store *st, const char *prefix,
                                  const int *ranks, int n, void **values,
                                  size_t *lens) {
  char **keys = calloc((size_t)n, sizeof *keys);
  if (keys == NULL)
    return gang__error(GANG_NO_MEMORY, "shm: out of memory");
  gang_status rc = GANG_OK;
  for (int i = 0; i < n && rc == GANG_OK; i++) {
    keys[i] = malloc(64);
    if (keys[i] == NULL)
      rc = gang__error(GANG_NO_MEMORY, "shm: out of memory");
    else
      snprintf(keys[i], 64, "%s/%d", prefix, ranks[i]);
  }
  if (rc == GANG_OK)
    rc = gang_store_multi_get(st, (const char *const *)keys, (size_t)n, values,
                              lens);
  for (int i = 0; i < n; i++)
    free(keys[i]);
  free(keys);
  return rc;
}

static gang_status set_key(gang_store *st, const char *prefix, int rank,
                           const char *value) {
  char key[64];
  snprintf(key, sizeof key, "%s/%d", prefix, rank);
  return gang_store_set(st, key, value, strlen(value));
}

/* Every local rank says `mine` (up to 4 flags, one hex digit); *all gets the
 * flags every one of them set. One store round for several yes/no
 * questions. */
static gang_status agree_flags(gang_store *st, const char *prefix, int rank,
                               const int *ranks, int n, unsigned mine,
                               unsigned *all) {
  static const char hex[] = "0123456789abcdef";
  char digit[2] = {hex[mine & 15], '\0'};
  GANG_CHECK(set_key(st, prefix, rank, digit));
  void **v = calloc((size_t)n, sizeof *v);
  size_t *l = calloc((size_t)n, sizeof *l);
  if (v == NULL || l == NULL) {
    free(v);
    free(l);
    return gang__error(GANG_NO_MEMORY, "shm: out of memory");
  }
  gang_status rc = get_local_keys(st, prefix, ranks, n, v, l);
  if (rc == GANG_OK) {
    *all = 15;
    for (int i = 0; i < n; i++) {
      char c = l[i] == 1 ? *(char *)v[i] : '0';
      const char *at = c != '\0' ? strchr(hex, c) : NULL;
      *all &= at != NULL ? (unsigned)(at - hex) : 0u;
      gang_store_free(v[i]);
    }
  }
  free(v);
  free(l);
  return rc;
}

/* Every local rank says `mine`; true when all said yes. */
static gang_status agree(gang_store *st, const char *prefix, int rank,
                         const int *ranks, int n, bool mine, bool *all) {
  unsigned got = 0;
  GANG_CHECK(agree_flags(st, prefix, rank, ranks, n, mine ? 1u : 0u, &got));
  *all = got & 1u;
  return GANG_OK;
}

/* The leader makes the memfd and lays out the arena. */
static gang_status arena_make(gang__shm *s, size_t chunk, int *fd_out) {
  size_t hdr = round_up(sizeof(arena_hdr), 4096);
  size_t chan = (size_t)s->n * (CTL_SIZE + 2 * chunk);
  size_t total = hdr + (size_t)NCHAN * chan;
  int fd = memfd_create("gang-shm", MFD_CLOEXEC);
  if (fd < 0)
    return gang__error_errno(GANG_SYSTEM, errno, "shm: memfd_create");
  if (ftruncate(fd, (off_t)total) != 0) {
    int e = errno;
    close(fd);
    return gang__error_errno(GANG_SYSTEM, e,
                             "shm: sizing the arena to %zu "
                             "bytes",
                             total);
  }
  void *p = mmap(NULL, total, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return gang__error_errno(GANG_SYSTEM, e, "shm: mapping the arena");
  }
  s->h = p;
  s->map_len = total;
  s->h->version = ARENA_VERSION;
  s->h->n = (uint32_t)s->n;
  s->h->chunk = chunk;
  s->h->chan_size = chan;
  s->h->chan_off = hdr;
  s->h->total = total;
  atomic_store(&s->h->failed, 0);
  atomic_store(&s->h->fail_claim, 0);
  atomic_store_explicit((_Atomic uint64_t *)&s->h->magic, ARENA_MAGIC,
                        memory_order_release);
  *fd_out = fd;
  return GANG_OK;
}

/* A follower opens the leader's memfd through /proc. */
static gang_status arena_open(gang__shm *s, const char *where) {
  int pid = 0, fd = -1;
  if (sscanf(where, "%d %d", &pid, &fd) != 2)
    return gang__error(GANG_PROTOCOL, "shm: bad arena address '%s'", where);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  int my = open(path, O_RDWR | O_CLOEXEC);
  if (my < 0)
    return gang__error_errno(GANG_SYSTEM, errno, "shm: opening %s", path);
  struct stat sb;
  if (fstat(my, &sb) != 0 || sb.st_size < (off_t)sizeof(arena_hdr)) {
    close(my);
    return gang__error(GANG_PROTOCOL, "shm: %s is not an arena", path);
  }
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_NORESERVE, my, 0);
  close(my);
  if (p == MAP_FAILED)
    return gang__error_errno(GANG_SYSTEM, errno, "shm: mapping %s", path);
  s->h = p;
  s->map_len = (size_t)sb.st_size;
  if (atomic_load_explicit((_Atomic uint64_t *)&s->h->magic,
                           memory_order_acquire) != ARENA_MAGIC ||
      s->h->version != ARENA_VERSION || s->h->n != (uint32_t)s->n ||
      s->h->total != s->map_len)
    return gang__error(GANG_PROTOCOL, "shm: %s has another layout", path);
  return GANG_OK;
}

/* Can this process read every other local rank's memory? If not, says
 * why in why[cap]. */
static bool cma_probe(gang__shm *s, char *why, size_t cap) {
  for (int i = 0; i < s->n; i++) {
    if (i == s->local)
      continue;
    uint64_t v = 0;
    struct iovec l = {&v, sizeof v},
                 r = {(void *)(uintptr_t)s->h->probe[i], sizeof v};
    ssize_t got = process_vm_readv(s->h->pid[i], &l, 1, &r, 1, 0);
    if (got != (ssize_t)sizeof v || v != ARENA_MAGIC) {
      snprintf(why, cap, "process_vm_readv from local rank %d (pid %d) %s", i,
               s->h->pid[i], got < 0 ? strerror(errno) : "read wrong data");
      GANG_INFO(SHM, "single copy off: %s", why);
      return false;
    }
  }
  return true;
}

/* Whether two host identities (host_identity, after the "flag|") name
 * the same kernel boot: their boot ids, before the first '|', agree. */
static bool same_kernel(const char *a, const char *b) {
  size_t n = strcspn(a, "|");
  return n > 0 && strncmp(a, b, n) == 0 && b[n] == '|';
}

static gang_status create_local(gang_store *store, int rank, int size,
                                gang__fabric *fabric, int *hosts, int *kernel,
                                gang__shm **out) {
  *out = NULL;
  *kernel = 1;
  for (int i = 0; i < size; i++)
    hosts[i] = 0;
  if (size == 1)
    return GANG_OK;
  /* Host identities, and whether each rank may use shared memory at all. */
  int64_t disable = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_SHM_DISABLE, &disable));
  /* Read before the first key is set, so a bad value fails this rank at
   * once, before it takes part in any agreement (the others then fail at
   * their store timeout, waiting for its keys). */
  bool want_cma = true, force_cma = false;
  GANG_CHECK(cma_setting(&want_cma, &force_cma));
  char id[512], mine[600];
  host_identity(id, sizeof id);
  snprintf(mine, sizeof mine, "%d|%s", disable ? 0 : 1, id);
  GANG_CHECK(set_key(store, "shm/host", rank, mine));
  int *all = calloc((size_t)size, sizeof *all);
  void **v = calloc((size_t)size, sizeof *v);
  size_t *l = calloc((size_t)size, sizeof *l);
  gang__shm *s = calloc(1, sizeof *s);
  int *local_of = malloc(sizeof *local_of * (size_t)size);
  int fd = -1;
  gang_status st = GANG_OK;
  if (all == NULL || v == NULL || l == NULL || s == NULL || local_of == NULL) {
    st = gang__error(GANG_NO_MEMORY, "shm: out of memory");
    goto done;
  }
  for (int i = 0; i < size; i++)
    all[i] = i;
  GANG_CHECK_GOTO(get_local_keys(store, "shm/host", all, size, v, l), st, done);
  /* Host index: first occurrence order of each identity (minus the flag). */
  bool enabled = true;
  int n = 0;
  for (int i = 0; i < size; i++) {
    const char *hi = (const char *)v[i] + 2 * (l[i] >= 2);
    hosts[i] = i;
    for (int j = 0; j < i; j++)
      if (strcmp((const char *)v[j] + 2 * (l[j] >= 2), hi) == 0) {
        hosts[i] = hosts[j];
        break;
      }
  }
  *kernel = 0;
  for (int i = 0; i < size; i++)
    *kernel += same_kernel((const char *)v[i] + 2 * (l[i] >= 2),
                           (const char *)v[rank] + 2 * (l[rank] >= 2));
  for (int i = 0; i < size; i++) {
    local_of[i] = -1;
    if (hosts[i] != hosts[rank])
      continue;
    if (((char *)v[i])[0] != '1')
      enabled = false;
    local_of[i] = n;
    all[n++] = i; /* all[0..n): the local world ranks, ascending */
  }
  if (n < 2)
    goto done;
  if (!enabled) {
    GANG_INFO(SHM, "shared memory off: GANG_SHM_DISABLE is set on a rank of "
                   "this host; same-host ranks use TCP");
    goto done;
  }
  if (n > GANG_SHM_MAX_LOCAL) {
    GANG_WARN(SHM,
              "shared memory off: %d ranks on this host, more than the "
              "%d an arena serves; they use TCP",
              n, GANG_SHM_MAX_LOCAL);
    goto done;
  }
  s->local = local_of[rank];
  s->n = n;
  s->world_size = size;
  s->fabric = fabric;
  s->probe_word = ARENA_MAGIC;
  size_t chunk;
  GANG_CHECK_GOTO(choose_chunk(n, n > gang__cpus_available(), &chunk), st,
                  done);
  /* The leader makes the arena; the others open it. Everyone says whether
   * it worked before anyone relies on it. */
  bool mapped;
  char where[64];
  if (s->local == 0) {
    gang_status mk = arena_make(s, chunk, &fd);
    if (mk != GANG_OK)
      GANG_INFO(SHM, "shared memory off: %s", gang_last_error());
    snprintf(where, sizeof where, "%d %d", (int)getpid(), fd);
    if (mk != GANG_OK)
      snprintf(where, sizeof where, "none");
    GANG_CHECK_GOTO(set_key(store, "shm/arena", rank, where), st, done);
    mapped = mk == GANG_OK;
  } else {
    void *w = NULL;
    size_t wl = 0;
    char key[64];
    snprintf(key, sizeof key, "shm/arena/%d", all[0]);
    GANG_CHECK_GOTO(gang_store_get(store, key, &w, &wl), st, done);
    gang_status op = strcmp(w, "none") == 0
                         ? gang__error(GANG_SYSTEM, "the leader has no arena")
                         : arena_open(s, w);
    gang_store_free(w);
    if (op != GANG_OK)
      GANG_INFO(SHM, "shared memory off: %s", gang_last_error());
    mapped = op == GANG_OK;
  }
  if (mapped) {
    s->h->world_rank[s->local] = rank;
    s->h->pid[s->local] = (int32_t)getpid();
    s->h->probe[s->local] = (uint64_t)(uintptr_t)&s->probe_word;
    note_cpus(s->h->cpus[s->local]);
  }
  bool ok = false;
  GANG_CHECK_GOTO(agree(store, "shm/mapped", rank, all, n, mapped, &ok), st,
                  done);
  if (fd >= 0) {
    close(fd); /* everyone has it mapped (or gave up) */
    fd = -1;
  }
  if (!ok) {
    GANG_INFO(SHM, "shared memory off on this host: a local rank could not "
                   "map the arena; same-host ranks use TCP");
    goto done;
  }
  /* Single copy (every pair must be able to read the other), room (no
   * more local ranks than the CPUs they may run on between them: ranks
   * pinned one to a CPU each are not oversubscribed, two pinned to one CPU
   * are) and forced single copy, agreed in one round because they choose
   * algorithms: every rank must choose the same. Every rank computes room
   * from the same masks, noted before the round above; half room is at
   * most two ranks per CPU. */
  enum { AGREE_CMA = 1, AGREE_ROOMY = 2, AGREE_FORCED = 4, AGREE_HALF = 8 };
  char refused[160] = "";
  unsigned flags =
      (want_cma && cma_probe(s, refused, sizeof refused) ? AGREE_CMA : 0) |
      (n <= cpus_between(s->h, n) ? AGREE_ROOMY : 0) |
      (n <= 2 * cpus_between(s->h, n) ? AGREE_HALF : 0) |
      (force_cma ? AGREE_FORCED : 0);
  unsigned agreed = 0;
  GANG_CHECK_GOTO(agree_flags(store, "shm/algo", rank, all, n, flags, &agreed),
                  st, done);
  s->cma = agreed & AGREE_CMA;
  s->oversubscribed = !(agreed & AGREE_ROOMY);
  s->crowded = !(agreed & AGREE_HALF);
  s->cma_oversubscribed = s->cma && (agreed & AGREE_FORCED);
  /* Asked for by name, refused by the kernel (a container's seccomp
   * profile or ptrace rules, a rank made non-dumpable): the gang still
   * works, staged, so this is no error, but the user who set it should
   * not have to find out from the bandwidth. */
  if (force_cma && !s->cma)
    GANG_WARN(SHM,
              "GANG_SHM_CMA=%s asks for single copy, but %s: large transfers "
              "between this host's ranks are staged",
              gang__setting_str(GANG_SETTING_SHM_CMA),
              refused[0] != '\0'
                  ? refused
                  : "another rank of this host did not allow it (it sets "
                    "GANG_SHM_CMA=0, or its process_vm_readv of a peer "
                    "failed)");
  s->local_of = local_of;
  local_of = NULL;
  gang__fabric_set_fail_hook(fabric, on_fabric_fail, s);
  GANG_INFO(SHM,
            "arena of %d local ranks mapped (%zu MiB virtual, %zu KiB "
            "staging per member; single copy %s%s)",
            n, s->map_len >> 20, (size_t)(chunk >> 10),
            !s->cma                 ? "off"
            : !s->oversubscribed    ? "on"
            : s->cma_oversubscribed ? "on (forced)"
                                    : "only for large all_to_all blocks",
            s->oversubscribed ? "; oversubscribed: short spins" : "");
  *out = s;
  s = NULL;
done:
  if (fd >= 0)
    close(fd);
  if (s != NULL) {
    if (s->h != NULL)
      munmap(s->h, s->map_len);
    free(s->local_of);
    free(s);
  }
  for (int i = 0; v != NULL && i < size; i++)
    gang_store_free(v[i]);
  free(v);
  free(l);
  free(all);
  free(local_of);
  return st;
}

gang_status gang__shm_create(gang_store *store, int rank, int size,
                             gang__fabric *fabric, int64_t deadline, int *hosts,
                             int *kernel, gang__shm **out, bool *everywhere) {
  (void)deadline; /* the store handle's own deadline bounds every wait */
  *everywhere = false;
  int k = 1;
  GANG_CHECK(create_local(store, rank, size, fabric, hosts, &k, out));
  if (kernel != NULL)
    *kernel = k;
  if (size == 1)
    return GANG_OK;
  /* Hierarchical collectives need every host's ranks to share memory (or
   * be alone on their host): a world-wide yes or no. */
  int alone = 0;
  for (int i = 0; i < size; i++)
    alone += hosts[i] == hosts[rank];
  int *ranks = malloc(sizeof *ranks * (size_t)size);
  if (ranks == NULL) {
    gang__shm_destroy(*out);
    *out = NULL;
    return gang__error(GANG_NO_MEMORY, "shm: out of memory");
  }
  for (int i = 0; i < size; i++)
    ranks[i] = i;
  gang_status st = agree(store, "shm/state", rank, ranks, size,
                         *out != NULL || alone == 1, everywhere);
  free(ranks);
  if (st != GANG_OK) {
    gang__shm_destroy(*out);
    *out = NULL;
  }
  return st;
}

void gang__shm_destroy(gang__shm *s) {
  if (s == NULL)
    return;
  gang__fabric_set_fail_hook(s->fabric, NULL, NULL);
  munmap(s->h, s->map_len);
  free(s->local_of);
  free(s);
}

bool gang__shm_oversubscribed(const gang__shm *s) { return s->oversubscribed; }

int gang__shm_local_index(const gang__shm *s, int world_rank) {
  if (s == NULL || world_rank < 0 || world_rank >= s->world_size)
    return -1;
  return s->local_of[world_rank];
}

/* ---- Channels ------------------------------------------------------------ */

/* Finds the entry keyed `key` or claims a free one (zeroing its control
 * pages). Sibling gangs of a split share a context id, so the key also
 * names the gang's first world rank. */
static gang_status dir_attach(gang__shm *s, uint64_t key, int members,
                              int *slot) {
  arena_hdr *h = s->h;
  int64_t give_up = gang__now_ns() + 10000000000ll;
  for (;;) {
    int free_slot = -1;
    for (int k = 0; k < NCHAN; k++) {
      int i = (int)((key + (uint64_t)k) % NCHAN);
      dir_entry *e = &h->dir[i];
      uint64_t cur = atomic_load(&e->key);
      if (cur == key) {
        /* Attachable while a member is attached or one has yet to join;
         * with neither, its last member is freeing it: look again. */
        uint64_t u = atomic_load(&e->use);
        bool open = false;
        while ((open = DIR_ATTACHED(u) != 0 || DIR_JOINED(u) < e->members) &&
               !atomic_compare_exchange_weak(
                   &e->use, &u, u + DIR_USE_ONE + DIR_USE_JOINED)) {
        }
        if (open) {
          *slot = i;
          return GANG_OK;
        }
        free_slot = -2;
        break;
      }
      if (cur == KEY_CLAIMING) {
        free_slot = -2; /* it may become ours: look again */
        break;
      }
      if (cur == KEY_FREE && free_slot == -1)
        free_slot = i;
    }
    if (free_slot >= 0) {
      dir_entry *e = &h->dir[free_slot];
      uint64_t expect = KEY_FREE;
      if (atomic_compare_exchange_strong(&e->key, &expect, KEY_CLAIMING)) {
        memset(gang__shm_chan_base(s, free_slot), 0, (size_t)s->n * CTL_SIZE);
        e->members = (uint32_t)members;
        atomic_store(&e->use, DIR_USE_ONE + DIR_USE_JOINED);
        atomic_store_explicit(&e->key, key, memory_order_release);
        *slot = free_slot;
        return GANG_OK;
      }
      continue;
    }
    if (free_slot == -1)
      return gang__error(GANG_NO_MEMORY,
                         "shm: all %d channels of this host's arena are in "
                         "use (destroy gangs you no longer need)",
                         NCHAN);
    if (gang__now_ns() > give_up)
      return gang__error(GANG_INTERNAL, "shm: channel directory entry stuck");
    sched_yield();
  }
}

gang_status gang__shm_chan_attach(gang__shm *s, uint64_t ctx, const int *world,
                                  int n, int rank, gang__shm_chan **out) {
  uint64_t key = gang__mix64(ctx ^ gang__mix64((uint64_t)world[0] + 1));
  if (key <= KEY_CLAIMING)
    key += 2;
  gang__shm_chan *c = calloc(1, sizeof *c);
  gang__shm_ctl **ctl = calloc((size_t)n, sizeof *ctl);
  unsigned char **stage = calloc((size_t)n, sizeof *stage);
  pid_t *pid = calloc((size_t)n, sizeof *pid);
  int *wr = malloc((size_t)n * sizeof *wr);
  if (c == NULL || ctl == NULL || stage == NULL || pid == NULL || wr == NULL) {
    free(c);
    free(ctl);
    free(stage);
    free(pid);
    free(wr);
    return gang__error(GANG_NO_MEMORY, "shm: out of memory");
  }
  memcpy(wr, world, (size_t)n * sizeof *wr);
  int slot = -1;
  gang_status st = dir_attach(s, key, n, &slot);
  if (st != GANG_OK) {
    free(c);
    free(ctl);
    free(stage);
    free(pid);
    free(wr);
    return st;
  }
  unsigned char *b = gang__shm_chan_base(s, slot);
  size_t chunk = s->h->chunk;
  for (int m = 0; m < n; m++) {
    ctl[m] = (gang__shm_ctl *)(b + (size_t)m * CTL_SIZE);
    stage[m] = b + (size_t)s->n * CTL_SIZE + (size_t)m * 2 * chunk;
    pid[m] = s->h->pid[s->local_of[world[m]]];
  }
  *c = (gang__shm_chan){.arena = s,
                        .slot = slot,
                        .rank = rank,
                        .size = n,
                        .chunk = chunk,
                        .cma = s->cma,
                        .oversubscribed = s->oversubscribed,
                        .crowded = s->crowded,
                        .cma_oversubscribed = s->cma_oversubscribed,
                        .ctl = ctl,
                        .stage = stage,
                        .pid = pid,
                        .world = wr,
                        .fabric = s->fabric,
                        .deadline = GANG_DEADLINE_NONE};
  /* Start from where the channel is: a fresh claim is at 0. */
  c->step = 0;
  *out = c;
  return GANG_OK;
}

void gang__shm_chan_detach(gang__shm_chan *c) {
  if (c == NULL)
    return;
  dir_entry *e = &c->arena->h->dir[c->slot];
  /* The last member to leave frees the entry, once every member joined
   * (a member that never comes leaves it to the arena's end). */
  uint64_t was = atomic_fetch_sub(&e->use, DIR_USE_ONE);
  if (DIR_ATTACHED(was) == 1 && DIR_JOINED(was) >= e->members)
    atomic_store(&e->key, KEY_FREE);
  free(c->ctl);
  free(c->stage);
  free(c->pid);
  free(c->world);
  free(c->scratch);
  free(c);
}

gang_status gang__shm_scratch(gang__shm_chan *c, size_t bytes, void **out) {
  if (c->scratch_cap < bytes) {
    void *p = realloc(c->scratch, bytes);
    if (p == NULL)
      return gang__error(GANG_NO_MEMORY,
                         "%s: cannot allocate %zu bytes of scratch", c->op,
                         bytes);
    c->scratch = p;
    c->scratch_cap = bytes;
  }
  *out = c->scratch;
  return GANG_OK;
}
