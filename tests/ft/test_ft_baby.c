/* The subprocess gang (gang/ft.h, gang_baby_create): unconfigured it
 * refuses collectives; configured, every collective of gang.h works through
 * its child with the results checked, several posted before waiting and
 * one growing the shared memory; each configure needs a fresh prefix and
 * leaves no child, descriptor or mapping behind; a missing gang-baby
 * program is a clear error. The failures (a child killed, hung, aborted,
 * orphaned) are in test_ft_baby_faults.c. */
#include <stdlib.h>
#include <string.h>

#include "baby_test.h"

/* ---- Unconfigured ------------------------------------------------------- */

static int unconfigured_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  gang_t *g = baby_new(20000);
  RCHECK(!gang_ft_configured(g) && gang_rank(g) == -1 && gang_size(g) == 0);
  float v[4] = {1, 2, 3, 4};
  RCHECK(gang_all_reduce(g, v, 4, GANG_FLOAT32, GANG_SUM) ==
         GANG_INVALID_USAGE);
  RCHECK(strstr(gang_last_error(), "not configured") != NULL);
  /* Refused, not broken: the next call says the same. */
  RCHECK(gang_barrier(g) == GANG_INVALID_USAGE);
  RCHECK(baby_pid() < 0);
  gang_destroy(g);
  return 0;
}

static void test_unconfigured_refuses(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(1, unconfigured_rank, NULL, 30000), 0);
}

/* ---- Every collective --------------------------------------------------- */

static void check_gathers(gang_t *g, int rank, int size) {
  int32_t b[1000];
  for (int i = 0; i < 1000; i++)
    b[i] = rank == 1 ? i * 3 : -1;
  RCHECK_OK(gang_broadcast(g, b, 1000, GANG_INT32, 1));
  for (int i = 0; i < 1000; i++)
    RCHECK(b[i] == i * 3);
  int32_t in[7], out[2 * 7], l0[7], l1[7];
  for (int i = 0; i < 7; i++)
    in[i] = rank * 100 + i;
  RCHECK_OK(gang_all_gather(g, out, in, 7, GANG_INT32));
  for (int j = 0; j < size; j++)
    for (int i = 0; i < 7; i++)
      RCHECK(out[j * 7 + i] == j * 100 + i);
  memset(out, 0, sizeof out); /* in place: the input in its own slot */
  memcpy(out + rank * 7, in, sizeof in);
  RCHECK_OK(gang_all_gather(g, out, out + rank * 7, 7, GANG_INT32));
  for (int j = 0; j < size; j++)
    for (int i = 0; i < 7; i++)
      RCHECK(out[j * 7 + i] == j * 100 + i);
  void *const outs[2] = {l0, l1};
  RCHECK_OK(gang_all_gather_to_list(g, outs, in, 7, GANG_INT32));
  for (int i = 0; i < 7; i++)
    RCHECK(l0[i] == i && l1[i] == 100 + i);
}

static void check_scatters(gang_t *g, int rank, int size) {
  float rs_in[2 * 5], rs_out[5];
  for (int i = 0; i < 2 * 5; i++)
    rs_in[i] = (float)(rank * 1000 + i);
  RCHECK_OK(gang_reduce_scatter(g, rs_out, rs_in, 5, GANG_FLOAT32, GANG_SUM));
  for (int i = 0; i < 5; i++)
    RCHECK(rs_out[i] == (float)(1000 + 2 * (rank * 5 + i)));
  int32_t a_in[2 * 4], a_out[2 * 4];
  for (int j = 0; j < size; j++)
    for (int i = 0; i < 4; i++)
      a_in[j * 4 + i] = rank * 100 + j * 10 + i;
  RCHECK_OK(gang_all_to_all(g, a_out, a_in, 4, GANG_INT32));
  for (int j = 0; j < size; j++)
    for (int i = 0; i < 4; i++)
      RCHECK(a_out[j * 4 + i] == j * 100 + rank * 10 + i);
  /* Rank s sends s+1+d elements to rank d, valued s*1000 + d*100 + k. */
  size_t in_counts[2], out_counts[2];
  int32_t v_in[8], v_out[8], *p = v_in;
  for (int d = 0; d < size; d++) {
    in_counts[d] = (size_t)(rank + 1 + d);
    out_counts[d] = (size_t)(d + 1 + rank);
    for (int k = 0; k < rank + 1 + d; k++)
      *p++ = rank * 1000 + d * 100 + k;
  }
  RCHECK_OK(
      gang_all_to_all_v(g, v_out, out_counts, v_in, in_counts, GANG_INT32));
  p = v_out;
  for (int s = 0; s < size; s++)
    for (int k = 0; k < s + 1 + rank; k++)
      RCHECK(*p++ == s * 1000 + rank * 100 + k);
}

static void check_p2p(gang_t *g, int rank) {
  size_t big = 1 << 20;
  unsigned char *buf = malloc(big);
  RCHECK(buf != NULL);
  for (size_t i = 0; i < big; i++)
    buf[i] = rank == 0 ? (unsigned char)(i * 7) : 0;
  if (rank == 0) {
    RCHECK_OK(gang_send(g, buf, big, 1, 7));
    RCHECK_OK(gang_recv(g, buf, 3, 1, 8));
    RCHECK(buf[0] == 'a' && buf[1] == 'b' && buf[2] == 'c');
  } else {
    RCHECK_OK(gang_recv(g, buf, big, 0, 7));
    for (size_t i = 0; i < big; i++)
      RCHECK(buf[i] == (unsigned char)(i * 7));
    RCHECK_OK(gang_send(g, "abc", 3, 0, 8));
  }
  /* Both receive first: the child must post the send without waiting for
   * the receive before it. */
  int32_t mine = 40 + rank, theirs = 0;
  gang_work *wr = NULL, *ws = NULL;
  RCHECK_OK(gang_recv_post(g, &theirs, sizeof theirs, 1 - rank, 3, &wr));
  RCHECK_OK(gang_send_post(g, &mine, sizeof mine, 1 - rank, 3, &ws));
  RCHECK_OK(gang_work_wait(ws, -1));
  RCHECK_OK(gang_work_wait(wr, -1));
  RCHECK(theirs == 40 + (1 - rank));
  gang_work_free(wr);
  gang_work_free(ws);
  free(buf);
}

/* Several works in flight, waited for out of order; one needs the shared
 * memory to grow while the others are in flight; one is polled. */
static void check_posted(gang_t *g, int rank, int size) {
  enum { N = 3, BIG = 2 << 20 };
  float small[N][64];
  float *big = malloc(BIG * sizeof *big);
  RCHECK(big != NULL);
  gang_work *w[N + 1];
  for (int k = 0; k < N; k++) {
    for (int i = 0; i < 64; i++)
      small[k][i] = (float)(rank + k + i);
    RCHECK_OK(
        gang_all_reduce_post(g, small[k], 64, GANG_FLOAT32, GANG_SUM, &w[k]));
  }
  for (int i = 0; i < BIG; i++)
    big[i] = (float)(rank * 2 + (i & 1023));
  RCHECK_OK(gang_all_reduce_post(g, big, BIG, GANG_FLOAT32, GANG_SUM, &w[N]));
  for (int k = N; k >= 0; k--)
    RCHECK_OK(gang_work_wait(w[k], -1));
  for (int k = 0; k < N; k++)
    for (int i = 0; i < 64; i++)
      RCHECK(small[k][i] == (float)(size * (k + i) + size * (size - 1) / 2));
  for (int i = 0; i < BIG; i++)
    RCHECK(big[i] == (float)(size * (i & 1023) + size * (size - 1)));
  for (int k = 0; k <= N; k++)
    gang_work_free(w[k]);
  free(big);
  gang_work *wb = NULL;
  int finished = 0;
  RCHECK_OK(gang_barrier_post(g, &wb));
  double t0 = now_s();
  while (!finished && now_s() - t0 < 20) {
    RCHECK_OK(gang_work_test(wb, &finished));
    if (!finished)
      nap_ms(1);
  }
  RCHECK(finished);
  gang_work_free(wb);
}

static int every_rank(int rank, int size, void *arg) {
  (void)arg;
  int fds = gt_count_fds();
  gang_t *g = baby_new(20000);
  char addr[160];
  addr_of(addr, sizeof addr, "every", 0);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  RCHECK(gang_ft_configured(g) && gang_rank(g) == rank && gang_size(g) == size);
  RCHECK(baby_pid() > 0);
  check_all_reduce(g, rank, size);
  check_gathers(g, rank, size);
  check_scatters(g, rank, size);
  RCHECK_OK(gang_barrier(g));
  check_p2p(g, rank);
  check_posted(g, rank, size);
  /* No sub-gangs, said plainly; a configure makes the gang usable again. */
  gang_t *sub = NULL;
  int ranks[1] = {0};
  RCHECK(gang_create_subgang(g, ranks, 1, &sub) == GANG_NOT_SUPPORTED);
  RCHECK(strstr(gang_last_error(), "no sub-gangs") != NULL && sub == NULL);
  addr_of(addr, sizeof addr, "every", 1);
  RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
  check_all_reduce(g, rank, size);
  gang_destroy(g);
  RCHECK(gt_count_children() == 0);
  RCHECK(baby_maps() == 0);
  RCHECK(gt_count_fds() == fds);
  return 0;
}

static void test_every_collective(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, every_rank, NULL, 90000), 0);
}

/* ---- Configure again and again ------------------------------------------ */

#define CYCLES 30
static int cycles_rank(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = baby_new(20000);
  char addr[160];
  int fds = 0, maps = 0;
  pid_t last = -1;
  for (int i = 0; i < CYCLES; i++) {
    addr_of(addr, sizeof addr, "cycles", i);
    RCHECK_OK(gang_ft_configure(g, addr, rank, size, 20000));
    pid_t kid = baby_pid();
    RCHECK(kid > 0 && kid != last && gt_count_children() == 1);
    last = kid;
    float v[2] = {1, (float)i};
    RCHECK_OK(gang_all_reduce(g, v, 2, GANG_FLOAT32, GANG_SUM));
    RCHECK(v[0] == (float)size && v[1] == (float)(size * i));
    if (i == 1) {
      fds = gt_count_fds();
      maps = baby_maps();
    }
  }
  RCHECK(gt_count_fds() == fds && baby_maps() == maps);
  /* The same prefix again: refused, naming it, and unconfigured. */
  RCHECK(gang_ft_configure(g, addr, rank, size, 20000) == GANG_INVALID_USAGE);
  RCHECK(strstr(gang_last_error(), "used before") != NULL);
  RCHECK(!gang_ft_configured(g) && gt_count_children() == 0);
  gang_destroy(g);
  RCHECK(gt_count_children() == 0 && baby_maps() == 0);
  return 0;
}

static void test_configure_cycles(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, cycles_rank, NULL, 120000), 0);
}

/* ---- The program missing ------------------------------------------------ */

static int missing_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  gang_t *g = baby_new(20000);
  char addr[160];
  setenv("GANG_BABY_PATH", "/nonexistent/gang-baby", 1);
  addr_of(addr, sizeof addr, "missing", 0);
  RCHECK(gang_ft_configure(g, addr, 0, 1, 5000) == GANG_NOT_FOUND);
  fprintf(stderr, "%s\n", gang_last_error());
  RCHECK(strstr(gang_last_error(), "/nonexistent/gang-baby") != NULL);
  unsetenv("GANG_BABY_PATH");
  addr_of(addr, sizeof addr, "missing", 1);
  RCHECK(gang_ft_configure(g, addr, 0, 1, 5000) == GANG_NOT_FOUND);
  fprintf(stderr, "%s\n", gang_last_error());
  RCHECK(strstr(gang_last_error(), "tried") != NULL);
  RCHECK(strstr(gang_last_error(), "libexec/gang/gang-baby") != NULL);
  RCHECK(strstr(gang_last_error(), "GANG_BABY_PATH") != NULL);
  RCHECK(!gang_ft_configured(g) && gt_count_children() == 0);
  gang_destroy(g);
  return 0;
}

static void test_missing_program(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(1, missing_rank, NULL, 30000), 0);
}

int main(void) {
  /* Run by hand, the test finds the program in its build tree (CTest sets
   * GANG_BABY_PATH itself). */
  setenv("GANG_BABY_PATH", GT_BUILD_DIR "/tools/gang-baby/gang-baby", 0);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_unconfigured_refuses),
      GT_TEST(test_every_collective),
      GT_TEST(test_configure_cycles),
      GT_TEST(test_missing_program),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
