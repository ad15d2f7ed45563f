/* See store_cases.h. Keys are spelled "<tag>.<name>" with a tag fresh per
 * call, so the cases neither see nor disturb keys that other cases left. */
#include "store_cases.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "core/clock.h"
#include "raw.h"

static int case_seq;

/* Formats "<tag>.<name>" into buf. */
static const char *K(char *buf, size_t cap, const char *tag, const char *name) {
  snprintf(buf, cap, "%s.%s", tag, name);
  return buf;
}

void sc_expect_val(gang_store *st, const char *key, const char *want) {
  void *v = NULL;
  size_t n = 0;
  assert_gang_ok(gang_store_get(st, key, &v, &n));
  if (n != strlen(want) || memcmp(v, want, n) != 0)
    fail_msg("get '%s': got %zu bytes '%.*s', want '%s'", key, n, (int)n,
             (char *)v, want);
  assert_int_equal(((char *)v)[n], '\0');
  gang_store_free(v);
}

static void expect_missing(gang_store *st, const char *key) {
  bool all = true;
  assert_gang_ok(gang_store_check(st, &key, 1, &all));
  if (all)
    fail_msg("key '%s' exists and should not", key);
}

void sc_all_ops(gang_store *st) {
  char tag[32], a[64], b[64], c[64], ctr[64], lg[64], bin[64], cs[64];
  snprintf(tag, sizeof tag, "ops%d", ++case_seq);
  K(a, sizeof a, tag, "a");
  K(b, sizeof b, tag, "b");
  K(c, sizeof c, tag, "c");
  K(ctr, sizeof ctr, tag, "ctr");
  K(lg, sizeof lg, tag, "log");
  K(bin, sizeof bin, tag, "bin");
  K(cs, sizeof cs, tag, "cs");
  int64_t n0, n1;
  assert_gang_ok(gang_store_num_keys(st, &n0));

  /* set / get / overwrite / empty / binary with NUL bytes */
  assert_gang_ok(gang_store_set(st, a, "hello", 5));
  sc_expect_val(st, a, "hello");
  assert_gang_ok(gang_store_set(st, a, "bye", 3));
  sc_expect_val(st, a, "bye");
  assert_gang_ok(gang_store_set(st, b, NULL, 0));
  sc_expect_val(st, b, "");
  const unsigned char raw[] = {0, 1, 0xff, 0, 7};
  assert_gang_ok(gang_store_set(st, bin, raw, sizeof raw));
  void *v = NULL;
  size_t len = 0;
  assert_gang_ok(gang_store_get(st, bin, &v, &len));
  assert_int_equal(len, sizeof raw);
  assert_memory_equal(v, raw, sizeof raw);
  gang_store_free(v);

  /* add: missing counts as 0, decimal ASCII, errors on non-integers */
  int64_t x = 0;
  assert_gang_ok(gang_store_add(st, ctr, 5, &x));
  assert_int_equal(x, 5);
  assert_gang_ok(gang_store_add(st, ctr, -7, &x));
  assert_int_equal(x, -2);
  assert_gang_ok(gang_store_add(st, ctr, 0, NULL));
  sc_expect_val(st, ctr, "-2");
  assert_int_equal(gang_store_add(st, a, 1, &x), GANG_INVALID_USAGE);
  assert_non_null(strstr(gang_last_error(), "not a decimal integer"));
  assert_gang_ok(gang_store_set(st, c, "9223372036854775807", 19));
  assert_int_equal(gang_store_add(st, c, 1, &x), GANG_INVALID_USAGE);
  assert_non_null(strstr(gang_last_error(), "overflows"));
  assert_gang_ok(gang_store_set(st, c, "-9223372036854775808", 20));
  assert_gang_ok(gang_store_add(st, c, 8, &x));
  assert_int_equal(x, INT64_MIN + 8);

  /* check */
  const char *both[] = {a, ctr};
  char nope[64];
  K(nope, sizeof nope, tag, "nope");
  const char *one_missing[] = {a, nope};
  bool all = false;
  assert_gang_ok(gang_store_check(st, both, 2, &all));
  assert_true(all);
  assert_gang_ok(gang_store_check(st, one_missing, 2, &all));
  assert_false(all);
  assert_gang_ok(gang_store_check(st, NULL, 0, &all));
  assert_true(all);

  /* append creates, then extends */
  assert_gang_ok(gang_store_append(st, lg, "ab", 2));
  assert_gang_ok(gang_store_append(st, lg, "cd", 2));
  assert_gang_ok(gang_store_append(st, lg, NULL, 0));
  sc_expect_val(st, lg, "abcd");

  /* compare_set, torch's four cases */
  void *cur = NULL;
  size_t clen = 0;
  assert_gang_ok(gang_store_compare_set(st, cs, "x", 1, "y", 1, &cur, &clen));
  assert_int_equal(clen, 1); /* missing, expected non-empty: left missing */
  assert_memory_equal(cur, "x", 1);
  gang_store_free(cur);
  expect_missing(st, cs);
  assert_gang_ok(gang_store_compare_set(st, cs, NULL, 0, "v1", 2, &cur, &clen));
  assert_int_equal(clen, 2); /* missing, expected empty: created */
  assert_memory_equal(cur, "v1", 2);
  gang_store_free(cur);
  assert_gang_ok(gang_store_compare_set(st, cs, "zz", 2, "v2", 2, &cur, &clen));
  assert_int_equal(clen, 2); /* mismatch: unchanged, current returned */
  assert_memory_equal(cur, "v1", 2);
  gang_store_free(cur);
  assert_gang_ok(gang_store_compare_set(st, cs, "v1", 2, "v3", 2, NULL, NULL));
  sc_expect_val(st, cs, "v3"); /* match: swapped */

  /* num_keys: a b bin ctr c log cs */
  assert_gang_ok(gang_store_num_keys(st, &n1));
  assert_int_equal(n1 - n0, 7);

  /* delete */
  bool deleted = false;
  assert_gang_ok(gang_store_delete(st, b, &deleted));
  assert_true(deleted);
  assert_gang_ok(gang_store_delete(st, b, &deleted));
  assert_false(deleted);
  assert_gang_ok(gang_store_delete(st, nope, NULL));
  expect_missing(st, b);
  assert_gang_ok(gang_store_num_keys(st, &n1));
  assert_int_equal(n1 - n0, 6);
  /* a deleted counter restarts from 0 */
  assert_gang_ok(gang_store_delete(st, ctr, NULL));
  assert_gang_ok(gang_store_add(st, ctr, 1, &x));
  assert_int_equal(x, 1);

  /* multi_set / multi_get, including a key given twice (last one wins) */
  char m1[64], m2[64];
  K(m1, sizeof m1, tag, "m1");
  K(m2, sizeof m2, tag, "m2");
  const char *mk[] = {m1, m2, m1};
  const void *mv[] = {"one", "two", "uno"};
  const size_t ml[] = {3, 3, 3};
  assert_gang_ok(gang_store_multi_set(st, mk, mv, ml, 3));
  const char *gk[] = {m2, m1, lg};
  void *vals[3] = {0};
  size_t lens[3] = {0};
  assert_gang_ok(gang_store_multi_get(st, gk, 3, vals, lens));
  assert_int_equal(lens[0], 3);
  assert_memory_equal(vals[0], "two", 3);
  assert_int_equal(lens[1], 3);
  assert_memory_equal(vals[1], "uno", 3);
  assert_int_equal(lens[2], 4);
  assert_memory_equal(vals[2], "abcd", 4);
  for (int i = 0; i < 3; i++)
    gang_store_free(vals[i]);
  assert_gang_ok(gang_store_multi_set(st, NULL, NULL, NULL, 0));

  /* wait on present keys returns at once even with a zero timeout; on a
   * missing one it times out at once and names it */
  assert_gang_ok(gang_store_wait(st, gk, 3, 0));
  const char *wk[] = {m1, nope};
  assert_int_equal(gang_store_wait(st, wk, 2, 0), GANG_TIMEOUT);
  assert_non_null(strstr(gang_last_error(), nope));
  assert_null(strstr(gang_last_error(), m1));
}

/* Times one get of a missing key through `st` (whose timeout is 150 ms). */
static void expect_get_timeout(gang_store *st, const char *key,
                               const char *shown) {
  void *v;
  size_t n;
  int64_t t0 = gang__now_ns();
  assert_int_equal(gang_store_get(st, key, &v, &n), GANG_TIMEOUT);
  int64_t ms = (gang__now_ns() - t0) / 1000000;
  if (ms < 149 || ms > 150 + 200)
    fail_msg("get '%s' timed out after %lld ms, wanted 150", key,
             (long long)ms);
  if (strstr(gang_last_error(), shown) == NULL)
    fail_msg("timeout detail '%s' does not name '%s'", gang_last_error(),
             shown);
}

/* snprintf into a static buffer for the full key of a view's key. */
static const char *P(const char *fmt, const char *tag, const char *rest) {
  static char buf[192];
  snprintf(buf, sizeof buf, fmt, tag, rest);
  return buf;
}

void sc_prefix_views(gang_store *st) {
  char tag[32];
  snprintf(tag, sizeof tag, "pv%d", ++case_seq);
  int64_t n0, n1, x;
  assert_gang_ok(gang_store_num_keys(st, &n0));

  gang_store *v = NULL, *vv = NULL, *v2 = NULL;
  assert_gang_ok(gang_store_prefix(st, tag, &v));
  assert_gang_ok(gang_store_prefix(v, "inner", &vv));
  assert_gang_ok(gang_store_prefix(st, tag, &v2)); /* a second view */

  /* set through a view lands under "prefix/" in the parent, and back */
  assert_gang_ok(gang_store_set(v, "k", "view", 4));
  sc_expect_val(st, P("%s/%s", tag, "k"), "view");
  sc_expect_val(v2, "k", "view");
  assert_gang_ok(gang_store_set(st, P("%s/%s", tag, "fromroot"), "r", 1));
  sc_expect_val(v, "fromroot", "r");
  expect_missing(st, "k"); /* nothing leaked to the unprefixed key */

  /* nested views join the prefixes */
  assert_gang_ok(gang_store_set(vv, "k", "nested", 6));
  sc_expect_val(st, P("%s/%s", tag, "inner/k"), "nested");
  sc_expect_val(v, "inner/k", "nested");
  sc_expect_val(v, "k", "view"); /* not overwritten by the nested set */

  /* every operation maps its keys */
  assert_gang_ok(gang_store_add(vv, "ctr", 3, &x));
  assert_gang_ok(gang_store_add(v, "inner/ctr", 4, &x));
  assert_int_equal(x, 7);
  sc_expect_val(st, P("%s/%s", tag, "inner/ctr"), "7");
  assert_gang_ok(gang_store_append(vv, "log", "ab", 2));
  sc_expect_val(st, P("%s/%s", tag, "inner/log"), "ab");
  void *cur = NULL;
  size_t clen = 0;
  assert_gang_ok(
      gang_store_compare_set(vv, "log", "ab", 2, "cd", 2, &cur, &clen));
  assert_int_equal(clen, 2);
  assert_memory_equal(cur, "cd", 2);
  gang_store_free(cur);
  sc_expect_val(st, P("%s/%s", tag, "inner/log"), "cd");
  const char *keys[] = {"k", "ctr"};
  const void *vals[] = {"K", "9"};
  const size_t lens[] = {1, 1};
  assert_gang_ok(gang_store_multi_set(vv, keys, vals, lens, 2));
  sc_expect_val(st, P("%s/%s", tag, "inner/k"), "K");
  sc_expect_val(st, P("%s/%s", tag, "inner/ctr"), "9");
  void *got[2] = {0};
  size_t glen[2] = {0};
  assert_gang_ok(gang_store_multi_get(vv, keys, 2, got, glen));
  assert_int_equal(glen[0], 1);
  assert_memory_equal(got[0], "K", 1);
  assert_int_equal(glen[1], 1);
  assert_memory_equal(got[1], "9", 1);
  gang_store_free(got[0]);
  gang_store_free(got[1]);
  bool all = false;
  assert_gang_ok(gang_store_check(vv, keys, 2, &all));
  assert_true(all);
  assert_gang_ok(gang_store_wait(vv, keys, 2, 0));
  const char *rootkeys[] = {"k", "ctr"}; /* missing without the prefix */
  assert_gang_ok(gang_store_check(st, rootkeys, 2, &all));
  assert_false(all);

  /* num_keys through a view counts the whole store (documented) */
  assert_gang_ok(gang_store_num_keys(vv, &n1));
  assert_int_equal(n1 - n0, 5); /* k fromroot inner/k inner/ctr inner/log */
  bool deleted = false;
  assert_gang_ok(gang_store_delete(vv, "log", &deleted));
  assert_true(deleted);
  expect_missing(st, P("%s/%s", tag, "inner/log"));
  assert_gang_ok(gang_store_delete(v, "inner/log", &deleted));
  assert_false(deleted);

  /* a view has its own timeout; the detail names the full key */
  assert_gang_ok(gang_store_set_timeout(vv, 150));
  expect_get_timeout(vv, "absent", P("%s/%s", tag, "inner/absent"));

  /* closing views leaves the parent and sibling views usable */
  gang_store_close(vv);
  gang_store_close(v);
  sc_expect_val(v2, "inner/k", "K");
  gang_store_close(v2);
  sc_expect_val(st, P("%s/%s", tag, "k"), "view");
  gang_store_close(NULL);
}

static void *noop(void *arg) { return arg; }

void sc_prime_threads(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, noop, NULL) == 0)
    pthread_join(t, NULL);
}

/* ---- Hostile input over raw sockets (TCP servers) ------------------------ */

int sc_ready_conn(int port) {
  int fd = raw_connect(port);
  assert_true(fd >= 0);
  gang__store_server_hello sh;
  assert_true(raw_hello(fd, GANG_STORE_VERSION, 0, NULL, &sh));
  assert_int_equal(sh.status, GANG_STORE_HELLO_OK);
  return fd;
}

void sc_still_serving(gang_store *st, int i) {
  char key[32];
  snprintf(key, sizeof key, "good/%d", i);
  assert_gang_ok(gang_store_set(st, key, "ok", 2));
  void *v;
  size_t n;
  assert_gang_ok(gang_store_get(st, key, &v, &n));
  assert_int_equal(n, 2);
  gang_store_free(v);
}

static void frame(uint8_t *b, uint32_t len, uint8_t op) {
  gang__put_u32(b, len);
  b[4] = op;
}

int sc_hostile_frames(int port, size_t max_value, gang_store *st) {
  assert_true(max_value >= 16 && max_value <= (4u << 20));
  char *bigval = malloc(max_value + 2);
  assert_non_null(bigval);
  int cases = 0;

  for (int round = 0; round < 3; round++) {
    /* 1. Wrong magic: an HTTP request. */
    int fd = raw_connect(port);
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_true(raw_send(fd, http, strlen(http)));
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    sc_still_serving(st, cases++);

    /* 2. Unknown opcode: answered PROTOCOL, then closed. */
    fd = sc_ready_conn(port);
    uint8_t b[64];
    frame(b, 1, 200);
    assert_true(raw_send(fd, b, 5));
    assert_int_equal(raw_reply_rc(fd, 2000), GANG_STORE_RC_PROTOCOL);
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    sc_still_serving(st, cases++);

    /* 3. Lengths 2^32-1, 0 and just over the frame cap. */
    uint32_t lens[] = {0xffffffffu, 0,
                       gang__store_frame_cap(8192, (uint32_t)max_value) + 1};
    for (int i = 0; i < 3; i++) {
      fd = sc_ready_conn(port);
      frame(b, lens[i], GANG_STORE_OP_SET);
      assert_true(raw_send(fd, b, 5));
      assert_true(raw_closed_within(fd, 2000));
      close(fd);
      sc_still_serving(st, cases++);
    }

    /* 4. A frame truncated by the peer going away mid-frame. */
    fd = sc_ready_conn(port);
    frame(b, 100, GANG_STORE_OP_SET);
    memset(b + 5, 'x', 20);
    assert_true(raw_send(fd, b, 25));
    shutdown(fd, SHUT_WR);
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    sc_still_serving(st, cases++);

    /* 5. A key length that claims more than the frame holds. */
    fd = sc_ready_conn(port);
    frame(b, 1 + 4 + 3, GANG_STORE_OP_GET - 1 /* SET */);
    gang__put_u32(b + 5, 1000);
    memcpy(b + 9, "abc", 3);
    assert_true(raw_send(fd, b, 12));
    assert_int_equal(raw_reply_rc(fd, 2000), GANG_STORE_RC_PROTOCOL);
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    sc_still_serving(st, cases++);

    /* 6. Key of 8 KiB + 1, an empty key, a value over the cap, trailing
     * bytes. */
    static char bigkey[8194];
    memset(bigkey, 'k', 8193);
    memset(bigval, 'v', max_value + 1);
    bigval[max_value + 1] = '\0';
    const char *keys[] = {bigkey, "", "k", "k"};
    const char *vals[] = {"v", "v", bigval, "v"};
    for (int i = 0; i < 4; i++) {
      fd = sc_ready_conn(port);
      gang__store_req r;
      raw_set_req(&r, keys[i], vals[i]);
      if (i == 1) {
        /* The encoder refuses empty keys: build this frame by hand. */
        uint8_t e[16];
        frame(e, 1 + 4 + 4 + 1, GANG_STORE_OP_SET);
        gang__put_u32(e + 5, 0);
        gang__put_u32(e + 9, 1);
        e[13] = 'v';
        assert_true(raw_send(fd, e, 14));
      } else if (i == 3) {
        gang__store_caps caps = {1u << 30, 1u << 30, 1u << 30, 0xffffffffu};
        gang__store_buf w = {0};
        assert_gang_ok(gang__store_req_encode(&r, &caps, &w));
        assert_gang_ok(gang__store_buf_reserve(&w, 3));
        memcpy(w.p + w.len, "xyz", 3);
        w.len += 3;
        gang__put_u32(w.p, gang__get_u32(w.p) + 3);
        assert_true(raw_send(fd, w.p, w.len));
        gang__store_buf_free(&w);
      } else {
        assert_true(raw_request(fd, &r));
      }
      assert_int_equal(raw_reply_rc(fd, 5000), GANG_STORE_RC_PROTOCOL);
      assert_true(raw_closed_within(fd, 2000));
      close(fd);
      sc_still_serving(st, cases++);
    }

    /* 7. Too many keys: a count far beyond the cap, and one that the body
     * cannot hold. */
    uint32_t counts[] = {0xffffffffu, (128u << 10) + 1, 1000};
    for (int i = 0; i < 3; i++) {
      fd = sc_ready_conn(port);
      frame(b, 1 + 4 + 4, GANG_STORE_OP_CHECK);
      gang__put_u32(b + 5, counts[i]);
      memset(b + 9, 0, 4);
      assert_true(raw_send(fd, b, 13));
      assert_int_equal(raw_reply_rc(fd, 2000), GANG_STORE_RC_PROTOCOL);
      assert_true(raw_closed_within(fd, 2000));
      close(fd);
      sc_still_serving(st, cases++);
    }

    /* 8. A peer that announces a near-cap frame and never sends it, while
     * a hundred others do the same: nothing is allocated for the promise. */
    int lazy[100];
    for (int i = 0; i < 100; i++) {
      lazy[i] = sc_ready_conn(port);
      frame(b, gang__store_frame_cap(8192, (uint32_t)max_value),
            GANG_STORE_OP_SET);
      assert_true(raw_send(lazy[i], b, 5));
    }
    sc_still_serving(st, cases++);
    for (int i = 0; i < 100; i++)
      close(lazy[i]);
  }

  free(bigval);
  return cases;
}

static long rss_now_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      break;
  if (f != NULL)
    fclose(f);
  return kb;
}

long sc_hostile_slow(int port, gang_store *st) {
  static char val[256 << 10];
  memset(val, 'v', sizeof val);
  assert_gang_ok(gang_store_set(st, "big", val, sizeof val));
  /* A reader that pipelines 200 gets of 256 KiB and never reads. */
  int fd = sc_ready_conn(port);
  gang__store_req r;
  memset(&r, 0, sizeof r);
  r.op = GANG_STORE_OP_GET;
  r.nkeys = 1;
  r.keys = &r.key1_;
  r.keys[0].p = (const uint8_t *)"big";
  r.keys[0].len = 3;
  r.timeout_ms = 1000;
  for (int i = 0; i < 200; i++)
    if (!raw_request(fd, &r))
      break; /* the server stopped reading: that is the point */
  /* 300 slow senders, each one byte into the body of a frame that
   * announces 512 KiB. */
  long rss0 = rss_now_kib();
  int slow[300];
  uint8_t head[6] = {0, 0, 8, 0, GANG_STORE_OP_GET, 0}; /* len 512 KiB */
  for (int i = 0; i < 300; i++) {
    slow[i] = sc_ready_conn(port);
    assert_true(raw_send(slow[i], head, sizeof head));
  }
  for (int i = 0; i < 20; i++)
    sc_still_serving(st, i);
  long grew = rss_now_kib() - rss0;
  for (int i = 0; i < 300; i++)
    close(slow[i]);
  close(fd);
  sc_still_serving(st, 99);
  return grew;
}
