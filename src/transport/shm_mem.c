/* Memory the other ranks of this host read directly (gang_mem_alloc,
 * docs/shm.md, "Buffers from gang_mem_alloc"). Each allocation is a memfd
 * of its own: a head page, then the caller's bytes. A single-copy
 * algorithm publishes, beside its buffer's address, the memfd (number and
 * inode) and the segment's address range when the buffer lies in one;
 * a reader then maps the segment once, through /proc/<pid>/fd/<fd> as
 * the arena's followers do, and copies with loads and stores instead of
 * process_vm_readv's page walk. Mappings are kept per (pid, inode) and
 * dropped when the owner frees the segment (its head says so) or, checked
 * when a mapping is added, has exited. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "gang/gang.h"
#include "shm.h"

#define MEM_MAGIC 0x314d454d474e4147ull /* "GANGMEM1" */
#define HEAD ((size_t)4096)
#define MEM_MAX ((size_t)1 << 46)

typedef struct mem_head {
  _Atomic uint64_t magic;
  _Atomic uint32_t freed; /* set by the owner before it unmaps */
  uint64_t len;           /* the whole segment, head included */
} mem_head;

/* One of this process's segments. */
typedef struct own_seg {
  LIST_ENTRY(own_seg) link;
  unsigned char *map;
  size_t len;
  int fd;
  uint64_t ino;
} own_seg;

/* A peer's segment mapped here; in use by `refs` copies. */
typedef struct peer_seg {
  LIST_ENTRY(peer_seg) link;
  pid_t pid;
  uint64_t ino;
  unsigned char *map;
  size_t len;
  int refs;
} peer_seg;

static pthread_mutex_t own_mu = PTHREAD_MUTEX_INITIALIZER;
static LIST_HEAD(, own_seg) own = LIST_HEAD_INITIALIZER(own);
static _Atomic int own_count; /* lets gang__mem_find skip the lock */
static pthread_mutex_t peer_mu = PTHREAD_MUTEX_INITIALIZER;
static LIST_HEAD(, peer_seg) peers = LIST_HEAD_INITIALIZER(peers);
static int peer_count;

gang_status gang_mem_alloc(size_t bytes, void **out) {
  if (out == NULL)
    return gang__error(GANG_INVALID_ARGUMENT, "gang_mem_alloc: out is NULL");
  *out = NULL;
  if (bytes == 0 || bytes > MEM_MAX)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_mem_alloc: %zu bytes (1 to 2^46)", bytes);
  size_t len = HEAD + (bytes + HEAD - 1) / HEAD * HEAD;
  own_seg *s = calloc(1, sizeof *s);
  if (s == NULL)
    return gang__error(GANG_NO_MEMORY, "gang_mem_alloc: out of memory");
  s->fd = memfd_create("gang-mem", MFD_CLOEXEC);
  struct stat sb;
  if (s->fd < 0 || ftruncate(s->fd, (off_t)len) != 0 ||
      fstat(s->fd, &sb) != 0) {
    int e = errno;
    if (s->fd >= 0)
      close(s->fd);
    free(s);
    return gang__error_errno(e == ENOMEM || e == ENOSPC ? GANG_NO_MEMORY
                                                        : GANG_SYSTEM,
                             e, "gang_mem_alloc: a memfd of %zu bytes", len);
  }
  s->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (s->map == MAP_FAILED) {
    int e = errno;
    close(s->fd);
    free(s);
    return gang__error_errno(GANG_NO_MEMORY, e,
                             "gang_mem_alloc: mapping %zu bytes", len);
  }
  s->len = len;
  s->ino = (uint64_t)sb.st_ino;
  mem_head *h = (mem_head *)s->map;
  h->len = len;
  atomic_store_explicit(&h->magic, MEM_MAGIC, memory_order_release);
  pthread_mutex_lock(&own_mu);
  LIST_INSERT_HEAD(&own, s, link);
  atomic_fetch_add(&own_count, 1);
  pthread_mutex_unlock(&own_mu);
  *out = s->map + HEAD;
  return GANG_OK;
}

gang_status gang_mem_free(void *p) {
  if (p == NULL)
    return GANG_OK;
  pthread_mutex_lock(&own_mu);
  own_seg *s;
  LIST_FOREACH(s, &own, link)
  if (s->map + HEAD == p)
    break;
  if (s != NULL) {
    LIST_REMOVE(s, link);
    atomic_fetch_sub(&own_count, 1);
  }
  pthread_mutex_unlock(&own_mu);
  if (s == NULL)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "gang_mem_free: %p is not a pointer gang_mem_alloc "
                       "returned (or it was freed already)",
                       p);
  /* Readers that mapped it drop their mapping when they next look. */
  atomic_store_explicit(&((mem_head *)s->map)->freed, 1, memory_order_release);
  munmap(s->map, s->len);
  close(s->fd);
  free(s);
  return GANG_OK;
}

bool gang__mem_find(const void *p, gang__mem_ref *ref) {
  memset(ref, 0, sizeof *ref);
  if (atomic_load_explicit(&own_count, memory_order_relaxed) == 0)
    return false;
  const unsigned char *c = p;
  bool found = false;
  pthread_mutex_lock(&own_mu);
  own_seg *s;
  LIST_FOREACH(s, &own, link)
  if (c >= s->map + HEAD && c < s->map + s->len) {
    ref->fd = (uint64_t)s->fd;
    ref->ino = s->ino;
    ref->base = (uint64_t)(uintptr_t)s->map;
    ref->len = s->len;
    found = true;
    break;
  }
  pthread_mutex_unlock(&own_mu);
  return found;
}

/* Under peer_mu: unmaps the unused mappings of segments their owners
 * freed, and, with `dead`, of owners that have exited. */
static void sweep(bool dead) {
  peer_seg *m, *next;
  for (m = LIST_FIRST(&peers); m != NULL; m = next) {
    next = LIST_NEXT(m, link);
    if (m->refs > 0)
      continue;
    const mem_head *h = (const mem_head *)m->map;
    if (atomic_load_explicit(&h->freed, memory_order_acquire) ||
        (dead && kill(m->pid, 0) != 0 && errno == ESRCH)) {
      LIST_REMOVE(m, link);
      munmap(m->map, m->len);
      free(m);
      peer_count--;
    }
  }
}

/* Maps the segment `ref` of process `pid`, or NULL (then the caller uses
 * process_vm_readv). */
static peer_seg *map_peer(pid_t pid, const gang__mem_ref *ref) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%llu", (int)pid,
           (unsigned long long)ref->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  struct stat sb;
  /* The number may name another file by now: the inode says. */
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_ino != ref->ino ||
      (uint64_t)sb.st_size != ref->len) {
    close(fd);
    return NULL;
  }
  unsigned char *map =
      mmap(NULL, ref->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return NULL;
  const mem_head *h = (const mem_head *)map;
  peer_seg *m = calloc(1, sizeof *m);
  if (m == NULL ||
      atomic_load_explicit(&h->magic, memory_order_acquire) != MEM_MAGIC ||
      atomic_load_explicit(&h->freed, memory_order_acquire) ||
      h->len != ref->len) {
    free(m);
    munmap(map, ref->len);
    return NULL;
  }
  m->pid = pid;
  m->ino = ref->ino;
  m->map = map;
  m->len = (size_t)ref->len;
  return m;
}

unsigned char *gang__mem_peer_get(pid_t pid, const gang__mem_ref *ref,
                                  void **token) {
  *token = NULL;
  pthread_mutex_lock(&peer_mu);
  sweep(false);
  peer_seg *m;
  LIST_FOREACH(m, &peers, link)
  if (m->pid == pid && m->ino == ref->ino && m->len == ref->len)
    break;
  if (m == NULL && (m = map_peer(pid, ref)) != NULL) {
    sweep(true);
    LIST_INSERT_HEAD(&peers, m, link);
    peer_count++;
  }
  if (m != NULL)
    m->refs++;
  pthread_mutex_unlock(&peer_mu);
  *token = m;
  return m != NULL ? m->map : NULL;
}

void gang__mem_peer_put(void *token) {
  if (token == NULL)
    return;
  pthread_mutex_lock(&peer_mu);
  ((peer_seg *)token)->refs--;
  pthread_mutex_unlock(&peer_mu);
}

int gang__mem_peer_mapped(void) {
  pthread_mutex_lock(&peer_mu);
  sweep(true);
  int n = peer_count;
  pthread_mutex_unlock(&peer_mu);
  return n;
}
