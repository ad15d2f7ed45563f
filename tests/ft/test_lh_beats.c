/* Heartbeats by datagram (src/ft/lh_beats.c): what counts and what does
 * not, the table of known ids under churn, and a lighthouse whose
 * replicas' quiet beats arrive by datagram. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"

#include "ft/lh_beats.h"
#include "ft/lh_impl.h"
#include "ft/lighthouse.h"
#include "gang/store.h"
#include "store/auth.h"

#define INC 0x1234567890abcdefull

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int64_t count_of(gang__lh_beats *b, const char *id) {
  char ids[GANG_LH_ID_MAX] = {0};
  snprintf(ids, sizeof ids, "%s", id);
  int64_t c = -1;
  gang__lh_beats_read(b, ids, sizeof ids, 1, &c);
  return c;
}

/* Waits up to 2 s for id's count to reach want; the count then. */
static int64_t wait_count(gang__lh_beats *b, const char *id, int64_t want) {
  int64_t t0 = now_ms(), c;
  while ((c = count_of(b, id)) < want && now_ms() - t0 < 2000)
    usleep(2000);
  return c;
}

static int sender(void) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  assert_true(fd >= 0);
  return fd;
}

static void send_to(int fd, int port, const void *p, size_t n) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  assert_int_equal(sendto(fd, p, n, 0, (struct sockaddr *)&a, sizeof a),
                   (ssize_t)n);
}

static void test_what_counts(void **state) {
  (void)state;
  gang__lh_beats *b = NULL;
  assert_gang_ok(gang__lh_beats_start("127.0.0.1", 0, "s3cret", INC, &b));
  int port = gang__lh_beats_port(b);
  assert_true(port > 0);
  gang__auth_key *key = NULL, *wrong = NULL;
  assert_gang_ok(gang__auth_key_new("s3cret", &key));
  assert_gang_ok(gang__auth_key_new("other", &wrong));
  gang__lh_beats_add(b, "r1");
  int fd = sender();
  uint8_t d[GANG__LH_BEAT_CAP], bad[GANG__LH_BEAT_CAP];
  size_t n = gang__lh_beat_encode(d, sizeof d, INC, 100, "r1", key);
  assert_int_equal(n, 24 + 2 + 16);
  send_to(fd, port, d, n);
  assert_int_equal(wait_count(b, "r1", 1), 1);
  /* Each of these is dropped; a good one after them shows they were
   * read (datagrams from one socket arrive in order on loopback). */
  send_to(fd, port, d, n); /* a replay: same sequence */
  n = gang__lh_beat_encode(bad, sizeof bad, INC, 99, "r1", key);
  send_to(fd, port, bad, n); /* an older sequence */
  n = gang__lh_beat_encode(bad, sizeof bad, INC + 1, 200, "r1", key);
  send_to(fd, port, bad, n); /* another lighthouse */
  n = gang__lh_beat_encode(bad, sizeof bad, INC, 201, "r1", wrong);
  send_to(fd, port, bad, n); /* another secret */
  n = gang__lh_beat_encode(bad, sizeof bad, INC, 202, "r1", key);
  bad[n - 1] ^= 1;
  send_to(fd, port, bad, n); /* a changed tag */
  bad[n - 1] ^= 1;
  bad[24] = 'x';
  send_to(fd, port, bad, n); /* a changed id */
  n = gang__lh_beat_encode(bad, sizeof bad, INC, 203, "r1", NULL);
  send_to(fd, port, bad, n); /* no tag */
  n = gang__lh_beat_encode(bad, sizeof bad, INC, 204, "r1", key);
  send_to(fd, port, bad, n - 1); /* short */
  send_to(fd, port, bad, 10);    /* shorter than a header */
  n = gang__lh_beat_encode(bad, sizeof bad, INC, 205, "r2", key);
  send_to(fd, port, bad, n); /* an id it does not know */
  n = gang__lh_beat_encode(d, sizeof d, INC, 300, "r1", key);
  send_to(fd, port, d, n);
  assert_int_equal(wait_count(b, "r1", 2), 2);
  usleep(20000);
  assert_int_equal(count_of(b, "r1"), 2);
  assert_int_equal(count_of(b, "r2"), 0);
  /* Forgotten, then known again: it counts from 0, and sequences go on
   * from where they were (a replica's clock). */
  gang__lh_beats_remove(b, "r1");
  assert_int_equal(count_of(b, "r1"), 0);
  gang__lh_beats_add(b, "r1");
  n = gang__lh_beat_encode(d, sizeof d, INC, 400, "r1", key);
  send_to(fd, port, d, n);
  assert_int_equal(wait_count(b, "r1", 1), 1);
  /* Encoding refuses what cannot be a datagram. */
  char longid[GANG_LH_ID_MAX + 1];
  memset(longid, 'a', sizeof longid - 1);
  longid[sizeof longid - 1] = '\0';
  assert_int_equal(gang__lh_beat_encode(d, sizeof d, INC, 1, longid, key), 0);
  assert_int_equal(gang__lh_beat_encode(d, sizeof d, INC, 1, "", key), 0);
  assert_int_equal(gang__lh_beat_encode(d, 20, INC, 1, "r1", key), 0);
  close(fd);
  gang__auth_key_free(key);
  gang__auth_key_free(wrong);
  gang__lh_beats_stop(b);
}

static void test_no_secret(void **state) {
  (void)state;
  gang__lh_beats *b = NULL;
  assert_gang_ok(gang__lh_beats_start("127.0.0.1", 0, "", INC, &b));
  gang__auth_key *key = NULL;
  assert_gang_ok(gang__auth_key_new("s3cret", &key));
  gang__lh_beats_add(b, "r1");
  int fd = sender();
  uint8_t d[GANG__LH_BEAT_CAP];
  size_t n = gang__lh_beat_encode(d, sizeof d, INC, 1, "r1", key);
  send_to(fd, gang__lh_beats_port(b), d, n); /* tagged: the wrong length */
  n = gang__lh_beat_encode(d, sizeof d, INC, 2, "r1", NULL);
  send_to(fd, gang__lh_beats_port(b), d, n);
  assert_int_equal(wait_count(b, "r1", 1), 1);
  usleep(20000);
  assert_int_equal(count_of(b, "r1"), 1);
  close(fd);
  gang__auth_key_free(key);
  gang__lh_beats_stop(b);
}

/* Ids come and go far more often than the table has slots: lookups stay
 * right through the compactions. */
static void test_table_churn(void **state) {
  (void)state;
  gang__lh_beats *b = NULL;
  assert_gang_ok(gang__lh_beats_start("127.0.0.1", 0, NULL, INC, &b));
  char id[32];
  for (int i = 0; i < 30000; i++) {
    snprintf(id, sizeof id, "churn%d", i);
    gang__lh_beats_add(b, id);
    if (i >= 100) {
      snprintf(id, sizeof id, "churn%d", i - 100);
      gang__lh_beats_remove(b, id);
    }
  }
  int fd = sender();
  uint8_t d[GANG__LH_BEAT_CAP];
  for (int i = 29900; i < 30000; i++) {
    snprintf(id, sizeof id, "churn%d", i);
    size_t n = gang__lh_beat_encode(d, sizeof d, INC, 7, id, NULL);
    send_to(fd, gang__lh_beats_port(b), d, n);
  }
  assert_int_equal(wait_count(b, "churn29999", 1), 1);
  assert_int_equal(wait_count(b, "churn29900", 1), 1);
  assert_int_equal(count_of(b, "churn29899"), 0);
  close(fd);
  gang__lh_beats_stop(b);
}

/* The store's counter of `id` at addr, as soon as it reads `want` (up to
 * 3 s: quiet adds arrive on another connection). */
static int64_t store_counter(const char *addr, const char *id, int64_t want) {
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.secret = "";
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(addr, &so, &st));
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_HB, id);
  int64_t v = -1, t0 = now_ms();
  do {
    assert_gang_ok(gang_store_add(st, key, 0, &v));
  } while (v != want && now_ms() - t0 < 3000 && usleep(5000) == 0);
  gang_store_close(st);
  return v;
}

/* Through a lighthouse: after its first (answered) beat, a replica's
 * beats go by datagram and count, and the lighthouse confirms it. */
static void test_lighthouse_counts_datagrams(void **state) {
  (void)state;
  gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.http_port = -1;
  o.secret = "";
  gang_lighthouse *lh = NULL;
  assert_gang_ok(gang_lighthouse_start(&o, &lh));
  assert_non_null(lh->beats);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  gang__lh_client *c = NULL;
  assert_gang_ok(gang__lh_connect(addr, 5000, &c));
  /* Beats as a manager's, every 20 ms: one in 5 answered until the
   * lighthouse has confirmed the datagrams (lh/udp/<id>), which takes a
   * tick or two. */
  for (int i = 0; i < 40; i++) {
    assert_gang_ok(gang__lh_heartbeat(c, "dgram:0"));
    usleep(20000);
  }
  int64_t before = count_of(lh->beats, "dgram:0");
  assert_true(before > 0);
  /* Confirmed: the next 50 are all datagrams. */
  for (int i = 0; i < 50; i++)
    assert_gang_ok(gang__lh_heartbeat(c, "dgram:0"));
  assert_int_equal(wait_count(lh->beats, "dgram:0", before + 50), before + 50);
  gang__lh_close(c);
  gang_lighthouse_stop(lh);
}

/* A network that drops datagrams without a word: the client finds its
 * beats never confirmed and beats over the store. A store stands in for a
 * lighthouse that says it takes datagrams, and a UDP socket on its port
 * swallows them. */
static void test_dropped_datagrams_fall_back(void **state) {
  (void)state;
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  so.host = "127.0.0.1";
  so.secret = "";
  gang_store_server *srv = NULL;
  assert_gang_ok(gang_store_server_start(&so, &srv));
  int port = gang_store_server_port(srv);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  gang_store_options co = GANG_STORE_OPTIONS_INIT;
  co.secret = "";
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(addr, &co, &st));
  assert_gang_ok(
      gang_store_set(st, GANG__LH_KEY_INCARNATION, "0123456789abcdef", 16));
  assert_gang_ok(gang_store_set(st, GANG__LH_KEY_BEAT, "udp", 3));
  assert_gang_ok(gang_store_set(st, GANG__LH_KEY_IDS, "", 0));
  int sink = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  assert_int_equal(bind(sink, (struct sockaddr *)&a, sizeof a), 0);
  gang__lh_client *c = NULL;
  assert_gang_ok(gang__lh_connect(addr, 5000, &c));
  /* 1 answered (registers), then 3 rounds of 4 datagrams and an answered
   * beat that finds no confirmation: 4 answered, and the 14 after them
   * are adds to the store. */
  for (int i = 0; i < 30; i++)
    assert_gang_ok(gang__lh_heartbeat(c, "dropped:0"));
  assert_int_equal(store_counter(addr, "dropped:0", 18), 18);
  char buf[64];
  assert_true(recv(sink, buf, sizeof buf, MSG_DONTWAIT) > 0);
  gang__lh_close(c);
  close(sink);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_what_counts),
      GT_TEST(test_no_secret),
      GT_TEST(test_table_churn),
      GT_TEST(test_lighthouse_counts_datagrams),
      GT_TEST(test_dropped_datagrams_fall_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
