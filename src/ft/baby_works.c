/* The subprocess gang's works (baby_gang.h): posting a collective (its
 * input copied into the shared memory, a POST sent), reading the child's
 * answers (its result copied out) and failing works when the child dies.
 *
 * Works are queued per child in posting order, since the child answers in
 * that order. The parent has no thread: whoever waits reads the answers,
 * one thread at a time (`reading`), completing every work they belong to,
 * whoever's it is; other waiters sleep on `cv`. Every read has a deadline,
 * and a child that misses one is killed. The lock is never held across a
 * read or a blocked send, so gang_abort and gang_ft_configure from another
 * thread are prompt: they kill the child, which wakes the reader.
 *
 * Each work's input and output take a region of the memfd; works complete
 * in order, so regions are handed out as a ring, and the memfd grows when
 * a call does not fit (the child maps it again when a POST says so). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "baby_gang.h"
#include "core/clock.h"
#include "core/error.h"

#define MIN_CAP (64 * 1024)

static size_t align_up(size_t n) {
  return (n + BABY_ALIGN - 1) / BABY_ALIGN * BABY_ALIGN;
}

static bool done(gang_work *w) {
  return atomic_load_explicit(&w->done, memory_order_acquire) != 0;
}

/* ---- Children: death, failure, freeing (all with b->mu held) ------------ */

void gang__baby_kill_child(baby_child *ch, gang_status fate, const char *fmt,
                           ...) {
  if (ch->dead)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ch->why, sizeof ch->why, fmt, ap);
  va_end(ap);
  ch->fate = fate;
  gang__baby_kill(&ch->p);
  ch->dead = true;
}

/* The child's end closed, or a read failed: it died by itself. */
static void lost(baby_child *ch, int err) {
  if (ch->dead)
    return;
  gang__baby_kill(&ch->p); /* reaps */
  char how[160];
  gang__baby_describe_exit(&ch->p, how, sizeof how);
  snprintf(ch->why, sizeof ch->why, "the gang-baby child (pid %d) died: %s%s%s",
           (int)ch->p.pid, how, err ? "; " : "", err ? strerror(err) : "");
  ch->fate = GANG_PEER_LOST;
  ch->dead = true;
}

/* Completes w; a retired child's works fail alone, the gang they would
 * break is already the next one. */
static void finish(baby_child *ch, gang_work *w, gang_status st) {
  w->impl = NULL;
  if (ch->retired)
    gang__work_reject(w, st);
  else
    gang__work_complete(w, st);
}

void gang__baby_fail_all(baby_child *ch) {
  gang_work *w;
  while ((w = TAILQ_FIRST(&ch->queue)) != NULL) {
    TAILQ_REMOVE(&ch->queue, w, link);
    baby_work *x = w->impl;
    gang__error(ch->fate, "%s #%" PRIu64 ": %s", gang__coll_name(w->coll.kind),
                x->seq, ch->why);
    finish(ch, w, ch->fate);
  }
}

void gang__baby_drop_if_idle(baby_gang *b, baby_child *ch) {
  if (!ch->retired || !TAILQ_EMPTY(&ch->queue) || ch->reading ||
      ch->sending > 0)
    return;
  for (baby_child **pp = &b->retired; *pp; pp = &(*pp)->next)
    if (*pp == ch) {
      *pp = ch->next;
      break;
    }
  gang__baby_kill(&ch->p);
  gang__baby_release(&ch->p);
  free(ch);
}

/* ---- Answers ------------------------------------------------------------ */

/* Copies the result of w out of the shared memory into the caller's
 * buffers (the borrowed pointers of w->coll). */
static void copy_out(const gang_t *g, baby_child *ch, gang_work *w,
                     const baby_work *x) {
  const gang__coll *c = &w->coll;
  const unsigned char *src = ch->p.map + x->out_off;
  size_t bytes = c->count * gang_dtype_size(c->dtype);
  switch (c->kind) {
  case GANG_COLL_BROADCAST:
    if (g->rank == c->root)
      return; /* the source's buffer is unchanged */
    break;
  case GANG_COLL_ALL_GATHER_LIST:
    for (int i = 0; i < g->size && bytes > 0; i++)
      memcpy(c->outs[i], src + (size_t)i * bytes, bytes);
    return;
  default:
    break;
  }
  if (x->out_len > 0)
    memcpy(c->out, src, x->out_len);
}

static void on_done(baby_child *ch, const uint8_t *buf, size_t n) {
  baby_reply r;
  if (gang__baby_get_reply(buf, n, BABY_DONE, &r) != GANG_OK) {
    gang__baby_kill_child(ch, GANG_PROTOCOL,
                          "the gang-baby child (pid %d): %s: killed",
                          (int)ch->p.pid, gang_last_error());
    return;
  }
  gang_work *w = TAILQ_FIRST(&ch->queue);
  baby_work *x = w ? w->impl : NULL;
  if (x == NULL || r.seq != x->seq || r.status > GANG_NOT_FOUND) {
    gang__baby_kill_child(ch, GANG_PROTOCOL,
                          "the gang-baby child (pid %d) answered #%" PRIu64
                          " with status %u while #%" PRIu64 " was next: killed",
                          (int)ch->p.pid, r.seq, r.status, x ? x->seq : 0);
    return;
  }
  TAILQ_REMOVE(&ch->queue, w, link);
  gang_status st = (gang_status)r.status;
  if (st == GANG_OK)
    copy_out(w->g, ch, w, x);
  else
    gang__error(st, "%s (in the gang-baby child, pid %d)", r.detail,
                (int)ch->p.pid);
  finish(ch, w, st);
}

/* Reads one answer of ch, waiting until `deadline`, and handles it; or
 * handles the child's death. Returns false when the deadline passed with
 * nothing read. Called and returns with b->mu held; may free ch (a retired
 * one left without works): the caller touches ch again only while a work
 * of it is incomplete. */
static bool read_once(baby_gang *b, baby_child *ch, int64_t deadline) {
  ch->reading = true;
  int fd = ch->p.sock;
  pthread_mutex_unlock(&b->mu);
  /* One byte over the cap: a larger packet is then seen to be one. */
  uint8_t buf[BABY_MSG_MAX + 1];
  ssize_t n;
  int err = 0;
  bool timed_out = false;
  for (;;) {
    n = recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
      err = n < 0 ? errno : 0;
      break;
    }
    struct pollfd pf = {fd, POLLIN, 0};
    int r = poll(&pf, 1, gang__deadline_poll_ms(deadline));
    if (r == 0) {
      timed_out = true;
      break;
    }
  }
  pthread_mutex_lock(&b->mu);
  ch->reading = false;
  bool progress = true;
  if (ch->dead) {
    /* killed meanwhile (abort, configure, a waiter's deadline) */
  } else if (timed_out) {
    progress = false;
  } else if (n == 0 || err != 0) {
    lost(ch, err == ECONNRESET ? 0 : err);
  } else if ((size_t)n > BABY_MSG_MAX) {
    gang__baby_kill_child(
        ch, GANG_PROTOCOL,
        "the gang-baby child (pid %d) sent %zd bytes, over the cap of "
        "%d: killed",
        (int)ch->p.pid, n, BABY_MSG_MAX);
  } else {
    on_done(ch, buf, (size_t)n);
  }
  if (ch->dead)
    gang__baby_fail_all(ch);
  pthread_cond_broadcast(&b->cv);
  gang__baby_drop_if_idle(b, ch);
  return progress;
}

/* The deadline of w passed: the child is hung (or too slow, which cannot
 * be told apart), and what it would still write cannot be trusted. */
static void overdue_kill(baby_child *ch, gang_work *w) {
  baby_work *x = w->impl;
  gang__baby_kill_child(ch, GANG_TIMEOUT,
                        "deadline passed with no answer for %s #%" PRIu64
                        ": killed the gang-baby child (pid %d)",
                        gang__coll_name(w->coll.kind), x->seq, (int)ch->p.pid);
}

gang_status gang__baby_wait(gang_work *w, int64_t deadline) {
  baby_gang *b = w->g->impl;
  pthread_mutex_lock(&b->mu);
  while (!done(w)) {
    baby_child *ch = ((baby_work *)w->impl)->ch;
    if (ch->dead && !ch->reading) {
      gang__baby_fail_all(ch);
      gang__baby_drop_if_idle(b, ch);
    } else if (!ch->reading) {
      if (!read_once(b, ch, deadline)) {
        overdue_kill(ch, w);
        gang__baby_fail_all(ch);
        gang__baby_drop_if_idle(b, ch);
      }
    } else if (gang__deadline_passed(deadline)) {
      /* Another thread reads for an earlier work; ours is late. The kill
       * wakes that reader, which fails every work. */
      overdue_kill(ch, w);
      gang__cond_wait_slice(&b->cv, &b->mu, GANG_DEADLINE_NONE, 10000000);
    } else {
      gang__cond_wait_slice(&b->cv, &b->mu, deadline, 100000000);
    }
  }
  pthread_mutex_unlock(&b->mu);
  return w->status;
}

void gang__baby_test(gang_work *w) {
  baby_gang *b = w->g->impl;
  pthread_mutex_lock(&b->mu);
  while (!done(w)) {
    baby_child *ch = ((baby_work *)w->impl)->ch;
    if (ch->reading)
      break; /* that thread makes the progress */
    if (ch->dead) {
      gang__baby_fail_all(ch);
      gang__baby_drop_if_idle(b, ch);
    } else if (!read_once(b, ch, gang__now_ns())) {
      break; /* nothing more to read now */
    }
  }
  pthread_mutex_unlock(&b->mu);
}

/* ---- Posting ------------------------------------------------------------ */

/* True when [off, off+len) is inside the memfd and no queued work's region
 * overlaps it. */
static bool region_free(const baby_child *ch, size_t off, size_t len) {
  if (off > ch->p.cap || len > ch->p.cap - off)
    return false;
  gang_work *w;
  TAILQ_FOREACH(w, &ch->queue, link) {
    const baby_work *x = w->impl;
    if (x->len > 0 && off < x->off + x->len && x->off < off + len)
      return false;
  }
  return true;
}

/* A region of `len` bytes: right after the newest one, else from the start
 * (a ring, since works complete in order), else in memory grown for it.
 * With nothing in flight it starts at 0, where the caches are warm. */
static gang_status region_alloc(baby_child *ch, size_t len, size_t *off) {
  *off = 0;
  if (len == 0)
    return GANG_OK;
  bool empty = TAILQ_EMPTY(&ch->queue);
  if (!empty && region_free(ch, ch->tail, len)) {
    *off = ch->tail;
    return GANG_OK;
  }
  if (region_free(ch, 0, len))
    return GANG_OK;
  size_t old = ch->p.cap;
  if (len > SIZE_MAX / 4 || old > SIZE_MAX / 4)
    return gang__error(GANG_NO_MEMORY,
                       "gang-baby: %zu bytes of shared memory for one call",
                       len);
  size_t cap = old * 2 > old + len ? old * 2 : old + len;
  GANG_CHECK(gang__baby_grow(&ch->p, cap < MIN_CAP ? MIN_CAP : cap));
  /* In flight works all lie below the old end. */
  *off = empty ? 0 : old;
  return GANG_OK;
}

/* Lays c out in ch's memory, copies its input in and fills the POST. */
static gang_status stage(const gang_t *g, baby_child *ch, const gang__coll *c,
                         baby_work *x, baby_post *p) {
  size_t n = (size_t)g->size, es = gang_dtype_size(c->dtype);
  *p = (baby_post){.kind = (uint32_t)c->kind,
                   .dtype = (uint32_t)c->dtype,
                   .op = (uint32_t)c->op,
                   .root = c->root,
                   .peer = c->peer,
                   .tag = c->tag,
                   .count = c->count};
  size_t tin = 0, tout = 0, counts = 0;
  if (c->kind == GANG_COLL_ALL_TO_ALL_V) {
    for (size_t i = 0; i < n; i++) {
      tin += c->in_counts[i];
      tout += c->out_counts[i];
    }
    counts = 2 * n * sizeof(size_t);
  }
  size_t in = 0, out = 0;
  GANG_CHECK(gang__baby_need(p, g->size, tin, tout, &in, &out));
  size_t len = align_up(counts) + align_up(in) + align_up(out);
  size_t off = 0;
  GANG_CHECK(region_alloc(ch, len, &off));
  p->counts_off = off;
  p->in_off = off + align_up(counts);
  p->in_len = in;
  p->out_off = p->in_off + align_up(in);
  p->out_len = out;
  p->map_len = ch->p.cap;
  *x = (baby_work){
      .ch = ch, .off = off, .len = len, .out_off = p->out_off, .out_len = out};
  unsigned char *m = ch->p.map;
  size_t bytes = c->count * es;
  switch (c->kind) {
  case GANG_COLL_ALL_REDUCE:
    if (out)
      memcpy(m + p->out_off, c->out, out);
    break;
  case GANG_COLL_BROADCAST:
    if (out && g->rank == c->root)
      memcpy(m + p->out_off, c->out, out);
    break;
  case GANG_COLL_ALL_GATHER:
  case GANG_COLL_ALL_GATHER_LIST: /* into its own slot: gathered in place */
    if (bytes)
      memcpy(m + p->out_off + (size_t)g->rank * bytes, c->in, bytes);
    break;
  case GANG_COLL_ALL_TO_ALL_V:
    memcpy(m + p->counts_off, c->out_counts, n * sizeof(size_t));
    memcpy(m + p->counts_off + n * sizeof(size_t), c->in_counts,
           n * sizeof(size_t));
    /* fall through */
  case GANG_COLL_REDUCE_SCATTER:
  case GANG_COLL_ALL_TO_ALL:
  case GANG_COLL_SEND:
    if (in)
      memcpy(m + p->in_off, c->in, in);
    break;
  default:
    break;
  }
  return GANG_OK;
}

/* Sends a POST the socket had no room for, without the lock: the child
 * is not reading, and the lock must stay free for abort and configure. */
static void send_slow(baby_gang *b, baby_child *ch, gang_work *w,
                      const uint8_t *buf, size_t n, int64_t deadline) {
  ch->sending++;
  for (;;) {
    int fd = ch->p.sock;
    pthread_mutex_unlock(&b->mu);
    struct pollfd pf = {fd, POLLOUT, 0};
    int r = poll(&pf, 1, gang__deadline_poll_ms(deadline));
    pthread_mutex_lock(&b->mu);
    if (ch->dead || done(w))
      break;
    if (r == 0) {
      gang__baby_kill_child(
          ch, GANG_TIMEOUT,
          "the gang-baby child (pid %d) took no request for %s by its "
          "deadline: killed",
          (int)ch->p.pid, gang__coll_name(w->coll.kind));
      break;
    }
    ssize_t s = send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (s == (ssize_t)n)
      break;
    if (s < 0 && errno != EAGAIN && errno != EINTR) {
      lost(ch, errno == EPIPE || errno == ECONNRESET ? 0 : errno);
      break;
    }
  }
  ch->sending--;
}

gang_status gang__baby_post(gang_t *g, const gang__coll *c, gang_work *w) {
  baby_gang *b = g->impl;
  baby_work *x = (baby_work *)(void *)w->inline_state;
  pthread_mutex_lock(&b->mu);
  baby_child *ch = b->current;
  if (ch == NULL) {
    pthread_mutex_unlock(&b->mu);
    /* Not a failure of the gang: configuring makes it usable. */
    gang__error(GANG_INVALID_USAGE,
                "%s on a subprocess gang that is not configured (call "
                "gang_ft_configure first)",
                gang__coll_name(c->kind));
    gang__work_reject(w, GANG_INVALID_USAGE);
    return GANG_OK;
  }
  if (ch->dead) {
    gang__error(ch->fate, "%s: %s", gang__coll_name(c->kind), ch->why);
    pthread_mutex_unlock(&b->mu);
    gang__work_complete(w, ch->fate);
    return GANG_OK;
  }
  baby_post p;
  gang_status st = stage(g, ch, c, x, &p);
  if (st != GANG_OK) {
    pthread_mutex_unlock(&b->mu);
    gang__work_complete(w, st);
    return GANG_OK;
  }
  x->seq = p.seq = ++ch->next_seq;
  ch->tail = x->off + x->len;
  w->impl = x;
  TAILQ_INSERT_TAIL(&ch->queue, w, link);
  uint8_t buf[BABY_MSG_MAX];
  size_t n = gang__baby_put_post(buf, &p);
  ssize_t s = send(ch->p.sock, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (s != (ssize_t)n) {
    if (s < 0 && (errno == EAGAIN || errno == EINTR))
      send_slow(b, ch, w, buf, n, gang__deadline_in_ms(g->timeout_ms));
    else
      lost(ch, s < 0 && errno != EPIPE && errno != ECONNRESET ? errno : 0);
    if (ch->dead && !ch->reading)
      gang__baby_fail_all(ch);
    gang__baby_drop_if_idle(b, ch); /* retired by another thread meanwhile */
  }
  pthread_mutex_unlock(&b->mu);
  return GANG_OK;
}
