/* The child half of the subprocess gang: main() of the gang-baby program
 * (tools/gang-baby), kept in the library so the protocol (baby.h) has one
 * home. It creates the real gang, then runs what the parent posts.
 *
 * Two threads: the main one reads POSTs and posts them at once (so the
 * child never holds back a send that a peer's receive waits for), the
 * other waits for the works in order and sends each DONE; a work already
 * done when posted, with none queued before it, is answered by the main
 * thread, which saves a wake-up on small calls. The child waits
 * without deadlines: the parent owns them, and kills a child that misses
 * one. The parent's end closing (it finished with us, or died) is the way
 * out, and so is the parent's death seen through a pidfd: a process the
 * parent forked may hold a copy of its end, which would hide the close. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "baby.h"
#include "core/error.h"

/* A posted work, or one that failed when posted (w NULL). */
typedef struct entry {
  TAILQ_ENTRY(entry) link;
  uint64_t seq;
  gang_work *w;
  gang_status st;
  char detail[BABY_DETAIL_MAX + 1];
} entry;

/* An earlier mapping of the memfd, kept while works may point into it. */
typedef struct old_map {
  void *p;
  size_t len;
  struct old_map *next;
} old_map;

typedef struct baby {
  int sock, memfd;
  int parent; /* pidfd of the parent, readable when it died; -1: none */
  gang_t *g;
  unsigned char *map;
  size_t len;
  old_map *old;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  TAILQ_HEAD(, entry) queue; /* posted, DONE not yet sent */
  uint64_t posted, finished;
  bool stop; /* the parent's end closed */
} baby;

static void reply(int sock, int kind, uint64_t seq, gang_status st,
                  const char *detail) {
  baby_reply r = {.seq = seq, .status = (uint32_t)st};
  snprintf(r.detail, sizeof r.detail, "%s", detail);
  uint8_t buf[BABY_MSG_MAX];
  size_t n = gang__baby_put_reply(buf, kind, &r);
  /* A parent that is gone makes this fail; the main thread then sees the
   * end of its stream. */
  ssize_t s;
  do
    s = send(sock, buf, n, MSG_NOSIGNAL);
  while (s < 0 && errno == EINTR);
}

/* ---- Creating the gang -------------------------------------------------- */

typedef struct create_job {
  const baby_hello *h;
  gang_t *g;
  gang_status st;
  char detail[BABY_DETAIL_MAX + 1];
  int wake; /* written when done */
} create_job;

static void *create_thread(void *arg) {
  create_job *j = arg;
  gang_options o = GANG_OPTIONS_INIT;
  o.device =
      (gang_device){(gang_device_type)j->h->device_type, j->h->device_index};
  o.timeout_ms = j->h->timeout_ms;
  o.host = j->h->host[0] ? j->h->host : NULL;
  o.check = -1; /* the parent's gang checks, if asked to */
  j->st = gang_create_with_store(&o, j->h->store_addr, j->h->rank, j->h->size,
                                 &j->g);
  if (j->st != GANG_OK)
    snprintf(j->detail, sizeof j->detail, "%s", gang_last_error());
  (void)!write(j->wake, "x", 1);
  return NULL;
}

/* Creates the gang in a thread while watching the parent's end: a parent
 * that gives up (or dies) during the rendezvous must not leave us waiting
 * out its timeout. */
static gang_status create(baby *b, const baby_hello *h, char *detail) {
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0)
    return gang__error_errno(GANG_SYSTEM, errno, "gang-baby: pipe");
  create_job j = {.h = h, .wake = wake[1]};
  pthread_t t;
  if (pthread_create(&t, NULL, create_thread, &j) != 0) {
    close(wake[0]);
    close(wake[1]);
    return gang__error(GANG_SYSTEM, "gang-baby: cannot start a thread");
  }
  for (;;) {
    struct pollfd pf[3] = {
        {b->sock, POLLIN, 0}, {b->parent, POLLIN, 0}, {wake[0], POLLIN, 0}};
    if (poll(pf, 3, -1) < 0 && errno == EINTR)
      continue;
    if (pf[2].revents)
      break;
    if (pf[0].revents || pf[1].revents)
      _exit(1); /* the parent is gone: nothing to report to */
  }
  pthread_join(t, NULL);
  close(wake[0]);
  close(wake[1]);
  if (j.st != GANG_OK) {
    snprintf(detail, BABY_DETAIL_MAX + 1, "%s", j.detail);
    return j.st;
  }
  b->g = j.g;
  /* No deadline of its own: the parent's are the ones that count. */
  b->g->timeout_ms = -1;
  return GANG_OK;
}

/* ---- Running works ------------------------------------------------------ */

/* Sends the DONE of a finished entry and frees its work. */
static void answer(baby *b, entry *e, gang_status st) {
  if (st != GANG_OK && e->w != NULL)
    snprintf(e->detail, sizeof e->detail, "%s", gang_last_error());
  /* Counted before the DONE goes: a parent that has every answer and
   * leaves must find us idle, or we would abort a gang whose peers may
   * still be finishing the last collective. */
  pthread_mutex_lock(&b->mu);
  b->finished++;
  pthread_mutex_unlock(&b->mu);
  reply(b->sock, BABY_DONE, e->seq, st, st == GANG_OK ? "" : e->detail);
  gang_work_free(e->w);
  e->w = NULL;
}

static void *completer(void *arg) {
  baby *b = arg;
  for (;;) {
    pthread_mutex_lock(&b->mu);
    while (TAILQ_EMPTY(&b->queue) && !b->stop)
      pthread_cond_wait(&b->cv, &b->mu);
    entry *e = TAILQ_FIRST(&b->queue);
    pthread_mutex_unlock(&b->mu);
    if (e == NULL)
      return NULL;
    answer(b, e, e->w != NULL ? gang_work_wait(e->w, -1) : e->st);
    pthread_mutex_lock(&b->mu);
    TAILQ_REMOVE(&b->queue, e, link);
    pthread_mutex_unlock(&b->mu);
    free(e);
  }
}

static unsigned char *at(const baby *b, uint64_t off) {
  return b->map != NULL ? b->map + off : NULL;
}

static bool inside(const baby *b, uint64_t off, uint64_t len) {
  return off <= b->len && len <= b->len - off;
}

/* Maps the grown memfd; the old mapping stays until no work uses it. */
static gang_status remap(baby *b, uint64_t len) {
  pthread_mutex_lock(&b->mu);
  bool idle = TAILQ_EMPTY(&b->queue);
  pthread_mutex_unlock(&b->mu);
  while (idle && b->old != NULL) {
    old_map *o = b->old;
    b->old = o->next;
    munmap(o->p, o->len);
    free(o);
  }
  if (len <= b->len)
    return GANG_OK;
  struct stat st;
  if (len > SIZE_MAX || fstat(b->memfd, &st) != 0 || (uint64_t)st.st_size < len)
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: the parent says the memory has %" PRIu64
                       " bytes, but it has fewer",
                       len);
  void *m =
      mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, b->memfd, 0);
  old_map *o = b->map != NULL ? malloc(sizeof *o) : NULL;
  if (m == MAP_FAILED || (b->map != NULL && o == NULL)) {
    if (m != MAP_FAILED)
      munmap(m, (size_t)len);
    free(o);
    return gang__error(GANG_NO_MEMORY, "gang-baby: mapping %" PRIu64 " bytes",
                       len);
  }
  if (o != NULL) {
    *o = (old_map){b->map, b->len, b->old};
    b->old = o;
  }
  b->map = m;
  b->len = (size_t)len;
  return GANG_OK;
}

/* Turns a POST into the collective on our mapping, checking that every
 * region it names lies inside it. */
static gang_status build(const baby *b, const baby_post *p, gang__coll *c) {
  int size = gang_size(b->g);
  size_t n = (size_t)size, tin = 0, tout = 0;
  const size_t *counts = NULL;
  if (p->kind == GANG_COLL_ALL_TO_ALL_V) {
    if (!inside(b, p->counts_off, 2 * n * sizeof(size_t)) ||
        p->counts_off % sizeof(size_t) != 0)
      return gang__error(GANG_PROTOCOL, "gang-baby: counts outside the memory");
    counts = (const size_t *)(const void *)at(b, p->counts_off);
    for (size_t i = 0; i < n; i++)
      if (__builtin_add_overflow(tout, counts[i], &tout) ||
          __builtin_add_overflow(tin, counts[n + i], &tin))
        return gang__error(GANG_PROTOCOL, "gang-baby: counts overflow");
  }
  size_t in = 0, out = 0;
  GANG_CHECK(gang__baby_need(p, size, tin, tout, &in, &out));
  if (in > p->in_len || out > p->out_len || !inside(b, p->in_off, p->in_len) ||
      !inside(b, p->out_off, p->out_len))
    return gang__error(GANG_PROTOCOL,
                       "gang-baby: %s #%" PRIu64 " lies outside the memory",
                       gang__coll_name((gang__coll_kind)p->kind), p->seq);
  *c = (gang__coll){.kind = (gang__coll_kind)p->kind,
                    .dtype = (gang_dtype)p->dtype,
                    .op = (gang_reduce_op)p->op,
                    .root = p->root,
                    .peer = p->peer,
                    .tag = p->tag,
                    .count = (size_t)p->count};
  unsigned char *io = at(b, p->in_off), *oo = at(b, p->out_off);
  switch (c->kind) {
  case GANG_COLL_ALL_GATHER_LIST: /* the parent scatters the slots */
    c->kind = GANG_COLL_ALL_GATHER;
    /* fall through */
  case GANG_COLL_ALL_GATHER:
    c->out = oo;
    c->in = out ? oo + (size_t)gang_rank(b->g) * (out / n) : oo;
    break;
  case GANG_COLL_ALL_TO_ALL_V:
    c->out_counts = counts;
    c->in_counts = counts + n;
    /* fall through */
  case GANG_COLL_REDUCE_SCATTER:
  case GANG_COLL_ALL_TO_ALL:
    c->in = io;
    c->out = oo;
    break;
  case GANG_COLL_SEND:
    c->in = io;
    break;
  default:
    c->out = oo;
    break;
  }
  return GANG_OK;
}

static void post(baby *b, const baby_post *p) {
  entry *e = calloc(1, sizeof *e);
  if (e == NULL) {
    fprintf(stderr, "gang-baby: out of memory\n");
    _exit(3); /* the parent fails the work with our exit status */
  }
  e->seq = p->seq;
  gang__coll c;
  e->st = remap(b, p->map_len);
  if (e->st == GANG_OK)
    e->st = build(b, p, &c);
  if (e->st == GANG_OK)
    e->st = gang__post_coll(b->g, &c, &e->w);
  if (e->st != GANG_OK)
    snprintf(e->detail, sizeof e->detail, "%s", gang_last_error());
  pthread_mutex_lock(&b->mu);
  b->posted++;
  bool alone = TAILQ_EMPTY(&b->queue);
  pthread_mutex_unlock(&b->mu);
  /* A work that is already done with nothing before it is answered here:
   * handing it to the other thread measured 10 us of a 30 us round trip. */
  int done = e->w == NULL;
  gang_status st = e->w != NULL ? gang_work_test(e->w, &done) : e->st;
  if (alone && done) {
    answer(b, e, st);
    free(e);
    return;
  }
  pthread_mutex_lock(&b->mu);
  TAILQ_INSERT_TAIL(&b->queue, e, link);
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

static void serve(baby *b) {
  pthread_t t;
  if (pthread_create(&t, NULL, completer, b) != 0) {
    fprintf(stderr, "gang-baby: cannot start a thread\n");
    return;
  }
  uint8_t buf[BABY_MSG_MAX + 1];
  for (;;) {
    struct pollfd pf[2] = {{b->sock, POLLIN, 0}, {b->parent, POLLIN, 0}};
    if (poll(pf, 2, -1) < 0 && errno == EINTR)
      continue;
    if (pf[1].revents) {
      /* Unblocks a DONE stuck on a full socket nobody will read. */
      shutdown(b->sock, SHUT_RDWR);
      break;
    }
    ssize_t n = recv(b->sock, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (n <= 0)
      break; /* the parent is done with us */
    baby_post p;
    if ((size_t)n > BABY_MSG_MAX ||
        gang__baby_get_post(buf, (size_t)n, &p) != GANG_OK) {
      fprintf(stderr, "gang-baby: %s\n",
              (size_t)n > BABY_MSG_MAX ? "message over the cap"
                                       : gang_last_error());
      break;
    }
    post(b, &p);
  }
  pthread_mutex_lock(&b->mu);
  b->stop = true;
  bool busy = b->finished != b->posted;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
  /* Works in flight have nobody to answer to: end them. An idle gang is
   * only destroyed, which says goodbye to the peers. */
  if (busy)
    gang_abort(b->g);
  pthread_join(t, NULL);
}

int gang__baby_child_main(int argc, char **argv) {
  char *end1 = NULL, *end2 = NULL;
  long sock = argc == 4 ? strtol(argv[2], &end1, 10) : -1;
  long memfd = argc == 4 ? strtol(argv[3], &end2, 10) : -1;
  if (argc != 4 || strcmp(argv[1], "--baby-fds") != 0 || *end1 || *end2 ||
      sock < 0 || memfd < 0 || sock > INT32_MAX || memfd > INT32_MAX) {
    fprintf(stderr, "gang-baby: the child process of a subprocess gang "
                    "(gang_baby_create in gang/ft.h); the library starts it, "
                    "not a person\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  baby b = {.sock = (int)sock, .memfd = (int)memfd, .parent = -1};
#ifdef SYS_pidfd_open
  pid_t ppid = getppid();
  b.parent = (int)syscall(SYS_pidfd_open, ppid, 0);
  if (getppid() != ppid)
    return 0; /* the parent died before we watched it */
#endif
  TAILQ_INIT(&b.queue);
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.cv, NULL);
  uint8_t buf[BABY_MSG_MAX + 1];
  ssize_t n;
  do
    n = recv(b.sock, buf, sizeof buf, MSG_TRUNC);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return 0; /* the parent left before saying anything */
  baby_hello h;
  char detail[BABY_DETAIL_MAX + 1] = "";
  gang_status st = (size_t)n > BABY_MSG_MAX
                       ? gang__error(GANG_PROTOCOL, "gang-baby: hello too long")
                       : gang__baby_get_hello(buf, (size_t)n, &h);
  if (st != GANG_OK)
    snprintf(detail, sizeof detail, "%s", gang_last_error());
  else
    st = create(&b, &h, detail);
  reply(b.sock, BABY_READY, 0, st, detail);
  if (st == GANG_OK) {
    serve(&b);
    gang_destroy(b.g);
  }
  while (b.old != NULL) {
    old_map *o = b.old;
    b.old = o->next;
    munmap(o->p, o->len);
    free(o);
  }
  if (b.map != NULL)
    munmap(b.map, b.len);
  close(b.memfd);
  if (b.parent >= 0)
    close(b.parent);
  /* b.sock stays open: the parent takes its closing for our exit and then
   * reaps us (with a SIGKILL, in case), so it must close with the process
   * itself, after whatever exit still runs (a sanitizer's leak check). */
  pthread_cond_destroy(&b.cv);
  pthread_mutex_destroy(&b.mu);
  return st == GANG_OK ? 0 : 1;
}
