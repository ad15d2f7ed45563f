/* Strangers on a fabric listener: connections that never say hello, or say
 * part of one, must not hold up a gang's setup. A third process opens 100
 * silent connections (and 10 that send half a hello) to rank 0's listener
 * before rank 1 connects; rank 1's setup must take no longer than without
 * them (within 100 ms, more under a sanitizer). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK_S 0.5
#else
#define SLACK_S 0.1
#endif

enum { SILENT = 100, HALF = 10 };

/* Rank 1's time to a ready gang of two. */
static double join_time(const char *ns, int rank) {
  double t0 = gt_now_s();
  gang_t *g = gt_join(ns, 0, rank, 2, 20000, 0);
  double t = gt_now_s() - t0;
  int32_t x = 1;
  RCHECK_OK(gang_all_reduce(g, &x, 1, GANG_INT32, GANG_SUM));
  RCHECK(x == 2);
  gang_destroy(g);
  return t;
}

static int stranger_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  gang_store *ctl = gt_store_at("ctl");
  if (rank == 0) {
    (void)join_time("base", 0);
    (void)join_time("strangers", 0);
  } else if (rank == 1) {
    double base = join_time("base", 1);
    gt_wait_key(ctl, "ready"); /* the strangers are in */
    double with = join_time("strangers", 1);
    fprintf(stderr,
            "rank 1's setup: %.3f s alone, %.3f s after %d silent and %d "
            "half-hello strangers\n",
            base, with, SILENT, HALF);
    RCHECK_OK(gang_store_set(ctl, "done", "1", 1));
    RCHECK(with < base + SLACK_S);
  } else {
    /* The stranger: rank 0's fabric address, from the store. */
    gang_store *st = gt_store_at("strangers0");
    void *v = NULL;
    size_t n = 0;
    RCHECK_OK(gang_store_get(st, "fabric/addr/0", &v, &n));
    char addr[128];
    snprintf(addr, sizeof addr, "%.*s", (int)n, (char *)v);
    gang_store_free(v);
    char *colon = strrchr(addr, ':');
    RCHECK(colon != NULL);
    *colon = '\0';
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    RCHECK(inet_pton(AF_INET, addr, &sa.sin_addr) == 1);
    int fds[SILENT + HALF];
    for (int i = 0; i < SILENT + HALF; i++) {
      fds[i] = socket(AF_INET, SOCK_STREAM, 0);
      RCHECK(fds[i] >= 0);
      RCHECK(connect(fds[i], (struct sockaddr *)&sa, sizeof sa) == 0);
      if (i >= SILENT) {
        static const char half[20] = "GANGFABRIC-half";
        RCHECK(write(fds[i], half, sizeof half) == (ssize_t)sizeof half);
      }
    }
    RCHECK_OK(gang_store_set(ctl, "ready", "1", 1));
    gt_wait_key(ctl, "done");
    for (int i = 0; i < SILENT + HALF; i++)
      close(fds[i]);
    gang_store_close(st);
  }
  gang_store_close(ctl);
  return 0;
}

static void test_strangers_do_not_delay_setup(void **state) {
  (void)state;
  assert_int_equal(gt_run_ranks(3, stranger_rank, NULL, 90000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_strangers_do_not_delay_setup),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
