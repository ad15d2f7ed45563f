/* Store authentication: the right secret works, every wrong combination is
 * GANG_AUTH with a clear message, replayed and reflected proofs fail, and a
 * connection that has not authenticated cannot change anything. */
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "raw.h"

#include "gang/store.h"
#include "store/auth.h"

static gang_store_server *server_with(const char *secret, int64_t hs_ms) {
  gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
  o.secret = secret;
  o.handshake_timeout_ms = hs_ms;
  gang_store_server *srv = NULL;
  assert_gang_ok(gang_store_server_start(&o, &srv));
  return srv;
}

static gang_status connect_with(gang_store_server *srv, const char *secret,
                                gang_store **st) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_store_server_port(srv));
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.secret = secret;
  o.connect_timeout_ms = 2000;
  *st = NULL;
  return gang_store_connect(addr, &o, st);
}

static void test_right_secret(void **state) {
  (void)state;
  gang_store_server *srv = server_with("s3cret", 0);
  gang_store *st;
  assert_gang_ok(connect_with(srv, "s3cret", &st));
  assert_gang_ok(gang_store_set(st, "k", "v", 1));
  int64_t n;
  assert_gang_ok(gang_store_num_keys(st, &n));
  assert_int_equal(n, 1);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_secret_from_env(void **state) {
  (void)state;
  setenv("GANG_STORE_SECRET", "from-the-env", 1);
  gang_store_server *srv = server_with(NULL, 0);
  gang_store *st;
  assert_gang_ok(connect_with(srv, NULL, &st));
  gang_store_close(st);
  /* An explicit "" turns auth off on the client: refused by this server. */
  assert_int_equal(connect_with(srv, "", &st), GANG_AUTH);
  unsetenv("GANG_STORE_SECRET");
  gang_store_server_stop(srv);
}

static void test_wrong_combinations(void **state) {
  (void)state;
  gang_store_server *srv = server_with("s3cret", 0);
  gang_store *st;
  assert_int_equal(connect_with(srv, "wrong", &st), GANG_AUTH);
  assert_non_null(strstr(gang_last_error(), "different secrets"));
  assert_null(st);
  assert_int_equal(connect_with(srv, "", &st), GANG_AUTH);
  assert_non_null(strstr(gang_last_error(), "requires authentication"));
  gang_store_server_stop(srv);

  gang_store_server *open = server_with("", 0);
  assert_int_equal(connect_with(open, "s3cret", &st), GANG_AUTH);
  assert_non_null(strstr(gang_last_error(), "does not authenticate"));
  gang_store_server_stop(open);
}

/* Completes a raw handshake with `proof_fn` choosing the proof; returns the
 * auth result (0 ok) or -1 if the server closed without one. */
static int raw_auth(int fd, const uint8_t nonce_c[32], const uint8_t *proof,
                    gang__store_server_hello *sh) {
  if (!raw_hello(fd, GANG_STORE_VERSION, GANG_STORE_HELLO_AUTH, nonce_c, sh))
    return -1;
  if (proof == NULL)
    return -2; /* caller sends its own proof */
  if (!raw_send(fd, proof, 32))
    return -1;
  uint8_t r[4];
  if (!raw_recv(fd, r, 4, 2000))
    return -1;
  return (int)gang__get_u32(r);
}

static void test_replay_and_reflection(void **state) {
  (void)state;
  const char *secret = "s3cret";
  gang_store_server *srv = server_with(secret, 0);
  int port = gang_store_server_port(srv);
  uint8_t nc[32];
  memset(nc, 0x42, sizeof nc);

  /* A legitimate handshake by hand, recording the proof. */
  int fd = raw_connect(port);
  gang__store_server_hello sh1;
  assert_int_equal(raw_auth(fd, nc, NULL, &sh1), -2);
  assert_true(gang__auth_check(secret, GANG_AUTH_SERVER_PROOF, nc, sh1.nonce,
                               sh1.proof));
  uint8_t proof[32];
  assert_gang_ok(
      gang__auth_proof(secret, GANG_AUTH_CLIENT_PROOF, nc, sh1.nonce, proof));
  assert_true(raw_send(fd, proof, 32));
  uint8_t res[4];
  assert_true(raw_recv(fd, res, 4, 2000));
  assert_int_equal(gang__get_u32(res), 0);
  close(fd);

  /* Replay: same client nonce, the recorded proof. The server's nonce is
   * fresh, so the proof no longer matches. */
  fd = raw_connect(port);
  gang__store_server_hello sh2;
  assert_int_equal(raw_auth(fd, nc, proof, &sh2), 1);
  assert_memory_not_equal(sh1.nonce, sh2.nonce, 32);
  assert_true(raw_closed_within(fd, 2000));
  close(fd);

  /* Reflection: send the server's own proof back as ours. */
  fd = raw_connect(port);
  gang__store_server_hello sh3;
  assert_int_equal(raw_auth(fd, nc, NULL, &sh3), -2);
  assert_true(raw_send(fd, sh3.proof, 32));
  assert_true(raw_recv(fd, res, 4, 2000));
  assert_int_equal(gang__get_u32(res), 1);
  assert_true(raw_closed_within(fd, 2000));
  close(fd);
  gang_store_server_stop(srv);
}

static void test_no_state_change_before_auth(void **state) {
  (void)state;
  gang_store_server *srv = server_with("s3cret", 0);
  int port = gang_store_server_port(srv);
  /* Hello, then straight to a SET frame without any proof. */
  int fd = raw_connect(port);
  gang__store_server_hello sh;
  uint8_t nc[32] = {1};
  assert_true(raw_hello(fd, GANG_STORE_VERSION, 0, nc, &sh));
  assert_true(sh.flags & GANG_STORE_HELLO_AUTH);
  gang__store_req r;
  raw_set_req(&r, "rank/0", "rogue-address-claiming-rank-0");
  assert_true(raw_request(fd, &r));
  (void)raw_request(fd, &r); /* may already find the connection closed */
  assert_true(raw_closed_within(fd, 2000));
  close(fd);
  /* A SET frame instead of a hello. */
  fd = raw_connect(port);
  assert_true(raw_request(fd, &r));
  assert_true(raw_closed_within(fd, 2000));
  close(fd);

  gang_store *st;
  assert_gang_ok(connect_with(srv, "s3cret", &st));
  int64_t n = -1;
  assert_gang_ok(gang_store_num_keys(st, &n));
  assert_int_equal(n, 0);
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_handshake_timeout(void **state) {
  (void)state;
  gang_store_server *srv = server_with("s3cret", 200);
  int port = gang_store_server_port(srv);
  int idle = raw_connect(port);
  int partial = raw_connect(port);
  assert_true(raw_send(partial, "GNGS\1", 5)); /* a slow hello */
  int noproof = raw_connect(port);
  gang__store_server_hello sh;
  uint8_t nc[32] = {2};
  assert_true(
      raw_hello(noproof, GANG_STORE_VERSION, GANG_STORE_HELLO_AUTH, nc, &sh));
  int64_t t0 = gang__now_ns();
  assert_true(raw_closed_within(idle, 3000));
  assert_true(raw_closed_within(partial, 3000));
  assert_true(raw_closed_within(noproof, 3000));
  int64_t ms = (gang__now_ns() - t0) / 1000000;
  assert_true(ms >= 100 && ms < 1500);
  close(idle);
  close(partial);
  close(noproof);
  /* Authenticated clients are not subject to it. */
  gang_store *st;
  assert_gang_ok(connect_with(srv, "s3cret", &st));
  struct timespec ts = {0, 400 * 1000 * 1000};
  nanosleep(&ts, NULL); /* idle past the handshake timeout on purpose */
  assert_gang_ok(gang_store_set(st, "k", "v", 1));
  gang_store_close(st);
  gang_store_server_stop(srv);
}

static void test_version_mismatch(void **state) {
  (void)state;
  gang_store_server *srv = server_with("", 0);
  int fd = raw_connect(gang_store_server_port(srv));
  gang__store_server_hello sh;
  assert_true(raw_hello(fd, 99, 0, NULL, &sh));
  assert_int_equal(sh.status, GANG_STORE_HELLO_BAD_VERSION);
  assert_int_equal(sh.version, GANG_STORE_VERSION);
  assert_true(raw_closed_within(fd, 2000));
  close(fd);
  gang_store_server_stop(srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_right_secret),
      GT_TEST(test_secret_from_env),
      GT_TEST(test_wrong_combinations),
      GT_TEST(test_replay_and_reflection),
      GT_TEST(test_no_state_change_before_auth),
      GT_TEST(test_handshake_timeout),
      GT_TEST(test_version_mismatch),
  };
  store_test_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
