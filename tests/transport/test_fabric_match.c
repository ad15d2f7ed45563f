/* The fabric through its own headers (fabric.h, fabric_internal.h), with
 * no gang on top: the frame layout, matching of messages to receives
 * posted in another order (small ones read into early buffers, large ones
 * left in the socket until their receive comes), the exact length a
 * receive demands, and withdrawing a posted receive. Two ranks over
 * loopback TCP meet through a file store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/bytes.h"
#include "core/clock.h"
#include "gang/store.h"
#include "transport/fabric_internal.h"

#define CTX 0x6d61746368ull

static char g_path[64];
static int g_round;

typedef struct side {
  gang_store *file, *st;
  gang__fabric *f;
} side;

static side open_side(int rank, int size) {
  side s = {0};
  RCHECK_OK(gang_store_file_open(g_path, NULL, &s.file));
  char prefix[32];
  snprintf(prefix, sizeof prefix, "round%d/", g_round);
  RCHECK_OK(gang_store_prefix(s.file, prefix, &s.st));
  gang__fabric_config cfg = {.rank = rank,
                             .size = size,
                             .store = s.st,
                             .host = "127.0.0.1",
                             .deadline = gang__deadline_in_ms(20000)};
  RCHECK_OK(gang__fabric_create(&cfg, &s.f));
  return s;
}

static void close_side(side *s) {
  gang__fabric_destroy(s->f);
  gang_store_close(s->st);
  gang_store_close(s->file);
}

static gang__xfer xfer(bool send, int peer, uint32_t tag, void *buf,
                       size_t len) {
  return (gang__xfer){.peer = peer,
                      .send = send,
                      .tag = tag,
                      .ctx = CTX,
                      .seq = 7,
                      .buf = buf,
                      .len = len,
                      .owns_buf = !send};
}

static unsigned char pattern(uint32_t tag, size_t i) {
  return (unsigned char)((i * 131 + tag * 17) % 251);
}

/* ---- Frames ---------------------------------------------------------------
 */

static void test_frame_layout(void **state) {
  (void)state;
  /* Data frames of 64 KiB or more carry their header in a page. */
  assert_int_equal(gang__fabric_frame_head(FRAME_DATA, 0), HDR);
  assert_int_equal(gang__fabric_frame_head(FRAME_DATA, PAD_MIN - 1), HDR);
  assert_int_equal(gang__fabric_frame_head(FRAME_DATA, PAD_MIN), FRAME_PAGE);
  assert_int_equal(gang__fabric_frame_head(FRAME_DATA, MAX_FRAME), FRAME_PAGE);
  assert_int_equal(gang__fabric_frame_head(FRAME_DATA, MAX_FRAME + 1), HDR);
  assert_int_equal(gang__fabric_frame_head(FRAME_ABORT, PAD_MIN), HDR);
  assert_int_equal(gang__fabric_frame_head(FRAME_BYE, 0), HDR);
  /* Little-endian fields at fixed offsets. */
  uint8_t h[HDR];
  gang__fabric_encode_header(h, FRAME_DATA, 0x01020304u, 0x1122334455667788ull,
                             0x99aabbccddeeff00ull, 0x0102030405ull);
  assert_int_equal(gang__get_u32(h), FRAME_DATA);
  assert_int_equal(h[4], 0x04);
  assert_int_equal(gang__get_u32(h + 4), 0x01020304u);
  assert_true(gang__get_u64(h + 8) == 0x1122334455667788ull);
  assert_true(gang__get_u64(h + 16) == 0x99aabbccddeeff00ull);
  assert_true(gang__get_u64(h + 24) == 0x0102030405ull);
}

/* ---- Matching ---------------------------------------------------------------
 */

/* Sizes: small ones are read into early buffers at once, those above
 * EAGER_MAX wait in the socket for their receive; one is padded. */
static const size_t sizes[] = {1, 5000, EAGER_MAX + 1, 3, 3 * PAD_MIN};
#define NMSG (sizeof sizes / sizeof sizes[0])

static int reverse_rank(int rank, int size, void *arg) {
  (void)arg;
  side s = open_side(rank, size);
  int64_t deadline = gang__deadline_in_ms(20000);
  unsigned char *buf[NMSG];
  for (size_t m = 0; m < NMSG; m++) {
    buf[m] = malloc(sizes[m]);
    for (size_t i = 0; i < sizes[m]; i++)
      buf[m][i] = rank == 0 ? pattern((uint32_t)m, i) : 0xee;
  }
  if (rank == 0) {
    /* All sent in tag order at once. */
    gang__xfer x[NMSG];
    for (size_t m = 0; m < NMSG; m++)
      x[m] = xfer(true, 1, (uint32_t)m, buf[m], sizes[m]);
    RCHECK_OK(gang__fabric_run(s.f, x, NMSG, deadline, "sends"));
  } else {
    /* Received one by one, last tag first. */
    for (size_t k = NMSG; k-- > 0;) {
      gang__xfer x = xfer(false, 0, (uint32_t)k, buf[k], sizes[k]);
      RCHECK_OK(gang__fabric_run(s.f, &x, 1, deadline, "receive"));
      RCHECK(x.done);
      for (size_t i = 0; i < sizes[k]; i++)
        RCHECK(buf[k][i] == pattern((uint32_t)k, i));
    }
  }
  for (size_t m = 0; m < NMSG; m++)
    free(buf[m]);
  close_side(&s);
  return 0;
}

static void test_receives_in_reverse_order(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, reverse_rank, NULL, 60000), 0);
}

/* A receive of 99 bytes for a message of 100 fails the fabric with
 * GANG_MISMATCH, naming both lengths; the sender learns it too. */
static int mismatch_rank(int rank, int size, void *arg) {
  (void)arg;
  side s = open_side(rank, size);
  int64_t deadline = gang__deadline_in_ms(20000);
  unsigned char b[100] = {0};
  gang__xfer x = xfer(rank == 0, 1 - rank, 3, b, rank == 0 ? 100 : 99);
  gang_status st = gang__fabric_run(s.f, &x, 1, deadline, "the transfer");
  if (rank == 1) {
    RCHECK(st == GANG_MISMATCH);
    RCHECK(strstr(gang_last_error(), "sent 100 bytes") != NULL);
    RCHECK(strstr(gang_last_error(), "expected 99") != NULL);
  } else {
    RCHECK_OK(st); /* the frame went out */
  }
  /* Sticky on both: the peer's ABORT frame carries the status. */
  unsigned char c[4];
  gang__xfer y = xfer(rank == 1, 1 - rank, 4, c, sizeof c);
  RCHECK(gang__fabric_run(s.f, &y, 1, deadline, "after") == GANG_MISMATCH);
  close_side(&s);
  return 0;
}

static void test_wrong_length_is_a_mismatch(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, mismatch_rank, NULL, 60000), 0);
}

/* ---- Withdrawing ----------------------------------------------------------
 */

/* A posted receive nothing will match is withdrawn: it is done, its group
 * complete, nothing failed, and the fabric goes on (an exchange after it
 * works, and a message sent later with the withdrawn receive's tag is an
 * early message for the receive posted next). */
static int cancel_rank(int rank, int size, void *arg) {
  (void)arg;
  side s = open_side(rank, size);
  int64_t deadline = gang__deadline_in_ms(20000);
  unsigned char b[64], c[64];
  memset(b, 0xee, sizeof b);
  if (rank == 1) {
    gang__xfer lonely = xfer(false, 0, 9, b, sizeof b);
    gang__xgroup g;
    RCHECK_OK(gang__fabric_start(s.f, &lonely, 1, &g, "lonely receive"));
    bool done = true;
    RCHECK_OK(gang__fabric_test(s.f, &g, "lonely receive", &done));
    RCHECK(!done);
    gang__fabric_cancel(s.f, &lonely, 1, "withdrawn by the test");
    RCHECK(lonely.done && g.remaining == 0);
    RCHECK(gang__fabric_status(s.f, NULL, 0) == GANG_OK);
    for (size_t i = 0; i < sizeof b; i++)
      RCHECK(b[i] == 0xee);
  }
  /* An exchange: both directions at once. */
  for (size_t i = 0; i < sizeof b; i++)
    b[i] = pattern((uint32_t)rank, i);
  gang__xfer x[2] = {xfer(true, 1 - rank, 10, b, sizeof b),
                     xfer(false, 1 - rank, 10, c, sizeof c)};
  RCHECK_OK(gang__fabric_run(s.f, x, 2, deadline, "exchange"));
  for (size_t i = 0; i < sizeof c; i++)
    RCHECK(c[i] == pattern((uint32_t)(1 - rank), i));
  /* Tag 9 after all: rank 1's new receive gets it. */
  gang__xfer y = xfer(rank == 0, 1 - rank, 9, rank == 0 ? b : c, sizeof b);
  RCHECK_OK(gang__fabric_run(s.f, &y, 1, deadline, "tag 9"));
  if (rank == 1)
    for (size_t i = 0; i < sizeof c; i++)
      RCHECK(c[i] == pattern(0, i));
  close_side(&s);
  return 0;
}

static void test_withdrawn_receive(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, cancel_rank, NULL, 60000), 0);
}

/* ---- Pacing ----------------------------------------------------------------
 */

/* A paced send runs one piece beyond its receive's arrived pieces, and
 * one more per GANG__PACE_RTT_US of its connection's round trip: lockstep
 * where the round trip is short, a round trip's worth of pieces ahead
 * across a long one. Worked on a bare fabric: send_limit reads only the
 * connection's piece and round trip and its receive's progress. */
static void test_pacing_window(void **state) {
  (void)state;
  gang__fabric_conn conns[2];
  memset(conns, 0, sizeof conns);
  gang__fabric f;
  memset(&f, 0, sizeof f);
  f.size = 2;
  f.conns = conns;
  const size_t piece = 128 << 10, len = 8 << 20;
  conns[1].piece = piece;
  gang__xfer r = xfer(false, 1, 1, NULL, len);
  gang__xfer x = xfer(true, 1, 1, NULL, len);
  x.pace = &r;
  conns[1].rx = &r;
  size_t head = gang__fabric_frame_head(FRAME_DATA, len);
  struct {
    uint32_t rtt_us;
    size_t got, lim;
  } cases[] = {
      {0, 0, piece},                 /* unknown: lockstep */
      {5, 0, piece},                 /* loopback */
      {99, piece + 1, 2 * piece},    /* a piece and a byte arrived */
      {100, 0, 2 * piece},           /* one more piece per 100 us */
      {1000, 0, 11 * piece},         /* 500 us one way */
      {1000, 3 * piece, 14 * piece}, /* ... and moving on */
      {1000000, 0, len},             /* never beyond the message */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    conns[1].rtt_us = cases[i].rtt_us;
    conns[1].rgot = cases[i].got;
    assert_int_equal(gang__fabric_send_limit(&f, &x), head + cases[i].lim);
  }
  r.done = true; /* the receive is complete: no limit */
  conns[1].rtt_us = 0;
  assert_int_equal(gang__fabric_send_limit(&f, &x), head + len);
}

/* ---- Fabrics over the caller's connections --------------------------------
 */

/* gang__fabric_create_connected: two fabrics of one process over a
 * socketpair, with no store and no hello, move messages both ways (padded
 * ones, an empty one, and a large one that arrives before its receive and
 * is buffered once the receive behind it waits) driven by non-blocking
 * passes; a rank outside the world is refused, and the fds given are
 * closed then too (GT_TEST checks for leaks). */
static void test_connected_fabrics(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  gang__fabric *f[2] = {NULL, NULL};
  int fds0[2] = {-1, sv[0]}, fds1[2] = {sv[1], -1};
  assert_int_equal(gang__fabric_create_connected(0, 2, fds0, &f[0]), GANG_OK);
  assert_int_equal(gang__fabric_create_connected(1, 2, fds1, &f[1]), GANG_OK);
  enum { BIG = 100000, LATE = 70000 };
  unsigned char *in[2], *out[2], late_in[LATE], late_out[LATE];
  for (int r = 0; r < 2; r++) {
    in[r] = malloc(BIG);
    out[r] = malloc(BIG);
    assert_non_null(in[r]);
    assert_non_null(out[r]);
    for (size_t i = 0; i < BIG; i++)
      out[r][i] = pattern((uint32_t)r, i);
  }
  for (size_t i = 0; i < LATE; i++)
    late_out[i] = pattern(3, i);
  /* Rank 0 sends the late message first and posts its receive last. */
  gang__xfer x0[3] = {xfer(true, 1, 3, late_out, LATE),
                      xfer(true, 1, 1, out[0], BIG),
                      xfer(false, 1, 2, in[0], BIG)};
  gang__xfer x1[3] = {xfer(true, 0, 2, out[1], BIG),
                      xfer(false, 0, 1, in[1], BIG), xfer(true, 0, 4, NULL, 0)};
  gang__xfer e = xfer(false, 1, 4, NULL, 0);
  gang__xgroup g0, g1, ge;
  assert_int_equal(gang__fabric_start(f[0], x0, 3, &g0, "rank 0"), GANG_OK);
  assert_int_equal(gang__fabric_start(f[1], x1, 3, &g1, "rank 1"), GANG_OK);
  assert_int_equal(gang__fabric_start(f[0], &e, 1, &ge, "empty"), GANG_OK);
  bool d0 = false, d1 = false, de = false;
  int64_t deadline = gang__deadline_in_ms(20000);
  while (!(d0 && d1 && de) && !gang__deadline_passed(deadline)) {
    assert_int_equal(gang__fabric_test(f[0], &g0, "rank 0", &d0), GANG_OK);
    assert_int_equal(gang__fabric_test(f[1], &g1, "rank 1", &d1), GANG_OK);
    assert_int_equal(gang__fabric_test(f[0], &ge, "empty", &de), GANG_OK);
  }
  assert_true(d0 && d1 && de);
  assert_memory_equal(in[0], out[1], BIG);
  assert_memory_equal(in[1], out[0], BIG);
  /* The late message was kept; its receive takes it now. */
  gang__xfer l = xfer(false, 0, 3, late_in, LATE);
  assert_int_equal(
      gang__fabric_run(f[1], &l, 1, gang__deadline_in_ms(20000), "late"),
      GANG_OK);
  assert_memory_equal(late_in, late_out, LATE);
  for (int r = 0; r < 2; r++) {
    gang__fabric_destroy(f[r]);
    free(in[r]);
    free(out[r]);
  }
  /* Refused: rank 2 of a world of 2; the fds given are closed. */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  int bad[2] = {sv[0], sv[1]};
  gang__fabric *none = NULL;
  assert_int_equal(gang__fabric_create_connected(2, 2, bad, &none),
                   GANG_INVALID_ARGUMENT);
  assert_null(none);
}

static int make_store(void **state) {
  (void)state;
  snprintf(g_path, sizeof g_path, "/tmp/gang-test-match-%d", (int)getpid());
  unlink(g_path);
  return 0;
}

static int remove_store(void **state) {
  (void)state;
  unlink(g_path);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_frame_layout),
      GT_TEST(test_receives_in_reverse_order),
      GT_TEST(test_wrong_length_is_a_mismatch),
      GT_TEST(test_withdrawn_receive),
      GT_TEST(test_pacing_window),
      GT_TEST(test_connected_fabrics),
  };
  return cmocka_run_group_tests(tests, make_store, remove_store);
}
