/* The lighthouse against what it should survive: its status page read
 * with a real HTTP client (Python's urllib, else curl, else a visible
 * skip) while slow and oversize requests are dropped and quorums go on;
 * the store's hostile-input cases (tests/store/store_cases.c) on its port;
 * records and ids that are not what they claim; and bad arguments. */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"
#include "lh_replica.h"
#include "store/raw.h"
#include "store/store_cases.h"

#include "core/clock.h"
#include "gang/store.h"

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
  (void)sc_hostile_slow(gang_lighthouse_port(lh), st);
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
  /* A log grown past 64 KiB (ids registered again and again) is rewritten
   * to the ids known, and the lighthouse goes on reading it. */
  static char dup[80 << 10];
  for (size_t i = 0; i + 7 <= sizeof dup; i += 7)
    memcpy(dup + i, "good-a\n", 7);
  assert_gang_ok(gang_store_append(st, "lh/ids", dup, sizeof dup / 7 * 7));
  for (int tries = 0;; tries++) {
    assert_gang_ok(gang_store_get(st, "lh/ids", &v, &n));
    gang_store_free(v);
    if (n < 1024)
      break;
    assert_true(tries < 200);
    poll(NULL, 0, TICK); /* the rewrite is what is waited for */
  }
  replica late;
  replica_start(&late, lh, "late");
  assert_gang_ok(gang_store_get(st, "lh/ids", &v, &n));
  assert_non_null(strstr(v, "late\n"));
  gang_store_free(v);
  replica_free(&late);
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
  gang__lh_member me = {"ok", 0, 0, false, 0, 0, 0};
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
      GT_TEST(test_status_page),
      GT_TEST(test_store_hostile_cases),
      GT_TEST(test_hostile_records),
      GT_TEST(test_arguments),
  };
  sc_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
