/* A real lighthouse in this process, replicas as threads with clients of
 * their own (src/ft/lh_client.c): a quorum forms and keeps its id while
 * its members stay, takes a new one on a commit failure; a replica that
 * stops heartbeating is dropped and a failure notice names it within the
 * heartbeat timeout and a tick or two; the split-brain guard holds (2 of
 * 4 heartbeating wait, 2 of 3 do not); a
 * stopped and restarted lighthouse is a new incarnation; old rounds are
 * collected; the status page reads as JSON with a real HTTP client and
 * shrugs off slow and oversize requests; hostile records and the store's
 * hostile-input cases (tests/store/store_cases.c) leave it working.
 *
 * Timings are printed (and bounded loosely, for sanitizer builds on a busy
 * machine): first quorum, fast quorum, time to notice a dead replica. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"
#include "store/store_cases.h"

#include "core/clock.h"
#include "ft/lh_impl.h"
#include "ft/lighthouse.h"
#include "gang/ft.h"
#include "gang/store.h"

#define TICK 50         /* ms */
#define HB_TIMEOUT 1000 /* ms */
#define HB_EVERY 50     /* ms between a replica's heartbeats */
#define CLIENT_MS 10000 /* connect and default deadline of clients */

static double ms_since(int64_t t0) {
  return (double)(gang__now_ns() - t0) / 1e6;
}

static gang_lighthouse *lh_start(int port, int min_replicas, int64_t join_ms,
                                 const char *secret) {
  gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.port = port;
  o.min_replicas = min_replicas;
  o.join_timeout_ms = join_ms;
  o.quorum_tick_ms = TICK;
  o.heartbeat_timeout_ms = HB_TIMEOUT;
  o.secret = secret;
  gang_lighthouse *lh = NULL;
  assert_gang_ok(gang_lighthouse_start(&o, &lh));
  assert_true(gang_lighthouse_port(lh) > 0);
  return lh;
}

/* ---- Replicas -------------------------------------------------------------
 */

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

static void replica_start(replica *r, const gang_lighthouse *lh,
                          const char *id) {
  memset(r, 0, sizeof *r);
  snprintf(r->id, sizeof r->id, "%s", id);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
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
static int64_t replica_silence(replica *r) {
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

static void join_start(replica *r, int64_t step, int64_t failures, bool shrink,
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

static gang_status join_wait(replica *r) {
  pthread_join(r->join_th, NULL);
  r->joining = false;
  return r->jst;
}

static void join_ok(replica *r) {
  if (join_wait(r) != GANG_OK)
    fail_msg("%s: join failed (%d): %s", r->id, r->jst, r->jerr);
}

static void replica_free(replica *r) {
  if (r->joining)
    join_wait(r);
  replica_silence(r);
  gang__lh_quorum_fini(&r->q);
  gang__lh_close(r->hb);
  gang__lh_close(r->jc);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

static const char *ids_of(const gang__lh_quorum *q) {
  static char buf[512];
  buf[0] = '\0';
  for (int i = 0; i < q->n; i++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "",
             q->members[i].replica_id);
  return buf;
}

/* Every replica of r[0..n) joins; all must get the same quorum, which is
 * returned through r[0].q. Returns the slowest join's time. */
static double round_all(replica *r, int n, int64_t failures_of_first) {
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

/* ---- Cases ----------------------------------------------------------------
 */

static void test_quorum_forms_and_keeps_id(void **state) {
  (void)state;
  /* Through an authenticated store, as a job would run it: the lighthouse
   * and its clients take the secret from the environment. Set while no
   * thread of ours runs. */
  setenv("GANG_STORE_SECRET", "lighthouse-test-secret", 1);
  gang_lighthouse *lh = lh_start(0, 3, 20000, NULL);
  replica r[3];
  const char *ids[] = {"rep-c:1", "rep-a:2", "rep-b:3"};
  for (int i = 0; i < 3; i++)
    replica_start(&r[i], lh, ids[i]);
  double first = round_all(r, 3, 0);
  assert_int_equal(r[0].q.quorum_id, 1);
  assert_string_equal(ids_of(&r[0].q), "rep-a:2,rep-b:3,rep-c:1");
  assert_true(r[0].q.incarnation == gang__lh_incarnation(r[0].jc));
  assert_int_equal(r[0].q.members[0].world_size, 2);
  assert_int_equal(r[0].q.members[0].step, 10);
  int64_t round0 = r[0].q.round;
  /* The same members again and again: the same id, a new round each. */
  double sum = 0, worst = 0;
  int rounds = 20;
  for (int k = 0; k < rounds; k++) {
    double t = round_all(r, 3, 0);
    sum += t;
    worst = t > worst ? t : worst;
    assert_int_equal(r[0].q.quorum_id, 1);
    assert_int_equal(r[0].q.round, round0 + 1 + k);
  }
  printf("first quorum of 3: %.1f ms; fast quorum (same members): mean %.1f "
         "ms, worst %.1f ms over %d rounds (tick %d ms)\n",
         first, sum / rounds, worst, rounds, TICK);
  assert_true(first < 5000);
  /* A member that failed to commit: the quorum takes a new id, once. */
  round_all(r, 3, 1);
  assert_int_equal(r[0].q.quorum_id, 2);
  assert_int_equal(r[0].q.members[0].commit_failures, 0);
  round_all(r, 3, 0);
  assert_int_equal(r[0].q.quorum_id, 2);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
  unsetenv("GANG_STORE_SECRET");
}

/* Waits for failure notices until `want` arrives; returns when. */
static int64_t await_notice(gang__lh_client *c, int64_t *cursor,
                            const char *want) {
  char id[GANG_LH_ID_MAX];
  for (;;) {
    assert_gang_ok(gang__lh_next_notice(c, cursor, id, sizeof id, 10000));
    if (strcmp(id, want) == 0)
      return gang__now_ns();
  }
}

static void test_dead_replica_noticed(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 1, 30000, NULL);
  replica r[3];
  const char *ids[] = {"a", "b", "dies"};
  for (int i = 0; i < 3; i++)
    replica_start(&r[i], lh, ids[i]);
  round_all(r, 3, 0);
  assert_int_equal(r[0].q.quorum_id, 1);
  gang__lh_client *watch;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &watch));
  int64_t cursor = 0;
  /* No notice while everyone lives. */
  char id[GANG_LH_ID_MAX];
  assert_int_equal(gang__lh_next_notice(watch, &cursor, id, sizeof id, 0),
                   GANG_TIMEOUT);
  assert_int_equal(cursor, 0);
  /* The survivors join the next round; the other goes silent. The join
   * timeout is 30 s: only its heartbeat expiring lets the round close. */
  join_start(&r[0], 11, 0, false, 20000);
  join_start(&r[1], 11, 0, false, 20000);
  int64_t last = replica_silence(&r[2]);
  int64_t noticed = await_notice(watch, &cursor, "dies");
  assert_int_equal(cursor, 1);
  join_ok(&r[0]);
  join_ok(&r[1]);
  double notice_ms = (double)(noticed - last) / 1e6;
  double drop_ms = (double)(gang__now_ns() - last) / 1e6;
  printf("dead replica: failure notice %.1f ms after its last heartbeat, "
         "quorum without it by %.1f ms (heartbeat timeout %d ms, tick %d "
         "ms)\n",
         notice_ms, drop_ms, HB_TIMEOUT, TICK);
  assert_true(notice_ms >= HB_TIMEOUT - 5);
  /* timeout + a tick for the beat to be seen + a tick to see it expire,
   * and room for a sanitizer build on a shared machine */
  assert_true(notice_ms <= HB_TIMEOUT + 2 * TICK + 500);
  assert_string_equal(ids_of(&r[0].q), "a,b");
  assert_int_equal(r[0].q.quorum_id, 2);
  assert_int_equal(r[1].q.quorum_id, 2);
  /* One notice per death, not one per tick. */
  assert_int_equal(
      gang__lh_next_notice(watch, &cursor, id, sizeof id, 3 * TICK),
      GANG_TIMEOUT);
  gang__lh_close(watch);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

static void test_split_brain_guard(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 1, 200, NULL);
  replica r[4];
  const char *ids[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    replica_start(&r[i], lh, ids[i]);
  /* 2 of 4 heartbeating: no quorum, even well past the join timeout. */
  join_start(&r[0], 0, 0, false, 1000);
  join_start(&r[1], 0, 0, false, 1000);
  assert_int_equal(join_wait(&r[0]), GANG_TIMEOUT);
  assert_int_equal(join_wait(&r[1]), GANG_TIMEOUT);
  assert_non_null(strstr(r[0].jerr, "no quorum including 'a'"));
  /* One of the others dies: 2 of the 3 left heartbeating are more than
   * half, and form a quorum (the other one, alive, is left out). */
  join_start(&r[0], 0, 0, false, 20000);
  join_start(&r[1], 0, 0, false, 20000);
  int64_t last = replica_silence(&r[2]);
  join_ok(&r[0]);
  join_ok(&r[1]);
  assert_string_equal(ids_of(&r[0].q), "a,b");
  /* Not before its heartbeat expired. */
  printf("split brain: 2 of 4 waited; 2 of 3 formed a quorum %.1f ms after "
         "the last heartbeat of the one that died\n",
         ms_since(last));
  assert_true(ms_since(last) >= HB_TIMEOUT - 5);
  for (int i = 0; i < 4; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

static void test_restart_is_new_incarnation(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 20000, NULL);
  int port = gang_lighthouse_port(lh);
  replica r[2];
  replica_start(&r[0], lh, "x");
  replica_start(&r[1], lh, "y");
  round_all(r, 2, 0);
  round_all(r, 2, 1);
  assert_int_equal(r[0].q.quorum_id, 2);
  uint64_t inc1 = gang__lh_incarnation(r[0].jc);
  for (int i = 0; i < 2; i++)
    replica_silence(&r[i]);
  gang_lighthouse_stop(lh);
  /* The old connections are dead, with an error, not a hang. */
  assert_int_not_equal(gang__lh_heartbeat(r[0].hb, "x"), GANG_OK);
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  /* Same port, new lighthouse: clients reconnect and ids start again. */
  lh = lh_start(port, 2, 20000, NULL);
  replica_start(&r[0], lh, "x");
  replica_start(&r[1], lh, "y");
  assert_true(gang__lh_incarnation(r[0].jc) != inc1);
  round_all(r, 2, 0);
  assert_int_equal(r[0].q.quorum_id, 1);
  assert_true(r[0].q.incarnation == gang__lh_incarnation(r[0].jc));
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

static void test_old_rounds_collected(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 20000, "");
  replica r[2];
  replica_start(&r[0], lh, "p");
  replica_start(&r[1], lh, "q");
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.secret = "";
  gang_store *st;
  assert_gang_ok(gang_store_connect(addr, &so, &st));
  int64_t keys = 0, most = 0;
  for (int k = 0; k < 3 * GANG__LH_GC_ROUNDS; k++) {
    round_all(r, 2, 0);
    assert_gang_ok(gang_store_num_keys(st, &keys));
    most = keys > most ? keys : most;
  }
  /* incarnation, ids, round, 2 counters, the kept quorums (and a join or
   * two of the next round). */
  printf("after %d rounds: %" PRId64 " keys (most %" PRId64 ")\n",
         3 * GANG__LH_GC_ROUNDS, keys, most);
  assert_true(most <= 5 + GANG__LH_GC_ROUNDS + 1 + 2);
  gang_store_close(st);
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

/* ---- The status page ------------------------------------------------------
 */

static const char status_check_py[] =
    "import json, sys, urllib.request, urllib.error\n"
    "base, inc, qid, ids = sys.argv[1:5]\n"
    "d = json.load(urllib.request.urlopen(base + '/status', timeout=10))\n"
    "for k in ('incarnation', 'quorum_id', 'round', 'min_replicas',\n"
    "          'waiting', 'replicas', 'quorums'):\n"
    "    assert k in d, k\n"
    "assert d['incarnation'] == inc, d['incarnation']\n"
    "assert d['quorum_id'] == int(qid), d['quorum_id']\n"
    "assert d['min_replicas'] == 2\n"
    "got = sorted(r['replica_id'] for r in d['replicas'])\n"
    "assert got == ids.split(','), got\n"
    "for r in d['replicas']:\n"
    "    for k in ('step', 'world_size', 'heartbeat_age_ms', 'joined',\n"
    "              'healthy', 'in_quorum'):\n"
    "        assert k in r, k\n"
    "    assert r['step'] == 10 and r['world_size'] == 2, r\n"
    "    assert 0 <= r['heartbeat_age_ms'] < 1000 and r['healthy'], r\n"
    "q = d['quorums'][0]\n"
    "assert q['quorum_id'] == d['quorum_id'] and q['members'] == got, q\n"
    "assert q['time'].endswith('Z') and q['time_ms'] > 0, q\n"
    "assert len(d['quorums']) <= 10\n"
    "html = urllib.request.urlopen(base + '/', timeout=10).read().decode()\n"
    "assert 'gang lighthouse' in html and '<table>' in html\n"
    "try:\n"
    "    urllib.request.urlopen(base + '/nope', timeout=10)\n"
    "    sys.exit('no 404 for /nope')\n"
    "except urllib.error.HTTPError as e:\n"
    "    assert e.code == 404, e.code\n"
    "print('status page ok:', len(d['replicas']), 'replicas,',\n"
    "      len(d['quorums']), 'quorums')\n";

/* Fetches and checks the status page with a real HTTP client: Python's
 * urllib, else curl (fewer checks), else says it skipped. */
static void check_status_page(int http_port, uint64_t inc, int64_t qid,
                              const char *ids) {
  char base[64], incs[32], qids[32], url[96];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", http_port);
  snprintf(incs, sizeof incs, "%016" PRIx64, inc);
  snprintf(qids, sizeof qids, "%" PRId64, qid);
  char *out = NULL;
  if (access("/usr/bin/python3", X_OK) == 0) {
    char *argv[] = {
        "/usr/bin/python3", "-c", (char *)status_check_py, base, incs, qids,
        (char *)ids,        NULL};
    int st = gt_run_cmd(argv, NULL, &out, 30000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("status page check failed (status %d):\n%s", st, out);
    printf("%s", out);
  } else if (access("/usr/bin/curl", X_OK) == 0) {
    snprintf(url, sizeof url, "%s/status", base);
    char *argv[] = {"/usr/bin/curl", "-sf", "--max-time", "10", url, NULL};
    int st = gt_run_cmd(argv, NULL, &out, 30000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        strstr(out, incs) == NULL || strstr(out, "\"replicas\"") == NULL)
      fail_msg("curl %s: status %d:\n%s", url, st, out);
    printf("status page fetched with curl\n");
  } else {
    printf("SKIPPED: the status page check (neither /usr/bin/python3 nor "
           "/usr/bin/curl is installed)\n");
  }
  free(out);
}

#include "store/raw.h"

static void test_status_page(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 20000, NULL);
  int hport = gang_lighthouse_http_port(lh);
  assert_true(hport > 0 && hport != gang_lighthouse_port(lh));
  replica r[2];
  replica_start(&r[0], lh, "web-b");
  replica_start(&r[1], lh, "web-a");
  round_all(r, 2, 0);
  /* Hostile HTTP peers: one says nothing, one sends 8 KiB of header
   * without an end, one stops halfway through its request line. */
  int idle = raw_connect(hport), big = raw_connect(hport),
      half = raw_connect(hport);
  assert_true(idle >= 0 && big >= 0 && half >= 0);
  char junk[8192];
  memset(junk, 'A', sizeof junk);
  raw_send(big, junk, sizeof junk);
  raw_send(half, "GET /sta", 8);
  /* Quorums go on, and the page answers others meanwhile. */
  round_all(r, 2, 0);
  check_status_page(hport, gang__lh_incarnation(r[0].jc), r[0].q.quorum_id,
                    "web-a,web-b");
  /* The slow ones are dropped after a second. */
  assert_true(raw_closed_within(big, 3000));
  assert_true(raw_closed_within(idle, 3000));
  assert_true(raw_closed_within(half, 3000));
  close(idle);
  close(big);
  close(half);
  /* Rendered directly too: a dead replica shows as such. */
  replica_silence(&r[1]);
  gang__lh_status *s = &lh->status;
  for (int tries = 0;; tries++) {
    pthread_mutex_lock(&s->mu);
    size_t len = 0;
    char *html = gang__lh_status_html(s, gang__lh_now_ms(), &len);
    pthread_mutex_unlock(&s->mu);
    assert_non_null(html);
    bool dead = strstr(html, "(dead)") != NULL;
    free(html);
    if (dead)
      break;
    assert_true(tries < 100);
    /* the page is what is being waited for: ask again after a tick */
    struct pollfd none;
    poll(&none, 0, TICK);
  }
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

/* ---- Hostile input --------------------------------------------------------
 */

static gang_store *raw_store(const gang_lighthouse *lh) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.secret = "";
  so.timeout_ms = 5000;
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(addr, &so, &st));
  return st;
}

static void test_store_hostile_cases(void **state) {
  (void)state;
  /* No secret, so that raw connections get past the hello. */
  gang_lighthouse *lh = lh_start(0, 1, 20000, "");
  gang_store *st = raw_store(lh);
  int64_t before = 0, after = 0;
  assert_gang_ok(gang_store_num_keys(st, &before));
  int cases = sc_hostile_frames(gang_lighthouse_port(lh), 1 << 20, st);
  sc_hostile_slow(gang_lighthouse_port(lh), st);
  /* good/0..cases-1, good/99 and big: nothing of the bad connections. */
  assert_true(cases >= 20 && cases < 99);
  assert_gang_ok(gang_store_num_keys(st, &after));
  assert_int_equal(after, before + cases + 2);
  /* ... and the lighthouse still forms quorums. */
  replica r[2];
  replica_start(&r[0], lh, "after-a");
  replica_start(&r[1], lh, "after-b");
  round_all(r, 2, 0);
  assert_string_equal(ids_of(&r[0].q), "after-a,after-b");
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_store_close(st);
  gang_lighthouse_stop(lh);
}

static void test_hostile_records(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 300, NULL);
  gang_store *st = raw_store(lh);
  /* Lines in lh/ids that are not ids are skipped. */
  const char junk[] = "has space\n\x01\n\n";
  assert_gang_ok(gang_store_append(st, "lh/ids", junk, sizeof junk - 1));
  replica r[3];
  replica_start(&r[0], lh, "good-a");
  replica_start(&r[1], lh, "good-b");
  replica_start(&r[2], lh, "liar");
  /* A join of "liar" that is not a member record, then one that names
   * somebody else: both ignored; liar heartbeats without a valid join, so
   * the round waits for it until the join timeout, then goes without. */
  int64_t round = 0;
  assert_gang_ok(gang_store_add(st, "lh/round", 0, &round));
  char key[128];
  snprintf(key, sizeof key, "lh/r/%" PRId64 "/join/liar", round);
  assert_gang_ok(gang_store_set(st, key, "nonsense", 8));
  join_start(&r[0], 10, 0, false, 20000);
  join_start(&r[1], 10, 0, false, 20000);
  join_ok(&r[0]);
  join_ok(&r[1]);
  assert_string_equal(ids_of(&r[0].q), "good-a,good-b");
  assert_int_equal(r[0].q.round, round);
  snprintf(key, sizeof key, "lh/r/%" PRId64 "/join/liar", round + 1);
  const char *other = "replica_id=good-a\nstep=1\nworld_size=1\n"
                      "shrink_only=0\ncommit_failures=0\n";
  assert_gang_ok(gang_store_set(st, key, other, strlen(other)));
  round_all(r, 2, 0);
  assert_string_equal(ids_of(&r[0].q), "good-a,good-b");
  /* lh/ids deleted: the lighthouse puts it back and goes on. */
  assert_gang_ok(gang_store_delete(st, "lh/ids", NULL));
  void *v = NULL;
  size_t n = 0;
  assert_gang_ok(gang_store_get(st, "lh/ids", &v, &n));
  gang_store_free(v);
  round_all(r, 2, 0);
  /* A client that is not a lighthouse's: a plain store is refused. */
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  gang_store_server *plain = NULL;
  assert_gang_ok(gang_store_server_start(&so, &plain));
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_store_server_port(plain));
  gang__lh_client *c = NULL;
  assert_int_equal(gang__lh_connect(addr, 300, &c), GANG_TIMEOUT);
  assert_non_null(strstr(gang_last_error(), "is it a lighthouse?"));
  gang_store_server_stop(plain);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  gang_store_close(st);
  gang_lighthouse_stop(lh);
}

/* ---- Arguments ------------------------------------------------------------
 */

static void expect_bad(gang_lighthouse_options *o, const char *words) {
  gang_lighthouse *lh = NULL;
  gang_status s = gang_lighthouse_start(o, &lh);
  if (s == GANG_OK || strstr(gang_last_error(), words) == NULL)
    fail_msg("start: status %d, detail '%s', wanted '%s'", s, gang_last_error(),
             words);
  assert_null(lh);
}

static void test_arguments(void **state) {
  (void)state;
  gang_lighthouse *lh = NULL;
  assert_int_equal(gang_lighthouse_start(NULL, NULL), GANG_INVALID_ARGUMENT);
  gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
  o.size = 0;
  expect_bad(&o, "GANG_LIGHTHOUSE_OPTIONS_INIT");
  gang_lighthouse_options base = GANG_LIGHTHOUSE_OPTIONS_INIT;
  base.host = "127.0.0.1";
  o = base, o.port = 70000, expect_bad(&o, "port 70000");
  o = base, o.http_port = -2, expect_bad(&o, "http_port -2");
  o = base, o.min_replicas = -1, expect_bad(&o, "min_replicas -1");
  o = base, o.join_timeout_ms = -1, expect_bad(&o, "join_timeout_ms");
  o = base, o.heartbeat_timeout_ms = -5, expect_bad(&o, "heartbeat_timeout_ms");
  o = base, o.quorum_tick_ms = 60001, expect_bad(&o, "quorum_tick_ms");
  /* Ports in use: nothing left behind (the leak check counts). */
  gang_lighthouse *a = lh_start(0, 1, 1000, NULL);
  o = base, o.port = gang_lighthouse_port(a), expect_bad(&o, "127.0.0.1");
  o = base, o.http_port = gang_lighthouse_http_port(a);
  expect_bad(&o, "status page");
  gang_lighthouse_stop(a);
  /* No status page. */
  o = base, o.http_port = -1;
  assert_gang_ok(gang_lighthouse_start(&o, &lh));
  assert_int_equal(gang_lighthouse_http_port(lh), -1);
  gang_lighthouse_stop(lh);
  gang_lighthouse_stop(NULL);
  assert_int_equal(gang_lighthouse_port(NULL), -1);
  assert_int_equal(gang_lighthouse_http_port(NULL), -1);
  /* The client's arguments. */
  gang__lh_client *c = NULL;
  assert_int_equal(gang__lh_connect("no-port", 100, &c), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang__lh_connect("127.0.0.1:1", 0, &c),
                   GANG_INVALID_ARGUMENT);
  lh = lh_start(0, 1, 1000, NULL);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  assert_gang_ok(gang__lh_connect(addr, 5000, &c));
  assert_int_equal(gang__lh_heartbeat(c, "has space"), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang__lh_heartbeat(c, ""), GANG_INVALID_ARGUMENT);
  gang__lh_member me = {"ok", 0, 0, false, 0};
  gang__lh_quorum q;
  assert_int_equal(gang__lh_join(c, &me, 100, &q), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "world_size"));
  me.world_size = 1;
  me.step = -1;
  assert_int_equal(gang__lh_join(c, &me, 100, &q), GANG_INVALID_ARGUMENT);
  assert_string_equal(gang__lh_addr(c), addr);
  gang__lh_close(c);
  gang__lh_close(NULL);
  gang_lighthouse_stop(lh);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_quorum_forms_and_keeps_id),
      GT_TEST(test_dead_replica_noticed),
      GT_TEST(test_split_brain_guard),
      GT_TEST(test_restart_is_new_incarnation),
      GT_TEST(test_old_rounds_collected),
      GT_TEST(test_status_page),
      GT_TEST(test_store_hostile_cases),
      GT_TEST(test_hostile_records),
      GT_TEST(test_arguments),
  };
  sc_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
