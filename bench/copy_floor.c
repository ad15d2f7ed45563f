/* The memory floor that large collectives are measured against
 * (docs/performance.md, "What limits each cell"): a bench/lib backend with
 * no library, whose ranks keep every buffer in one shared-memory segment
 * that all of them map, so that a collective is nothing but the copies
 * and sums its result needs, made by every rank at once, between two
 * barriers. No library can move less: each must at least read its peers'
 * data and write its own output, and most also copy through a staging
 * buffer or pay for process_vm_readv's page pinning.
 *
 *   gangrun --standalone --no-store --nproc-per-node N copy_floor \
 *       --op all_gather -b 64K -e 64M [gang-bench's flags]
 *
 * Ranks are started with RANK and WORLD_SIZE set (gangrun, or any launcher)
 * and meet in /dev/shm under COPY_FLOOR_NAME, by default a name from their
 * parent's pid (the launcher's, common to every rank). Each call is:
 *   entry barrier (every rank's input is ready);
 *   all_gather: copy each peer's block (and out of place one's own);
 *   reduce_scatter: sum every rank's block r into one's output;
 *   all_reduce: a copy of the whole buffer on every rank at once (from
 *     its send or, in place, its stage buffer), the two-core copy bound:
 *     read S, write S per rank, less than any all_reduce moves through
 *     each core (it has no sum). That is not the result, so
 *     all_reduce's results are not checked. (Two
 *     phases, a reduce_scatter and an all_gather between barriers, took
 *     longer than gang's pipelined all_reduce: no floor.) With
 *     COPY_FLOOR_ALL_REDUCE=sum, the least a real all_reduce does with
 *     every buffer mapped, pipelined by COPY_FLOOR_CHUNK bytes (1 MiB):
 *     per chunk each rank sums its block from every rank's buffer into
 *     its own, a barrier, then copies the others' summed blocks (read
 *     1.5 S, write S per rank with two ranks); its results are checked;
 *   broadcast: copy the root's buffer (out of place, the root first copies
 *     its input to its output, as gang-bench measures gang);
 *   all_to_all: copy block r of every rank's input (in place through this
 *     rank's stage buffer, a barrier between);
 *   exit barrier (no peer still reads this rank's buffers).
 * COPY_FLOOR_CMA=1 reads the peers' buffers with process_vm_readv (a
 * reduction's pieces through a 64 KiB buffer) instead of loads from the
 * shared mapping: the floor of a library's single copy from buffers it
 * did not allocate, as gang's single_copy algorithms and Open MPI's CMA
 * read them. float sums only (the driver's default). The figures are the
 * driver's, as for every library under bench/compare. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static const bench_program program = {
    .name = "copy_floor",
    .about = "the memory floor of a collective: every buffer in shared "
             "memory, each call only\nthe copies and sums its result needs; "
             "start one process per rank with RANK and\nWORLD_SIZE set "
             "(gangrun --standalone --no-store).\n",
    .dtypes = 1u << BENCH_FLOAT,
    .ops = 1u << BENCH_SUM,
    .algos = 0,
};

#define MAGIC 0x636f7079666c6f72ull /* "copyflor" */
#define PAGE ((size_t)4096)
#define ROUND(x) (((x) + PAGE - 1) / PAGE * PAGE)

typedef struct header {
  _Atomic uint64_t magic; /* set last by rank 0 */
  _Atomic int attached;
  int size;
  uint64_t bytes;
  int32_t pid[64];   /* each rank's, for COPY_FLOOR_CMA */
  uint64_t base[64]; /* where each rank mapped the segment */
  _Alignas(64) _Atomic unsigned arrived;
  _Alignas(64) _Atomic unsigned generation;
} header;

typedef struct floor_ctx {
  int rank, size;
  int yield;        /* more ranks than CPUs: give the CPU up while waiting */
  int cma;          /* peers' buffers read with process_vm_readv */
  int sum;          /* COPY_FLOOR_ALL_REDUCE=sum */
  size_t sum_chunk; /* its chunk, bytes */
  float *tmp;       /* CMA reductions: a peer's chunk */
  unsigned char *base;
  size_t bytes, cap, slots; /* segment, one buffer, doubles per rank */
  header *h;
  double *scratch;     /* size * slots: the reductions' exchange */
  unsigned char *bufs; /* rank q's send at 2q cap, recv at (2q+1) cap */
} floor_ctx;

static unsigned char *sendbuf(const floor_ctx *f, int q) {
  return f->bufs + (size_t)(2 * q) * f->cap;
}

static unsigned char *recvbuf(const floor_ctx *f, int q) {
  return f->bufs + (size_t)(2 * q + 1) * f->cap;
}

/* len bytes of rank q's src (an address in this rank's mapping) to dst:
 * a load from the shared mapping, or with COPY_FLOOR_CMA a
 * process_vm_readv from q's own mapping, as a library must do with
 * buffers it did not allocate. */
static int fetch(floor_ctx *f, int q, void *dst, const void *src, size_t len) {
  if (!f->cma || q == f->rank) {
    memcpy(dst, src, len);
    return 0;
  }
  uint64_t remote =
      f->h->base[q] + (uint64_t)((const unsigned char *)src - f->base);
  unsigned char *d = dst;
  while (len > 0) {
    struct iovec l = {d, len}, r = {(void *)(uintptr_t)remote, len};
    ssize_t got = process_vm_readv(f->h->pid[q], &l, 1, &r, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR)
        continue;
      fprintf(stderr,
              "copy_floor rank %d: process_vm_readv of %zu bytes "
              "from rank %d: %s\n",
              f->rank, len, q, got < 0 ? strerror(errno) : "nothing read");
      return 1;
    }
    d += got;
    remote += (uint64_t)got;
    len -= (size_t)got;
  }
  return 0;
}

static void relax(const floor_ctx *f, unsigned *spins) {
  if (f->yield || ++*spins > 4096)
    sched_yield();
  else
    __builtin_ia32_pause();
}

/* Sense by generation: the last rank to arrive resets the count and
 * starts the next generation. */
static void barrier(floor_ctx *f) {
  header *h = f->h;
  unsigned gen = atomic_load_explicit(&h->generation, memory_order_acquire);
  if (atomic_fetch_add_explicit(&h->arrived, 1, memory_order_acq_rel) ==
      (unsigned)f->size - 1) {
    atomic_store_explicit(&h->arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&h->generation, gen + 1, memory_order_release);
    return;
  }
  unsigned spins = 0;
  while (atomic_load_explicit(&h->generation, memory_order_acquire) == gen)
    relax(f, &spins);
}

/* out = the sum of k inputs, 16 KiB at a time so that the partial sums
 * stay in L1. out may be one of the inputs (in place). */
static void sum_into(float *out, const float *const *in, int k, size_t n) {
  const size_t chunk = 4096;
  for (size_t lo = 0; lo < n; lo += chunk) {
    size_t m = n - lo < chunk ? n - lo : chunk;
    float *o = out + lo;
    const float *a = in[0] + lo, *b = k > 1 ? in[1] + lo : NULL;
    if (b == NULL)
      memmove(o, a, m * sizeof *o);
    else
      for (size_t i = 0; i < m; i++)
        o[i] = a[i] + b[i];
    for (int j = 2; j < k; j++) {
      const float *c = in[j] + lo;
      for (size_t i = 0; i < m; i++)
        o[i] += c[i];
    }
  }
}

#define CMA_CHUNK 16384 /* floats: 64 KiB, a peer's piece in L2 */

/* Sums block [lo, hi) of every rank's input into out; with CMA, each
 * peer's piece through tmp. */
static int reduce_block(floor_ctx *f, const bench_call *c, size_t lo, size_t hi,
                        float *out) {
  const float *in[64];
  for (int j = 0; j < f->size; j++) {
    int q = (f->rank + j) % f->size; /* each rank starts with its own */
    in[j] = (const float *)(c->inplace ? recvbuf(f, q) : sendbuf(f, q)) + lo;
  }
  if (!f->cma) {
    sum_into(out, in, f->size, hi - lo);
    return 0;
  }
  for (size_t at = 0; at < hi - lo; at += CMA_CHUNK) {
    size_t m = hi - lo - at < CMA_CHUNK ? hi - lo - at : CMA_CHUNK;
    const float *pair[2] = {in[0] + at, f->tmp};
    for (int j = 1; j < f->size; j++) {
      int q = (f->rank + j) % f->size;
      if (fetch(f, q, f->tmp, in[j] + at, m * sizeof(float)) != 0)
        return 1;
      sum_into(out + at, pair, 2, m);
      pair[0] = out + at;
    }
  }
  return 0;
}

/* COPY_FLOOR_ALL_REDUCE=sum: the least a real all_reduce does with every
 * buffer mapped, pipelined by chunk: rank r sums its block of the chunk
 * from every rank's buffer into its own, one barrier, then copies the
 * other ranks' summed blocks from their buffers. No chunk waits for more
 * than that barrier: a rank's next sum writes only its own block of the
 * next chunk, which no peer reads before the next barrier. Called after
 * the entry barrier; ends with the exit barrier. */
static int sum_allreduce(floor_ctx *f, const bench_call *c) {
  int r = f->rank, n = f->size;
  size_t count = c->s.bytes / sizeof(float);
  size_t per = f->sum_chunk / sizeof(float);
  float *mine = (float *)c->recv;
  for (size_t done = 0; done < count; done += per) {
    size_t m = count - done < per ? count - done : per;
    size_t lo = done + m * (size_t)r / (size_t)n;
    size_t hi = done + m * (size_t)(r + 1) / (size_t)n;
    if (hi > lo && reduce_block(f, c, lo, hi, mine + lo) != 0)
      return 1;
    barrier(f);
    for (int j = 1; j < n; j++) {
      int q = (r + j) % n;
      size_t ql = done + m * (size_t)q / (size_t)n;
      size_t qh = done + m * (size_t)(q + 1) / (size_t)n;
      if (qh > ql && fetch(f, q, mine + ql, (float *)recvbuf(f, q) + ql,
                           (qh - ql) * sizeof(float)) != 0)
        return 1;
    }
  }
  barrier(f);
  return 0;
}

static int fl_run(void *ctx, const bench_call *c) {
  floor_ctx *f = ctx;
  int r = f->rank, n = f->size;
  size_t es = sizeof(float), pb = c->s.per * es;
  if (c->coll == BENCH_BROADCAST && r == c->root && !c->inplace)
    memcpy(c->recv, c->send, c->s.bytes);
  barrier(f);
  switch (c->coll) {
  case BENCH_BARRIER:
    return 0;
  case BENCH_ALL_GATHER:
    for (int j = 1; j <= n; j++) { /* the next rank's block first */
      int q = (r + j) % n;
      if (q == r && c->inplace)
        continue;
      const unsigned char *src =
          c->inplace ? recvbuf(f, q) + (size_t)q * pb : sendbuf(f, q);
      if (fetch(f, q, c->recv + (size_t)q * pb, src, pb) != 0)
        return 1;
    }
    break;
  case BENCH_REDUCE_SCATTER: {
    float *out = (float *)(c->inplace ? c->recv + (size_t)r * pb : c->recv);
    if (reduce_block(f, c, (size_t)r * c->s.per, (size_t)(r + 1) * c->s.per,
                     out) != 0)
      return 1;
    break;
  }
  case BENCH_ALL_REDUCE: /* see the top */
    if (f->sum)
      return sum_allreduce(f, c);
    memcpy(c->recv, c->inplace ? c->stage : c->send, c->s.bytes);
    break;
  case BENCH_BROADCAST:
    if (r != c->root &&
        fetch(f, c->root, c->recv, recvbuf(f, c->root), c->s.bytes) != 0)
      return 1;
    break;
  case BENCH_ALL_TO_ALL:
    for (int j = 0; j < n; j++) {
      int q = (r + j) % n;
      const unsigned char *src =
          (c->inplace ? recvbuf(f, q) : sendbuf(f, q)) + (size_t)r * pb;
      if (fetch(f, q, (c->inplace ? c->stage : c->recv) + (size_t)q * pb, src,
                pb) != 0)
        return 1;
    }
    if (c->inplace) {
      barrier(f);
      memcpy(c->recv, c->stage, (size_t)n * pb);
    }
    break;
  default:
    return 1;
  }
  barrier(f);
  return 0;
}

/* The driver's reductions: each rank's vector in its slot, a barrier,
 * every rank combines all slots, a barrier before the slots are reused. */
static int exchange(floor_ctx *f, const void *v, size_t bytes) {
  if (bytes > f->slots * sizeof(double)) {
    fprintf(stderr, "copy_floor: a reduction of %zu bytes (at most %zu)\n",
            bytes, f->slots * sizeof(double));
    return 1;
  }
  memcpy(f->scratch + (size_t)f->rank * f->slots, v, bytes);
  barrier(f);
  return 0;
}

static int fl_max_f64(void *ctx, double *v, size_t n) {
  floor_ctx *f = ctx;
  if (exchange(f, v, n * sizeof *v) != 0)
    return 1;
  for (int q = 0; q < f->size; q++)
    for (size_t i = 0; i < n; i++) {
      double x = f->scratch[(size_t)q * f->slots + i];
      v[i] = x > v[i] ? x : v[i];
    }
  barrier(f);
  return 0;
}

static int fl_i64(floor_ctx *f, int64_t *v, size_t n, int sum) {
  if (exchange(f, v, n * sizeof *v) != 0)
    return 1;
  for (size_t i = 0; i < n; i++) {
    int64_t acc = sum ? 0 : INT64_MAX;
    for (int q = 0; q < f->size; q++) {
      int64_t x;
      memcpy(&x, f->scratch + (size_t)q * f->slots + i, sizeof x);
      acc = sum ? acc + x : (x < acc ? x : acc);
    }
    v[i] = acc;
  }
  barrier(f);
  return 0;
}

static int fl_sum_i64(void *ctx, int64_t *v, size_t n) {
  return fl_i64(ctx, v, n, 1);
}

static int fl_min_i64(void *ctx, int64_t *v, size_t n) {
  return fl_i64(ctx, v, n, 0);
}

static int fl_barrier(void *ctx) {
  barrier(ctx);
  return 0;
}

/* Send and receive in the segment, touched here so that first-use faults
 * stay out of the timed loop; the stage buffer is the driver's. */
static unsigned char *fl_buffer(void *ctx, int which, size_t bytes) {
  floor_ctx *f = ctx;
  if (which > 1 || bytes > f->cap)
    return NULL;
  unsigned char *p = which == 0 ? sendbuf(f, f->rank) : recvbuf(f, f->rank);
  memset(p, 0, f->cap);
  return p;
}

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  char *end;
  long x = v != NULL ? strtol(v, &end, 10) : -1;
  if (v == NULL || *v == '\0' || *end != '\0' || x < 0 || x > 4096) {
    fprintf(stderr,
            "copy_floor: %s must be set to a rank count or rank "
            "(start it with gangrun --standalone --no-store)\n",
            name);
    return 1;
  }
  *out = (int)x;
  return 0;
}

static int timed_out(const struct timespec *t0, double s) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) +
             (double)(t.tv_nsec - t0->tv_nsec) / 1e9 >
         s;
}

/* Rank 0 creates the segment; the others open it once it has its size and
 * magic; rank 0 unlinks the name when all have it mapped. */
static int attach(floor_ctx *f, const bench_args *a) {
  char name[96];
  const char *given = getenv("COPY_FLOOR_NAME");
  if (given != NULL && *given != '\0')
    snprintf(name, sizeof name, "/%s", given);
  else
    snprintf(name, sizeof name, "/gang-copy-floor-%d-%d", (int)getppid(),
             f->size);
  f->cap = ROUND(a->max_bytes + BENCH_GUARD);
  f->slots = 3 * (size_t)a->iters + 64;
  size_t scratch = ROUND((size_t)f->size * f->slots * sizeof(double));
  f->bytes = PAGE + scratch + (size_t)f->size * 2 * f->cap;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int fd;
  if (f->rank == 0) {
    shm_unlink(name); /* a crashed run's */
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)f->bytes) != 0) {
      fprintf(stderr, "copy_floor: cannot create %s of %zu bytes: %s\n", name,
              f->bytes, strerror(errno));
      if (fd >= 0) {
        close(fd);
        shm_unlink(name);
      }
      return 1;
    }
  } else {
    struct stat sb = {0};
    while ((fd = shm_open(name, O_RDWR, 0)) < 0 || fstat(fd, &sb) != 0 ||
           (size_t)sb.st_size != f->bytes) {
      if (fd >= 0)
        close(fd);
      if (timed_out(&t0, 30)) {
        fprintf(stderr,
                "copy_floor rank %d: no segment %s of %zu bytes "
                "from rank 0 in 30 s\n",
                f->rank, name, f->bytes);
        return 1;
      }
      usleep(1000);
    }
  }
  f->base = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (f->base == MAP_FAILED) {
    fprintf(stderr, "copy_floor: mmap of %zu bytes: %s\n", f->bytes,
            strerror(errno));
    if (f->rank == 0)
      shm_unlink(name);
    return 1;
  }
  f->h = (header *)f->base;
  f->scratch = (double *)(f->base + PAGE);
  f->bufs = f->base + PAGE + scratch;
  if (f->rank == 0) {
    f->h->size = f->size;
    f->h->bytes = f->bytes;
    atomic_store_explicit(&f->h->magic, MAGIC, memory_order_release);
  } else {
    while (atomic_load_explicit(&f->h->magic, memory_order_acquire) != MAGIC)
      usleep(100);
    if (f->h->size != f->size || f->h->bytes != f->bytes) {
      fprintf(stderr,
              "copy_floor rank %d: rank 0 has %d ranks and %llu "
              "bytes, this rank %d and %zu (the same flags on "
              "every rank)\n",
              f->rank, f->h->size, (unsigned long long)f->h->bytes, f->size,
              f->bytes);
      return 1;
    }
  }
  f->h->pid[f->rank] = (int32_t)getpid();
  f->h->base[f->rank] = (uint64_t)(uintptr_t)f->base;
  atomic_fetch_add(&f->h->attached, 1);
  if (f->rank == 0) {
    while (atomic_load(&f->h->attached) < f->size) {
      if (timed_out(&t0, 30)) {
        fprintf(stderr, "copy_floor: %d of %d ranks attached in 30 s\n",
                atomic_load(&f->h->attached), f->size);
        shm_unlink(name);
        return 1;
      }
      usleep(1000);
    }
    shm_unlink(name);
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_args a;
  int rc = bench_parse_args(argc, argv, &program, &a);
  if (rc != 0)
    return rc < 0 ? 0 : rc;
  floor_ctx f = {0};
  if (env_int("RANK", &f.rank) != 0 || env_int("WORLD_SIZE", &f.size) != 0)
    return 2;
  if (f.size < 1 || f.rank >= f.size || f.size > 64) {
    fprintf(stderr, "copy_floor: RANK %d of WORLD_SIZE %d (1 to 64 ranks)\n",
            f.rank, f.size);
    return 2;
  }
  const char *cma = getenv("COPY_FLOOR_CMA");
  f.cma = cma != NULL && strcmp(cma, "1") == 0;
  const char *ar = getenv("COPY_FLOOR_ALL_REDUCE");
  if (ar != NULL && strcmp(ar, "sum") != 0 && strcmp(ar, "copy") != 0) {
    fprintf(stderr, "copy_floor: COPY_FLOOR_ALL_REDUCE=%s (copy or sum)\n", ar);
    return 2;
  }
  f.sum = ar != NULL && strcmp(ar, "sum") == 0;
  const char *ch = getenv("COPY_FLOOR_CHUNK");
  char *end = NULL;
  long long chunk = ch != NULL ? strtoll(ch, &end, 10) : 1 << 20;
  if (ch != NULL && (*ch == '\0' || *end != '\0' || chunk < 4096 ||
                     chunk > (1ll << 30) || chunk % 64 != 0)) {
    fprintf(stderr,
            "copy_floor: COPY_FLOOR_CHUNK=%s (bytes, a multiple of 64 "
            "from 4096 to 1 GiB)\n",
            ch);
    return 2;
  }
  f.sum_chunk = (size_t)chunk;
  static float tmp[CMA_CHUNK];
  f.tmp = tmp;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  f.yield = cpus > 0 && f.size > cpus;
  if (attach(&f, &a) != 0)
    return 1;
  bench_backend b = {.program = program.name,
                     .library = "copy floor",
                     .rank = f.rank,
                     .size = f.size,
                     .ctx = &f,
                     .run = fl_run,
                     .max_f64 = fl_max_f64,
                     .sum_i64 = fl_sum_i64,
                     .min_i64 = fl_min_i64,
                     .barrier = fl_barrier,
                     .buffer = fl_buffer,
                     .unchecked = f.sum ? 0 : 1u << BENCH_ALL_REDUCE};
  rc = bench_run(&b, &a);
  munmap(f.base, f.bytes);
  return rc;
}
