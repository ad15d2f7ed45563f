/* The TCP store client's reply reader against a stand-in server that
 * speaks the wire protocol by hand: a reply that arrives a byte at a time
 * (after the client's spin has given up) is assembled, bytes beyond the
 * reply and an oversized frame break the connection with a protocol error,
 * and GANG_STORE_SPIN_US is checked (0 works, garbage is refused). */
#include <stdlib.h>

#include "harness/harness.h"
#include "raw.h"

#include "gang/store.h"
#include "store/proto.h"

/* How the stand-in answers the one ADD it takes. */
typedef enum { TRICKLE, EXTRA, HUGE } misbehaviour;

typedef struct standin {
  int lfd, port;
  misbehaviour how;
  pthread_t th;
} standin;

static gang__store_caps caps = {.max_key = 1024,
                                .max_value = 1 << 20,
                                .max_keys = 64,
                                .max_frame = (1 << 20) + 4096};

static void *standin_main(void *arg) {
  standin *s = arg;
  int fd = accept(s->lfd, NULL, NULL);
  if (fd < 0)
    return NULL;
  uint8_t hello[GANG_STORE_SERVER_HELLO_BYTES];
  if (!raw_recv(fd, hello, GANG_STORE_CLIENT_HELLO_BYTES, 10000))
    goto out;
  gang__store_server_hello sh;
  memset(&sh, 0, sizeof sh);
  sh.magic = GANG_STORE_MAGIC;
  sh.version = GANG_STORE_VERSION;
  sh.kind = GANG_STORE_KIND_SERVER;
  sh.status = GANG_STORE_HELLO_OK;
  sh.caps = caps;
  gang__store_server_hello_encode(&sh, hello);
  if (!raw_send(fd, hello, GANG_STORE_SERVER_HELLO_BYTES))
    goto out;
  /* The request: its length, then that many bytes. */
  uint8_t len[4], body[256];
  if (!raw_recv(fd, len, 4, 10000) || gang__get_u32(len) > sizeof body ||
      !raw_recv(fd, body, gang__get_u32(len), 10000))
    goto out;
  gang__store_buf rep = {0};
  if (gang__store_rep_num(&rep, 41) != GANG_OK)
    goto out;
  if (s->how == TRICKLE) {
    for (size_t i = 0; i < rep.len; i++) {
      usleep(2000); /* past any spin: the client sleeps between bytes */
      if (!raw_send(fd, rep.p + i, 1))
        break;
    }
  } else if (s->how == EXTRA) {
    uint8_t twice[64];
    memcpy(twice, rep.p, rep.len);
    memcpy(twice + rep.len, rep.p, rep.len);
    raw_send(fd, twice, 2 * rep.len);
  } else {
    gang__put_u32(rep.p, caps.max_frame + 1);
    raw_send(fd, rep.p, rep.len);
  }
  gang__store_buf_free(&rep);
  /* Wait for the client to hang up. */
  uint8_t b;
  raw_recv(fd, &b, 1, 10000);
out:
  close(fd);
  return NULL;
}

static void standin_start(standin *s, misbehaviour how) {
  s->how = how;
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  assert_true(s->lfd >= 0);
  assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(s->lfd, 4), 0);
  assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&a, &n), 0);
  s->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&s->th, NULL, standin_main, s), 0);
}

static void standin_join(standin *s) {
  pthread_join(s->th, NULL);
  close(s->lfd);
}

static gang_status add_once(standin *s, int64_t *v) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", s->port);
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 10000;
  gang_store *st;
  gang_status rc = gang_store_connect(addr, &o, &st);
  if (rc != GANG_OK)
    return rc;
  rc = gang_store_add(st, "k", 1, v);
  gang_store_close(st);
  return rc;
}

static void test_trickled_reply(void **state) {
  (void)state;
  standin s;
  standin_start(&s, TRICKLE);
  int64_t v = 0;
  assert_gang_ok(add_once(&s, &v));
  assert_int_equal(v, 41);
  standin_join(&s);
}

static void test_bytes_beyond_reply(void **state) {
  (void)state;
  standin s;
  standin_start(&s, EXTRA);
  int64_t v = 0;
  /* Two replies in one segment: the client reads both at once, and must
   * not take the first and leave the second for the next call. */
  assert_int_equal(add_once(&s, &v), GANG_PROTOCOL);
  assert_non_null(strstr(gang_last_error(), "beyond its reply"));
  standin_join(&s);
}

static void test_oversized_reply(void **state) {
  (void)state;
  standin s;
  standin_start(&s, HUGE);
  int64_t v = 0;
  assert_int_equal(add_once(&s, &v), GANG_PROTOCOL);
  assert_non_null(strstr(gang_last_error(), "reply frame of"));
  standin_join(&s);
}

static void test_spin_setting(void **state) {
  (void)state;
  gang_store_server *srv;
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  so.secret = "";
  assert_gang_ok(gang_store_server_start(&so, &srv));
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_store_server_port(srv));
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 10000;
  o.secret = "";
  gang_store *st;
  setenv("GANG_STORE_SPIN_US", "0", 1);
  assert_gang_ok(gang_store_connect(addr, &o, &st));
  int64_t v;
  assert_gang_ok(gang_store_add(st, "k", 2, &v));
  assert_int_equal(v, 2);
  gang_store_close(st);
  setenv("GANG_STORE_SPIN_US", "lots", 1);
  assert_int_equal(gang_store_connect(addr, &o, &st), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "GANG_STORE_SPIN_US"));
  setenv("GANG_STORE_SPIN_US", "-5", 1);
  assert_int_equal(gang_store_connect(addr, &o, &st), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "GANG_STORE_SPIN_US"));
  unsetenv("GANG_STORE_SPIN_US");
  gang_store_server_stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_trickled_reply),
      GT_TEST(test_bytes_beyond_reply),
      GT_TEST(test_oversized_reply),
      GT_TEST(test_spin_setting),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
