/* The flight recorder (flight.h): rings of recent calls, the process's
 * registry of them, and their dumps. */
#include "flight.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include "algo/select.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"

/* One recorded call. Every field is a relaxed atomic: the recording
 * threads and a dump may meet on an entry, and `id` says whether what a
 * dump read was one call's (see read_entry). */
typedef struct fl_entry {
  _Atomic uint64_t id; /* record number + 1; 0: empty or being rewritten */
  _Atomic uint64_t seq;
  _Atomic uint64_t count;
  _Atomic int64_t posted, started, ended;
  _Atomic int kind, dtype, op, root, tag, state, status, algo;
} fl_entry;

/* A plain copy of an entry, for the dump. */
typedef struct fl_call {
  uint64_t id, seq, count;
  int64_t posted, started, ended;
  int kind, dtype, op, root, tag, state, status, algo;
} fl_call;

struct gang__flight {
  TAILQ_ENTRY(gang__flight) link; /* in the registry, under reg_mu */
  const void *world_key;
  char world[160];
  int world_rank;
  uint64_t ctx;
  int rank, size;
  int *map;
  size_t n;              /* entries in the ring */
  _Atomic uint64_t next; /* record number of the next call */
  fl_entry *ring;
};

/* ---- Recording ---------------------------------------------------------- */

#define RLX memory_order_relaxed

uint64_t gang__flight_post(gang__flight *f, const gang__coll *c, uint64_t seq,
                           int state) {
  /* One thread posts to a gang at a time (gang.h). */
  uint64_t id = atomic_load_explicit(&f->next, RLX) + 1;
  atomic_store_explicit(&f->next, id, RLX);
  fl_entry *e = &f->ring[(id - 1) % f->n];
  int64_t now = gang__now_ns();
  atomic_store_explicit(&e->id, 0, RLX);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&e->seq, seq, RLX);
  atomic_store_explicit(&e->count, c->count, RLX);
  atomic_store_explicit(&e->posted, now, RLX);
  atomic_store_explicit(&e->started, state == GANG__FLIGHT_RUNNING ? now : 0,
                        RLX);
  atomic_store_explicit(&e->ended, 0, RLX);
  atomic_store_explicit(&e->kind, (int)c->kind, RLX);
  atomic_store_explicit(&e->dtype, (int)c->dtype, RLX);
  atomic_store_explicit(&e->op, (int)c->op, RLX);
  bool p2p = c->kind == GANG_COLL_SEND || c->kind == GANG_COLL_RECV;
  atomic_store_explicit(&e->root, p2p ? c->peer : c->root, RLX);
  atomic_store_explicit(&e->tag, p2p ? c->tag : 0, RLX);
  atomic_store_explicit(&e->state, state, RLX);
  atomic_store_explicit(&e->status, GANG_OK, RLX);
  atomic_store_explicit(&e->algo, -1, RLX);
  atomic_store_explicit(&e->id, id, memory_order_release);
  return id;
}

/* The entry of record id, or NULL when the ring has moved past it. */
static fl_entry *entry_of(gang__flight *f, uint64_t id) {
  fl_entry *e = &f->ring[(id - 1) % f->n];
  return atomic_load_explicit(&e->id, RLX) == id ? e : NULL;
}

void gang__flight_start(gang__flight *f, uint64_t id) {
  fl_entry *e = entry_of(f, id);
  if (e == NULL)
    return;
  atomic_store_explicit(&e->started, gang__now_ns(), RLX);
  atomic_store_explicit(&e->state, GANG__FLIGHT_RUNNING, RLX);
}

void gang__flight_end(gang__flight *f, uint64_t id, gang_status st, int algo) {
  fl_entry *e = entry_of(f, id);
  if (e == NULL)
    return;
  atomic_store_explicit(&e->ended, gang__now_ns(), RLX);
  atomic_store_explicit(&e->status, (int)st, RLX);
  atomic_store_explicit(&e->algo, algo, RLX);
  atomic_store_explicit(&e->state, GANG__FLIGHT_DONE, RLX);
}

/* Copies e; false when it is empty or was rewritten while read. */
static bool read_entry(fl_entry *e, fl_call *out) {
  uint64_t id = atomic_load_explicit(&e->id, memory_order_acquire);
  if (id == 0)
    return false;
  *out = (fl_call){
      .id = id,
      .seq = atomic_load_explicit(&e->seq, RLX),
      .count = atomic_load_explicit(&e->count, RLX),
      .posted = atomic_load_explicit(&e->posted, RLX),
      .started = atomic_load_explicit(&e->started, RLX),
      .ended = atomic_load_explicit(&e->ended, RLX),
      .kind = atomic_load_explicit(&e->kind, RLX),
      .dtype = atomic_load_explicit(&e->dtype, RLX),
      .op = atomic_load_explicit(&e->op, RLX),
      .root = atomic_load_explicit(&e->root, RLX),
      .tag = atomic_load_explicit(&e->tag, RLX),
      .state = atomic_load_explicit(&e->state, RLX),
      .status = atomic_load_explicit(&e->status, RLX),
      .algo = atomic_load_explicit(&e->algo, RLX),
  };
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&e->id, RLX) == id;
}

/* ---- The registry and SIGUSR1 ------------------------------------------- */

/* Recorders alive in this process. reg_mu guards the list; life_mu the
 * dump thread's start and stop, which follow the list's first and last
 * recorder (so a process with no gang keeps no thread and SIGUSR1's
 * default action). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t life_mu = PTHREAD_MUTEX_INITIALIZER;
static TAILQ_HEAD(, gang__flight) reg = TAILQ_HEAD_INITIALIZER(reg);
static sem_t wake; /* posted by the handler (signal-safe) */
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static atomic_bool stop_thread;
static bool thread_on, handler_ours;
static pthread_t dump_thread;

static void init_wake(void) { sem_init(&wake, 0, 0); }

static void on_usr1(int sig) {
  (void)sig;
  int saved = errno;
  sem_post(&wake);
  errno = saved;
}

static void dump_all(const void *world_key, const char *reason);

static void *dump_main(void *arg) {
  (void)arg;
  for (;;) {
    while (sem_wait(&wake) != 0 && errno == EINTR) {
    }
    if (atomic_load(&stop_thread))
      return NULL;
    dump_all(NULL, "SIGUSR1");
  }
}

/* Starts the dump thread and takes SIGUSR1 if nobody else handles it.
 * Called with life_mu held. */
static void start_thread(void) {
  pthread_once(&wake_once, init_wake);
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
      old.sa_handler != SIG_DFL) {
    GANG_INFO(COLL, "flight recorder: SIGUSR1 has a handler already, so it "
                    "does not dump; gang_flight_dump still does");
    return;
  }
  while (sem_trywait(&wake) == 0) {
  }
  atomic_store(&stop_thread, false);
  /* Any thread may take the signal, this one too: the handler only posts
   * the semaphore, and this thread writes the dump. */
  if (pthread_create(&dump_thread, NULL, dump_main, NULL) != 0) {
    GANG_WARN(COLL, "flight recorder: no thread for SIGUSR1 dumps");
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  handler_ours = true;
  thread_on = true;
}

/* Gives SIGUSR1 back and stops the thread. Called with life_mu held. */
static void stop_dump_thread(void) {
  if (!thread_on)
    return;
  if (handler_ours) {
    struct sigaction cur;
    if (sigaction(SIGUSR1, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == on_usr1)
      signal(SIGUSR1, SIG_DFL);
    handler_ours = false;
  }
  atomic_store(&stop_thread, true);
  sem_post(&wake);
  pthread_join(dump_thread, NULL);
  thread_on = false;
}

gang_status gang__flight_new(const char *world, const void *world_key,
                             int world_rank, uint64_t ctx, int rank, int size,
                             const int *map, gang__flight **out) {
  *out = NULL;
  int64_t n = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_FLIGHT, &n));
  if (n < 0 || n > 1000000)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "GANG_FLIGHT=%" PRId64 ": the calls each gang keeps "
                       "must be 0 (off) to 1000000, e.g. GANG_FLIGHT=2000",
                       n);
  if (n == 0)
    return GANG_OK;
  gang__flight *f = calloc(1, sizeof *f);
  int *m = calloc((size_t)size, sizeof *m);
  fl_entry *ring = calloc((size_t)n, sizeof *ring);
  if (f == NULL || m == NULL || ring == NULL) {
    free(f);
    free(m);
    free(ring);
    return gang__error(GANG_NO_MEMORY,
                       "gang: out of memory for a flight recorder of %" PRId64
                       " calls (GANG_FLIGHT)",
                       n);
  }
  memcpy(m, map, sizeof *m * (size_t)size);
  f->world_key = world_key;
  snprintf(f->world, sizeof f->world, "%s", world);
  for (char *s = f->world; *s; s++)
    if (*s == ' ' || *s == '\t' || *s == '\n')
      *s = '_';
  f->world_rank = world_rank;
  f->ctx = ctx;
  f->rank = rank;
  f->size = size;
  f->map = m;
  f->n = (size_t)n;
  f->ring = ring;
  pthread_mutex_lock(&life_mu);
  pthread_mutex_lock(&reg_mu);
  bool first = TAILQ_EMPTY(&reg);
  TAILQ_INSERT_TAIL(&reg, f, link);
  pthread_mutex_unlock(&reg_mu);
  if (first)
    start_thread();
  pthread_mutex_unlock(&life_mu);
  *out = f;
  return GANG_OK;
}

void gang__flight_free(gang__flight *f) {
  if (f == NULL)
    return;
  pthread_mutex_lock(&life_mu);
  pthread_mutex_lock(&reg_mu);
  TAILQ_REMOVE(&reg, f, link);
  bool last = TAILQ_EMPTY(&reg);
  pthread_mutex_unlock(&reg_mu);
  if (last)
    stop_dump_thread();
  pthread_mutex_unlock(&life_mu);
  free(f->ring);
  free(f->map);
  free(f);
}

/* ---- Dumps -------------------------------------------------------------- */

static const char *state_name(int s) {
  switch (s) {
  case GANG__FLIGHT_POSTED:
    return "posted";
  case GANG__FLIGHT_RUNNING:
    return "running";
  default:
    return "done";
  }
}

static void dump_call(FILE *o, const char *id, const gang__flight *f,
                      const fl_call *c) {
  fprintf(o,
          "gang-flight call dump=%s ctx=%016" PRIx64 " seq=%" PRIu64
          " call=%s count=%" PRIu64 " dtype=%s op=%s root=%d tag=%d state=%s "
          "status=%s posted=%" PRId64 " started=%" PRId64 " ended=%" PRId64
          " algo=%s\n",
          id, f->ctx, c->seq, gang__coll_name((gang__coll_kind)c->kind),
          c->count, gang_dtype_name((gang_dtype)c->dtype),
          gang_reduce_op_name((gang_reduce_op)c->op), c->root, c->tag,
          state_name(c->state), gang_status_name((gang_status)c->status),
          c->posted, c->started, c->ended,
          c->algo < 0 ? "-" : gang__algo_name((algo_id)c->algo));
}

/* Writes one recorder: its gang line, then its calls oldest first. */
static void dump_one(FILE *o, const char *id, gang__flight *f) {
  uint64_t last = atomic_load_explicit(&f->next, memory_order_acquire);
  uint64_t first = last > f->n ? last - f->n + 1 : 1;
  fprintf(o,
          "gang-flight gang dump=%s world=%s ctx=%016" PRIx64
          " wrank=%d grank=%d gsize=%d recorded=%" PRIu64 " ranks=",
          id, f->world, f->ctx, f->world_rank, f->rank, f->size, last);
  for (int i = 0; i < f->size; i++)
    fprintf(o, "%s%d", i ? "," : "", f->map[i]);
  fputc('\n', o);
  for (uint64_t r = first; r <= last && last > 0; r++) {
    fl_call c;
    if (read_entry(&f->ring[(r - 1) % f->n], &c) && c.id == r)
      dump_call(o, id, f, &c);
  }
}

/* Where this process's dumps go: GANG_FLIGHT_DUMP<rank>, or NULL for the
 * log. */
static FILE *open_target(int rank) {
  const char *prefix = gang__setting_str(GANG_SETTING_FLIGHT_DUMP);
  if (prefix[0] == '\0')
    return NULL;
  char path[1024];
  snprintf(path, sizeof path, "%s%d", prefix, rank);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    GANG_WARN(COLL, "flight recorder: cannot write %s (%s); dumping to the log",
              path, strerror(errno));
    return NULL;
  }
  FILE *o = fdopen(fd, "a");
  if (o == NULL)
    close(fd);
  return o;
}

/* Dumps the recorders of world_key (NULL: all) as one block of text. */
static void dump_all(const void *world_key, const char *reason) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (m == NULL)
    return;
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  int64_t mono = gang__now_ns();
  char host[64] = "unknown";
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == ' ' || *c == ':')
      *c = '_';
  char why[600];
  snprintf(why, sizeof why, "%s", reason);
  for (char *c = why; *c; c++)
    if (*c == '\n' || *c == '\r')
      *c = ' ';
  int rank = -1;
  pthread_mutex_lock(&reg_mu);
  gang__flight *f;
  TAILQ_FOREACH(f, &reg, link)
  if (rank < 0 && (world_key == NULL || f->world_key == world_key))
    rank = f->world_rank;
  static atomic_int dumps;
  char id[96];
  snprintf(id, sizeof id, "%s:%d:%d", host, (int)getpid(),
           atomic_fetch_add(&dumps, 1) + 1);
  fprintf(m,
          "gang-flight begin dump=%s rank=%d pid=%d host=%s mono=%" PRId64
          " real=%" PRId64 " reason=%s\n",
          id, rank, (int)getpid(), host, mono,
          (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec, why);
  /* Oldest gang first. */
  TAILQ_FOREACH(f, &reg, link)
  if (world_key == NULL || f->world_key == world_key)
    dump_one(m, id, f);
  pthread_mutex_unlock(&reg_mu);
  fprintf(m, "gang-flight end dump=%s\n", id);
  fclose(m);
  FILE *o = open_target(rank < 0 ? 0 : rank);
  if (o != NULL) {
    fwrite(text, 1, len, o);
    fclose(o);
  } else {
    gang__log_raw(text, len);
  }
  free(text);
}

void gang__flight_dump_world(const void *world_key, const char *reason) {
  dump_all(world_key, reason);
}

gang_status gang_flight_dump(const char *reason) {
  pthread_mutex_lock(&reg_mu);
  bool any = !TAILQ_EMPTY(&reg);
  pthread_mutex_unlock(&reg_mu);
  if (!any)
    return gang__error(GANG_INVALID_USAGE,
                       "gang_flight_dump: no gang of this process records "
                       "its calls: none exists, or GANG_FLIGHT was 0 when "
                       "they were created (set it to how many calls each "
                       "keeps, e.g. GANG_FLIGHT=2000)");
  dump_all(NULL, reason != NULL && reason[0] ? reason : "gang_flight_dump");
  return GANG_OK;
}
