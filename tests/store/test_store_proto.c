/* The wire protocol as pure functions: every request and reply round-trips
 * through encode/decode, and the decoders refuse what the caps forbid
 * before allocating. */
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "raw.h"

#include "core/bytes.h"
#include "store/auth.h"
#include "store/proto.h"

static const gang__store_caps caps = {8192, 1 << 20, 1024, 4 << 20};

static gang__store_bytes S(const char *s) {
  gang__store_bytes b = {(const uint8_t *)s, (uint32_t)strlen(s)};
  return b;
}

/* Encodes r, checks the frame header and decodes it back into *d. */
static void roundtrip(gang__store_req *r, gang__store_req *d,
                      gang__store_buf *b) {
  b->len = 0;
  assert_gang_ok(gang__store_req_encode(r, &caps, b));
  assert_int_equal(b->len, gang__store_req_size(r));
  uint32_t len;
  uint8_t op;
  assert_true(gang__store_frame_header(b->p, b->len, &len, &op));
  assert_int_equal(len + 4, b->len);
  assert_int_equal(op, r->op);
  assert_gang_ok(gang__store_req_decode(op, b->p + 5, len - 1, &caps, d));
  assert_int_equal(d->op, r->op);
}

static void req_init(gang__store_req *r, uint8_t op) {
  memset(r, 0, sizeof *r);
  r->op = op;
  r->keys = &r->key1_;
  r->vals = r->val2_;
  r->nkeys = 1;
  r->timeout_ms = -1;
}

static void test_request_roundtrips(void **state) {
  (void)state;
  gang__store_buf b = {0};
  gang__store_req r, d;

  req_init(&r, GANG_STORE_OP_SET);
  r.keys[0] = S("key");
  r.vals[0] = S("value");
  roundtrip(&r, &d, &b);
  assert_int_equal(d.nkeys, 1);
  assert_memory_equal(d.keys[0].p, "key", 3);
  assert_int_equal(d.vals[0].len, 5);
  gang__store_req_fini(&d);

  req_init(&r, GANG_STORE_OP_GET);
  r.keys[0] = S("k");
  r.timeout_ms = 1234;
  roundtrip(&r, &d, &b);
  assert_int_equal(d.timeout_ms, 1234);
  gang__store_req_fini(&d);

  req_init(&r, GANG_STORE_OP_ADD);
  r.keys[0] = S("ctr");
  r.num = -5;
  roundtrip(&r, &d, &b);
  assert_int_equal(d.num, -5);
  gang__store_req_fini(&d);

  req_init(&r, GANG_STORE_OP_COMPARE_SET);
  r.keys[0] = S("k");
  r.vals[0] = S("");
  r.vals[1] = S("new");
  roundtrip(&r, &d, &b);
  assert_int_equal(d.vals[0].len, 0);
  assert_memory_equal(d.vals[1].p, "new", 3);
  gang__store_req_fini(&d);

  req_init(&r, GANG_STORE_OP_NUM_KEYS);
  r.nkeys = 0;
  roundtrip(&r, &d, &b);
  gang__store_req_fini(&d);

  req_init(&r, GANG_STORE_OP_PING);
  r.nkeys = 0;
  r.num = 99;
  roundtrip(&r, &d, &b);
  assert_int_equal(d.num, 99);
  gang__store_req_fini(&d);

  gang__store_bytes ks[3] = {S("a"), S("bb"), S("ccc")};
  gang__store_bytes vs[3] = {S("1"), S(""), S("333")};
  req_init(&r, GANG_STORE_OP_MULTI_SET);
  r.nkeys = 3;
  r.keys = ks;
  r.vals = vs;
  roundtrip(&r, &d, &b);
  assert_int_equal(d.nkeys, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(d.keys[i].len, ks[i].len);
    assert_memory_equal(d.keys[i].p, ks[i].p, ks[i].len);
    assert_int_equal(d.vals[i].len, vs[i].len);
  }
  gang__store_req_fini(&d);

  uint8_t ops[] = {GANG_STORE_OP_WAIT, GANG_STORE_OP_MULTI_GET,
                   GANG_STORE_OP_CHECK};
  for (int i = 0; i < 3; i++) {
    req_init(&r, ops[i]);
    r.nkeys = 3;
    r.keys = ks;
    r.timeout_ms = 7;
    roundtrip(&r, &d, &b);
    assert_int_equal(d.nkeys, 3);
    assert_memory_equal(d.keys[2].p, "ccc", 3);
    gang__store_req_fini(&d);
  }
  gang__store_buf_free(&b);
}

static void test_byte_layout(void **state) {
  (void)state;
  /* SET "k" = "v": len 11, op 2, u32 1 'k', u32 1 'v' (docs). */
  gang__store_req r;
  req_init(&r, GANG_STORE_OP_SET);
  r.keys[0] = S("k");
  r.vals[0] = S("v");
  gang__store_buf b = {0};
  assert_gang_ok(gang__store_req_encode(&r, &caps, &b));
  const uint8_t want[] = {11, 0, 0, 0, 2, 1, 0, 0, 0, 'k', 1, 0, 0, 0, 'v'};
  assert_int_equal(b.len, sizeof want);
  assert_memory_equal(b.p, want, sizeof want);
  gang__store_buf_free(&b);
  /* Hellos. */
  gang__store_client_hello ch = {GANG_STORE_MAGIC, 1, 1, 1, {0}};
  uint8_t hb[GANG_STORE_SERVER_HELLO_BYTES];
  gang__store_client_hello_encode(&ch, hb);
  assert_memory_equal(hb, "GNGS\x01\x00\x01\x00\x01\x00\x00\x00", 12);
  gang__store_server_hello sh, sh2;
  memset(&sh, 0, sizeof sh);
  sh.magic = GANG_STORE_MAGIC;
  sh.caps = caps;
  sh.proof[31] = 9;
  gang__store_server_hello_encode(&sh, hb);
  gang__store_server_hello_decode(hb, &sh2);
  assert_memory_equal(&sh.caps, &sh2.caps, sizeof sh.caps);
  assert_int_equal(sh2.proof[31], 9);
}

static void test_encoder_caps(void **state) {
  (void)state;
  gang__store_buf b = {0};
  gang__store_req r;
  static char big[(1 << 20) + 2];
  memset(big, 'x', sizeof big - 1);
  req_init(&r, GANG_STORE_OP_SET);
  r.keys[0] = S("k");
  r.vals[0] = S(big);
  assert_int_equal(gang__store_req_encode(&r, &caps, &b),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(b.len, 0);
  big[8193] = '\0';
  r.keys[0] = S(big);
  r.vals[0] = S("v");
  assert_int_equal(gang__store_req_encode(&r, &caps, &b),
                   GANG_INVALID_ARGUMENT);
  r.keys[0] = S("");
  assert_int_equal(gang__store_req_encode(&r, &caps, &b),
                   GANG_INVALID_ARGUMENT);
  r.op = 77;
  assert_int_equal(gang__store_req_encode(&r, &caps, &b),
                   GANG_INVALID_ARGUMENT);
  gang__store_buf_free(&b);
}

static gang_status decode_raw(uint8_t op, const uint8_t *body, size_t n) {
  gang__store_req d;
  gang_status s = gang__store_req_decode(op, body, n, &caps, &d);
  gang__store_req_fini(&d);
  return s;
}

static void test_decoder_rejects(void **state) {
  (void)state;
  uint8_t b[64] = {0};
  /* unknown opcode */
  assert_int_equal(decode_raw(0, b, 0), GANG_PROTOCOL);
  assert_int_equal(decode_raw(13, b, 0), GANG_PROTOCOL);
  /* key longer than the cap, empty key, key length beyond the body */
  gang__put_u32(b, 8193);
  assert_int_equal(decode_raw(GANG_STORE_OP_DELETE, b, 4), GANG_PROTOCOL);
  assert_non_null(strstr(gang_last_error(), "exceeds the cap"));
  gang__put_u32(b, 0);
  assert_int_equal(decode_raw(GANG_STORE_OP_DELETE, b, 4), GANG_PROTOCOL);
  gang__put_u32(b, 10);
  assert_int_equal(decode_raw(GANG_STORE_OP_DELETE, b, 8), GANG_PROTOCOL);
  /* value over the cap */
  gang__put_u32(b, 1);
  b[4] = 'k';
  gang__put_u32(b + 5, (1 << 20) + 1);
  assert_int_equal(decode_raw(GANG_STORE_OP_SET, b, 9), GANG_PROTOCOL);
  /* counts: over the cap, and more than the body could hold */
  gang__put_u32(b, 1025);
  assert_int_equal(decode_raw(GANG_STORE_OP_CHECK, b, 64), GANG_PROTOCOL);
  gang__put_u32(b, 0xffffffffu);
  assert_int_equal(decode_raw(GANG_STORE_OP_CHECK, b, 64), GANG_PROTOCOL);
  gang__put_u32(b, 100);
  assert_int_equal(decode_raw(GANG_STORE_OP_CHECK, b, 64), GANG_PROTOCOL);
  /* truncated fixed fields and trailing bytes */
  assert_int_equal(decode_raw(GANG_STORE_OP_PING, b, 7), GANG_PROTOCOL);
  assert_int_equal(decode_raw(GANG_STORE_OP_PING, b, 9), GANG_PROTOCOL);
  assert_gang_ok(decode_raw(GANG_STORE_OP_PING, b, 8));
  assert_int_equal(decode_raw(GANG_STORE_OP_NUM_KEYS, b, 1), GANG_PROTOCOL);
  assert_gang_ok(decode_raw(GANG_STORE_OP_NUM_KEYS, b, 0));
}

static void test_reply_roundtrips(void **state) {
  (void)state;
  gang__store_buf b = {0};
  gang__store_rep rep;
  gang__store_bytes vs[2] = {S("x"), S("yy")};
  assert_gang_ok(gang__store_rep_vals(&b, vs, 2));
  assert_gang_ok(gang__store_rep_decode(GANG_STORE_OP_MULTI_GET, 2, b.p[4],
                                        b.p + 5, b.len - 5, &caps, &rep));
  assert_int_equal(rep.nvals, 2);
  assert_memory_equal(rep.vals[1].p, "yy", 2);
  gang__store_rep_fini(&rep);
  /* the wrong number of values for the request */
  assert_int_equal(gang__store_rep_decode(GANG_STORE_OP_MULTI_GET, 3, b.p[4],
                                          b.p + 5, b.len - 5, &caps, &rep),
                   GANG_PROTOCOL);
  b.len = 0;
  uint32_t miss[] = {0, 2};
  assert_gang_ok(gang__store_rep_timeout(&b, miss, 2));
  assert_gang_ok(gang__store_rep_decode(GANG_STORE_OP_WAIT, 3, b.p[4], b.p + 5,
                                        b.len - 5, &caps, &rep));
  assert_int_equal(rep.nmissing, 2);
  assert_int_equal(gang__get_u32(rep.missing + 4), 2);
  /* an index beyond the request's keys, a timeout for a set */
  assert_int_equal(gang__store_rep_decode(GANG_STORE_OP_WAIT, 2, b.p[4],
                                          b.p + 5, b.len - 5, &caps, &rep),
                   GANG_PROTOCOL);
  assert_int_equal(gang__store_rep_decode(GANG_STORE_OP_SET, 3, b.p[4], b.p + 5,
                                          b.len - 5, &caps, &rep),
                   GANG_PROTOCOL);
  b.len = 0;
  assert_gang_ok(gang__store_rep_num(&b, -42));
  assert_gang_ok(gang__store_rep_decode(GANG_STORE_OP_ADD, 1, b.p[4], b.p + 5,
                                        b.len - 5, &caps, &rep));
  assert_int_equal(rep.num, -42);
  b.len = 0;
  assert_gang_ok(
      gang__store_rep_error(&b, GANG_STORE_RC_NO_MEMORY, "cap %d", 5));
  assert_gang_ok(gang__store_rep_decode(GANG_STORE_OP_SET, 1, b.p[4], b.p + 5,
                                        b.len - 5, &caps, &rep));
  assert_int_equal(rep.rc, GANG_STORE_RC_NO_MEMORY);
  assert_memory_equal(rep.msg.p, "cap 5", 5);
  assert_int_equal(gang__store_rep_decode(GANG_STORE_OP_SET, 1, 99, b.p + 5,
                                          b.len - 5, &caps, &rep),
                   GANG_PROTOCOL);
  gang__store_buf_free(&b);
}

static void test_auth_proofs(void **state) {
  (void)state;
  uint8_t nc[32], ns[32], p1[32], p2[32];
  assert_gang_ok(gang__auth_random(nc, 32));
  assert_gang_ok(gang__auth_random(ns, 32));
  assert_memory_not_equal(nc, ns, 32);
  assert_gang_ok(gang__auth_proof("s", GANG_AUTH_SERVER_PROOF, nc, ns, p1));
  assert_gang_ok(gang__auth_proof("s", GANG_AUTH_CLIENT_PROOF, nc, ns, p2));
  /* direction-bound, nonce-bound, secret-bound */
  assert_memory_not_equal(p1, p2, 32);
  assert_true(gang__auth_check("s", GANG_AUTH_SERVER_PROOF, nc, ns, p1));
  assert_false(gang__auth_check("s", GANG_AUTH_CLIENT_PROOF, nc, ns, p1));
  assert_false(gang__auth_check("t", GANG_AUTH_SERVER_PROOF, nc, ns, p1));
  assert_false(gang__auth_check("s", GANG_AUTH_SERVER_PROOF, ns, nc, p1));
  /* RFC 4231 test case 2 shape: HMAC-SHA256 is what we compute. */
  uint8_t zero[32] = {0};
  assert_gang_ok(
      gang__auth_proof("Jefe", GANG_AUTH_SERVER_PROOF, zero, zero, p1));
  assert_memory_not_equal(p1, zero, 32);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_request_roundtrips), GT_TEST(test_byte_layout),
      GT_TEST(test_encoder_caps),       GT_TEST(test_decoder_rejects),
      GT_TEST(test_reply_roundtrips),   GT_TEST(test_auth_proofs),
  };
  store_test_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
