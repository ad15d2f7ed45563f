/* The shared-memory arena of a world on one host: setup (host identity,
 * the memfd, agreement on single copy), channels for gangs, and the waits
 * and wake-ups the shm algorithms are built from. See shm.h. */

#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"

#define ARENA_MAGIC 0x314d4853474e4147ull /* "GANGSHM1" */
#define ARENA_VERSION 1u
#define NCHAN 256
#define CTL_SIZE ((sizeof(gang__shm_ctl) + 4095) / 4096 * 4096)
#define KEY_FREE 0ull
#define KEY_CLAIMING 1ull

typedef struct dir_entry {
  _Alignas(64) _Atomic uint64_t key;
  _Atomic uint32_t refs;
  uint32_t members;
} dir_entry;

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
  gang__fabric *fabric;
  uint64_t probe_word; /* read by peers to test single copy */
};

/* ---- Futex --------------------------------------------------------------- */

static void futex_wake_all(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v, int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

void gang__shm_ring(gang__shm_wake *w) {
  atomic_fetch_add_explicit(&w->bell, 1, memory_order_seq_cst);
  futex_wake_all(&w->bell);
}

/* ---- Failure ------------------------------------------------------------- */

gang_status gang__shm_failed(const gang__shm *s) {
  return (gang_status)atomic_load_explicit(&s->h->failed, memory_order_acquire);
}

static unsigned char *chan_base(const gang__shm *s, int slot) {
  return (unsigned char *)s->h + s->h->chan_off +
         (size_t)slot * s->h->chan_size;
}

void gang__shm_fail(gang__shm *s, gang_status st, const char *reason) {
  if (s == NULL || st == GANG_OK)
    return;
  int32_t zero = 0;
  if (atomic_compare_exchange_strong(&s->h->fail_claim, &zero, 1)) {
    snprintf(s->h->fail_text, sizeof s->h->fail_text, "%s", reason);
    atomic_store_explicit(&s->h->failed, (int32_t)st, memory_order_seq_cst);
  }
  /* Wake everyone asleep in any channel of the arena. */
  for (int i = 0; i < NCHAN; i++) {
    if (atomic_load(&s->h->dir[i].key) <= KEY_CLAIMING)
      continue;
    unsigned char *b = chan_base(s, i);
    for (int m = 0; m < s->n; m++) {
      gang__shm_wake *w = &((gang__shm_ctl *)(b + (size_t)m * CTL_SIZE))->wake;
      if (atomic_load(&w->sleepers) != 0)
        gang__shm_ring(w);
    }
  }
}

/* The fabric failed: every local rank must stop waiting. */
static void on_fabric_fail(void *arg, gang_status st, const char *reason) {
  gang__shm_fail(arg, st, reason);
}

/* ---- Waiting ------------------------------------------------------------- */

/* The last step a member published. */
static uint64_t last_step(gang__shm_ctl *ctl) {
  uint64_t last = 0;
  for (int i = 0; i < GANG_SHM_LINES; i++) {
    uint64_t v = atomic_load(&ctl->line[i].seq);
    last = v > last ? v : last;
  }
  return last;
}

static gang_status wait_error(gang__shm_chan *c, gang_status st, int member,
                              uint64_t seq, const char *why) {
  return gang__error(st,
                     "%s #%" PRIu64 " (gang rank %d/%d, shared memory): %s, "
                     "still waiting for: gang rank %d (pid %d) to reach step "
                     "%" PRIu64 " (it is at %" PRIu64 ")",
                     c->op ? c->op : "collective", c->opseq, c->rank, c->size,
                     why, member, (int)c->pid[member], seq,
                     last_step(c->ctl[member]));
}

static void describe_sig(const gang__shm_chan *c, uint64_t sig, char *buf,
                         size_t cap) {
  int kind = (int)(sig >> 59);
  snprintf(buf, cap, "%s of %" PRIu64 " bytes (dtype %u, op %u, root %u)",
           c->kind_name ? c->kind_name(kind) : "collective",
           (uint64_t)(sig & ((1ull << 40) - 1)), (unsigned)(sig >> 54) & 31,
           (unsigned)(sig >> 51) & 7, (unsigned)(sig >> 40) & 2047);
}

gang_status gang__shm_mismatch(gang__shm_chan *c, int member, uint64_t seq) {
  char mine[128], theirs[128];
  describe_sig(c, c->sig, mine, sizeof mine);
  describe_sig(c, c->ctl[member]->line[GANG_SHM_LINE(seq)].sig, theirs,
               sizeof theirs);
  return gang__error(GANG_MISMATCH,
                     "%s #%" PRIu64 " (gang rank %d/%d, shared memory): ranks "
                     "disagree on the collective: this rank calls %s, gang "
                     "rank %d calls %s",
                     c->op ? c->op : "collective", c->opseq, c->rank, c->size,
                     mine, member, theirs);
}

/* The arena failed (a local rank's fabric did): fail ours the same way. */
static gang_status arena_failure(gang__shm_chan *c, int member, uint64_t seq) {
  gang__shm *s = c->arena;
  gang_status st = gang__shm_failed(s);
  char text[600];
  snprintf(text, sizeof text, "%s", s->h->fail_text);
  if (gang__fabric_status(c->fabric, NULL, 0) == GANG_OK)
    gang__fabric_fail(c->fabric, st, text);
  return wait_error(c, st, member, seq, text);
}

/* ---- Where the ranks run -------------------------------------------------
 *
 * A wait that spins holds its CPU. That is right while the member it waits
 * for runs on another CPU, and wrong when the member is runnable on ours:
 * then the spin only delays it. The scheduler does put two ranks that wake
 * each other on one CPU when other processes keep the second CPU busy
 * (four shell loops of `sleep 0.001` on 2 cores did it in four runs of
 * six), and it left them there: every step then cost a whole spin window,
 * 8-byte all_reduces 1.2 ms instead of 0.2-0.5 us (docs/shm.md, "Waiting").
 * So a wait that lasts asks the kernel where the member is
 * (/proc/<pid>/task/<tid>/stat: its state and the CPU it last ran on),
 * at once when the member's own note names our CPU, else after a while and
 * then now and then; when the member is runnable on our CPU, the wait moves
 * to a CPU no member uses, or, when there is none, yields. */

/* The calling thread's id, cached; a forked child starts without it. */
static _Thread_local pid_t self_tid;
static pthread_once_t tid_once = PTHREAD_ONCE_INIT;
static void forget_tid(void) { self_tid = 0; }
static void register_forget_tid(void) {
  pthread_atfork(NULL, NULL, forget_tid);
}

static pid_t this_tid(void) {
  if (self_tid == 0) {
    pthread_once(&tid_once, register_forget_tid);
    self_tid = (pid_t)syscall(SYS_gettid);
  }
  return self_tid;
}

int gang__shm_note_cpu(gang__shm_chan *c) {
  int cpu = sched_getcpu(); /* a load from glibc's rseq area */
  gang__shm_wake *w = &c->ctl[c->rank]->wake;
  if (cpu >= 0 && atomic_load_explicit(&w->cpu, memory_order_relaxed) != cpu + 1)
    atomic_store_explicit(&w->cpu, cpu + 1, memory_order_relaxed);
  pid_t tid = this_tid();
  if (atomic_load_explicit(&w->tid, memory_order_relaxed) != tid)
    atomic_store_explicit(&w->tid, tid, memory_order_relaxed);
  return cpu;
}

/* Whether the kernel says the thread of `member` that last noted itself is
 * runnable (running or waiting for a CPU) and last ran on CPU `cpu`. As we
 * run on `cpu`, such a member is waiting for it. */
static bool runnable_on(const gang__shm_chan *c, int member, int cpu) {
  pid_t tid = atomic_load_explicit(&c->ctl[member]->wake.tid,
                                   memory_order_relaxed);
  if (tid <= 0 || cpu < 0)
    return false;
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)c->pid[member],
           (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return false;
  buf[n] = '\0';
  /* "pid (comm) S ...": the name may hold anything, so fields count from
   * the last ')'; the CPU is field 39, the 37th after the state. */
  char *p = strrchr(buf, ')');
  if (p == NULL || p[1] != ' ')
    return false;
  p += 2;
  if (*p != 'R')
    return false;
  for (int k = 0; k < 36; k++) {
    p = strchr(p, ' ');
    if (p == NULL)
      return false;
    p++;
  }
  return atoi(p) == cpu;
}

/* Most often a wait moves itself off a CPU it shares (move_off). */
#define SHM_MOVE_EVERY_NS 1000000

/* Moves this thread off CPU `cpu`, where a member it waits for is
 * runnable, to a CPU it may run on that no member of the channel last
 * noted, if there is one: its affinity is narrowed to that CPU, which makes
 * the kernel move it there at once, then set back as it was, which leaves
 * it there. Returns the CPU it runs on afterwards (`cpu` when it stayed). */
static int move_off(gang__shm_chan *c, int member, int cpu) {
  int64_t now = gang__now_ns();
  if (now < c->next_move)
    return cpu;
  c->next_move = now + SHM_MOVE_EVERY_NS;
  cpu_set_t mine, used, to;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0)
    return cpu;
  CPU_ZERO(&used);
  for (int m = 0; m < c->size; m++) {
    int x = atomic_load_explicit(&c->ctl[m]->wake.cpu, memory_order_relaxed);
    if (x > 0 && x <= CPU_SETSIZE)
      CPU_SET(x - 1, &used);
  }
  CPU_SET(cpu, &used);
  int target = -1;
  for (int k = 1; k < CPU_SETSIZE && target < 0; k++) {
    int x = (cpu + k) % CPU_SETSIZE;
    if (CPU_ISSET(x, &mine) && !CPU_ISSET(x, &used))
      target = x;
  }
  if (target < 0)
    return cpu;
  CPU_ZERO(&to);
  CPU_SET(target, &to);
  if (sched_setaffinity(0, sizeof to, &to) != 0)
    return cpu;
  sched_setaffinity(0, sizeof mine, &mine);
  int now_on = gang__shm_note_cpu(c);
  GANG_TRACE(SHM, "%s #%" PRIu64 ": moved off CPU %d, shared with gang rank "
             "%d, to %d",
             c->op ? c->op : "collective", c->opseq, cpu, member, now_on);
  return now_on;
}

/* How long a wait spins before it sleeps, and how long one that yields
 * does so before it sleeps (ns). */
#define SHM_SPIN_NS 500000
#define SHM_YIELD_NS 1000000
/* Pauses between looks at the clock and at the member's note. */
#define SHM_SPIN_BATCH 64
/* When a spinning wait first asks where its member is, and then how often;
 * when the member's note names our CPU, at once and then at most this
 * often. A look costs about 6 us here. */
#define SHM_LOOK_FIRST_NS 20000
#define SHM_LOOK_EVERY_NS 100000
#define SHM_LOOK_HINTED_NS 10000

gang_status gang__shm_wait_slow(gang__shm_chan *c, int member, uint64_t seq) {
  gang__shm_line *f = &c->ctl[member]->line[GANG_SHM_LINE(seq)];
  gang__shm_wake *w = &c->ctl[member]->wake;
  gang__shm *s = c->arena;
  int cpu = gang__shm_note_cpu(c);
  /* Spin first: a peer on another core answers within a microsecond or
   * two, or within the time it takes to reduce a chunk; unless the member
   * is runnable on our CPU (above).
   *
   * With more ranks than CPUs the peer most likely needs our CPU too: a
   * few pauses (about 20 ns each), then yield. 64 pauses measured 10-23 %
   * slower for small collectives with 8 and 16 ranks on 2 cores (paired
   * rounds, docs/performance.md): the spin burnt the CPU the member being
   * waited for had to run on. */
  int64_t start = 0, look_at = 0, last_look = 0;
  bool yield = c->oversubscribed;
  for (int i = 0; !yield; i++) {
    if (atomic_load_explicit(&f->seq, memory_order_acquire) >= seq)
      return GANG_OK;
    gang__shm_relax();
    if (i % SHM_SPIN_BATCH != SHM_SPIN_BATCH - 1)
      continue;
    if (gang__shm_failed(s) != GANG_OK)
      return arena_failure(c, member, seq);
    int64_t now = gang__now_ns();
    if (start == 0) {
      start = now;
      look_at = now + SHM_LOOK_FIRST_NS;
      last_look = now - SHM_LOOK_HINTED_NS;
    } else if (now - start > SHM_SPIN_NS) {
      break;
    }
    bool hinted = gang__shm_shares_cpu(c, member, cpu) &&
                  now - last_look >= SHM_LOOK_HINTED_NS;
    if (!hinted && now < look_at)
      continue;
    last_look = now;
    look_at = now + SHM_LOOK_EVERY_NS;
    cpu = gang__shm_note_cpu(c);
    if (!runnable_on(c, member, cpu))
      continue;
    int was = cpu;
    cpu = move_off(c, member, cpu);
    yield = cpu == was;
  }
  /* Hand the CPU to the member that needs it, for a while, before
   * sleeping. A futex sleep costs a wake-up syscall on the publisher's
   * side and a trip through the scheduler on ours at every step, and a
   * woken rank may be placed on its waker's CPU; yielding ranks keep the
   * CPUs rotating among the runnable ones. Measured with 8 and 16 ranks on
   * 2 cores (bench/compare, 100-200 iterations): small all_reduce 110-160
   * -> 40-150 us, 0.2-0.5x Open MPI's time where it had been 0.85-1.2x. */
  c->waits_long++;
  if (yield) {
    for (int i = 0; c->oversubscribed && i < 4; i++) {
      if (atomic_load_explicit(&f->seq, memory_order_acquire) >= seq)
        return GANG_OK;
      gang__shm_relax();
    }
    /* The clock is read at every look: one yield may hand the CPU to a
     * rank that is busy for a whole time slice. */
    int64_t until = gang__now_ns() + SHM_YIELD_NS;
    for (;;) {
      if (atomic_load_explicit(&f->seq, memory_order_acquire) >= seq)
        return GANG_OK;
      if (gang__shm_failed(s) != GANG_OK)
        return arena_failure(c, member, seq);
      if (gang__now_ns() > until)
        break;
      sched_yield();
      gang__shm_note_cpu(c);
    }
  }
  /* Then sleep until the member rings (it does whenever it publishes with
   * sleepers counted). The slices only bound how late a dead peer is
   * noticed: its TCP connection ends, which the fabric sees when poked,
   * at most once a millisecond per channel (a poke is a syscall per peer,
   * too dear to make at every wake-up of 16 ranks on 2 cores). */
  if (c->deadline == 0)
    c->deadline = gang__deadline_in_ms(c->timeout_ms);
  int64_t slice = 1000000; /* ns; grows to 8 ms */
  for (;;) {
    if (atomic_load_explicit(&f->seq, memory_order_acquire) >= seq)
      return GANG_OK;
    if (gang__shm_failed(s) != GANG_OK)
      return arena_failure(c, member, seq);
    int64_t now = gang__now_ns();
    if (now >= c->next_poke) {
      c->next_poke = now + 1000000;
      if (gang__fabric_poke(c->fabric) != GANG_OK) {
        char d[600];
        gang_status st = gang__fabric_status(c->fabric, d, sizeof d);
        return wait_error(c, st, member, seq, d);
      }
    }
    if (c->deadline != GANG_DEADLINE_NONE && now >= c->deadline)
      return wait_error(c, GANG_TIMEOUT, member, seq, "deadline exceeded");
    int64_t ns = slice;
    if (c->deadline != GANG_DEADLINE_NONE && c->deadline - now < ns)
      ns = c->deadline - now;
    atomic_fetch_add_explicit(&w->sleepers, 1, memory_order_seq_cst);
    uint32_t bell = atomic_load_explicit(&w->bell, memory_order_seq_cst);
    if (atomic_load_explicit(&f->seq, memory_order_seq_cst) < seq &&
        gang__shm_failed(s) == GANG_OK)
      futex_wait(&w->bell, bell, ns);
    atomic_fetch_sub_explicit(&w->sleepers, 1, memory_order_seq_cst);
    /* Woken, perhaps onto the CPU of the member that rang: say where. */
    gang__shm_note_cpu(c);
    if (slice < 8000000)
      slice *= 2;
  }
}

/* ---- Single copy ----------------------------------------------------------
 */

/* Copies len bytes between this process's `local` and address `remote` of
 * member's process, in the direction `write` says. */
static gang_status copy_remote(gang__shm_chan *c, int member, void *local,
                               uint64_t remote, size_t len, bool write) {
  unsigned char *d = local;
  while (len > 0) {
    struct iovec l = {d, len}, r = {(void *)(uintptr_t)remote, len};
    ssize_t got = write ? process_vm_writev(c->pid[member], &l, 1, &r, 1, 0)
                        : process_vm_readv(c->pid[member], &l, 1, &r, 1, 0);
    if (got <= 0) {
      int err = got < 0 ? errno : EIO;
      if (err == EINTR)
        continue;
      /* A peer that failed may have freed its buffer or exited: its
       * failure, when known, says more than our errno. */
      if (gang__shm_failed(c->arena) != GANG_OK)
        return arena_failure(c, member, c->step);
      if (gang__fabric_poke(c->fabric) != GANG_OK) {
        char d[600];
        gang_status st = gang__fabric_status(c->fabric, d, sizeof d);
        return wait_error(c, st, member, c->step, d);
      }
      if (err == ESRCH)
        return gang__error(GANG_PEER_LOST,
                           "%s #%" PRIu64 " (gang rank %d/%d, shared memory): "
                           "gang rank %d (pid %d) is gone",
                           c->op ? c->op : "collective", c->opseq, c->rank,
                           c->size, member, (int)c->pid[member]);
      return gang__error_errno(
          GANG_SYSTEM, err,
          "%s #%" PRIu64 " (gang rank %d/%d): %s of %zu bytes %s gang rank %d "
          "(pid %d)",
          c->op ? c->op : "collective", c->opseq, c->rank, c->size,
          write ? "process_vm_writev" : "process_vm_readv", len,
          write ? "to" : "from", member, (int)c->pid[member]);
    }
    d += got;
    remote += (uint64_t)got;
    len -= (size_t)got;
  }
  return GANG_OK;
}

gang_status gang__shm_read_remote(gang__shm_chan *c, int member, void *dst,
                                  uint64_t remote, size_t len) {
  return copy_remote(c, member, dst, remote, len, false);
}

gang_status gang__shm_write_remote(gang__shm_chan *c, int member,
                                   uint64_t remote, const void *src,
                                   size_t len) {
  return copy_remote(c, member, (void *)src, remote, len, true);
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
  if (forced[0] != '\0') {
    snprintf(out, cap, "forced:%s", forced);
    return;
  }
  char boot[64], host[256];
  read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  if (gethostname(host, sizeof host) != 0)
    host[0] = '\0';
  host[sizeof host - 1] = '\0';
  snprintf(out, cap, "%s|%s|net:%llu|pid:%llu", boot, host,
           ns_inode("/proc/self/ns/net"), ns_inode("/proc/self/ns/pid"));
}

int gang__cpus_available(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

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

/* Every local rank says `mine` (up to 3 flags, one digit); *all gets the
 * flags every one of them set. One store round for several yes/no
 * questions. */
static gang_status agree_flags(gang_store *st, const char *prefix, int rank,
                               const int *ranks, int n, unsigned mine,
                               unsigned *all) {
  char digit[2] = {(char)('0' + (mine & 7)), '\0'};
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
    *all = 7;
    for (int i = 0; i < n; i++) {
      char c = l[i] == 1 ? *(char *)v[i] : '0';
      *all &= c >= '0' && c <= '7' ? (unsigned)(c - '0') : 0u;
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

/* Can this process read every other local rank's memory? */
static bool cma_probe(gang__shm *s) {
  for (int i = 0; i < s->n; i++) {
    if (i == s->local)
      continue;
    uint64_t v = 0;
    struct iovec l = {&v, sizeof v},
                 r = {(void *)(uintptr_t)s->h->probe[i], sizeof v};
    ssize_t got = process_vm_readv(s->h->pid[i], &l, 1, &r, 1, 0);
    if (got != (ssize_t)sizeof v || v != ARENA_MAGIC) {
      GANG_INFO(SHM,
                "single copy off: process_vm_readv from local rank %d (pid "
                "%d) %s",
                i, s->h->pid[i], got < 0 ? strerror(errno) : "read wrong data");
      return false;
    }
  }
  return true;
}

static gang_status create_local(gang_store *store, int rank, int size,
                                gang__fabric *fabric, int *hosts,
                                gang__shm **out) {
  *out = NULL;
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
  /* Single copy needs every pair to be able to read the other. */
  /* Single copy, room (no more local ranks than CPUs) and forced single
   * copy, agreed in one round because they choose algorithms: every rank
   * must choose the same. Ranks pinned to different CPU sets may count
   * differently; one that sees fewer CPUs than local ranks makes the host
   * oversubscribed. */
  enum { AGREE_CMA = 1, AGREE_ROOMY = 2, AGREE_FORCED = 4 };
  unsigned flags = (want_cma && cma_probe(s) ? AGREE_CMA : 0) |
                   (n <= gang__cpus_available() ? AGREE_ROOMY : 0) |
                   (force_cma ? AGREE_FORCED : 0);
  unsigned agreed = 0;
  GANG_CHECK_GOTO(agree_flags(store, "shm/algo", rank, all, n, flags, &agreed),
                  st, done);
  s->cma = agreed & AGREE_CMA;
  s->oversubscribed = !(agreed & AGREE_ROOMY);
  s->cma_oversubscribed = s->cma && (agreed & AGREE_FORCED);
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
                             gang__shm **out, bool *everywhere) {
  (void)deadline; /* the store handle's own deadline bounds every wait */
  *everywhere = false;
  GANG_CHECK(create_local(store, rank, size, fabric, hosts, out));
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

int gang__shm_local_index(const gang__shm *s, int world_rank) {
  if (s == NULL || world_rank < 0 || world_rank >= s->world_size)
    return -1;
  return s->local_of[world_rank];
}

/* ---- Channels ------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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
        uint32_t r = atomic_load(&e->refs);
        while (r != 0 && !atomic_compare_exchange_weak(&e->refs, &r, r + 1)) {
        }
        if (r != 0) {
          *slot = i;
          return GANG_OK;
        }
        /* Being freed by its last member: look again shortly. */
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
        memset(chan_base(s, free_slot), 0, (size_t)s->n * CTL_SIZE);
        e->members = (uint32_t)members;
        atomic_store(&e->refs, 1);
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
  uint64_t key = mix64(ctx ^ mix64((uint64_t)world[0] + 1));
  if (key <= KEY_CLAIMING)
    key += 2;
  gang__shm_chan *c = calloc(1, sizeof *c);
  gang__shm_ctl **ctl = calloc((size_t)n, sizeof *ctl);
  unsigned char **stage = calloc((size_t)n, sizeof *stage);
  pid_t *pid = calloc((size_t)n, sizeof *pid);
  if (c == NULL || ctl == NULL || stage == NULL || pid == NULL) {
    free(c);
    free(ctl);
    free(stage);
    free(pid);
    return gang__error(GANG_NO_MEMORY, "shm: out of memory");
  }
  int slot = -1;
  gang_status st = dir_attach(s, key, n, &slot);
  if (st != GANG_OK) {
    free(c);
    free(ctl);
    free(stage);
    free(pid);
    return st;
  }
  unsigned char *b = chan_base(s, slot);
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
                        .cma_oversubscribed = s->cma_oversubscribed,
                        .ctl = ctl,
                        .stage = stage,
                        .pid = pid,
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
  if (atomic_fetch_sub(&e->refs, 1) == 1)
    atomic_store(&e->key, KEY_FREE);
  free(c->ctl);
  free(c->stage);
  free(c->pid);
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
