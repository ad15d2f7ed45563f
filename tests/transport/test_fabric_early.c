/* A peer that runs ahead (GANG_TCP_EARLY_MAX, docs/fabric.md): rank 1
 * posts 48 MiB of 32 KiB sends before rank 0 posts a receive, over TCP
 * with a 4 MiB bound.
 *
 *   - ahead: while rank 0 exchanges messages with rank 2 (so its fabric
 *     reads every connection), it holds no more of rank 1's than the
 *     bound (its RSS grows by less than bound + 8 MiB; the rest waits in
 *     TCP), then receives every message in order, intact;
 *   - behind: rank 0 wants the last message first, which lies behind more
 *     than the bound: it fails with NO_MEMORY naming rank 1 and the
 *     setting, and rank 1 learns of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"

enum { MSG = 32 * 1024, NMSG = 1536, TAG = 5 };

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

static uint8_t byte_of(int m, size_t i) {
  return (uint8_t)((size_t)m * 131 + i * 7 + 1);
}

static gang_t *tcp_gang(const char *ns, int rank, int size) {
  setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_TCP_EARLY_MAX", "4m", 1);
  return gt_join(ns, 0, rank, size, 30000, 0);
}

/* Rank 1's side: every send posted at once; the statuses they end with. */
static int send_all(gang_t *g, gang_status *worst) {
  uint8_t *buf = malloc((size_t)MSG * NMSG);
  gang_work **w = calloc(NMSG, sizeof *w);
  RCHECK(buf != NULL && w != NULL);
  for (int m = 0; m < NMSG; m++)
    for (size_t i = 0; i < MSG; i++)
      buf[(size_t)m * MSG + i] = byte_of(m, i);
  int posted = 0;
  gang_status st = GANG_OK;
  for (int m = 0; m < NMSG && st == GANG_OK; m++) {
    st = gang_send_post(g, buf + (size_t)m * MSG, MSG, 0, TAG + (m == NMSG - 1),
                        &w[m]);
    if (st == GANG_OK)
      posted++;
  }
  *worst = st;
  for (int m = 0; m < posted; m++) {
    gang_status s = gang_work_wait(w[m], 30000);
    if (*worst == GANG_OK)
      *worst = s;
    gang_work_free(w[m]);
  }
  free(w);
  free(buf);
  return 0;
}

static int ahead_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = tcp_gang("early-ahead", rank, size);
  int32_t go = 1;
  if (rank == 1) {
    gang_status worst;
    send_all(g, &worst);
    RCHECK_OK(worst);
  } else if (rank == 2) {
    while (go) { /* ping-pong with rank 0 until it says stop */
      RCHECK_OK(gang_recv(g, &go, sizeof go, 0, 1));
      RCHECK_OK(gang_send(g, &go, sizeof go, 0, 2));
    }
  } else {
    long before = rss_kib();
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* rank 1's sends pile up meanwhile */
      RCHECK_OK(gang_send(g, &go, sizeof go, 2, 1));
      RCHECK_OK(gang_recv(g, &go, sizeof go, 2, 2));
      gt_nap_ms(1);
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < 2);
    go = 0;
    RCHECK_OK(gang_send(g, &go, sizeof go, 2, 1));
    RCHECK_OK(gang_recv(g, &go, sizeof go, 2, 2));
    long grown = rss_kib() - before;
    fprintf(stderr, "rank 0 grew by %ld KiB with 48 MiB sent ahead\n", grown);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    RCHECK(grown < (4 + 8) * 1024); /* a sanitizer's heap grows apart */
#endif
    uint8_t *msg = malloc(MSG);
    RCHECK(msg != NULL);
    for (int m = 0; m < NMSG; m++) {
      RCHECK_OK(gang_recv(g, msg, MSG, 1, TAG + (m == NMSG - 1)));
      for (size_t i = 0; i < MSG; i += 97)
        RCHECK(msg[i] == byte_of(m, i));
    }
    free(msg);
  }
  gang_destroy(g);
  return 0;
}

static void test_a_peer_ahead_is_held_back(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(3, ahead_rank, NULL, 90000), 0);
}

static int behind_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  gang_t *g = tcp_gang("early-behind", rank, 2);
  if (rank == 1) {
    gang_status worst;
    send_all(g, &worst);
    RCHECK(worst != GANG_OK); /* rank 0 failed: the sends end too */
  } else {
    gt_nap_ms(500);
    uint8_t *msg = malloc(MSG);
    RCHECK(msg != NULL);
    gang_status st = gang_recv(g, msg, MSG, 1, TAG + 1); /* the last one */
    fprintf(stderr, "rank 0: %s\n", gang_last_error());
    RCHECK(st == GANG_NO_MEMORY);
    RCHECK(strstr(gang_last_error(), "rank 1") != NULL);
    RCHECK(strstr(gang_last_error(), "GANG_TCP_EARLY_MAX") != NULL);
    free(msg);
  }
  gang_destroy(g);
  return 0;
}

static void test_a_receive_behind_the_bound_fails_clearly(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(2, behind_rank, NULL, 90000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_a_peer_ahead_is_held_back),
      GT_TEST(test_a_receive_behind_the_bound_fails_clearly),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
