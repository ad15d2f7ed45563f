/* A lighthouse and replicas as threads, for the lighthouse's tests
 * (test_lighthouse.c, test_lh_hostile.c). Each replica has two clients of
 * its own: one its heartbeat thread uses (every HB_EVERY ms), one its join
 * thread uses. Helpers fail the calling cmocka test on an error. */
#ifndef GANG_TESTS_FT_LH_REPLICA_H
#define GANG_TESTS_FT_LH_REPLICA_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ft/lh_impl.h"
#include "ft/lighthouse.h"
#include "gang/ft.h"

#define TICK 50         /* ms */
#define HB_TIMEOUT 1000 /* ms */
#define HB_EVERY 50     /* ms between a replica's heartbeats */
#define CLIENT_MS 10000 /* connect and default deadline of clients */

typedef struct replica {
  char id[64];
  gang__lh_client *hb, *jc; /* heartbeat thread's, join thread's */
  pthread_t beat_th, join_th;
  bool beating, joining;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  int64_t last_beat_ns;
  gang_status hb_err;
  /* the join in flight */
  gang__lh_member me;
  int64_t timeout_ms;
  gang_status jst;
  gang__lh_quorum q;
  double took_ms;
  char jerr[512];
} replica;

double ms_since(int64_t t0);

/* A lighthouse on 127.0.0.1:port (0: any) with TICK and HB_TIMEOUT. */
gang_lighthouse *lh_start(int port, int min_replicas, int64_t join_ms,
                          const char *secret);
/* The same with a tick of tick_ms. */
gang_lighthouse *lh_start_tick(int port, int min_replicas, int64_t join_ms,
                               const char *secret, int64_t tick_ms);

/* Connects, registers `id` with a first heartbeat, starts heartbeating. */
void replica_start(replica *r, const gang_lighthouse *lh, const char *id);
/* The same with a lighthouse on 127.0.0.1:port (a gang-lighthouse process). */
void replica_start_port(replica *r, int port, const char *id);
/* Stops the heartbeats; returns when the last one was sent. */
int64_t replica_silence(replica *r);
/* Waits for a join in flight, stops, closes, frees. */
void replica_free(replica *r);

/* A join in the background (r->q, r->jst, r->took_ms, r->jerr). */
void join_start(replica *r, int64_t step, int64_t failures, bool shrink,
                int64_t timeout_ms);
gang_status join_wait(replica *r);
void join_ok(replica *r); /* join_wait, which must succeed */

/* The quorum's member ids joined by ',' (a static buffer). */
const char *ids_of(const gang__lh_quorum *q);

/* Every replica of r[0..n) joins (step 10, the first with
 * failures_of_first commit failures); all must get the same quorum, left
 * in each r[i].q. Returns the slowest join's time in ms. */
double round_all(replica *r, int n, int64_t failures_of_first);

#endif
