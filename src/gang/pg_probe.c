/* The world's link model (docs/algorithms.md, "The link model"): alpha
 * and beta, the costs the TCP path chooses algorithms by. Set by
 * GANG_NET_LATENCY_US / GANG_NET_BANDWIDTH, or, in a world over several
 * hosts where neither is set (and GANG_NET_PROBE is on), measured at
 * creation between rank 0 and the first rank on another host: the
 * fastest of nine 8-byte round trips gives alpha (a busy machine only
 * adds to a round trip: the median of nine was 1.9x the delay beside
 * other tests), a 1 MiB send answered by 8 bytes gives beta. Then every
 * rank runs a few rounds of a dissemination (each sends 8 bytes 2^k ranks
 * on and receives from 2^k back, as the steps of recursive doubling and
 * halving do), and alpha becomes their mean round where that is more:
 * a step of the whole world also waits for its peers to get a CPU and
 * for a switch carrying every rank's messages at once, which one pair
 * alone does not see. Likewise beta: the first rank of each host sends
 * 1 MiB to the next host's, all at once, and beta becomes what a byte
 * took there where that is more; the pair's is kept as one flow's alone
 * (a tree's first steps, with fewer senders than hosts).
 * Rank 0 publishes the model in the store and every rank takes it, so all
 * choose alike. A process measures once: the worlds it creates later (a
 * fault-tolerant job's reconfigurations) take the first measurement. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/mix.h"
#include "pg_internal.h"

#define PROBE_ROUNDS 9                /* timed 8-byte round trips */
#define PROBE_BYTES ((size_t)1 << 20) /* the bandwidth probe's message */
#define PROBE_SENDS 2
#define PROBE_WORLD_REPS 7  /* timed dissemination barriers of the world */
#define PROBE_STREAM_REPS 5 /* timed exchanges of every host's first rank */

/* The settings' model, checked. */
static gang_status set_model(double *alpha_ns, double *beta_ns) {
  int64_t us = 0, bw = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_NET_LATENCY_US, &us));
  GANG_CHECK(gang__setting_int(GANG_SETTING_NET_BANDWIDTH, &bw));
  if (us < 1 || us > 1000000 || bw < 1)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "GANG_NET_LATENCY_US must be in [1, 1000000] and "
                       "GANG_NET_BANDWIDTH at least 1 (bytes per second), "
                       "not %lld and %lld",
                       (long long)us, (long long)bw);
  *alpha_ns = (double)us * 1000;
  *beta_ns = 1e9 / (double)bw;
  return GANG_OK;
}

static uint64_t probe_ctx(void) {
  return gang__mix64(0x6e657470726f6265ull) & ~PG_P2P_CTX_BIT;
}

/* One message of len bytes to (send) or from world rank peer. */
static gang_status move(pg_world *w, int peer, bool send, void *buf, size_t len,
                        uint32_t tag, int64_t deadline) {
  gang__xfer x = {.peer = peer,
                  .send = send,
                  .tag = tag,
                  .ctx = probe_ctx(),
                  .seq = 0,
                  .buf = buf,
                  .len = len};
  return gang__fabric_run(w->fabric, &x, 1, deadline, "link probe");
}

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static bool cached;
static double cached_alpha_ns, cached_beta_ns, cached_beta_one_ns;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Rank 0's side (leads) or the peer's; rank 0 gets the model. */
static gang_status probe(pg_world *w, int peer, bool leads, int64_t deadline,
                         double *alpha_ns, double *beta_ns) {
  char small[8] = {0};
  char *big = malloc(PROBE_BYTES);
  if (big == NULL)
    return gang__error(GANG_NO_MEMORY, "link probe: out of memory");
  memset(big, 0, PROBE_BYTES);
  int64_t rtt[PROBE_ROUNDS], one[PROBE_SENDS];
  gang_status st = GANG_OK;
  uint32_t tag = 0;
  for (int i = 0; i <= PROBE_ROUNDS && st == GANG_OK; i++, tag += 2) {
    int64_t t0 = gang__now_ns();
    if (leads) {
      st = move(w, peer, true, small, sizeof small, tag, deadline);
      if (st == GANG_OK)
        st = move(w, peer, false, small, sizeof small, tag + 1, deadline);
    } else {
      st = move(w, peer, false, small, sizeof small, tag, deadline);
      if (st == GANG_OK)
        st = move(w, peer, true, small, sizeof small, tag + 1, deadline);
    }
    if (i > 0) /* the first one warms the connection up */
      rtt[i - 1] = gang__now_ns() - t0;
  }
  for (int i = 0; i < PROBE_SENDS && st == GANG_OK; i++, tag += 2) {
    int64_t t0 = gang__now_ns();
    if (leads) {
      st = move(w, peer, true, big, PROBE_BYTES, tag, deadline);
      if (st == GANG_OK)
        st = move(w, peer, false, small, sizeof small, tag + 1, deadline);
    } else {
      st = move(w, peer, false, big, PROBE_BYTES, tag, deadline);
      if (st == GANG_OK)
        st = move(w, peer, true, small, sizeof small, tag + 1, deadline);
    }
    one[i] = gang__now_ns() - t0;
  }
  free(big);
  if (st != GANG_OK || !leads)
    return st;
  qsort(rtt, PROBE_ROUNDS, sizeof rtt[0], cmp_i64);
  qsort(one, PROBE_SENDS, sizeof one[0], cmp_i64);
  double r = (double)rtt[0];
  *alpha_ns = r / 2 > 1000 ? r / 2 : 1000; /* at least 1 us */
  /* The send and its 8-byte answer: 2 alpha + PROBE_BYTES beta. */
  double b = ((double)one[0] - r) / (double)PROBE_BYTES;
  *beta_ns = b > 0.01 ? b : 0.01; /* at most 100 GB/s */
  return GANG_OK;
}

/* Every rank: PROBE_WORLD_REPS dissemination barriers after one to warm
 * up, and one more after them, untimed; *round_ns (rank 0's) gets the
 * timed ones' mean round. The mean, not a median of barriers: ranks enter
 * skewed (rank 0's probe peer ends it a one-way delay sooner), and a skew
 * between two ranks lasts through exchanges, one rank's round the delay
 * plus the skew and the next's the delay less it, so single barriers
 * scatter where their sum does not. The last barrier keeps the timed ones
 * clear of world_stream: a rank that left the last timed barrier before
 * rank 0 would start its 1 MiB send, and rank 0's last message would
 * queue behind it on a switch (the box's hub put up to 7 ms on that
 * barrier's rounds, 1.5-2x the world's alpha). No rank leaves the
 * untimed barrier before every rank entered it. Tags from 1000 on (the
 * pair's are below). */
static gang_status world_rounds(pg_world *w, int rank, int size,
                                int64_t deadline, double *round_ns) {
  int rounds = 0;
  for (int d = 1; d < size; d *= 2)
    rounds++;
  char out[8] = {0}, in[8];
  uint32_t tag = 1000;
  int64_t t0 = 0;
  int64_t t1 = 0;
  for (int rep = 0; rep <= PROBE_WORLD_REPS + 1; rep++) {
    if (rep == 1)
      t0 = gang__now_ns();
    else if (rep == PROBE_WORLD_REPS + 1)
      t1 = gang__now_ns();
    for (int d = 1; d < size; d *= 2, tag++) {
      gang__xfer x[2] = {{.peer = (rank + d) % size,
                          .send = true,
                          .tag = tag,
                          .ctx = probe_ctx(),
                          .buf = out,
                          .len = sizeof out},
                         {.peer = (rank - d + size) % size,
                          .send = false,
                          .tag = tag,
                          .ctx = probe_ctx(),
                          .buf = in,
                          .len = sizeof in}};
      GANG_CHECK(gang__fabric_run(w->fabric, x, 2, deadline, "link probe"));
    }
  }
  *round_ns = (double)(t1 - t0) / (PROBE_WORLD_REPS * rounds);
  return GANG_OK;
}

/* The first rank of each host sends PROBE_BYTES to the next host's and
 * receives the previous host's, all at once, PROBE_STREAM_REPS times
 * after one to warm up; *beta_ns (rank 0's) gets what a byte of the
 * median exchange took beyond alpha_ns (1 MiB exchanges last long beside
 * the ranks' skew, and the median leaves out a descheduled one): a link's
 * bandwidth while every host's is busy, as in the steps of a collective, where
 * a switch (or the box's hub) carries them all. Tags from 2000 on. */
static gang_status world_stream(pg_world *w, int rank, int size,
                                int64_t deadline, double alpha_ns,
                                double *beta_ns) {
  int *lead = malloc(sizeof *lead * (size_t)size);
  if (lead == NULL)
    return gang__error(GANG_NO_MEMORY, "link probe: out of memory");
  int h = 0, me = -1;
  for (int i = 0; i < size; i++)
    if (w->hosts[i] == i) { /* the first rank of its host */
      if (i == rank)
        me = h;
      lead[h++] = i;
    }
  if (me < 0 || h < 2) {
    free(lead);
    return GANG_OK;
  }
  char *buf = malloc(2 * PROBE_BYTES);
  if (buf == NULL) {
    free(lead);
    return gang__error(GANG_NO_MEMORY, "link probe: out of memory");
  }
  memset(buf, 0, PROBE_BYTES);
  gang_status st = GANG_OK;
  int64_t t[PROBE_STREAM_REPS];
  for (int rep = 0; rep <= PROBE_STREAM_REPS && st == GANG_OK; rep++) {
    int64_t t0 = gang__now_ns();
    gang__xfer x[2] = {{.peer = lead[(me + 1) % h],
                        .send = true,
                        .tag = 2000 + (uint32_t)rep,
                        .ctx = probe_ctx(),
                        .buf = buf,
                        .len = PROBE_BYTES},
                       {.peer = lead[(me - 1 + h) % h],
                        .send = false,
                        .tag = 2000 + (uint32_t)rep,
                        .ctx = probe_ctx(),
                        .buf = buf + PROBE_BYTES,
                        .len = PROBE_BYTES}};
    st = gang__fabric_run(w->fabric, x, 2, deadline, "link probe");
    if (rep > 0) /* the first one warms the connections up */
      t[rep - 1] = gang__now_ns() - t0;
  }
  if (st == GANG_OK) {
    qsort(t, PROBE_STREAM_REPS, sizeof t[0], cmp_i64);
    double one = (double)t[PROBE_STREAM_REPS / 2];
    *beta_ns = (one - alpha_ns) / (double)PROBE_BYTES;
  }
  free(buf);
  free(lead);
  return st;
}

gang_status gang__pg_net_model(pg_world *w, int rank, int size, double crowd,
                               int64_t deadline) {
  GANG_CHECK(set_model(&w->net_alpha_ns, &w->net_beta_ns));
  w->net_beta_one_ns = 0;
  if (w->store == NULL)
    return GANG_OK;
  int peer = -1;
  for (int i = 1; w->hosts != NULL && i < size && peer < 0; i++)
    if (w->hosts[i] != w->hosts[0])
      peer = i;
  int64_t on = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_NET_PROBE, &on));
  /* Every rank decides alike: the host table is the same everywhere, and
   * a setting differing between ranks only decides whether rank 0 asks
   * the peer, which it publishes below. */
  bool set = gang__setting_is_set(GANG_SETTING_NET_LATENCY_US) ||
             gang__setting_is_set(GANG_SETTING_NET_BANDWIDTH);
  char text[128];
  if (rank == 0) {
    const char *how = "set";
    bool measure = peer >= 0 && on && !set, probed = measure;
    pthread_mutex_lock(&cache_mu);
    if (measure && cached) {
      w->net_alpha_ns = cached_alpha_ns;
      w->net_beta_ns = cached_beta_ns;
      w->net_beta_one_ns = cached_beta_one_ns;
      measure = false;
      how = "measured earlier";
    }
    pthread_mutex_unlock(&cache_mu);
    char plan[16];
    snprintf(plan, sizeof plan, "%d", measure ? peer : -1);
    GANG_CHECK(
        gang_store_set(w->store, "pg/net-probe", plan, strlen(plan) + 1));
    double round_ns = 0;
    if (measure) {
      GANG_CHECK(
          probe(w, peer, true, deadline, &w->net_alpha_ns, &w->net_beta_ns));
      GANG_CHECK(world_rounds(w, rank, size, deadline, &round_ns));
      if (round_ns > w->net_alpha_ns)
        w->net_alpha_ns = round_ns;
      double beta = 0;
      GANG_CHECK(world_stream(w, rank, size, deadline, w->net_alpha_ns, &beta));
      /* The pair's beta is one flow alone; the world's, every host's
       * first rank sending at once (the box's hub: 0.12-0.16 GB/s
       * against 0.04 for 4 hosts at once). */
      if (beta > w->net_beta_ns) {
        w->net_beta_one_ns = w->net_beta_ns;
        w->net_beta_ns = beta;
      }
      how = "measured";
      pthread_mutex_lock(&cache_mu);
      cached = true;
      cached_alpha_ns = w->net_alpha_ns;
      cached_beta_ns = w->net_beta_ns;
      cached_beta_one_ns = w->net_beta_one_ns;
      pthread_mutex_unlock(&cache_mu);
    }
    /* With more of the world's ranks than CPUs on the machine, a step
     * of an exchange waits for its peer to get a CPU: at 8 ranks on 2
     * CPUs the ring's 14 steps took 2x halving-doubling's 6 at 2 MiB,
     * where the probe's alpha (taken while the others sat idle) chose
     * the ring (docs/algorithms.md, "The link model"). A measured model
     * has that in its world's rounds; the settings' is scaled. */
    char with[192] = "";
    int o = 0;
    if (measure)
      o = snprintf(with, sizeof with,
                   " between rank 0 and rank %d; the world's round %.1f us",
                   peer, round_ns / 1000);
    if (w->net_beta_one_ns > 0)
      o += snprintf(with + o, sizeof with - (size_t)o, "; one flow %.3g GB/s",
                    1 / w->net_beta_one_ns);
    if (!set && !probed && crowd > 1) {
      w->net_alpha_ns *= crowd;
      snprintf(with + o, sizeof with - (size_t)o,
               "; alpha x%.2g, the world's ranks per CPU here", crowd);
    }
    snprintf(text, sizeof text, "%.17g %.17g %.17g %s", w->net_alpha_ns,
             w->net_beta_ns, w->net_beta_one_ns, how);
    GANG_INFO(INIT, "link model: alpha %.1f us, bandwidth %.3g GB/s (%s%s)",
              w->net_alpha_ns / 1000, 1 / w->net_beta_ns, how, with);
    return gang_store_set(w->store, "pg/net", text, strlen(text) + 1);
  }
  void *v = NULL;
  size_t len = 0;
  GANG_CHECK(gang_store_get(w->store, "pg/net-probe", &v, &len));
  int asked = len > 0 && ((char *)v)[len - 1] == '\0' ? atoi(v) : -2;
  gang_store_free(v);
  if (asked == rank) {
    double a, b;
    GANG_CHECK(probe(w, 0, false, deadline, &a, &b));
  }
  if (asked > 0) { /* rank 0 measures: the world's rounds, everyone */
    double round_ns, beta;
    GANG_CHECK(world_rounds(w, rank, size, deadline, &round_ns));
    GANG_CHECK(world_stream(w, rank, size, deadline, 0, &beta));
  }
  GANG_CHECK(gang_store_get(w->store, "pg/net", &v, &len));
  double a = 0, b = 0, one = -1;
  bool ok = len > 0 && len <= sizeof text && ((char *)v)[len - 1] == '\0' &&
            sscanf(v, "%lf %lf %lf", &a, &b, &one) == 3 && a > 0 && b > 0 &&
            one >= 0;
  gang_store_free(v);
  if (!ok)
    return gang__error(GANG_PROTOCOL,
                       "rank 0's link model in the store is not two positive "
                       "numbers and a third not negative");
  w->net_alpha_ns = a;
  w->net_beta_ns = b;
  w->net_beta_one_ns = one;
  return GANG_OK;
}
