/* The TCP fabric's progress engine (fabric_internal.h): registering
 * transfers, the pass over every connection, and the wait loop in which
 * whichever thread waits drives the I/O of every registered transfer
 * (fabric.h describes it). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "fabric_internal.h"

static void progress(gang__fabric *f);

void gang__fabric_set_oversubscribed(gang__fabric *f) {
  if (gang__setting_is_set(GANG_SETTING_TCP_SPIN_US))
    return;
  pthread_mutex_lock(&f->mu);
  if (f->spin_ns > 50000)
    f->spin_ns = 50000;
  f->busy_ns = 0;
  pthread_mutex_unlock(&f->mu);
}

gang_status gang__fabric_poke(gang__fabric *f) {
  pthread_mutex_lock(&f->mu);
  if (f->failed == GANG_OK && !f->driving) {
    f->driving = true;
    progress(f);
    f->driving = false;
    pthread_cond_broadcast(&f->cv);
  }
  gang_status st = f->failed;
  pthread_mutex_unlock(&f->mu);
  return st;
}

/* ---- Registration and the wait loop -------------------------------------- */

static void register_xfer(gang__fabric *f, gang__xfer *x) {
  gang__fabric_conn *c = &f->conns[x->peer];
  x->linked = false;
  x->off = 0;
  x->lost_bet = false;
  x->done = false;
  if (x->send) {
    if (c->bye) { /* it said goodbye: nobody will read this */
      gang__fabric_left_before(f, c);
      return;
    }
    TAILQ_INSERT_TAIL(&c->sq, x, link);
    x->linked = true;
    return;
  }
  /* An unexpected message that already (partly) arrived? FIFO order. */
  umsg *u;
  TAILQ_FOREACH(u, &c->uq, link) {
    if (u->waiting != NULL || u->ctx != x->ctx || u->seq != x->seq ||
        u->tag != x->tag)
      continue;
    if (u->len != x->len) {
      gang__fabric_mismatch(f, c, x, u->len);
      return;
    }
    if (u->got == u->len && c->rum != u) {
      gang__fabric_deliver(f, c, u, x);
    } else {
      u->waiting = x;
    }
    return;
  }
  /* A peer that left can have sent this before it did, but nothing more. */
  if (c->dead && c->bye) {
    gang__fabric_left_before(f, c);
    return;
  }
  TAILQ_INSERT_TAIL(&c->posted, x, link);
  x->linked = true;
}

/* Whether c has bytes to take in without a read: a frame staged by an
 * earlier read, or a payload in progress (one that waits for its receive
 * to be posted is held in user space). */
static bool has_local(const gang__fabric_conn *c) {
  return c->s_end > c->s_off || c->in_payload;
}

/* Of the connections, those worth a pass: all of them, or, from
 * PASS_POLL_MIN connections on, those a zero-timeout poll() finds readable
 * (or hung up) and those with bytes already in user space or sends queued.
 * One poll() then replaces a recv() per connection that would mostly find
 * nothing: at 8 ranks, 7 syscalls per pass of a waiting rank, on a machine
 * where the ranks it waits for need the CPU. Returns how many peers it put
 * in f->pass_peer, or -1: pass over all. */
#define PASS_POLL_MIN 3
static int pass_peers(gang__fabric *f) {
  if (f->size - 1 < PASS_POLL_MIN)
    return -1;
  if (f->pass_fds == NULL) {
    f->pass_fds = malloc(sizeof *f->pass_fds * (size_t)f->size);
    f->pass_peer = malloc(sizeof *f->pass_peer * (size_t)f->size);
    if (f->pass_fds == NULL || f->pass_peer == NULL) {
      free(f->pass_fds);
      free(f->pass_peer);
      f->pass_fds = NULL;
      f->pass_peer = NULL;
      return -1;
    }
  }
  int n = 0;
  for (int p = 0; p < f->size; p++) {
    gang__fabric_conn *c = &f->conns[p];
    if (p == f->rank || c->dead)
      continue;
    f->pass_fds[n] = (struct pollfd){c->fd, POLLIN | POLLRDHUP, 0};
    f->pass_peer[n++] = p;
  }
  if (n < PASS_POLL_MIN) /* peers gone: a recv each is cheaper */
    return -1;
  if (poll(f->pass_fds, (nfds_t)n, 0) < 0)
    return -1;
  int k = 0;
  for (int i = 0; i < n; i++) {
    gang__fabric_conn *c = &f->conns[f->pass_peer[i]];
    if (f->pass_fds[i].revents != 0 || has_local(c) || !TAILQ_EMPTY(&c->sq))
      f->pass_peer[k++] = f->pass_peer[i];
  }
  return k;
}

/* Non-blocking pass over the connections (pass_peers). Under f->mu. */
static void progress(gang__fabric *f) {
  int k = pass_peers(f);
  int count = k < 0 ? f->size : k;
  for (int i = 0; i < count && f->failed == GANG_OK; i++) {
    int p = k < 0 ? i : f->pass_peer[i];
    if (p == f->rank || f->conns[p].dead)
      continue;
    gang__fabric_conn *c = &f->conns[p];
    /* Read first: a goodbye waiting in the socket must fail a send to that
     * peer instead of letting it vanish into a closing connection. Unless
     * the head send is one half of an exchange with this peer whose other
     * half has not arrived yet: the goodbye fails that receive (and the
     * exchange), so the send can go first and not wait behind a read that
     * finds nothing, a syscall on the exchange's critical path (measured:
     * 10.2 -> 9.0 µs per 8-byte all_reduce over TCP). Any other posted
     * receive proves nothing: it may be satisfied before the goodbye. */
    const gang__xfer *h = TAILQ_FIRST(&c->sq);
    if (h != NULL && h->pace != NULL && h->pace->peer == p && !h->pace->done) {
      gang__fabric_push_sends(f, c);
      if (f->failed == GANG_OK)
        gang__fabric_pull(f, c);
    } else {
      gang__fabric_pull(f, c);
      if (f->failed == GANG_OK)
        gang__fabric_push_sends(f, c);
    }
  }
}

/* Sleeps in poll() until some connection is ready, the wake fd fires or
 * `deadline`. Releases f->mu while sleeping. */
static void sleep_in_poll(gang__fabric *f, int64_t deadline) {
  struct pollfd stackfds[64];
  struct pollfd *fds = stackfds;
  if (f->size + 1 > 64)
    fds = malloc(sizeof *fds * (size_t)(f->size + 1));
  if (fds == NULL)
    return;
  int n = 0;
  fds[n++] = (struct pollfd){f->wakefd, POLLIN, 0};
  for (int p = 0; p < f->size; p++) {
    gang__fabric_conn *c = &f->conns[p];
    if (p == f->rank || c->dead)
      continue;
    /* A stalled connection has data we do not want yet: watch it only for
     * the peer hanging up. */
    short in = gang__fabric_stalled(c) ? POLLRDHUP : POLLIN;
    const gang__xfer *h = TAILQ_FIRST(&c->sq);
    bool out = h != NULL && h->off < gang__fabric_send_limit(f, h);
    fds[n++] = (struct pollfd){c->fd, (short)(in | (out ? POLLOUT : 0)), 0};
  }
  int ms = gang__deadline_poll_ms(deadline);
  if (ms < 0 || ms > 1000)
    ms = 1000; /* re-check state now and then */
  f->polling = true;
  pthread_mutex_unlock(&f->mu);
  int r = poll(fds, (nfds_t)n, ms);
  if (r > 0 && (fds[0].revents & POLLIN)) {
    uint64_t v;
    (void)!read(f->wakefd, &v, sizeof v);
  }
  pthread_mutex_lock(&f->mu);
  f->polling = false;
  for (int i = 1; r > 0 && i < n; i++) {
    if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
      continue;
    for (int p = 0; p < f->size; p++)
      if (p != f->rank && f->conns[p].fd == fds[i].fd)
        f->conns[p].hup = true;
  }
  if (fds != stackfds)
    free(fds);
}

static void describe_pending(gang__xfer *x, int n, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o + 64 < cap; i++) {
    if (x[i].done)
      continue;
    o += (size_t)snprintf(buf + o, cap - o, "%s%s rank %d (tag %u)",
                          o ? ", " : "", x[i].send ? "send to" : "receive from",
                          x[i].peer, x[i].tag);
  }
}

static gang_status failure_locked(gang__fabric *f, const char *what) {
  gang_status st = f->failed;
  char d[1024];
  snprintf(d, sizeof d, "%s", f->fail_detail);
  pthread_mutex_unlock(&f->mu);
  /* The reason may already say which operation failed. */
  if (strncmp(d, what, strlen(what)) == 0)
    return gang__error(st, "%s", d);
  return gang__error(st, "%s: %s", what, d);
}

gang_status gang__fabric_start(gang__fabric *f, gang__xfer *x, int n,
                               gang__xgroup *grp, const char *what) {
  pthread_mutex_lock(&f->mu);
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  grp->remaining = n;
  grp->failed = false;
  for (int i = 0; i < n && f->failed == GANG_OK; i++) {
    x[i].grp = grp;
    register_xfer(f, &x[i]);
  }
  if (f->polling) {
    uint64_t one = 1;
    (void)!write(f->wakefd, &one, sizeof one);
  }
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

/* Takes x off its connection's send or receive queue; false if it was on
 * neither (a receive waiting on an early message, or being filled). */
static bool unlink_xfer(gang__fabric_conn *c, gang__xfer *x) {
  if (!x->linked)
    return false;
  if (x->send)
    TAILQ_REMOVE(&c->sq, x, link);
  else
    TAILQ_REMOVE(&c->posted, x, link);
  x->linked = false;
  return true;
}

void gang__fabric_cancel(gang__fabric *f, gang__xfer *x, int n,
                         const char *why) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < n; i++) {
    if (x[i].done || f->failed != GANG_OK)
      continue;
    gang__fabric_conn *c = &f->conns[x[i].peer];
    bool on_wire =
        c->rx == &x[i] || (TAILQ_FIRST(&c->sq) == &x[i] && x[i].off > 0);
    if (on_wire) {
      gang__fabric_fail_locked(f, GANG_ABORTED, why);
      continue;
    }
    if (!unlink_xfer(c, &x[i])) {
      umsg *u;
      TAILQ_FOREACH(u, &c->uq, link)
      if (u->waiting == &x[i])
        u->waiting = NULL;
    }
    gang__fabric_abandon(f, &x[i]);
  }
  /* A failure completed the rest. */
  pthread_mutex_unlock(&f->mu);
}

gang_status gang__fabric_test(gang__fabric *f, gang__xgroup *grp,
                              const char *what, bool *done) {
  pthread_mutex_lock(&f->mu);
  if (f->failed == GANG_OK && grp->remaining > 0 && !f->driving) {
    f->driving = true;
    progress(f);
    f->driving = false;
    pthread_cond_broadcast(&f->cv);
  }
  if (grp->remaining == 0 && !grp->failed) {
    pthread_mutex_unlock(&f->mu);
    *done = true;
    return GANG_OK;
  }
  if (f->failed != GANG_OK)
    return failure_locked(f, what);
  *done = grp->remaining == 0;
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

gang_status gang__fabric_wait(gang__fabric *f, gang__xgroup *grp, gang__xfer *x,
                              int n, int64_t deadline, const char *what) {
  pthread_mutex_lock(&f->mu);
  bool driving = false;
  int64_t spin_until = gang__now_ns() + f->spin_ns;
  uint64_t seen = f->moved;
  while (grp->remaining > 0 && f->failed == GANG_OK) {
    if (!driving && !f->driving)
      f->driving = driving = true;
    if (driving) {
      progress(f);
      /* Others' transfers may have completed too. */
      pthread_cond_broadcast(&f->cv);
      if (grp->remaining == 0 || f->failed != GANG_OK ||
          gang__deadline_passed(deadline))
        break;
      /* Spin while bytes keep moving, and for spin_ns after they stop:
       * a sleep in poll() costs a wake-up on the critical path. */
      int64_t now = gang__now_ns();
      if (f->moved != seen) {
        seen = f->moved;
        spin_until = now + f->spin_ns;
      }
      if (now < spin_until) {
        /* Busy for the first stretch (a reply on another core lands within
         * microseconds), then hand the CPU over between passes in case the
         * peer waits for it. */
        pthread_mutex_unlock(&f->mu);
        if (now - (spin_until - f->spin_ns) >= f->busy_ns)
          sched_yield();
        pthread_mutex_lock(&f->mu);
      } else {
        sleep_in_poll(f, deadline);
      }
    } else {
      if (gang__deadline_passed(deadline))
        break;
      gang__cond_wait_slice(&f->cv, &f->mu, deadline, 10000000);
    }
  }
  if (driving) {
    f->driving = false;
    pthread_cond_broadcast(&f->cv);
  }
  if (grp->remaining > 0 && f->failed == GANG_OK) {
    char pend[512], why[1024];
    describe_pending(x, n, pend, sizeof pend);
    snprintf(why, sizeof why,
             "%s on rank %d: deadline exceeded, still waiting for: %s", what,
             f->rank, pend);
    gang__fabric_fail_locked(f, GANG_TIMEOUT, why);
  }
  if (f->failed != GANG_OK && (grp->remaining > 0 || grp->failed))
    return failure_locked(f, what);
  pthread_mutex_unlock(&f->mu);
  return GANG_OK;
}

gang_status gang__fabric_run(gang__fabric *f, gang__xfer *x, int n,
                             int64_t deadline, const char *what) {
  gang__xgroup grp;
  GANG_CHECK(gang__fabric_start(f, x, n, &grp, what));
  return gang__fabric_wait(f, &grp, x, n, deadline, what);
}
