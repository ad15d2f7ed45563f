/* See lh_replica.h. */
#include "lh_replica.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/clock.h"

double ms_since(int64_t t0) { return (double)(gang__now_ns() - t0) / 1e6; }

gang_lighthouse *lh_start(int port, int min_replicas, int64_t join_ms,
                          const char *secret) {
  return lh_start_tick(port, min_replicas, join_ms, secret, TICK);
}

gang_lighthouse *lh_start_tick(int port, int min_replicas, int64_t join_ms,
                               const char *secret, int64_t tick_ms) {
  gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.port = port;
  o.min_replicas = min_replicas;
  o.join_timeout_ms = join_ms;
  o.quorum_tick_ms = tick_ms;
  o.heartbeat_timeout_ms = HB_TIMEOUT;
  o.secret = secret;
  gang_lighthouse *lh = NULL;
  assert_gang_ok(gang_lighthouse_start(&o, &lh));
  assert_true(gang_lighthouse_port(lh) > 0);
  return lh;
}

static void *beat_main(void *arg) {
  replica *r = arg;
  pthread_mutex_lock(&r->mu);
  while (!r->stop) {
    pthread_mutex_unlock(&r->mu);
    gang_status s = gang__lh_heartbeat(r->hb, r->id);
    int64_t t = gang__now_ns();
    pthread_mutex_lock(&r->mu);
    if (s != GANG_OK) {
      r->hb_err = s;
      break;
    }
    r->last_beat_ns = t;
    /* A timer, not a synchronisation: stop wakes it at once. */
    int64_t next = t + HB_EVERY * 1000000LL;
    while (!r->stop && gang__now_ns() < next)
      gang__cond_wait_slice(&r->cv, &r->mu, next, HB_EVERY * 1000000LL);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

void replica_start(replica *r, const gang_lighthouse *lh, const char *id) {
  replica_start_port(r, gang_lighthouse_port(lh), id);
}

void replica_start_port(replica *r, int port, const char *id) {
  memset(r, 0, sizeof *r);
  snprintf(r->id, sizeof r->id, "%s", id);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &r->hb));
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &r->jc));
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  /* The first beat before the thread: the replica is registered when
   * this returns. */
  assert_gang_ok(gang__lh_heartbeat(r->hb, r->id));
  r->last_beat_ns = gang__now_ns();
  assert_int_equal(pthread_create(&r->beat_th, NULL, beat_main, r), 0);
  r->beating = true;
}

/* Stops the heartbeats; returns when the last one was sent. */
int64_t replica_silence(replica *r) {
  if (!r->beating)
    return r->last_beat_ns;
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->beat_th, NULL);
  r->beating = false;
  return r->last_beat_ns;
}

static void *join_main(void *arg) {
  replica *r = arg;
  int64_t t0 = gang__now_ns();
  memset(&r->q, 0, sizeof r->q);
  r->jst = gang__lh_join(r->jc, &r->me, r->timeout_ms, &r->q);
  r->took_ms = ms_since(t0);
  if (r->jst != GANG_OK)
    snprintf(r->jerr, sizeof r->jerr, "%s", gang_last_error());
  return NULL;
}

void join_start(replica *r, int64_t step, int64_t failures, bool shrink,
                int64_t timeout_ms) {
  gang__lh_quorum_fini(&r->q);
  memset(&r->me, 0, sizeof r->me);
  snprintf(r->me.replica_id, sizeof r->me.replica_id, "%s", r->id);
  r->me.step = step;
  r->me.world_size = 2;
  r->me.commit_failures = failures;
  r->me.shrink_only = shrink;
  r->timeout_ms = timeout_ms;
  assert_int_equal(pthread_create(&r->join_th, NULL, join_main, r), 0);
  r->joining = true;
}

gang_status join_wait(replica *r) {
  pthread_join(r->join_th, NULL);
  r->joining = false;
  return r->jst;
}

/* A failed join ends the process, not only the test: cmocka's failure
 * unwinds out of the test's frame, where the replicas live, while their
 * heartbeat threads go on reading them. */
void join_ok(replica *r) {
  if (join_wait(r) == GANG_OK)
    return;
  fprintf(stderr, "FAILED: %s: join failed (%d): %s\n", r->id, r->jst, r->jerr);
  fflush(NULL);
  _exit(1);
}

void replica_free(replica *r) {
  if (r->joining)
    join_wait(r);
  replica_silence(r);
  gang__lh_quorum_fini(&r->q);
  gang__lh_close(r->hb);
  gang__lh_close(r->jc);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

const char *ids_of(const gang__lh_quorum *q) {
  static char buf[512];
  buf[0] = '\0';
  for (int i = 0; i < q->n; i++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "",
             q->members[i].replica_id);
  return buf;
}

/* Every replica of r[0..n) joins; all must get the same quorum, which is
 * returned through r[0].q. Returns the slowest join's time. */
double round_all(replica *r, int n, int64_t failures_of_first) {
  for (int i = 0; i < n; i++)
    join_start(&r[i], 10, i == 0 ? failures_of_first : 0, false, 20000);
  double slowest = 0;
  for (int i = 0; i < n; i++) {
    join_ok(&r[i]);
    if (r[i].took_ms > slowest)
      slowest = r[i].took_ms;
    assert_int_equal(r[i].q.quorum_id, r[0].q.quorum_id);
    assert_int_equal(r[i].q.round, r[0].q.round);
  }
  return slowest;
}
