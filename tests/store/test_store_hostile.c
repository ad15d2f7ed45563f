/* Hostile input over raw sockets: each bad connection is closed alone, the
 * server keeps serving a well-behaved client, its memory stays bounded and
 * nothing a bad connection sent changes the store. Also the memory cap, a
 * reader that never reads, many slow senders and the client cap. The raw
 * cases live in store_cases.c, so that every server speaking the store
 * protocol (the lighthouse too) runs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "raw.h"
#include "store_cases.h"

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

static void test_bad_frames(void **state) {
  (void)state;
  gang_store_server *srv = server(1 << 20, 0, 0);
  gang_store *st = good_client(srv);
  long rss0 = rss_kib();
  int cases = sc_hostile_frames(gang_store_server_port(srv), 1 << 20, st);
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
  gang_store *st = good_client(srv);
  long rss0 = rss_kib();
  long during = sc_hostile_slow(gang_store_server_port(srv), st);
  long grew = rss_kib() - rss0;
  printf("slow reader + 300 slow senders: RSS grew %ld KiB while they were "
         "connected, %ld KiB after\n",
         during, grew);
  assert_true(!RSS_CHECKED || during < 8192);
  assert_true(!RSS_CHECKED || grew < 8192);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_max_clients(void **state) {
  (void)state;
  gang_store_server *srv = server(0, 0, 4);
  int port = gang_store_server_port(srv);
  int fds[4];
  for (int i = 0; i < 4; i++)
    fds[i] = sc_ready_conn(port);
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
