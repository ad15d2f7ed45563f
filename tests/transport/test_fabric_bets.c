/* The fabric reads a frame's payload straight into the first receive
 * posted on its connection, betting that the frame is that receive's, and
 * moves the bytes out again when it is not (read_posted in
 * src/transport/fabric.c). A lost bet leaves another frame's bytes in the
 * receive's buffer until its own payload arrives, so only receives that
 * own their buffer (gang__xfer.owns_buf) may be bet on: the pipelined
 * ring's all_gather receives land in blocks a send may still be reading.
 * Here, on the fabric itself, two ranks over loopback TCP: rank 1 posts a
 * receive that does not own its buffer, then one that does; rank 0 sends
 * the second message first. Until the first receive's own message is sent
 * (after rank 1 says so through the store), its buffer must hold exactly
 * what rank 1 put there. The same with an owned first receive must show
 * other bytes in it (the bet was placed and lost), so the first check
 * cannot pass for want of a bet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

#include "core/clock.h"
#include "gang/store.h"
#include "transport/fabric.h"

#define LEN 8192
#define CTX 0x5eedu

static char g_path[64];
static int g_round;

/* This round's view of the file store; *file is the store it borrows. */
static gang_store *open_store(gang_store **file) {
  RCHECK_OK(gang_store_file_open(g_path, NULL, file));
  char prefix[32];
  snprintf(prefix, sizeof prefix, "round%d/", g_round);
  gang_store *view = NULL;
  RCHECK_OK(gang_store_prefix(*file, prefix, &view));
  return view;
}

static gang__xfer xfer(bool send, int peer, uint32_t tag, void *buf,
                       bool owns) {
  return (gang__xfer){.peer = peer,
                      .send = send,
                      .tag = tag,
                      .ctx = CTX,
                      .seq = 1,
                      .buf = buf,
                      .len = LEN,
                      .owns_buf = owns};
}

static bool all_bytes(const unsigned char *b, unsigned char v) {
  for (size_t i = 0; i < LEN; i++)
    if (b[i] != v)
      return false;
  return true;
}

/* arg: whether rank 1's first receive owns its buffer. */
static int bet_rank(int rank, int size, void *arg) {
  bool first_owns = *(const bool *)arg;
  gang_store *file = NULL, *st = open_store(&file);
  gang__fabric_config cfg = {.rank = rank,
                             .size = size,
                             .store = st,
                             .host = "127.0.0.1",
                             .deadline = gang__deadline_in_ms(20000)};
  gang__fabric *f = NULL;
  RCHECK_OK(gang__fabric_create(&cfg, &f));
  static unsigned char a[LEN], b[LEN];
  int64_t deadline = gang__deadline_in_ms(20000);
  if (rank == 0) {
    memset(a, 0x11, LEN); /* tag 1: the first receive's */
    memset(b, 0x22, LEN); /* tag 2: the second receive's */
    gang__xfer x = xfer(true, 1, 2, b, false);
    RCHECK_OK(gang__fabric_run(f, &x, 1, deadline, "send tag 2"));
    const char *key = "go";
    RCHECK_OK(gang_store_wait(st, &key, 1, 20000));
    x = xfer(true, 1, 1, a, false);
    RCHECK_OK(gang__fabric_run(f, &x, 1, deadline, "send tag 1"));
  } else {
    memset(a, 0xee, LEN);
    memset(b, 0xee, LEN);
    gang__xfer first = xfer(false, 0, 1, a, first_owns);
    gang__xfer second = xfer(false, 0, 2, b, true);
    gang__xgroup g1, g2;
    RCHECK_OK(gang__fabric_start(f, &first, 1, &g1, "recv tag 1"));
    RCHECK_OK(gang__fabric_start(f, &second, 1, &g2, "recv tag 2"));
    RCHECK_OK(gang__fabric_wait(f, &g2, &second, 1, deadline, "recv tag 2"));
    RCHECK(all_bytes(b, 0x22));
    bool untouched = all_bytes(a, 0xee);
    fprintf(stderr, "first receive %s its buffer: %s\n",
            first_owns ? "owning" : "not owning",
            untouched ? "untouched" : "holds other bytes");
    RCHECK(untouched == !first_owns); /* owning: the bet was placed, lost */
    RCHECK_OK(gang_store_set(st, "go", "1", 1));
    RCHECK_OK(gang__fabric_wait(f, &g1, &first, 1, deadline, "recv tag 1"));
    RCHECK(all_bytes(a, 0x11));
  }
  gang__fabric_destroy(f);
  gang_store_close(st);
  gang_store_close(file);
  return 0;
}

static void test_receive_not_owning_its_buffer_is_never_bet_on(void **state) {
  (void)state;
  static bool owns = false;
  g_round++;
  assert_int_equal(gt_run_ranks(2, bet_rank, &owns, 60000), 0);
}

static void test_receive_owning_its_buffer_is_bet_on(void **state) {
  (void)state;
  static bool owns = true;
  g_round++;
  assert_int_equal(gt_run_ranks(2, bet_rank, &owns, 60000), 0);
}

static int make_store(void **state) {
  (void)state;
  snprintf(g_path, sizeof g_path, "/tmp/gang-test-bets-%d", (int)getpid());
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
      GT_TEST(test_receive_not_owning_its_buffer_is_never_bet_on),
      GT_TEST(test_receive_owning_its_buffer_is_bet_on),
  };
  return cmocka_run_group_tests(tests, make_store, remove_store);
}
