/* Promises of gang/gang.h that only a real gang can show:
 *
 *   - a work freed before it completes aborts the gang, and the peers
 *     learn of it at once (not at their deadline), with the reason (a peer
 *     that had not reached the call may still finish it with what had
 *     arrived; its next call fails);
 *   - failures are shared by a world: when one rank aborts the world, a
 *     sub-gang that rank is not even a member of fails on the other ranks,
 *     at once;
 *   - a receive must name the message's exact length (docs/gang.md): one
 *     shorter or longer is GANG_MISMATCH on both ranks, naming both
 *     lengths, and nothing is written into the receive's buffer;
 *   - the reason of an abort reaches the peers even when the aborting
 *     rank was in the middle of writing a frame to them. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK_S 2.0
#else
#define SLACK_S 0.5
#endif

static int g_round;

static gang_store *ctl(void) {
  char ns[32];
  snprintf(ns, sizeof ns, "promises%d", g_round);
  return gt_store_at(ns);
}

/* ---- A work freed unfinished ------------------------------------------- */

static int freed_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("freed", g_round, rank, size, 30000, 0);
  gang_store *st = ctl();
  float buf[64] = {0};
  if (rank == 0) {
    gang_work *w = NULL;
    RCHECK_OK(gang_all_reduce_post(g, buf, 64, GANG_FLOAT32, GANG_SUM, &w));
    gang_work_free(w); /* rank 1 has not come: unfinished */
    RCHECK(gang_barrier(g) == GANG_ABORTED);
    fprintf(stderr, "rank 0: %s\n", gang_get_last_error(g));
    RCHECK(strstr(gang_get_last_error(g), "freed before it completed") != NULL);
    RCHECK_OK(gang_store_set(st, "freed", "1", 1));
  } else {
    gt_wait_key(st, "freed");
    /* What rank 0 had contributed may let this all_reduce finish; the
     * abort then fails the next call. Either comes at once. */
    double t0 = gt_now_s();
    gang_status s = gang_all_reduce(g, buf, 64, GANG_FLOAT32, GANG_SUM);
    if (s == GANG_OK)
      s = gang_barrier(g);
    double took = gt_now_s() - t0;
    fprintf(stderr, "rank 1: %s after %.3f s: %s\n", gang_status_name(s), took,
            gang_get_last_error(g));
    RCHECK(s == GANG_ABORTED);
    RCHECK(took < SLACK_S);
    RCHECK(strstr(gang_get_last_error(g), "rank 0") != NULL);
    RCHECK(strstr(gang_get_last_error(g), "freed before it completed") != NULL);
  }
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_work_freed_unfinished_aborts_everyone(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, freed_rank, NULL, 60000), 0);
}

/* ---- A world failure reaches every sub-gang ---------------------------- */

static int world_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("world", g_round, rank, size, 30000, 0);
  gang_store *st = ctl();
  gang_t *pair = NULL; /* ranks 0 and 1; rank 2 is not in it */
  RCHECK_OK(gang_split(g, rank < 2 ? 0 : 1, rank, &pair));
  RCHECK_OK(gang_barrier(pair));
  RCHECK_OK(gang_barrier(g)); /* every pair is ready */
  if (rank == 2) {
    gang_abort(g);
    RCHECK_OK(gang_store_set(st, "aborted", "1", 1));
  } else {
    gt_wait_key(st, "aborted");
    double t0 = gt_now_s();
    gang_status s = GANG_OK;
    /* Rank 2's abort reaches us over the world's connections; the pair's
     * next calls then fail, however long that took. */
    while (s == GANG_OK && gt_now_s() - t0 < SLACK_S)
      s = gang_barrier(pair);
    double took = gt_now_s() - t0;
    fprintf(stderr, "rank %d: the pair's barrier: %s after %.3f s: %s\n", rank,
            gang_status_name(s), took, gang_get_last_error(pair));
    RCHECK(s == GANG_ABORTED || s == GANG_PEER_LOST);
    RCHECK(took < SLACK_S);
    RCHECK(gang_barrier(g) != GANG_OK);
  }
  gang_destroy(pair);
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_world_failure_reaches_every_sub_gang(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(3, world_rank, NULL, 60000), 0);
}

/* ---- A receive of the wrong length -------------------------------------- */

typedef struct wrong_len {
  size_t len; /* the receive's; the message has 100 bytes */
  bool early; /* the message arrives before the receive is posted */
} wrong_len;

/* Rank 0 sends 100 bytes with tag 1, then 4 with tag 2. Posted first:
 * rank 1 posts its receive of the wrong length, and rank 0 sends once the
 * store says so, so the frame finds the receive. Early: rank 1 first
 * receives tag 2, which reads tag 1's frame off the connection before it
 * (TCP keeps their order), and only then posts tag 1's receive. */
static int wrong_len_rank(int rank, int size, void *arg) {
  const wrong_len *c = arg;
  gang_t *g = gt_join("wronglen", g_round, rank, size, 30000, 0);
  gang_store *st = ctl();
  unsigned char msg[128], small[4] = {1, 2, 3, 4};
  gang_status s;
  if (rank == 0) {
    for (size_t i = 0; i < sizeof msg; i++)
      msg[i] = (unsigned char)(i * 7 + 1);
    if (!c->early)
      gt_wait_key(st, "posted");
    /* The receiver's failure reaches the sender's next call: posted first,
     * that may already be the second send (the receiver fails as soon as
     * the first frame arrives); early, the receiver needs the second. */
    s = gang_send(g, msg, 100, 1, 1);
    if (s == GANG_OK)
      s = gang_send(g, small, sizeof small, 1, 2);
    RCHECK(s == GANG_OK || !c->early);
    if (s == GANG_OK)
      s = gang_barrier(g);
  } else {
    memset(msg, 0xee, sizeof msg);
    gang_work *w = NULL;
    if (c->early) {
      /* The message is there to compare with: the post itself may fail. */
      unsigned char got[4];
      RCHECK_OK(gang_recv(g, got, sizeof got, 0, 2));
      RCHECK(memcmp(got, small, sizeof got) == 0);
      s = gang_recv_post(g, msg, c->len, 0, 1, &w);
    } else {
      RCHECK_OK(gang_recv_post(g, msg, c->len, 0, 1, &w));
      RCHECK_OK(gang_store_set(st, "posted", "1", 1));
      s = GANG_OK;
    }
    if (s == GANG_OK) {
      s = gang_work_wait(w, -1);
      gang_work_free(w);
    }
    for (size_t i = 0; i < sizeof msg; i++)
      RCHECK(msg[i] == 0xee);
  }
  fprintf(stderr, "rank %d (receive of %zu, %s): %s: %s\n", rank, c->len,
          c->early ? "early" : "posted first", gang_status_name(s),
          gang_get_last_error(g));
  RCHECK(s == GANG_MISMATCH);
  if (rank == 1) {
    RCHECK(strstr(gang_get_last_error(g), "sent 100 bytes") != NULL);
    char want[32];
    snprintf(want, sizeof want, "expected %zu", c->len);
    RCHECK(strstr(gang_get_last_error(g), want) != NULL);
  }
  RCHECK(gang_barrier(g) == GANG_MISMATCH); /* sticky */
  gang_store_close(st);
  gang_destroy(g);
  return 0;
}

static void test_receive_of_wrong_length_is_a_mismatch(void **state) {
  (void)state;
  const wrong_len cases[] = {
      {99, false}, {101, false}, {99, true}, {101, true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, wrong_len_rank, (void *)&cases[i], 60000),
                     0);
  }
}

/* ---- An abort in the middle of a frame ---------------------------------- */

/* Far more than 64 KiB socket buffers hold, and little enough that the
 * failing rank finishes the frame within its 100 ms for all peers
 * (FAIL_WRITE_MS, src/transport/fabric.c) also under ThreadSanitizer: 8 MiB
 * took longer there now and then, and the reason, best effort past that,
 * did not come. */
#define MID_BYTES ((size_t)2 << 20)

/* Rank 1 starts a 2 MiB send to rank 0, which is receiving it, pushes
 * part of it (socket buffers of 64 KiB keep the rest back) and aborts: the
 * frame is half written. Rank 0 must fail with rank 1's reason, not only
 * with a closed connection ("rank 1 closed the connection"). */
static int mid_frame_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_SOCKET_BUFFER", "65536", 1);
  gang_t *g = gt_join("midframe", g_round, rank, size, 30000, 0);
  unsigned char *buf = malloc(MID_BYTES);
  RCHECK(buf != NULL);
  memset(buf, rank == 1 ? 0x5a : 0, MID_BYTES);
  gang_status s;
  if (rank == 0) {
    /* The rest of the frame comes before the reason: the receive may
     * complete, with every byte right, and the next call fails. */
    s = gang_recv(g, buf, MID_BYTES, 1, 7);
    if (s == GANG_OK) {
      for (size_t i = 0; i < MID_BYTES; i += 4093)
        RCHECK(buf[i] == 0x5a);
      s = gang_barrier(g);
    }
  } else {
    gang_work *w = NULL;
    RCHECK_OK(gang_send_post(g, buf, MID_BYTES, 0, 7, &w));
    int done = 0;
    for (int i = 0; i < 3 && !done; i++)
      RCHECK_OK(gang_work_test(w, &done));
    RCHECK(!done); /* 2 MiB do not fit in 64 KiB buffers */
    gang_abort(g);
    s = gang_work_wait(w, -1);
    gang_work_free(w);
  }
  fprintf(stderr, "rank %d: %s: %s\n", rank, gang_status_name(s),
          gang_get_last_error(g));
  RCHECK(s == GANG_ABORTED);
  if (rank == 0)
    RCHECK(strstr(gang_get_last_error(g), "aborted by gang_abort") != NULL);
  free(buf);
  gang_destroy(g);
  return 0;
}

static void test_abort_reason_reaches_peer_mid_frame(void **state) {
  (void)state;
  for (int k = 0; k < 3; k++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, mid_frame_rank, NULL, 60000), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_work_freed_unfinished_aborts_everyone),
      GT_TEST(test_world_failure_reaches_every_sub_gang),
      GT_TEST(test_receive_of_wrong_length_is_a_mismatch),
      GT_TEST(test_abort_reason_reaches_peer_mid_frame),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
