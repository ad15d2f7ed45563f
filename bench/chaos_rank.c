/* chaos_bench's side of a trial that runs in the rank processes (and the
 * plan every process draws from the seed): make the gang and its
 * sub-gangs, loop over the plan's collectives until one fails, then count
 * what the gang left behind. See chaos_bench.c. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chaos.h"
#include "procfs.h"
#include "gang/store.h"

/* ---- Names and random numbers -------------------------------------------- */

const char *const chaos_mode_names[MODE_N] = {"shm", "tcp", "mixed"};
const char *const chaos_fault_names[FAULT_N] = {"kill", "stop", "abort"};
const char *const chaos_op_names[OP_N] = {"barrier",        "all_reduce",
                                          "broadcast",      "all_gather",
                                          "reduce_scatter", "all_to_all"};

/* splitmix64: every rank draws the trial's plan from the same seed. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int below(uint64_t *s, int n) {
  return (int)(next_u64(s) % (unsigned)n);
}

int64_t chaos_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void chaos_nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- The plan of a trial ------------------------------------------------- */

static const gang_dtype dtypes[] = {GANG_FLOAT32, GANG_INT32, GANG_FLOAT64,
                                    GANG_BFLOAT16, GANG_INT8};

static size_t random_count(uint64_t *s, size_t max_bytes, size_t esize) {
  if (below(s, 16) == 0)
    return 0;
  /* Log-uniform between one element and max_bytes. */
  int top = 0;
  while (((size_t)2 << top) <= max_bytes / esize)
    top++;
  size_t c = (size_t)1 << below(s, top + 1);
  return c + (size_t)(next_u64(s) % c);
}

plan chaos_make_plan(const config *cfg, int trial) {
  uint64_t s = cfg->seed * 0x100000001b3ULL + (uint64_t)trial;
  (void)next_u64(&s);
  plan p;
  memset(&p, 0, sizeof p);
  p.n = cfg->min_ranks + below(&s, cfg->max_ranks - cfg->min_ranks + 1);
  do
    p.mode = below(&s, MODE_N);
  while (!cfg->modes[p.mode]);
  /* Below 4 ranks one of the two hosts has a single rank, no shared
   * memory, and every collective runs flat over TCP: mixed trials take 4
   * or more where they may. */
  if (p.mode == MODE_MIXED && p.n < 4 && cfg->max_ranks >= 4) {
    int lo = cfg->min_ranks > 4 ? cfg->min_ranks : 4;
    p.n = lo + below(&s, cfg->max_ranks - lo + 1);
  }
  do
    p.fault = below(&s, FAULT_N);
  while (!cfg->faults[p.fault]);
  p.victim = below(&s, p.n);
  p.rank0_store = below(&s, 2) == 0;
  p.sub_kind = below(&s, 4);
  p.sub_kind = p.sub_kind >= 2 ? 0 : p.sub_kind + 1; /* half: none */
  int ncolors = 1 + below(&s, 3);
  for (int r = 0; r < p.n; r++)
    p.color[r] = below(&s, ncolors);
  /* A random non-empty subset in random order. */
  int perm[MAX_RANKS];
  for (int r = 0; r < p.n; r++)
    perm[r] = r;
  for (int r = p.n - 1; r > 0; r--) {
    int j = below(&s, r + 1), t = perm[r];
    perm[r] = perm[j];
    perm[j] = t;
  }
  p.nmembers = 1 + below(&s, p.n);
  memcpy(p.members, perm, sizeof(int) * (size_t)p.nmembers);
  p.abort_sub = p.sub_kind != 0 && below(&s, 2) == 0;
  if (p.sub_kind == 2 && p.abort_sub) {
    /* Only a member holds the sub-gang it could abort. */
    bool member = false;
    for (int i = 0; i < p.nmembers; i++)
      member |= p.members[i] == p.victim;
    p.abort_sub = member;
  }
  p.delay_ms = below(&s, 301);
  p.nsteps = 4 + below(&s, MAX_STEPS - 3);
  for (int i = 0; i < p.nsteps; i++) {
    step *st = &p.steps[i];
    st->op = below(&s, OP_N);
    /* The first step is on the world, so a rank outside every sub-gang
     * still has collectives to fail in. */
    st->on_sub = i > 0 && p.sub_kind != 0 && below(&s, 2) == 0;
    st->batch = below(&s, 3) == 0 ? 1 + below(&s, MAX_BATCH) : 0;
    st->dtype = dtypes[below(&s, (int)(sizeof dtypes / sizeof *dtypes))];
    st->count = st->op == OP_BARRIER ? 0
                                     : random_count(&s, cfg->max_bytes,
                                                    gang_dtype_size(st->dtype));
    st->root = below(&s, MAX_RANKS);
  }
  p.timeout_ms =
      p.fault == FAULT_STOP
          ? cfg->timeout_ms
          : (int64_t)((KILL_ABORT_LIMIT_S + HANG_EXTRA_S + 5) * 1000);
  return p;
}

/* ---- Counting what a process holds --------------------------------------- */

static int count_fds(void) { return procfs_count("/proc/self/fd") - 1; }
static int count_threads(void) { return procfs_count("/proc/self/task"); }

/* Processes whose parent is `pid`. */
int chaos_children_of(pid_t pid, pid_t *out, int cap) {
  int n = procfs_children(pid, NULL, out, cap);
  return n < 0 ? 0 : n;
}

/* memfds and /dev/shm entries this process has open or mapped. */
static int scan_shared_memory(rank_rec *rec) {
  int memfds = 0;
  DIR *d = opendir("/proc/self/fd");
  char link[512], path[300];
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
      continue;
    link[n] = '\0';
    if (strncmp(link, "/memfd:", 7) == 0)
      memfds++;
    else if (rec != NULL && strncmp(link, "/dev/shm/", 9) == 0 &&
             rec->nshm < MAX_SHM_PATHS)
      snprintf(rec->shm[rec->nshm++], sizeof rec->shm[0], "%s", link);
  }
  if (d != NULL)
    closedir(d);
  FILE *f = fopen("/proc/self/maps", "r");
  char line[768];
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    char *p = strchr(line, '/');
    if (p == NULL)
      continue;
    p[strcspn(p, "\n")] = '\0';
    if (strncmp(p, "/memfd:", 7) == 0)
      memfds++;
    else if (rec != NULL && strncmp(p, "/dev/shm/", 9) == 0 &&
             rec->nshm < MAX_SHM_PATHS)
      snprintf(rec->shm[rec->nshm++], sizeof rec->shm[0], "%s", p);
  }
  if (f != NULL)
    fclose(f);
  return memfds;
}

/* ---- A rank -------------------------------------------------------------- */

typedef struct bufs {
  void *in[MAX_BATCH], *out[MAX_BATCH];
} bufs;

/* Posts (batch > 0) or runs one collective of step `s` on g. */
static gang_status issue(gang_t *g, const step *s, bufs *b, int slot,
                         gang_work **w) {
  int size = gang_size(g);
  void *in = b->in[slot], *out = b->out[slot];
  switch (s->op) {
  case OP_BARRIER:
    return w ? gang_barrier_post(g, w) : gang_barrier(g);
  case OP_ALL_REDUCE:
    return w ? gang_all_reduce_post(g, out, s->count, s->dtype, GANG_SUM, w)
             : gang_all_reduce(g, out, s->count, s->dtype, GANG_SUM);
  case OP_BROADCAST:
    return w ? gang_broadcast_post(g, out, s->count, s->dtype, s->root % size,
                                   w)
             : gang_broadcast(g, out, s->count, s->dtype, s->root % size);
  case OP_ALL_GATHER:
    return w ? gang_all_gather_post(g, out, in, s->count, s->dtype, w)
             : gang_all_gather(g, out, in, s->count, s->dtype);
  case OP_REDUCE_SCATTER:
    return w ? gang_reduce_scatter_post(g, out, in, s->count, s->dtype,
                                        GANG_SUM, w)
             : gang_reduce_scatter(g, out, in, s->count, s->dtype, GANG_SUM);
  default:
    return w ? gang_all_to_all_post(g, out, in, s->count, s->dtype, w)
             : gang_all_to_all(g, out, in, s->count, s->dtype);
  }
}

/* Notes the first failure of a step: when it came and what it said. */
static void note_failure(rank_rec *rec, gang_status st, int64_t t_call) {
  rec->t_err = chaos_now_ns();
  rec->status = st;
  rec->t_call = t_call;
  snprintf(rec->err, sizeof rec->err, "%s", gang_last_error());
}

/* Runs step s; on failure fills rec with what failed first. The works of
 * a batch are all waited for, in order, even after one failed (a later
 * wait that hung would show as a hang). */
static gang_status run_step(gang_t *g, const step *s, int index, bufs *b,
                            rank_rec *rec) {
  gang_status st = GANG_OK;
  if (s->batch == 0) {
    int64_t t = chaos_now_ns();
    st = issue(g, s, b, 0, NULL);
    if (st != GANG_OK)
      note_failure(rec, st, t);
  } else {
    gang_work *w[MAX_BATCH] = {NULL};
    int posted = 0;
    for (int i = 0; i < s->batch && st == GANG_OK; i++) {
      int64_t t = chaos_now_ns();
      st = issue(g, s, b, i, &w[i]);
      if (st != GANG_OK)
        note_failure(rec, st, t);
      else
        posted++;
    }
    for (int i = 0; i < posted; i++) {
      int64_t t = chaos_now_ns();
      gang_status ws = gang_work_wait(w[i], -1);
      if (ws != GANG_OK && st == GANG_OK) {
        st = ws;
        rec->posted = true;
        note_failure(rec, ws, t);
      }
      gang_work_free(w[i]);
    }
  }
  if (st != GANG_OK) {
    rec->step = index;
    rec->op = s->op;
    rec->on_sub = s->on_sub;
  }
  return st;
}

typedef struct abort_arg {
  int fd;
  gang_t *g;
  trial_shared *sh;
} abort_arg;

/* The abort fault: waits for the parent's word, then aborts. */
static void *abort_thread(void *arg) {
  abort_arg *a = arg;
  char c;
  if (read(a->fd, &c, 1) == 1) {
    atomic_store(&a->sh->t_fault, chaos_now_ns());
    gang_abort(a->g);
  }
  return NULL;
}

static void set_transport_env(const plan *p, int rank) {
  if (p->mode == MODE_TCP)
    setenv("GANG_SHM_DISABLE", "1", 1);
  if (p->mode == MODE_MIXED)
    setenv("GANG_HOST_ID", rank % 2 ? "chaos-odd" : "chaos-even", 1);
}

static size_t max_block_bytes(const plan *p) {
  size_t m = 0;
  for (int i = 0; i < p->nsteps; i++) {
    size_t b = p->steps[i].count * gang_dtype_size(p->steps[i].dtype);
    m = b > m ? b : m;
  }
  return m;
}

void chaos_rank_main(const plan *p, int rank, int store_port, int trial,
                     int abort_fd, trial_shared *sh) {
  rank_rec *rec = &sh->r[rank];
  set_transport_env(p, rank);
  int fds0 = count_fds(), threads0 = count_threads();
  pid_t kids[4];
  int kids0 = chaos_children_of(getpid(), kids, 4);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = p->timeout_ms;
  gang_t *g = NULL, *sub = NULL;
  gang_status st;
  if (p->rank0_store) {
    /* As torchrun's environment has it: rank 0 hosts the store at
     * MASTER_ADDR:MASTER_PORT (store_port, a free port). */
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", p->n);
    setenv("WORLD_SIZE", v, 1);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", store_port);
    setenv("MASTER_PORT", v, 1);
    unsetenv("GANG_STORE_ADDR");
    st = gang_create_default(&o, &g);
  } else {
    char addr[96];
    snprintf(addr, sizeof addr, "127.0.0.1:%d/chaos/%d", store_port, trial);
    st = gang_create_with_store(&o, addr, rank, p->n, &g);
  }
  if (st != GANG_OK) {
    fprintf(stderr, "chaos: rank %d: %s\n", rank, gang_last_error());
    _exit(2);
  }
  if (p->sub_kind == 1)
    st = gang_split(g, p->color[rank], rank, &sub);
  else if (p->sub_kind == 2)
    st = gang_create_subgang(g, p->members, p->nmembers, &sub);
  if (st != GANG_OK) {
    fprintf(stderr, "chaos: rank %d: sub-gang: %s\n", rank, gang_last_error());
    _exit(2);
  }
  size_t block = max_block_bytes(p);
  size_t cap = block * (size_t)p->n;
  bufs b;
  for (int i = 0; i < MAX_BATCH; i++) {
    b.in[i] = calloc(cap ? cap : 1, 1);
    b.out[i] = calloc(cap ? cap : 1, 1);
    if (b.in[i] == NULL || b.out[i] == NULL)
      _exit(2);
  }
  pthread_t at;
  abort_arg aa = {abort_fd, p->abort_sub && sub ? sub : g, sh};
  bool aborter = p->fault == FAULT_ABORT && rank == p->victim;
  if (aborter && pthread_create(&at, NULL, abort_thread, &aa) != 0)
    _exit(2);
  rec->memfds = scan_shared_memory(rec);
  atomic_store(&rec->state, R_RUNNING);
  for (int i = 0;; i = (i + 1) % p->nsteps) {
    const step *s = &p->steps[i];
    gang_t *on = s->on_sub ? sub : g;
    if (on == NULL)
      continue; /* not a member of this sub-gang */
    if (run_step(on, s, i, &b, rec) != GANG_OK)
      break;
  }
  atomic_store(&rec->state, R_ERRORED);
  if (aborter)
    pthread_join(at, NULL);
  int64_t t0 = chaos_now_ns();
  gang_destroy(sub);
  gang_destroy(g);
  rec->destroy_ns = chaos_now_ns() - t0;
  for (int i = 0; i < MAX_BATCH; i++) {
    free(b.in[i]);
    free(b.out[i]);
  }
  rec->leak_fds = count_fds() - fds0;
  /* A joined thread may stay listed in /proc a moment after pthread_join
   * returns (the kernel unlists it after waking the joiner): up to 1 s. */
  int threads = count_threads();
  for (int i = 0; i < 200 && threads > threads0; i++) {
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    threads = count_threads();
  }
  rec->leak_threads = threads - threads0;
  rec->leak_children = chaos_children_of(getpid(), kids, 4) - kids0;
  rec->leak_memfds = scan_shared_memory(NULL);
  atomic_store(&rec->state, R_DONE);
  _exit(0);
}

/* ---- The fresh gang after a trial ---------------------------------------- */

void chaos_fresh_rank(const plan *p, int rank, int port, int trial) {
  set_transport_env(p, rank);
  char addr[96];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/fresh/%d", port, trial);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 20000;
  gang_t *g = NULL;
  if (gang_create_with_store(&o, addr, rank, p->n, &g) != GANG_OK) {
    fprintf(stderr, "chaos: fresh rank %d: %s\n", rank, gang_last_error());
    _exit(1);
  }
  enum { N = 4099 };
  int32_t *x = malloc(N * sizeof *x);
  for (int i = 0; x != NULL && i < N; i++)
    x[i] = (rank + 1) * (i % 1009 + 1);
  bool ok = x != NULL &&
            gang_all_reduce(g, x, N, GANG_INT32, GANG_SUM) == GANG_OK &&
            gang_barrier(g) == GANG_OK;
  int32_t ranks = p->n * (p->n + 1) / 2;
  for (int i = 0; ok && i < N; i++)
    ok = x[i] == ranks * (i % 1009 + 1);
  if (!ok)
    fprintf(stderr, "chaos: fresh rank %d: %s\n", rank,
            gang_get_last_error(g)[0] ? gang_get_last_error(g) : "wrong sums");
  free(x);
  gang_destroy(g);
  _exit(ok ? 0 : 1);
}
