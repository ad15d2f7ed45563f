/* Hostile input over raw sockets: each bad connection is closed alone, the
 * server keeps serving a well-behaved client, its memory stays bounded and
 * nothing a bad connection sent changes the store. Also the memory cap, a
 * reader that never reads, many slow senders and the client cap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "raw.h"

#include "gang/store.h"

/* RSS says nothing under ASan or TSan (quarantine, shadow memory): the bound is
 * checked in the other builds only. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RSS_CHECKED 0
#endif
#endif
#ifndef RSS_CHECKED
#define RSS_CHECKED 1
#endif

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

static gang_store_server *server(size_t max_value, size_t max_total,
                                 int max_clients) {
  gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
  o.secret = "";
  o.max_value_bytes = max_value;
  o.max_total_bytes = max_total;
  o.max_clients = max_clients;
  gang_store_server *srv = NULL;
  assert_gang_ok(gang_store_server_start(&o, &srv));
  return srv;
}

static gang_store *good_client(gang_store_server *srv) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_store_server_port(srv));
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.secret = "";
  o.timeout_ms = 5000;
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(addr, &o, &st));
  return st;
}

/* A raw connection past the hello, ready for frames. */
static int ready_conn(int port) {
  int fd = raw_connect(port);
  assert_true(fd >= 0);
  gang__store_server_hello sh;
  assert_true(raw_hello(fd, GANG_STORE_VERSION, 0, NULL, &sh));
  assert_int_equal(sh.status, GANG_STORE_HELLO_OK);
  return fd;
}

static void still_serving(gang_store *st, int i) {
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

static void test_bad_frames(void **state) {
  (void)state;
  gang_store_server *srv = server(1 << 20, 0, 0);
  int port = gang_store_server_port(srv);
  gang_store *st = good_client(srv);
  long rss0 = rss_kib();
  int cases = 0;

  for (int round = 0; round < 3; round++) {
    /* 1. Wrong magic: an HTTP request. */
    int fd = raw_connect(port);
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_true(raw_send(fd, http, strlen(http)));
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    still_serving(st, cases++);

    /* 2. Unknown opcode: answered PROTOCOL, then closed. */
    fd = ready_conn(port);
    uint8_t b[64];
    frame(b, 1, 200);
    assert_true(raw_send(fd, b, 5));
    assert_int_equal(raw_reply_rc(fd, 2000), GANG_STORE_RC_PROTOCOL);
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    still_serving(st, cases++);

    /* 3. Lengths 2^32-1, 0 and just over the frame cap. */
    uint32_t lens[] = {0xffffffffu, 0,
                       gang__store_frame_cap(8192, 1 << 20) + 1};
    for (int i = 0; i < 3; i++) {
      fd = ready_conn(port);
      frame(b, lens[i], GANG_STORE_OP_SET);
      assert_true(raw_send(fd, b, 5));
      assert_true(raw_closed_within(fd, 2000));
      close(fd);
      still_serving(st, cases++);
    }

    /* 4. A frame truncated by the peer going away mid-frame. */
    fd = ready_conn(port);
    frame(b, 100, GANG_STORE_OP_SET);
    memset(b + 5, 'x', 20);
    assert_true(raw_send(fd, b, 25));
    shutdown(fd, SHUT_WR);
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    still_serving(st, cases++);

    /* 5. A key length that claims more than the frame holds. */
    fd = ready_conn(port);
    frame(b, 1 + 4 + 3, GANG_STORE_OP_GET - 1 /* SET */);
    gang__put_u32(b + 5, 1000);
    memcpy(b + 9, "abc", 3);
    assert_true(raw_send(fd, b, 12));
    assert_int_equal(raw_reply_rc(fd, 2000), GANG_STORE_RC_PROTOCOL);
    assert_true(raw_closed_within(fd, 2000));
    close(fd);
    still_serving(st, cases++);

    /* 6. Key of 8 KiB + 1, an empty key, a value over the cap, trailing
     * bytes. */
    static char bigkey[8194];
    memset(bigkey, 'k', 8193);
    static char bigval[(1 << 20) + 2];
    memset(bigval, 'v', (1 << 20) + 1);
    const char *keys[] = {bigkey, "", "k", "k"};
    const char *vals[] = {"v", "v", bigval, "v"};
    for (int i = 0; i < 4; i++) {
      fd = ready_conn(port);
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
      still_serving(st, cases++);
    }

    /* 7. Too many keys: a count far beyond the cap, and one that the body
     * cannot hold. */
    uint32_t counts[] = {0xffffffffu, (128u << 10) + 1, 1000};
    for (int i = 0; i < 3; i++) {
      fd = ready_conn(port);
      frame(b, 1 + 4 + 4, GANG_STORE_OP_CHECK);
      gang__put_u32(b + 5, counts[i]);
      memset(b + 9, 0, 4);
      assert_true(raw_send(fd, b, 13));
      assert_int_equal(raw_reply_rc(fd, 2000), GANG_STORE_RC_PROTOCOL);
      assert_true(raw_closed_within(fd, 2000));
      close(fd);
      still_serving(st, cases++);
    }

    /* 8. A peer that announces a near-cap frame and never sends it, while
     * a hundred others do the same: nothing is allocated for the promise. */
    int lazy[100];
    for (int i = 0; i < 100; i++) {
      lazy[i] = ready_conn(port);
      frame(b, gang__store_frame_cap(8192, 1 << 20), GANG_STORE_OP_SET);
      assert_true(raw_send(lazy[i], b, 5));
    }
    still_serving(st, cases++);
    for (int i = 0; i < 100; i++)
      close(lazy[i]);
  }

  /* Nothing a bad connection sent reached the store. */
  int64_t n = 0;
  assert_gang_ok(gang_store_num_keys(st, &n));
  assert_int_equal(n, cases);
  long grew = rss_kib() - rss0;
  printf("hostile: %d cases, RSS grew %ld KiB\n", cases, grew);
  assert_true(!RSS_CHECKED || grew < 4096);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_memory_cap(void **state) {
  (void)state;
  gang_store_server *srv = server(0, 1 << 20, 0);
  gang_store *st = good_client(srv);
  static char val[64 << 10];
  memset(val, 'v', sizeof val);
  int stored = 0;
  gang_status s = GANG_OK;
  for (int i = 0; i < 100 && s == GANG_OK; i++) {
    char key[32];
    snprintf(key, sizeof key, "flood/%d", i);
    s = gang_store_set(st, key, val, sizeof val);
    if (s == GANG_OK)
      stored++;
  }
  assert_int_equal(s, GANG_NO_MEMORY);
  assert_non_null(strstr(gang_last_error(), "memory cap"));
  assert_true(stored >= 10 && stored < 16);
  /* An append flood stops at the same wall. */
  s = GANG_OK;
  for (int i = 0; i < 100 && s == GANG_OK; i++)
    s = gang_store_append(st, "log", val, 4096);
  assert_int_equal(s, GANG_NO_MEMORY);
  /* The connection is fine and freeing makes room again. */
  bool del;
  assert_gang_ok(gang_store_delete(st, "flood/0", &del));
  assert_gang_ok(gang_store_delete(st, "flood/1", &del));
  assert_gang_ok(gang_store_set(st, "again", val, sizeof val));
  /* A multi_set over the cap changes nothing (atomic). */
  const char *mk[] = {"m1", "m2", "m3"};
  const void *mv[] = {val, val, val};
  size_t ml[] = {sizeof val, sizeof val, sizeof val};
  int64_t before, after;
  assert_gang_ok(gang_store_num_keys(st, &before));
  assert_int_equal(gang_store_multi_set(st, mk, mv, ml, 3), GANG_NO_MEMORY);
  assert_gang_ok(gang_store_num_keys(st, &after));
  assert_int_equal(before, after);
  /* One whose frame alone is over the cap: skipped unbuffered, clean
   * error, connection still usable. */
  static char huge[2 << 20];
  assert_int_equal(gang_store_set(st, "huge", huge, sizeof huge),
                   GANG_NO_MEMORY);
  assert_non_null(strstr(gang_last_error(), "memory cap"));
  assert_gang_ok(gang_store_num_keys(st, &after));
  assert_int_equal(before, after);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_slow_reader_and_slowloris(void **state) {
  (void)state;
  gang_store_server *srv = server(0, 0, 0);
  int port = gang_store_server_port(srv);
  gang_store *st = good_client(srv);
  static char val[256 << 10];
  memset(val, 'v', sizeof val);
  assert_gang_ok(gang_store_set(st, "big", val, sizeof val));
  long rss0 = rss_kib();
  /* A reader that pipelines 200 gets of 256 KiB and never reads. */
  int fd = ready_conn(port);
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
  /* 300 slow senders, each one byte into a frame. */
  int slow[300];
  for (int i = 0; i < 300; i++) {
    slow[i] = ready_conn(port);
    assert_true(raw_send(slow[i], "\x10", 1));
  }
  for (int i = 0; i < 20; i++)
    still_serving(st, i);
  long grew = rss_kib() - rss0;
  printf("slow reader + 300 slow senders: RSS grew %ld KiB\n", grew);
  assert_true(!RSS_CHECKED || grew < 8192);
  for (int i = 0; i < 300; i++)
    close(slow[i]);
  close(fd);
  still_serving(st, 99);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_max_clients(void **state) {
  (void)state;
  gang_store_server *srv = server(0, 0, 4);
  int port = gang_store_server_port(srv);
  int fds[4];
  for (int i = 0; i < 4; i++)
    fds[i] = ready_conn(port);
  int extra = raw_connect(port);
  assert_true(raw_closed_within(extra, 2000));
  close(extra);
  close(fds[0]);
  /* The slot frees up once the server has seen the close. */
  gang_store *st = NULL;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.secret = "";
  o.connect_timeout_ms = 3000;
  assert_gang_ok(gang_store_connect(addr, &o, &st));
  assert_gang_ok(gang_store_set(st, "k", "v", 1));
  gang_store_close(st);
  for (int i = 1; i < 4; i++)
    close(fds[i]);
  gang_store_server_stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_bad_frames),
      GT_TEST(test_memory_cap),
      GT_TEST(test_slow_reader_and_slowloris),
      GT_TEST(test_max_clients),
  };
  store_test_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
