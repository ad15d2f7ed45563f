/* The shared-memory transport's waits and wake-ups, the arena's failure
 * and single copy between ranks (shm_internal.h lists the parts; shm.h
 * describes the design; docs/shm.md, "Waiting"). */
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
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "shm_internal.h"

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
    unsigned char *b = gang__shm_chan_base(s, i);
    for (int m = 0; m < s->n; m++) {
      gang__shm_wake *w = &((gang__shm_ctl *)(b + (size_t)m * CTL_SIZE))->wake;
      if (atomic_load(&w->sleepers) != 0)
        gang__shm_ring(w);
    }
  }
}

/* ---- Waiting ------------------------------------------------------------- */

/* The line of the last step a member published (NULL: none yet). */
static const gang__shm_line *last_line(const gang__shm_ctl *ctl) {
  const gang__shm_line *last = NULL;
  for (int i = 0; i < GANG_SHM_LINES; i++) {
    uint64_t v = atomic_load(&ctl->line[i].seq);
    if (v != 0 && (last == NULL || v > atomic_load(&last->seq)))
      last = &ctl->line[i];
  }
  return last;
}

/* How errors name a call and this member: "all_reduce #3 (gang rank
 * 0/2, shared memory)", or on a host's part of a gang over several hosts
 * "all_reduce #3 (this host's member 0/2, shared memory)". */
static void name_call(const gang__shm_chan *c, char *b, size_t cap) {
  snprintf(b, cap, "%s #%" PRIu64 " (%s %d/%d, shared memory)",
           c->op ? c->op : "collective", c->opseq,
           c->host_part ? "this host's member" : "gang rank", c->rank, c->size);
}

/* How errors name member m: "gang rank 1 (pid 42)", or on a host's part
 * "world rank 5 (pid 42)" (its number on this host would mean nothing to
 * the reader). */
static void name_member(const gang__shm_chan *c, int m, char *b, size_t cap) {
  snprintf(b, cap, "%s rank %d (pid %d)", c->host_part ? "world" : "gang",
           c->host_part ? c->world[m] : m, (int)c->pid[m]);
}

/* Where `member` is, in the gang's collectives (the numbers the caller and
 * the flight recorder use): not yet in this one, or in it but behind. */
static void name_progress(const gang__shm_chan *c, int member, char *b,
                          size_t cap) {
  const gang__shm_line *l = last_line(c->ctl[member]);
  uint64_t at = l ? l->opseq : 0;
  if (l == NULL)
    snprintf(b, cap,
             "which has not come to this call (it has done no "
             "collective on shared memory yet)");
  else if (at < c->opseq)
    snprintf(b, cap,
             "which has not come to this call (its last was #%" PRIu64
             ", %" PRIu64 " behind -- calls of the gang, not training steps)",
             at, c->opseq - at);
  else
    snprintf(b, cap, "which is in this call but has not done its part");
}

static gang_status wait_error(gang__shm_chan *c, gang_status st, int member,
                              const char *why) {
  char call[160], who[64], where[160];
  name_call(c, call, sizeof call);
  name_member(c, member, who, sizeof who);
  name_progress(c, member, where, sizeof where);
  return gang__error(st, "%s: %s, still waiting for: %s, %s", call, why, who,
                     where);
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
  const gang__shm_line *l = &c->ctl[member]->line[GANG_SHM_LINE(seq)];
  describe_sig(c, l->sig, theirs, sizeof theirs);
  char call[160], who[64];
  name_call(c, call, sizeof call);
  name_member(c, member, who, sizeof who);
  return gang__error(GANG_MISMATCH,
                     "%s: ranks disagree on the collective: this rank calls "
                     "%s, %s calls %s as its #%" PRIu64,
                     call, mine, who, theirs, l->opseq);
}

/* The arena failed (a local rank's fabric did): fail ours the same way. */
static gang_status arena_failure(gang__shm_chan *c, int member) {
  gang__shm *s = c->arena;
  gang_status st = gang__shm_failed(s);
  char text[600];
  snprintf(text, sizeof text, "%s", s->h->fail_text);
  if (gang__fabric_status(c->fabric, NULL, 0) == GANG_OK)
    gang__fabric_fail(c->fabric, st, text);
  return wait_error(c, st, member, text);
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
  if (cpu >= 0 &&
      atomic_load_explicit(&w->cpu, memory_order_relaxed) != cpu + 1)
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
  pid_t tid =
      atomic_load_explicit(&c->ctl[member]->wake.tid, memory_order_relaxed);
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
  GANG_TRACE(SHM,
             "%s #%" PRIu64 ": moved off CPU %d, shared with gang rank "
             "%d, to %d",
             c->op ? c->op : "collective", c->opseq, cpu, member, now_on);
  return now_on;
}

/* How long a wait spins before it sleeps, and how long one that yields
 * does so before it sleeps (ns). */
#define SHM_SPIN_NS 500000
#define SHM_YIELD_NS 1000000
/* After a spin that ended with the member still not there, the next
 * SHM_SHORT_WAITS waits spin only SHM_SPIN_SHORT_NS: on a machine whose
 * other work keeps the member off a CPU, a long spin only spends the
 * waiter's share of the CPU, and the scheduler then runs it later when it
 * is woken. Beside 8 shell loops of `sleep 0.001` (a process started
 * every millisecond by each) a two-rank 1 MiB all_reduce took a median of
 * 1.8 ms with 0.5 ms spins and 0.3 ms with 30 us ones (10 runs each,
 * alternated); on the idle machine they were the same. */
#define SHM_SPIN_SHORT_NS 30000
#define SHM_SHORT_WAITS 32
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
  int64_t spin_ns = SHM_SPIN_NS;
  if (c->short_spins > 0) {
    c->short_spins--;
    spin_ns = SHM_SPIN_SHORT_NS;
  }
  bool yield = c->oversubscribed;
  for (int i = 0; !yield; i++) {
    if (atomic_load_explicit(&f->seq, memory_order_acquire) >= seq)
      return GANG_OK;
    gang__shm_relax();
    if (i % SHM_SPIN_BATCH != SHM_SPIN_BATCH - 1)
      continue;
    if (gang__shm_failed(s) != GANG_OK)
      return arena_failure(c, member);
    int64_t now = gang__now_ns();
    if (start == 0) {
      start = now;
      look_at = now + SHM_LOOK_FIRST_NS;
      last_look = now - SHM_LOOK_HINTED_NS;
    } else if (now - start > spin_ns) {
      c->short_spins = SHM_SHORT_WAITS;
      break;
    }
    bool hinted = gang__shm_shares_cpu(c, member, cpu) &&
                  now - last_look >= SHM_LOOK_HINTED_NS;
    if (!hinted && now < look_at)
      continue;
    /* In a host's part of a gang over several hosts, a wait this long is
     * most often for a leader's network step: tens of microseconds at
     * best, during which the CPU our spin holds may be the one a rank
     * that answers it needs (a leader polling its sockets, or -- where
     * hosts share a machine's CPUs -- another host's ranks). With CPUs to
     * spare a yield returns at once: about a microsecond more to notice
     * the leader's step. */
    if (c->host_part) {
      yield = true;
      break;
    }
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
        return arena_failure(c, member);
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
      return arena_failure(c, member);
    int64_t now = gang__now_ns();
    if (now >= c->next_poke) {
      c->next_poke = now + 1000000;
      if (gang__fabric_poke(c->fabric) != GANG_OK) {
        char d[600];
        gang_status st = gang__fabric_status(c->fabric, d, sizeof d);
        return wait_error(c, st, member, d);
      }
      /* A member that left (its process exited, or it destroyed its
       * gang) said goodbye: the fabric only fails transfers with it, and
       * there is none here. */
      char left[400];
      if (gang__fabric_peer_left(c->fabric, c->world[member], left,
                                 sizeof left)) {
        char why[480];
        snprintf(why, sizeof why, "%s, before this step", left);
        return wait_error(c, GANG_PEER_LEFT, member, why);
      }
    }
    if (c->deadline != GANG_DEADLINE_NONE && now >= c->deadline)
      return wait_error(c, GANG_TIMEOUT, member, "deadline exceeded");
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

/* Member's [remote, remote + len) mapped here, when it lies in the
 * gang_mem_alloc segment `seg` and the segment can be mapped; NULL
 * otherwise. Hold *token until gang__mem_peer_put. */
static unsigned char *mapped(gang__shm_chan *c, int member,
                             const gang__mem_ref *seg, uint64_t remote,
                             size_t len, void **token) {
  *token = NULL;
  if (seg->len == 0 || remote < seg->base || remote - seg->base > seg->len ||
      len > seg->len - (remote - seg->base))
    return NULL;
  unsigned char *m = gang__mem_peer_get(c->pid[member], seg, token);
  return m != NULL ? m + (remote - seg->base) : NULL;
}

/* Copies len bytes between this process's `local` and address `remote` of
 * member's process, in the direction `write` says: through the mapping
 * when `remote` lies in the gang_mem_alloc segment `seg`, else with
 * process_vm_readv / writev. */
static gang_status copy_remote(gang__shm_chan *c, int member, void *local,
                               uint64_t remote, size_t len, bool write,
                               const gang__mem_ref *seg) {
  /* The member's buffer in a gang_mem_alloc segment: loads and stores. */
  void *token;
  unsigned char *at = mapped(c, member, seg, remote, len, &token);
  if (at != NULL) {
    if (write)
      memcpy(at, local, len);
    else
      memcpy(local, at, len);
    gang__mem_peer_put(token);
    atomic_fetch_add_explicit(&gang__mem_copies, 1, memory_order_relaxed);
    return GANG_OK;
  }
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
        return arena_failure(c, member);
      if (gang__fabric_poke(c->fabric) != GANG_OK) {
        char d[600];
        gang_status st = gang__fabric_status(c->fabric, d, sizeof d);
        return wait_error(c, st, member, d);
      }
      char call[160], who[64];
      name_call(c, call, sizeof call);
      name_member(c, member, who, sizeof who);
      char left[400];
      if (err == ESRCH && gang__fabric_peer_left(c->fabric, c->world[member],
                                                 left, sizeof left))
        return gang__error(GANG_PEER_LEFT, "%s: %s is gone: %s", call, who,
                           left);
      if (err == ESRCH) {
        gang__fabric_note_lost(c->fabric, c->world[member]);
        return gang__error(GANG_PEER_LOST, "%s: %s is gone", call, who);
      }
      return gang__error_errno(GANG_SYSTEM, err, "%s: %s of %zu bytes %s %s",
                               call,
                               write ? "process_vm_writev" : "process_vm_readv",
                               len, write ? "to" : "from", who);
    }
    d += got;
    remote += (uint64_t)got;
    len -= (size_t)got;
  }
  return GANG_OK;
}

_Atomic uint64_t gang__mem_copies;

void gang__shm_pub_in(gang__shm_chan *c, const void *p) {
  gang__shm_pub *pub = &c->ctl[c->rank]->pub;
  pub->in = (uint64_t)(uintptr_t)p;
  gang__mem_find(p, &pub->seg);
}

gang_status gang__shm_read_remote(gang__shm_chan *c, int member, void *dst,
                                  uint64_t remote, size_t len) {
  return copy_remote(c, member, dst, remote, len, false,
                     &c->ctl[member]->pub.seg);
}

gang_status gang__shm_write_remote(gang__shm_chan *c, int member,
                                   uint64_t remote, const void *src,
                                   size_t len) {
  return copy_remote(c, member, (void *)src, remote, len, true,
                     &c->ctl[member]->pub.seg);
}

bool gang__shm_direct_mine(const void *p, size_t len, gang__mem_ref *seg) {
  const unsigned char *b = p;
  return len > 0 && gang__mem_find(p, seg) &&
         (uint64_t)(uintptr_t)(b + len) <= seg->base + seg->len;
}

void gang__shm_set_direct(gang__shm_chan *c, uint64_t t, const void *base,
                          const gang__mem_ref *seg) {
  gang__shm_direct d = {0};
  if (seg != NULL) {
    d.addr = (uint64_t)(uintptr_t)base;
    d.seg = *seg;
  }
  memcpy(c->ctl[c->rank]->line[GANG_SHM_LINE(t)].data, &d, sizeof d);
}

bool gang__shm_get_direct(gang__shm_chan *c, int member, uint64_t t,
                          gang__shm_direct *d) {
  memcpy(d, c->ctl[member]->line[GANG_SHM_LINE(t)].data, sizeof *d);
  return d->seg.len != 0;
}

gang_status gang__shm_peek_direct(gang__shm_chan *c, int member,
                                  const gang__shm_direct *d, size_t off,
                                  size_t len, void *spare, const void **out,
                                  void **token) {
  unsigned char *at = mapped(c, member, &d->seg, d->addr + off, len, token);
  if (at != NULL) {
    atomic_fetch_add_explicit(&gang__mem_copies, 1, memory_order_relaxed);
    *out = at;
    return GANG_OK;
  }
  *out = spare;
  return copy_remote(c, member, spare, d->addr + off, len, false, &d->seg);
}
