/* Point-to-point over the fabric, aimed at how early messages are handled:
 * a large message that arrives before its receive waits in the socket and
 * lands in the receive's buffer; one that blocks a later message this rank
 * waits for is buffered instead (no deadlock); and a peer that dies while
 * its message waits in the socket is still noticed at once. */
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"

static int g_round;

static gang_t *join(int rank, int size) {
  return gt_join("p2p", g_round, rank, size, 30000, 0);
}

static uint8_t pattern(int tag, size_t i) {
  return (uint8_t)(tag * 31 + (int)(i * 7 % 251));
}

#define BIG ((size_t)4 << 20)

static int order_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size);
  uint8_t *a = malloc(BIG), *b = malloc(BIG);
  if (rank == 0) {
    for (size_t i = 0; i < BIG; i++) {
      a[i] = pattern(1, i);
      b[i] = pattern(2, i);
    }
    gang_work *w1, *w2;
    RCHECK_OK(gang_send_post(g, a, BIG, 1, 1, &w1));
    RCHECK_OK(gang_send_post(g, b, BIG, 1, 2, &w2));
    RCHECK_OK(gang_work_wait(w1, -1));
    RCHECK_OK(gang_work_wait(w2, -1));
    gang_work_free(w1);
    gang_work_free(w2);
    /* Early and large: rank 1 posts its receive only after a pause. */
    RCHECK_OK(gang_send(g, a, BIG, 1, 3));
  } else {
    /* Tag 2 sits behind tag 1 in the stream: waiting for it must not
     * deadlock on the tag-1 message nobody has asked for yet. */
    RCHECK_OK(gang_recv(g, b, BIG, 0, 2));
    RCHECK_OK(gang_recv(g, a, BIG, 0, 1));
    for (size_t i = 0; i < BIG; i++)
      RCHECK(a[i] == pattern(1, i) && b[i] == pattern(2, i));
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    memset(a, 0, BIG);
    RCHECK_OK(gang_recv(g, a, BIG, 0, 3));
    for (size_t i = 0; i < BIG; i++)
      RCHECK(a[i] == pattern(1, i));
  }
  RCHECK_OK(gang_barrier(g));
  free(a), free(b);
  gang_destroy(g);
  return 0;
}

static void test_early_messages(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, order_rank, NULL, 60000), 0);
}

/* ---- Frame sizes around the pad ------------------------------------------
 * DATA frames of 64 KiB or more carry a pad between header and payload
 * (PAD_MIN in src/transport/fabric.c). Messages of every size around it,
 * arriving early (65536 is buffered at once, 65537 waits in the socket) and
 * received out of order, then exchanges paced in 100-byte pieces (a pacing
 * limit counted from the 32-byte header instead of the padded one fails
 * them). The pause before the receives only makes the early paths likely:
 * without it the test still passes, checking less. test_pg_faults has the
 * pad arriving in two parts, ordered through the store. */
#define PAD_MIN ((size_t)64 << 10)
static const size_t pad_sizes[] = {1, PAD_MIN - 1, PAD_MIN, PAD_MIN + 1,
                                   300001};
#define NPAD (sizeof pad_sizes / sizeof *pad_sizes)

static int pad_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_TCP_PIECE", "100", 1);
  gang_t *g = join(rank, size);
  size_t max = pad_sizes[NPAD - 1];
  uint8_t *bufs[NPAD], *all = malloc(2 * max), *mine = malloc(max);
  RCHECK(all != NULL && mine != NULL);
  for (size_t k = 0; k < NPAD; k++) {
    bufs[k] = calloc(1, pad_sizes[k]);
    RCHECK(bufs[k] != NULL);
  }
  if (rank == 0) {
    gang_work *w[NPAD];
    for (size_t k = 0; k < NPAD; k++) {
      for (size_t i = 0; i < pad_sizes[k]; i++)
        bufs[k][i] = pattern((int)k, i);
      RCHECK_OK(gang_send_post(g, bufs[k], pad_sizes[k], 1, (int)k, &w[k]));
    }
    for (size_t k = 0; k < NPAD; k++) {
      RCHECK_OK(gang_work_wait(w[k], -1));
      gang_work_free(w[k]);
    }
  } else {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL); /* most likely all arrived by then */
    for (size_t k = NPAD; k-- > 0;) {
      RCHECK_OK(gang_recv(g, bufs[k], pad_sizes[k], 0, (int)k));
      for (size_t i = 0; i < pad_sizes[k]; i++)
        RCHECK(bufs[k][i] == pattern((int)k, i));
    }
  }
  for (size_t k = 0; k < NPAD; k++) {
    size_t n = pad_sizes[k];
    for (size_t i = 0; i < n; i++)
      mine[i] = pattern(rank + 10 * (int)k, i);
    memset(all, 0, 2 * n);
    RCHECK_OK(gang_all_gather(g, all, mine, n, GANG_UINT8));
    for (int q = 0; q < 2; q++)
      for (size_t i = 0; i < n; i++)
        RCHECK(all[(size_t)q * n + i] == pattern(q + 10 * (int)k, i));
  }
  RCHECK_OK(gang_barrier(g));
  for (size_t k = 0; k < NPAD; k++)
    free(bufs[k]);
  free(all);
  free(mine);
  gang_destroy(g);
  return 0;
}

static void test_sizes_around_the_pad(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, pad_rank, NULL, 60000), 0);
}

/* ---- Large all_reduces over TCP with the default pieces -----------------
 * The test_pg_gang matrix runs TCP with 12289-byte pieces and at most
 * 50000 elements; here two ranks all_reduce 1-16 MiB in place with the
 * pieces chosen per connection (512 KiB under reno), ten calls in a row
 * each, so a reduce that overwrites bytes the send has not sent yet shows
 * as wrong sums (an experiment that did so failed here in 5 of 5 runs). */
static int big_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  gang_t *g = join(rank, size);
  const size_t counts[] = {(size_t)1 << 18, ((size_t)1 << 20) + 7,
                           (size_t)1 << 22};
  float *x = malloc(counts[2] * sizeof *x);
  RCHECK(x != NULL);
  for (size_t c = 0; c < 3; c++)
    for (int call = 0; call < 10; call++) {
      size_t n = counts[c];
      for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(i % 1000) + rank * 3 + call);
      RCHECK_OK(gang_all_reduce(g, x, n, GANG_FLOAT32, GANG_SUM));
      for (size_t i = 0; i < n; i++)
        RCHECK(x[i] == (float)(2 * (int)(i % 1000) + 3 + 2 * call));
    }
  free(x);
  gang_destroy(g);
  return 0;
}

static void test_large_tcp_all_reduce(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, big_rank, NULL, 60000), 0);
}

/* ---- Receives bet on the next frame ---------------------------------------
 * The fabric reads the next frame's payload straight into the first posted
 * receive of 2 KiB or more, betting that the frame is that receive's
 * (read_posted in src/transport/fabric.c). Here every bet is lost: rank 1
 * posts its receives, then rank 0 sends them in another order, with a small
 * message, a large unposted one (padded, left in the socket, then buffered
 * since a receive waits behind it) and a padded receive meeting unpadded
 * frames in between. Each receive must end up with its own bytes. */
typedef struct bet_msg {
  int tag;
  size_t len;
} bet_msg;

#define BET_MAX ((size_t)200000)
/* In the order rank 1 posts its receives; tag 9's is posted last, once
 * these have completed. */
static const bet_msg bet_posted[] = {{1, 8192}, {2, 100},   {3, 100000},
                                     {4, 3000}, {5, 40000}, {6, 40000}};
/* In the order rank 0 sends. */
static const bet_msg bet_sent[] = {{2, 100},  {9, BET_MAX}, {1, 8192},
                                   {4, 3000}, {3, 100000},  {6, 40000},
                                   {5, 40000}};
#define NBET_POSTED (sizeof bet_posted / sizeof *bet_posted)
#define NBET_SENT (sizeof bet_sent / sizeof *bet_sent)

static int bet_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  gang_t *g = join(rank, size);
  uint8_t *bufs[NBET_SENT]; /* each as large as the largest message */
  for (size_t k = 0; k < NBET_SENT; k++) {
    bufs[k] = malloc(BET_MAX);
    RCHECK(bufs[k] != NULL);
  }
  for (int round = 0; round < 3; round++) {
    if (rank == 0) {
      RCHECK_OK(gang_barrier(g));
      gang_work *w[NBET_SENT];
      for (size_t k = 0; k < NBET_SENT; k++) {
        for (size_t i = 0; i < bet_sent[k].len; i++)
          bufs[k][i] = pattern(bet_sent[k].tag + round, i);
        RCHECK_OK(gang_send_post(g, bufs[k], bet_sent[k].len, 1,
                                 bet_sent[k].tag, &w[k]));
      }
      for (size_t k = 0; k < NBET_SENT; k++) {
        RCHECK_OK(gang_work_wait(w[k], -1));
        gang_work_free(w[k]);
      }
    } else {
      gang_work *w[NBET_POSTED];
      for (size_t k = 0; k < NBET_POSTED; k++) {
        memset(bufs[k], 0xee, bet_posted[k].len);
        RCHECK_OK(gang_recv_post(g, bufs[k], bet_posted[k].len, 0,
                                 bet_posted[k].tag, &w[k]));
      }
      RCHECK_OK(gang_barrier(g));
      for (size_t k = 0; k < NBET_POSTED; k++) {
        RCHECK_OK(gang_work_wait(w[k], -1));
        gang_work_free(w[k]);
        for (size_t i = 0; i < bet_posted[k].len; i++)
          RCHECK(bufs[k][i] == pattern(bet_posted[k].tag + round, i));
      }
      size_t late = BET_MAX;
      uint8_t *b = malloc(late);
      RCHECK(b != NULL);
      RCHECK_OK(gang_recv(g, b, late, 0, 9));
      for (size_t i = 0; i < late; i++)
        RCHECK(b[i] == pattern(9 + round, i));
      free(b);
    }
  }
  RCHECK_OK(gang_barrier(g));
  for (size_t k = 0; k < NBET_SENT; k++)
    free(bufs[k]);
  gang_destroy(g);
  return 0;
}

static void test_lost_bets(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, bet_rank, NULL, 60000), 0);
}

/* ---- Early messages' buffers are kept and reused ---------------------------
 * Buffers of messages that arrive before their receive are kept on the
 * connection for the next ones (fabric.c, early_buf). Rounds of early
 * messages of mixed sizes, in another order each round and received in
 * reverse, so kept buffers are reused for messages of other sizes: a kept
 * buffer too small must not be handed out (ASan sees the overflow), and a
 * larger one must hand over exactly the message's bytes (every byte is
 * checked, each round's pattern differs). */
static const size_t reuse_sizes[] = {37, 65536, 5000, 1, 65533, 100000};
#define NREUSE (sizeof reuse_sizes / sizeof *reuse_sizes)

static int reuse_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  gang_t *g = join(rank, size);
  uint8_t *b = malloc(100000);
  RCHECK(b != NULL);
  for (int round = 0; round < 5; round++) {
    if (rank == 0) {
      for (size_t k = 0; k < NREUSE; k++) {
        size_t n = reuse_sizes[(k + (size_t)round) % NREUSE];
        for (size_t i = 0; i < n; i++)
          b[i] = pattern((int)k + 7 * round, i);
        RCHECK_OK(gang_send(g, b, n, 1, (int)k));
      }
    } else {
      struct timespec ts = {0, 20 * 1000 * 1000};
      nanosleep(&ts, NULL); /* most likely all arrived by then */
      for (size_t k = NREUSE; k-- > 0;) {
        size_t n = reuse_sizes[(k + (size_t)round) % NREUSE];
        memset(b, 0xee, n);
        RCHECK_OK(gang_recv(g, b, n, 0, (int)k));
        for (size_t i = 0; i < n; i++)
          RCHECK(b[i] == pattern((int)k + 7 * round, i));
      }
    }
    RCHECK_OK(gang_barrier(g));
  }
  free(b);
  gang_destroy(g);
  return 0;
}

static void test_early_buffers_reused(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, reuse_rank, NULL, 60000), 0);
}

static int death_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size);
  RCHECK_OK(gang_barrier(g));
  uint8_t *a = calloc(1, BIG);
  if (rank == 0) {
    /* Start a large message rank 1 never asks for, then vanish without a
     * goodbye (as a crash would, but with exit status 0 for the harness). */
    gang_work *w;
    RCHECK_OK(gang_send_post(g, a, BIG, 1, 9, &w));
    int done = 0;
    for (int i = 0; i < 1000 && !done; i++)
      RCHECK_OK(gang_work_test(w, &done));
    _exit(0);
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* Rank 1 waits on rank 2, rank 2 on rank 1: only rank 0's death ends it. */
  gang_status st = gang_recv(g, a, 16, rank == 1 ? 2 : 1, 5);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took =
      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", rank, gang_status_name(st),
          took, gang_last_error());
  RCHECK(st == GANG_PEER_LOST);
  RCHECK(took < 5.0);
  free(a);
  gang_destroy(g);
  return 0;
}

static void test_peer_dies_with_message_waiting(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(3, death_rank, NULL, 60000), 0);
}

/* Regressions from review: a posted receive outliving its gang, a send to a
 * rank that already left, a local argument error that must reach the
 * peers, and NaN payloads that must come out bit-identical everywhere. */
typedef struct review_arg {
  bool posted;
  size_t len; /* of rank 1's message */
} review_arg;

static int review_rank(int rank, int size, void *arg) {
  const review_arg *ra = arg;
  gang_t *g = join(rank, size);
  static char buf[8192] = "left soon";
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/review%d", gt_store_port(),
           g_round);
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = 30000;
  gang_store *ctl = NULL;
  RCHECK_OK(gang_store_connect(addr, &so, &ctl));
  if (rank == 1) {
    RCHECK_OK(gang_send(g, buf, ra->len, 0, 1));
    gang_destroy(g); /* its goodbye is written before this returns */
    RCHECK_OK(gang_store_set(ctl, "left", "1", 1));
    gang_store_close(ctl);
    return 0;
  }
  /* With `posted`, the receive of rank 1's message is still registered
   * (posted, not yet waited for) when the send goes: a receive that its
   * data satisfies must not let the send skip the goodbye behind it. At
   * 8 KiB the fabric reads the message straight into that receive, by a
   * read that completes it (fabric.c, read_posted). */
  gang_work *rw = NULL;
  if (ra->posted)
    RCHECK_OK(gang_recv_post(g, buf, ra->len, 1, 1, &rw));
  else
    RCHECK_OK(gang_recv(g, buf, ra->len, 1, 1));
  /* Rank 1 has left: its goodbye is in this rank's socket (loopback). */
  void *v = NULL;
  size_t vn = 0;
  RCHECK_OK(gang_store_get(ctl, "left", &v, &vn));
  gang_store_free(v);
  gang_store_close(ctl);
  char out[16] = "too late";
  gang_status st = gang_send(g, out, sizeof out, 1, 2);
  fprintf(stderr, "send after the peer left: %s: %s\n", gang_status_name(st),
          gang_last_error());
  RCHECK(st == GANG_PEER_LEFT &&
         strstr(gang_last_error(), "left (destroyed its gang)") != NULL);
  /* The error names the call. */
  RCHECK(strstr(gang_last_error(), "send to rank 1 tag 2") != NULL);
  if (rw != NULL) {
    (void)gang_work_wait(rw, -1); /* the gang failed: any outcome */
    gang_work_free(rw);
  }
  gang_destroy(g);
  return 0;
}

static void test_send_after_peer_left(void **state) {
  (void)state;
  static review_arg args[] = {{false, 16}, {true, 16}, {true, 8192}};
  for (size_t k = 0; k < sizeof args / sizeof *args; k++) {
    g_round++;
    assert_int_equal(gt_run_ranks(2, review_rank, &args[k], 60000), 0);
  }
}

static int posted_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size);
  int all[2] = {0, 1};
  gang_t *sub = NULL;
  RCHECK_OK(gang_create_subgang(g, all, 2, &sub));
  char buf[16];
  gang_work *w = NULL;
  if (rank == 0)
    RCHECK_OK(gang_recv_post(sub, buf, sizeof buf, 1, 7, &w));
  /* The sub-gang goes; the world (and its connections) stays. */
  gang_destroy(sub);
  if (w != NULL) {
    /* The work is finished (aborted), withdrawn from the fabric, and never
     * touches the destroyed gang. */
    RCHECK(gang_work_wait(w, 0) == GANG_ABORTED);
    gang_work_free(w);
  }
  RCHECK_OK(gang_barrier(g));
  gang_destroy(g);
  return 0;
}

static void test_posted_receive_outlives_gang(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, posted_rank, NULL, 60000), 0);
}

static int a2av_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size);
  int32_t in[4] = {0}, out[4] = {0};
  size_t ic[2] = {1, 1}, oc[2] = {1, 1};
  if (rank == 0)
    oc[0] = 2; /* disagrees with its own in_counts[0] */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  gang_status st = gang_all_to_all_v(g, out, oc, in, ic, GANG_INT32);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took =
      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", rank, gang_status_name(st),
          took, gang_last_error());
  /* Both learn it at once, not at the 30 s deadline. */
  RCHECK(st == GANG_MISMATCH);
  RCHECK(took < 2.0);
  gang_destroy(g);
  return 0;
}

static void test_local_error_reaches_peers(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, a2av_rank, NULL, 60000), 0);
}

static int nan_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = join(rank, size);
  gang_reduce_op ops[] = {GANG_SUM, GANG_MIN, GANG_MAX, GANG_PRODUCT};
  /* 3 floats ride in flagged lines, 160 (640 bytes) in the small slot,
   * 5000 through staged buffers: each path must reduce in rank order. */
  size_t counts[] = {3, 160, 5000};
  float *x = malloc(5000 * sizeof *x);
  uint32_t *all = malloc(5000 * (size_t)size * sizeof *all);
  RCHECK(x != NULL && all != NULL);
  for (int k = 0; k < 3; k++) {
    size_t n = counts[k];
    for (int o = 0; o < 4; o++) {
      /* Each rank holds a different NaN payload. */
      uint32_t bits = 0x7fc00001u + (uint32_t)rank * 0x80000001u;
      for (size_t i = 0; i < n; i++) {
        if (i % 3 == 1)
          x[i] = (float)rank;
        else
          memcpy(&x[i], &bits, 4);
      }
      RCHECK_OK(gang_all_reduce(g, x, n, GANG_FLOAT32, ops[o]));
      RCHECK_OK(gang_all_gather(g, all, x, n, GANG_UINT32));
      for (int r = 1; r < size; r++)
        RCHECK(memcmp(all, all + n * (size_t)r, n * sizeof *all) == 0);
    }
  }
  free(all);
  free(x);
  gang_destroy(g);
  return 0;
}

static void test_nan_results_identical(void **state) {
  (void)state;
  for (int n = 2; n <= 5; n += 3) {
    g_round++;
    assert_int_equal(gt_run_ranks(n, nan_rank, NULL, 60000), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_early_messages),
      GT_TEST(test_sizes_around_the_pad),
      GT_TEST(test_large_tcp_all_reduce),
      GT_TEST(test_lost_bets),
      GT_TEST(test_early_buffers_reused),
      GT_TEST(test_peer_dies_with_message_waiting),
      GT_TEST(test_send_after_peer_left),
      GT_TEST(test_posted_receive_outlives_gang),
      GT_TEST(test_local_error_reaches_peers),
      GT_TEST(test_nan_results_identical),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
