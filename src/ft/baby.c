/* The subprocess gang (gang/ft.h, gang_baby_create; torchft's
 * ProcessGroupBaby): a gang_t whose communicator lives in a child process,
 * the gang-baby program, so that a communicator that hangs or crashes costs
 * a child, never the caller's process. baby.h describes the protocol,
 * baby_proc.c starts and ends children, baby_works.c runs works; this file
 * is the gang's life.
 *
 * Shaped like the reconfigurable gang (reconfig.c): each child is an
 * incarnation with the works posted to it; a configure retires the current
 * one, killing it if it has works in flight (they end with GANG_ABORTED,
 * without breaking the next incarnation) and letting an idle one exit by
 * itself, so its peers get a goodbye rather than a crash, then starts the
 * next. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "baby_gang.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/options.h"
#include "ft_impl.h"

/* How long an idle child gets to destroy its gang and exit. */
#define STOP_GRACE_MS 2000

/* ---- Configure, abort, destroy ------------------------------------------ */

/* Takes the current child out of service: killed with its works if it has
 * any, else asked to leave (it destroys its gang, saying goodbye to its
 * peers, which may still be reading its part of the last collective). */
static void retire(baby_gang *b, int64_t deadline) {
  baby_child *ch = b->current;
  if (ch == NULL)
    return;
  b->current = NULL;
  ch->retired = true;
  ch->next = b->retired;
  b->retired = ch;
  if (!ch->dead && (!TAILQ_EMPTY(&ch->queue) || ch->sending > 0)) {
    gang__baby_kill_child(
        ch, GANG_ABORTED,
        "the subprocess gang was configured again: its gang-baby child "
        "(pid %d) was killed with this work in flight",
        (int)ch->p.pid);
    pthread_cond_broadcast(&b->cv);
  } else if (!ch->dead) {
    /* Idle and unreachable now: nobody else touches it. */
    pthread_mutex_unlock(&b->mu);
    gang__baby_stop(&ch->p, deadline);
    pthread_mutex_lock(&b->mu);
    ch->dead = true;
    ch->fate = GANG_ABORTED;
  }
  if (!ch->reading)
    gang__baby_fail_all(ch);
  gang__baby_drop_if_idle(b, ch);
}

/* Waits for READY until deadline. */
static gang_status await_ready(baby_child *ch, int64_t deadline,
                               baby_reply *r) {
  uint8_t buf[BABY_MSG_MAX + 1];
  for (;;) {
    struct pollfd pf = {ch->p.sock, POLLIN, 0};
    int k = poll(&pf, 1, gang__deadline_poll_ms(deadline));
    if (k == 0)
      return gang__error(GANG_TIMEOUT,
                         "the gang-baby child (pid %d) was not ready by the "
                         "deadline: killed",
                         (int)ch->p.pid);
    if (k < 0 && errno == EINTR)
      continue;
    ssize_t n = recv(ch->p.sock, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (n <= 0) {
      gang__baby_kill(&ch->p);
      char how[160];
      gang__baby_describe_exit(&ch->p, how, sizeof how);
      return gang__error(GANG_PEER_LOST,
                         "the gang-baby child (pid %d) %s before it was ready "
                         "(its stderr says why)",
                         (int)ch->p.pid, how);
    }
    if ((size_t)n > BABY_MSG_MAX)
      return gang__error(GANG_PROTOCOL,
                         "the gang-baby child (pid %d) sent %zd bytes",
                         (int)ch->p.pid, n);
    return gang__baby_get_reply(buf, (size_t)n, BABY_READY, r);
  }
}

static gang_status baby_configure(gang_t *g, const char *store_addr, int rank,
                                  int size, int64_t timeout_ms) {
  baby_gang *b = g->impl;
  int64_t ms = timeout_ms > 0 ? timeout_ms : g->timeout_ms;
  int64_t deadline = gang__deadline_in_ms(ms);
  GANG_ARG_CHECK(strlen(store_addr) <= BABY_ADDR_MAX, "gang_ft_configure",
                 "store_addr has %zu bytes, the subprocess gang takes %d",
                 strlen(store_addr), BABY_ADDR_MAX);
  int64_t grace = gang__deadline_in_ms(STOP_GRACE_MS);
  pthread_mutex_lock(&b->mu);
  retire(b, grace < deadline ? grace : deadline);
  pthread_mutex_unlock(&b->mu);
  baby_child *ch = calloc(1, sizeof *ch);
  if (ch == NULL)
    return gang__error(GANG_NO_MEMORY, "gang_ft_configure: out of memory");
  TAILQ_INIT(&ch->queue);
  /* Started before the claim, which then overlaps its exec; and a missing
   * program spends no prefix. */
  gang_status st = gang__baby_spawn(&ch->p);
  if (st != GANG_OK) {
    free(ch);
    return st;
  }
  int left = gang__deadline_poll_ms(deadline);
  st = gang__ft_claim_prefix(store_addr, size, left < 0 ? 60000 : left);
  if (st != GANG_OK) {
    gang__baby_stop(&ch->p, gang__deadline_in_ms(STOP_GRACE_MS));
    gang__baby_release(&ch->p);
    free(ch);
    return st;
  }
  /* The child's rendezvous ends a little before the parent's deadline, so
   * its own error (which rank never came) arrives rather than a kill. */
  left = gang__deadline_poll_ms(deadline);
  int64_t margin = left / 10 < 2000 ? left / 10 : 2000;
  baby_hello h = {.rank = rank,
                  .size = size,
                  .timeout_ms = left < 0            ? -1
                                : left - margin > 0 ? left - margin
                                                    : 1,
                  .device_type = (int32_t)b->opts.device.type,
                  .device_index = b->opts.device.index};
  snprintf(h.store_addr, sizeof h.store_addr, "%s", store_addr);
  snprintf(h.host, sizeof h.host, "%s", b->host);
  uint8_t buf[BABY_MSG_MAX];
  size_t n = gang__baby_put_hello(buf, &h);
  baby_reply r = {0};
  if (send(ch->p.sock, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n)
    st = gang__error_errno(GANG_PEER_LOST, errno,
                           "the gang-baby child (pid %d) took no hello",
                           (int)ch->p.pid);
  else
    st = await_ready(ch, deadline, &r);
  if (st == GANG_OK && r.status != GANG_OK)
    st = gang__error(r.status > GANG_NOT_FOUND ? GANG_PROTOCOL : r.status,
                     "%s (in the gang-baby child, pid %d)", r.detail,
                     (int)ch->p.pid);
  if (st != GANG_OK) {
    gang__baby_kill(&ch->p);
    gang__baby_release(&ch->p);
    free(ch);
    return gang__error_wrap(st,
                            "gang_ft_configure (subprocess gang) as rank %d "
                            "of %d at '%s'",
                            rank, size, store_addr);
  }
  pthread_mutex_lock(&b->mu);
  b->current = ch;
  gang__ft_reset(g, rank, size);
  pthread_mutex_unlock(&b->mu);
  return GANG_OK;
}

static bool baby_configured(const gang_t *g) {
  baby_gang *b = g->impl;
  pthread_mutex_lock(&b->mu);
  baby_child *ch = b->current;
  bool up = ch != NULL && !ch->dead;
  if (up) {
    /* A child that died unseen: its end of the socket has closed. */
    struct pollfd pf = {ch->p.sock, 0, 0};
    up = !(poll(&pf, 1, 0) == 1 && (pf.revents & (POLLHUP | POLLERR)));
  }
  pthread_mutex_unlock(&b->mu);
  return up;
}

static const gang__ft_ops baby_ft_ops = {.configure = baby_configure,
                                         .configured = baby_configured};

static gang_status baby_subgang(gang_t *g, const int *ranks, int n, int index,
                                gang_t **out) {
  (void)g, (void)ranks, (void)n, (void)index, (void)out;
  /* A sub-gang shares its parent's connections, so it would have to live
   * in the same child and die with it at the next configure; torchft's
   * ProcessGroupBaby has none either. */
  return gang__error(GANG_NOT_SUPPORTED,
                     "a subprocess gang has no sub-gangs: its communicator "
                     "lives in a child process that every gang_ft_configure "
                     "replaces. Make the sub-gang from a direct gang, or make "
                     "a subprocess gang of its own for those ranks");
}

static void baby_abort(gang_t *g) {
  baby_gang *b = g->impl;
  pthread_mutex_lock(&b->mu);
  baby_child *ch = b->current;
  if (ch != NULL && !ch->dead) {
    gang__baby_kill_child(
        ch, GANG_ABORTED,
        "aborted (gang_abort): the gang-baby child (pid %d) was killed",
        (int)ch->p.pid);
    if (!ch->reading)
      gang__baby_fail_all(ch);
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
}

static void baby_destroy(gang_t *g) {
  baby_gang *b = g->impl;
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  retire(b, gang__deadline_in_ms(STOP_GRACE_MS));
  /* Works of retired children can no longer be waited for. */
  for (baby_child *ch = b->retired, *next; ch; ch = next) {
    next = ch->next;
    gang__baby_kill(&ch->p);
    gang__baby_release(&ch->p);
    free(ch);
  }
  pthread_mutex_unlock(&b->mu);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

static const gang__ops baby_ops = {
    .name = "subprocess",
    .simulated = false,
    .post = gang__baby_post,
    .wait = gang__baby_wait,
    .test = gang__baby_test,
    .subgang = baby_subgang,
    .abort = baby_abort,
    .destroy = baby_destroy,
    .ft = &baby_ft_ops,
};

gang_status gang_baby_create(const gang_options *opts, gang_t **out) {
  GANG_ARG_CHECK(out != NULL, "gang_baby_create", "out is NULL");
  baby_gang *b = calloc(1, sizeof *b);
  if (b == NULL)
    return gang__error(GANG_NO_MEMORY, "gang_baby_create: out of memory");
  gang_options o = GANG_OPTIONS_INIT;
  o.device = GANG__OPTS_GET(gang_options, opts, device, o.device);
  o.timeout_ms = GANG__OPTS_GET(gang_options, opts, timeout_ms, 0);
  const char *host = GANG__OPTS_GET(gang_options, opts, host, NULL);
  if (host != NULL)
    snprintf(b->host, sizeof b->host, "%s", host);
  b->opts = o;
  pthread_mutex_init(&b->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&b->cv, &ca);
  pthread_condattr_destroy(&ca);
  gang_status st = gang__new(&baby_ops, b, -1, 0, o.device, o.timeout_ms, out);
  if (st != GANG_OK) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
  }
  return st;
}
