/* Ranks of a process-group gang that disagree, and peers that misbehave
 * on the wire, with real processes: collectives of different sizes or
 * kinds, the signature check, a peer that sends garbage, and a padded
 * frame whose pad arrives in two parts. Every rank must get a clear
 * status naming what differs, never a crash, a hang or corrupt data. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"
#include "gang_impl.h"
#include "pg.h"
#include "transport/fabric.h"

static int g_round;

static gang_t *join(int rank, int size, int64_t timeout_ms) {
  return gt_join("faults", g_round, rank, size, timeout_ms, 0);
}

/* Writes the n low bytes of v little-endian (hand-made fabric frames). */
static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- ranks disagree --------------------------------------------------------
 */

/* arg: the two ranks' counts (floats); NULL for 1000 and 2000. */
static int mismatch_rank(int rank, int size, void *arg) {
  const size_t *counts = arg;
  gang_t *g = join(rank, size, 30000);
  size_t n = counts ? counts[rank] : rank == 0 ? 1000 : 2000;
  /* Each buffer is exactly as large as its own rank asked for, so an
   * out-of-bounds write would show under ASan. */
  float *buf = calloc(n, sizeof *buf);
  gang_status st = gang_all_reduce(g, buf, n, GANG_FLOAT32, GANG_SUM);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(gang_last_error(), "bytes") != NULL);
  free(buf);
  gang_destroy(g);
  return 0;
}

static void test_mismatched_counts(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, mismatch_rank, NULL, 30000), 0);
}

/* Small all_reduces move in flagged lines that carry the call's signature:
 * different line counts (40 and 80 bytes) and the same line count with
 * different sizes (80 and 84 bytes) must both be mismatches, not reads of
 * the other's bytes; so must those of steps that wait for a member's first
 * flag (three lines and more): 120 and 124 bytes (3 lines each), 112 and
 * 160 (2 against 3), 504 and 400 (9 against 8). */
static void test_mismatched_small_counts(void **state) {
  (void)state;
  size_t pairs[][2] = {{10, 20}, {20, 21}, {30, 31}, {28, 40}, {126, 100}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, mismatch_rank, pairs[i], 30000), 0);
  }
}

/* A barrier is a flagged step too (one byte, its own signature): against
 * an all_reduce on the other rank, in flagged lines (2 floats) or in the
 * small slot (200 floats), both ranks must see a mismatch naming both
 * calls, not return as if they had met. arg: rank 1's count. */
static int barrier_mismatch_rank(int rank, int size, void *arg) {
  size_t n = *(const size_t *)arg;
  gang_t *g = join(rank, size, 30000);
  float buf[200] = {0};
  gang_status st = rank == 0
                       ? gang_barrier(g)
                       : gang_all_reduce(g, buf, n, GANG_FLOAT32, GANG_SUM);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(gang_last_error(), "barrier") != NULL);
  RCHECK(strstr(gang_last_error(), "all_reduce") != NULL);
  gang_destroy(g);
  return 0;
}

static void test_barrier_against_all_reduce(void **state) {
  (void)state;
  size_t counts[] = {2, 200};
  for (size_t i = 0; i < 2; i++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, barrier_mismatch_rank, &counts[i], 30000),
                     0);
  }
}

/* ---- the signature check ------------------------------------------------ */

static int checked_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("faults", g_round, rank, size, 30000, 1);
  /* Agreeing calls pass the check, on the world and on a sub-gang. */
  float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  RCHECK_OK(gang_all_reduce(g, x, 10, GANG_FLOAT32, GANG_SUM));
  RCHECK(x[9] == 10.0f * size);
  gang_t *sub = NULL;
  RCHECK_OK(gang_split(g, 0, -rank, &sub));
  RCHECK_OK(gang_broadcast(sub, x, 10, GANG_FLOAT32, 0));
  gang_destroy(sub);
  /* Rank 1 calls a broadcast where the others all_reduce: caught before
   * any data moves, with both sides named. */
  gang_status st;
  if (rank == 1)
    st = gang_broadcast(g, x, 10, GANG_FLOAT32, 0);
  else
    st = gang_all_reduce(g, x, 10, GANG_FLOAT32, GANG_MAX);
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_MISMATCH);
  RCHECK(strstr(gang_last_error(), "broadcast") != NULL);
  RCHECK(strstr(gang_last_error(), "all_reduce") != NULL);
  RCHECK(strstr(gang_last_error(), "rank 1") != NULL);
  RCHECK(gang_barrier(g) == GANG_MISMATCH); /* sticky */
  gang_destroy(g);
  return 0;
}

static void test_signature_check(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(3, checked_rank, NULL, 30000), 0);
}

/* ---- a peer that sends garbage ---------------------------------------------
 */

/* arg NULL: 64 bytes of junk; else a DATA header claiming 2^41 bytes,
 * which must fail at once (not wait for a pad or a payload that never
 * comes). */
static int garbage_rank(int rank, int size, void *arg) {
  setenv("GANG_SHM_DISABLE", "1", 1); /* the bytes must cross TCP */
  gang_t *g = join(rank, size, 30000);
  gang_status st;
  if (rank == 1) {
    uint8_t junk[64];
    memset(junk, 0xab, sizeof junk);
    if (arg != NULL) {
      memset(junk, 0, sizeof junk);
      put_le(junk, 0x474e4701u, 4); /* DATA */
      put_le(junk + 24, (uint64_t)1 << 41, 8);
    }
    int fd = gang__fabric_peer_fd(gang__pg_fabric(g), 0);
    RCHECK(fd >= 0);
    RCHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    st = gang_barrier(g);
  } else {
    float x[8] = {0};
    st = gang_all_reduce(g, x, 8, GANG_FLOAT32, GANG_SUM);
  }
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(st),
          gang_last_error());
  if (rank == 0) {
    RCHECK(st == GANG_PROTOCOL);
    RCHECK(strstr(gang_last_error(), "malformed") != NULL);
  } else {
    RCHECK(st == GANG_PEER_LOST); /* rank 0 hung up on it */
  }
  gang_destroy(g);
  return 0;
}

static void test_garbage_from_peer(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, garbage_rank, NULL, 30000), 0);
  g_round++;
  assert_int_equal(gt_run_ranks(2, garbage_rank, "huge", 30000), 0);
}

/* ---- A padded frame whose pad arrives in two parts ---------------------
 * A DATA frame of 64 KiB or more has 4064 zero bytes between its 32-byte
 * header and its payload (docs/fabric.md). Rank 1 writes one by hand (a
 * point-to-point message: the world's context 1 with the point-to-point
 * bit, sequence 0, tag 7) in two parts: the header and 100 bytes of pad,
 * then the rest. Rank 0 runs a progress pass on its posted receive in
 * between (the store tells each side when the other is there), so it sees
 * a header whose pad is incomplete and must wait for the rest. */
#define SPLIT_LEN ((size_t)64 << 10)
#define SPLIT_HEAD 4096 /* header and pad */

/* Writes all n bytes to the fabric's socket, which is non-blocking. */
static void write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      RCHECK(poll(&pfd, 1, 10000) == 1);
      continue;
    }
    RCHECK(w > 0);
    p += w;
    n -= (size_t)w;
  }
}

static int split_pad_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  gang_t *g = join(rank, size, 30000);
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/split%d", gt_store_port(), g_round);
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(addr, NULL, &st));
  uint8_t *data = calloc(1, SPLIT_LEN + SPLIT_HEAD);
  RCHECK(data != NULL);
  void *val = NULL;
  size_t vlen = 0;
  if (rank == 1) {
    uint8_t *frame = data; /* header, pad, payload */
    put_le(frame, 0x474e4701u, 4);
    put_le(frame + 4, 7, 4);
    put_le(frame + 8, 1 | (uint64_t)1 << 63, 8);
    put_le(frame + 24, SPLIT_LEN, 8);
    for (size_t i = 0; i < SPLIT_LEN; i++)
      frame[SPLIT_HEAD + i] = (uint8_t)(i * 13 + 5);
    int fd = gang__fabric_peer_fd(gang__pg_fabric(g), 0);
    RCHECK(fd >= 0);
    write_all(fd, frame, 132);
    RCHECK_OK(gang_store_set(st, "part1", "1", 1));
    RCHECK_OK(gang_store_get(st, "polled", &val, &vlen));
    gang_store_free(val);
    write_all(fd, frame + 132, SPLIT_LEN + SPLIT_HEAD - 132);
  } else {
    gang_work *w = NULL;
    RCHECK_OK(gang_recv_post(g, data, SPLIT_LEN, 1, 7, &w));
    RCHECK_OK(gang_store_get(st, "part1", &val, &vlen));
    gang_store_free(val);
    int done = 0;
    for (int i = 0; i < 3; i++)
      RCHECK_OK(gang_work_test(w, &done));
    RCHECK(!done);
    RCHECK_OK(gang_store_set(st, "polled", "1", 1));
    RCHECK_OK(gang_work_wait(w, -1));
    gang_work_free(w);
    for (size_t i = 0; i < SPLIT_LEN; i++)
      RCHECK(data[i] == (uint8_t)(i * 13 + 5));
  }
  RCHECK_OK(gang_barrier(g));
  free(data);
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_padded_frame_in_two_parts(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, split_pad_rank, NULL, 60000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_mismatched_counts),
      GT_TEST(test_mismatched_small_counts),
      GT_TEST(test_barrier_against_all_reduce),
      GT_TEST(test_signature_check),
      GT_TEST(test_garbage_from_peer),
      GT_TEST(test_padded_frame_in_two_parts),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
