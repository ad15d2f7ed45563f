/* The selection table's choices on their own (src/algo/select.c): where
 * the measured ways apply, and the link model's prices and switches
 * between the TCP algorithms and the two-level forms. No ranks run here;
 * test_pg_algos runs every algorithm. */
#include <stdbool.h>
#include <string.h>

#include "harness/harness.h"

#include "algo/algo.h"
#include "algo/select.h"

/* The measured ways of all_gather and reduce_scatter with more members
 * than CPUs: taken up to two members per CPU, staging beyond (the
 * agreeing step's round of context switches costs more there). */
/* Two members' broadcast: a slotted step below 32 KiB, whose root runs
 * ahead; staged or two ends, measured, to 64 KiB; two ends from there. */
static void test_two_members_broadcast(void **state) {
  (void)state;
  static const struct {
    size_t kib;
    algo_id want;
  } cases[] = {
      {16, ALGO_SHM_STAGED}, {32, ALGO_SHM_MEASURED}, {64, ALGO_SHM_TWO_ENDS}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    algo_facts f = {.bytes = cases[i].kib * 1024,
                    .count = cases[i].kib * 256,
                    .size = 2,
                    .cma = true};
    assert_int_equal(gang__algo_select(NULL, ALGO_BROADCAST, ALGO_PATH_SHM, &f),
                     cases[i].want);
  }
}

static void test_measured_when_crowded(void **state) {
  (void)state;
  algo_coll colls[] = {ALGO_ALL_GATHER, ALGO_REDUCE_SCATTER};
  for (int i = 0; i < 2; i++) {
    algo_facts f = {.bytes = 64 * 1024,
                    .count = 16384,
                    .size = 4,
                    .cma = true,
                    .oversubscribed = true};
    assert_int_equal(gang__algo_select(NULL, colls[i], ALGO_PATH_SHM, &f),
                     ALGO_SHM_MEASURED);
    f.size = 8;
    f.crowded = true;
    assert_int_equal(gang__algo_select(NULL, colls[i], ALGO_PATH_SHM, &f),
                     ALGO_SHM_STAGED);
    f.cma_forced = true; /* GANG_SHM_CMA=1: single copy, crowded or not */
    f.bytes = 256 * 1024;
    f.count = 65536;
    assert_int_equal(gang__algo_select(NULL, colls[i], ALGO_PATH_SHM, &f),
                     ALGO_SHM_SINGLE_COPY);
    f = (algo_facts){.bytes = 64 * 1024, .count = 16384, .size = 4};
    assert_int_equal(gang__algo_select(NULL, colls[i], ALGO_PATH_SHM, &f),
                     ALGO_SHM_STAGED); /* no single copy at all */
  }
}

/* all_to_all with more members than CPUs: single copy from 256 KiB
 * blocks, measured from 16 KiB, crowded or not; staged below, or with no
 * single copy at all. */
static void test_alltoall_measured_when_over(void **state) {
  (void)state;
  algo_facts f = {.bytes = 64 * 1024,
                  .count = 16384,
                  .size = 4,
                  .cma = true,
                  .oversubscribed = true};
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_TO_ALL, ALGO_PATH_SHM, &f),
                   ALGO_SHM_MEASURED);
  f.size = 8;
  f.crowded = true;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_TO_ALL, ALGO_PATH_SHM, &f),
                   ALGO_SHM_MEASURED);
  f.bytes = 256 * 1024;
  f.count = 65536;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_TO_ALL, ALGO_PATH_SHM, &f),
                   ALGO_SHM_SINGLE_COPY);
  f.bytes = 8 * 1024;
  f.count = 2048;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_TO_ALL, ALGO_PATH_SHM, &f),
                   ALGO_SHM_STAGED);
  f = (algo_facts){.bytes = 64 * 1024,
                   .count = 16384,
                   .size = 4,
                   .oversubscribed = true}; /* no single copy at all */
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_TO_ALL, ALGO_PATH_SHM, &f),
                   ALGO_SHM_STAGED);
}

/* The link model (GANG_NET_LATENCY_US, GANG_NET_BANDWIDTH) chooses among
 * the TCP algorithms by their cost formulas: recursive doubling for small
 * all_reduces and the ring for large ones, the crossover moving with
 * alpha / beta; Bruck for small all_gather blocks and the ring for large
 * ones and between two ranks (Bruck's copy into place buys nothing
 * there). */
static void test_link_model(void **state) {
  (void)state;
  /* Two members: recursive doubling below 64 KiB, then whichever of it
   * and halving-doubling they measure faster, priced as the cheaper. */
  algo_facts two = {
      .size = 2, .count = SIZE_MAX, .alpha_ns = 10000, .beta_ns = 1.0};
  two.bytes = 64 * 1024 - 1;
  assert_int_equal(
      gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &two),
      ALGO_TCP_RD);
  for (size_t b = 64 * 1024; b <= ((size_t)1 << 30); b *= 16) {
    two.bytes = b;
    assert_int_equal(
        gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &two),
        ALGO_TCP_MEASURED);
    double rd = gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_RD, &two),
           hd = gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_HD, &two);
    assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_MEASURED, &two) ==
                (rd < hd ? rd : hd));
  }
  algo_facts f = {
      .size = 8, .count = SIZE_MAX, .alpha_ns = 10000, .beta_ns = 1.0};
  /* 8 members: recursive doubling 3 (alpha + n beta), halving-doubling 6
   * alpha + 1.75 n beta + 0.875 n gamma, the ring 14 alpha + 1.75 n beta. */
  f.bytes = 1024;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f),
                   ALGO_TCP_RD);
  f.bytes = 64 * 1024;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f),
                   ALGO_TCP_HD);
  f.bytes = (size_t)16 << 20;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f),
                   ALGO_TCP_RING);
  double rd = gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_RD, &f);
  double hd = gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_HD, &f);
  double ring = gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_RING, &f);
  double n = (double)f.bytes;
  assert_true(rd == 3 * (1e4 + n));
  assert_true(hd == 6 * 1e4 + 1.75 * n + 0.875 * n * 0.1);
  assert_true(ring == 14 * 1e4 + 1.75 * n);
  /* A slow, far link (1 ms) keeps the latency-light ones longer: 1 MiB
   * is still recursive doubling, 9 MiB halving-doubling. */
  f.alpha_ns = 1000000;
  f.bytes = (size_t)1 << 20;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f),
                   ALGO_TCP_RD);
  f.bytes = (size_t)9 << 20;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f),
                   ALGO_TCP_HD);
  /* 6 ranks: 4 in the doubling, 2 fold in and out (2 more steps each). */
  f.size = 6;
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_RD, &f) ==
              4 * (1e6 + (double)f.bytes));
  f.size = 8;
  f.alpha_ns = 10000;
  f.bytes = 64;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f),
                   ALGO_TCP_BRUCK);
  f.bytes = (size_t)1 << 20;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f),
                   ALGO_TCP_RING);
  f.size = 2;
  f.bytes = 64;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f),
                   ALGO_TCP_RING);
  /* A call that moves nothing costs nothing, on every path (its
   * algorithms return at once); a barrier's empty messages still cost
   * lg p alpha. */
  f.size = 8;
  f.bytes = 0;
  f.hosts = 4;
  f.per_host = 2;
  assert_true(gang__algo_cost(ALGO_ALL_GATHER, ALGO_TCP_BRUCK, &f) == 0);
  assert_true(gang__algo_cost(ALGO_REDUCE_SCATTER, ALGO_TCP_RING, &f) == 0);
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER, &f) == 0);
  assert_true(gang__algo_cost(ALGO_BARRIER, ALGO_TCP_DISSEMINATION, &f) ==
              3 * 1e4);
  f.hosts = 0;
  f.per_host = 0;
  /* A tree's steps with fewer senders than links: with one flow's beta a
   * quarter of the all-at-once beta, 8 members' binomial broadcast pays
   * max(1/4, 2^k/8) per byte at step k: 1/4, 1/4, 1/2. Without it, beta
   * throughout. */
  f.bytes = 4096;
  double bn = (double)f.bytes;
  assert_true(gang__algo_cost(ALGO_BROADCAST, ALGO_TCP_BINOMIAL, &f) ==
              3 * (1e4 + bn));
  f.beta_one_ns = 0.25;
  assert_true(gang__algo_cost(ALGO_BROADCAST, ALGO_TCP_BINOMIAL, &f) ==
              3 * 1e4 + bn * (0.25 + 0.25 + 0.5));
  /* The ring's steps load every link at once: beta. */
  assert_true(gang__algo_cost(ALGO_ALL_GATHER, ALGO_TCP_RING, &f) ==
              7 * (1e4 + bn));
  f.beta_one_ns = 0;
  /* Broadcast: scatter-allgather's formula, (lg p + p - 1) alpha + 2
   * (p-1)/p n beta, beats the tree's lg p (alpha + n beta) at 1 MiB and 8
   * members. It measured slower over one host's loopback: the table takes
   * it only where the members are on several hosts, and the tree below
   * the sizes its formula prefers. */
  f.size = 8;
  f.bytes = (size_t)1 << 20;
  assert_true(gang__algo_cost(ALGO_BROADCAST, ALGO_TCP_SAG, &f) ==
              10 * 1e4 + 1.75 * (double)f.bytes);
  assert_true(gang__algo_cost(ALGO_BROADCAST, ALGO_TCP_SAG, &f) <
              gang__algo_cost(ALGO_BROADCAST, ALGO_TCP_BINOMIAL, &f));
  assert_int_equal(gang__algo_select(NULL, ALGO_BROADCAST, ALGO_PATH_TCP, &f),
                   ALGO_TCP_BINOMIAL);
  f.spread = true;
  assert_int_equal(gang__algo_select(NULL, ALGO_BROADCAST, ALGO_PATH_TCP, &f),
                   ALGO_TCP_SAG);
  f.bytes = 4096; /* 7 alphas more than the tree's 3 cost more than the
                     bytes it saves */
  assert_int_equal(gang__algo_select(NULL, ALGO_BROADCAST, ALGO_PATH_TCP, &f),
                   ALGO_TCP_BINOMIAL);
  /* Fewer elements than members: the tree, whatever the model. */
  f.bytes = (size_t)1 << 20;
  f.count = 4;
  assert_int_equal(gang__algo_select(NULL, ALGO_BROADCAST, ALGO_PATH_TCP, &f),
                   ALGO_TCP_BINOMIAL);
  f.count = SIZE_MAX;
  /* With hosts of 2 members the scatter's crossing steps, like the
   * tree's, send from distinct hosts: no shared link. */
  f.hosts = 4;
  f.per_host = 2;
  assert_true(gang__algo_cost(ALGO_BROADCAST, ALGO_TCP_SAG, &f) ==
              10 * 1e4 + 1.75 * (double)f.bytes);
  f.hosts = f.per_host = 0;
  f.spread = false;
  /* reduce_scatter: at a power of two recursive halving moves the ring's
   * bytes in lg p steps, but copies the input in and its block out, where
   * the ring reads the input in place: 4 KiB blocks of 8 ranks take the
   * halving (3 alpha against 7), 1 MiB the ring (the copy of 9 blocks at
   * 10 GB/s outweighs 4 alpha); at 6 ranks the halving's fold (the whole
   * input, and the block back) costs more than the ring's two extra steps
   * but for tiny blocks. */
  f.size = 8;
  f.bytes = 4096;
  assert_int_equal(
      gang__algo_select(NULL, ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, &f),
      ALGO_TCP_HALVING);
  assert_true(gang__algo_cost(ALGO_REDUCE_SCATTER, ALGO_TCP_HALVING, &f) ==
              3 * 1e4 + 7 * 4096.0 + 7 * 4096 * 0.1 + 9 * 4096 * 0.1);
  assert_true(gang__algo_cost(ALGO_REDUCE_SCATTER, ALGO_TCP_RING, &f) ==
              7 * (1e4 + 4096.0 + 4096 * 0.1));
  f.bytes = (size_t)1 << 20;
  assert_int_equal(
      gang__algo_select(NULL, ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, &f),
      ALGO_TCP_RING);
  f.size = 6;
  assert_int_equal(
      gang__algo_select(NULL, ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, &f),
      ALGO_TCP_RING);
  f.bytes = 64;
  assert_int_equal(
      gang__algo_select(NULL, ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, &f),
      ALGO_TCP_HALVING);
}

/* Gangs over several hosts: the two-level form priced step by step
 * against flat TCP, whose exchanges across hosts share a host's link. */
static void test_two_level_model(void **state) {
  (void)state;
  /* 4 hosts of 2 members, 500 us and 1 Gbit/s links. */
  algo_facts f = {.size = 8,
                  .count = SIZE_MAX,
                  .alpha_ns = 500000,
                  .beta_ns = 8.0,
                  .hosts = 4,
                  .per_host = 2};
  f.bytes = 8;
  double n = 8, s = 1000, c = 0.1, r = 0.1;
  /* Local all_reduce, recursive doubling among 4 leaders, local
   * broadcast. */
  double want =
      2 * s + n * (2 * c + 0.5 * r) + 2 * (500000 + n * 8.0) + s + n * c;
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER, &f) == want);
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
                   ALGO_HIER);
  /* reduce_scatter of 256 KiB blocks: the packing, the host's reduce,
   * then the table's reduce_scatter among the 4 hosts along both rails
   * at once: each host's link carries two flows, beta twice. */
  f.bytes = 256 * 1024;
  n = (double)f.bytes;
  algo_facts rail = {
      .size = 4, .count = SIZE_MAX, .alpha_ns = 500000, .beta_ns = 16.0};
  rail.bytes = f.bytes;
  want = 8 * n * c + s + 8 * n * (c + r) +
         gang__algo_cost_path(ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, &rail);
  assert_true(gang__algo_cost(ALGO_REDUCE_SCATTER, ALGO_HIER, &f) == want);
  f.bytes = 8;
  n = 8;
  /* Flat: the two members of a host send across together in the steps of
   * halving-doubling, so their link's beta counts twice; the ring's not. */
  f.bytes = (size_t)1 << 20;
  n = (double)f.bytes;
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_HD, &f) ==
              6 * 500000.0 + 1.75 * n * 16.0 + 0.875 * n * 0.1);
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_RING, &f) ==
              14 * 500000.0 + 1.75 * n * 8.0);
  /* Barrier: a dissemination's lg p rounds, two local steps around the
   * leaders' two. */
  assert_true(gang__algo_cost(ALGO_BARRIER, ALGO_TCP_DISSEMINATION, &f) ==
              3 * 500000.0);
  assert_true(gang__algo_cost(ALGO_BARRIER, ALGO_HIER, &f) ==
              2 * s + 2 * 500000.0);
  for (int coll = 0; coll < ALGO_ALL_TO_ALL; coll++) {
    f.bytes = 4096;
    assert_true(gang__algo_cost((algo_coll)coll, ALGO_HIER, &f) > 0);
    assert_int_equal(
        gang__algo_select(NULL, (algo_coll)coll, ALGO_PATH_HIER, &f),
        ALGO_HIER);
  }
  /* The rails' all_reduce: a local reduce_scatter and all_gather around
   * an all_reduce of half the buffer along each of the two rails, both
   * at once on a host's link (beta twice). Priced below the leaders' form
   * (a local copy and half the TCP reduce fewer), so the table takes it
   * where hosts are equal and the count splits in whole parts. */
  f.bytes = (size_t)1 << 20;
  n = (double)f.bytes;
  f.rails = true;
  algo_facts along = f; /* a rail: 4 members, half the buffer */
  along.size = 4, along.hosts = along.per_host = 0, along.rails = false;
  along.bytes = f.bytes / 2, along.beta_ns = 16.0;
  assert_int_equal(
      gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &along),
      ALGO_TCP_HD);
  double rails = 2 * s + 2 * n * c + 0.5 * n * r +
                 gang__algo_cost(ALGO_ALL_REDUCE, ALGO_TCP_HD, &along);
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER_RAILS, &f) == rails);
  assert_true(rails < gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER, &f));
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
                   ALGO_HIER_RAILS);
  assert_true(gang__algo_cost_path(ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f) ==
              rails);
  /* Below 1 MiB: the leaders' form, though priced lower (select.c). */
  f.bytes = (size_t)256 << 10;
  assert_true(gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER_RAILS, &f) <
              gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER, &f));
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
                   ALGO_HIER);
  /* Odd count, too few elements, uneven hosts: leaders, forced or not. */
  algo_choice rails_forced;
  assert_int_equal(
      gang__algo_choice_parse("all_reduce=hierarchical_rails", &rails_forced),
      GANG_OK);
  size_t counts[] = {1001, 1, 1000};
  for (int i = 0; i < 3; i++) {
    f.count = counts[i];
    f.rails = i < 2; /* the last: uneven hosts */
    f.bytes = f.count * 4;
    assert_int_equal(
        gang__algo_select(&rails_forced, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
        ALGO_HIER);
  }
  f.rails = true; /* and 1000 elements */
  assert_int_equal(
      gang__algo_select(&rails_forced, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
      ALGO_HIER_RAILS);
  /* Only all_reduce has the rails' form. */
  assert_true(gang__algo_cost(ALGO_BROADCAST, ALGO_HIER_RAILS, &f) == 0);
  f.count = SIZE_MAX;
  f.rails = false;
  /* A link as fast as memory (1 us, 10 GB/s): at 64 MiB the local copies
   * cost more than flat TCP's ring saves, and the table goes flat. */
  f.alpha_ns = 1000;
  f.beta_ns = 0.1;
  f.bytes = (size_t)64 << 20;
  assert_true(gang__algo_cost_path(ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f) <
              gang__algo_cost(ALGO_ALL_REDUCE, ALGO_HIER, &f));
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
                   ALGO_AUTO);
  /* Forced, it runs whatever the model says; with no model it is the
   * table's choice. */
  algo_choice forced;
  assert_int_equal(gang__algo_choice_parse("all_reduce=hierarchical", &forced),
                   GANG_OK);
  assert_int_equal(
      gang__algo_select(&forced, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
      ALGO_HIER);
  f.alpha_ns = f.beta_ns = 0;
  assert_int_equal(gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_HIER, &f),
                   ALGO_HIER);
}

/* Contests (tcp_timed.c): from 64 KiB, three members and more, the
 * cheapest other algorithm the model compares with the chosen one, and
 * whether it prices it within 2x (a close call, timed at once); none
 * below 64 KiB, forced, between two members or without a model. */
static void test_contests(void **state) {
  (void)state;
  /* 8 hosts, 630 us one way-ish, 0.38 GB/s each at once: 256 KiB blocks
   * of all_gather cost Bruck 3 alpha + 7 n beta + 8 n copy = 6.93 ms and
   * the ring 7 (alpha + n beta) = 9.24 ms. */
  algo_facts f = {.bytes = 256 * 1024,
                  .count = 65536,
                  .size = 8,
                  .alpha_ns = 630000,
                  .beta_ns = 2.63};
  bool close = false;
  algo_id a = gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f);
  assert_int_equal(a, ALGO_TCP_BRUCK);
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_GATHER, &f, a, &close),
                   ALGO_TCP_RING);
  assert_true(close);
  /* The ring priced 1.33x Bruck; at 64 KiB 1.8x, still close; with 2 ms
   * of alpha 2.1x: a contest, not a close call. */
  f.bytes = 64 * 1024;
  f.count = 16384;
  a = gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f);
  assert_int_equal(a, ALGO_TCP_BRUCK);
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_GATHER, &f, a, &close),
                   ALGO_TCP_RING);
  assert_true(close);
  f.alpha_ns = 2000000;
  assert_true(gang__algo_cost(ALGO_ALL_GATHER, ALGO_TCP_RING, &f) >
              GANG__ALGO_CLOSE * gang__algo_cost(ALGO_ALL_GATHER, a, &f));
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_GATHER, &f, a, &close),
                   ALGO_TCP_RING);
  assert_false(close);
  /* Below 64 KiB moved no contest, however close: all_gather counts
   * every member's block (8 KiB blocks of 8 members contest, 4 KiB
   * ones do not), all_reduce the buffer. */
  f.alpha_ns = 1000;
  f.bytes = 8 * 1024;
  f.count = f.bytes / 4;
  assert_true(gang__algo_moved(ALGO_ALL_GATHER, &f) == 64 * 1024);
  a = gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f);
  assert_true(gang__algo_rival(NULL, ALGO_ALL_GATHER, &f, a, &close) !=
              ALGO_AUTO);
  f.bytes = 8 * 1024 - 4;
  f.count = f.bytes / 4;
  a = gang__algo_select(NULL, ALGO_ALL_GATHER, ALGO_PATH_TCP, &f);
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_GATHER, &f, a, &close),
                   ALGO_AUTO);
  assert_false(close);
  f.bytes = 64 * 1024 - 4;
  f.count = f.bytes / 4;
  assert_true(gang__algo_moved(ALGO_ALL_REDUCE, &f) == f.bytes);
  a = gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f);
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_REDUCE, &f, a, &close),
                   ALGO_AUTO);
  /* reduce_scatter, all_reduce: the same rule. */
  f.alpha_ns = 630000;
  f.bytes = 256 * 1024;
  f.count = 65536;
  a = gang__algo_select(NULL, ALGO_REDUCE_SCATTER, ALGO_PATH_TCP, &f);
  algo_id b = gang__algo_rival(NULL, ALGO_REDUCE_SCATTER, &f, a, &close);
  assert_true(b == ALGO_TCP_RING || b == ALGO_TCP_HALVING);
  assert_true(b != a && close);
  assert_true(gang__algo_cost(ALGO_REDUCE_SCATTER, b, &f) <=
              GANG__ALGO_CLOSE * gang__algo_cost(ALGO_REDUCE_SCATTER, a, &f));
  f.bytes = 2 * 1024 * 1024;
  f.count = f.bytes / 4;
  a = gang__algo_select(NULL, ALGO_ALL_REDUCE, ALGO_PATH_TCP, &f);
  b = gang__algo_rival(NULL, ALGO_ALL_REDUCE, &f, a, &close);
  assert_true(b != ALGO_AUTO && b != a);
  /* Forced by GANG_ALGO, or two members (measured apart), or no model:
   * the table's choice runs. */
  algo_choice forced;
  assert_int_equal(gang__algo_choice_parse("all_reduce=ring", &forced),
                   GANG_OK);
  assert_int_equal(
      gang__algo_rival(&forced, ALGO_ALL_REDUCE, &f, ALGO_TCP_RING, &close),
      ALGO_AUTO);
  f.size = 2;
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_REDUCE, &f, a, &close),
                   ALGO_AUTO);
  f.size = 8;
  f.alpha_ns = f.beta_ns = 0;
  assert_int_equal(gang__algo_rival(NULL, ALGO_ALL_REDUCE, &f, a, &close),
                   ALGO_AUTO);
  /* The two paths: 2 hosts of 2 with the default link, all_gather of 64
   * KiB blocks in two levels 180 us against flat TCP's 213: close; far
   * hosts, a contest but not close; below 64 KiB or forced, none. */
  algo_facts h = {.bytes = 64 * 1024,
                  .count = 16384,
                  .size = 4,
                  .alpha_ns = 10000,
                  .beta_ns = 0.93,
                  .hosts = 2,
                  .per_host = 2};
  assert_int_equal(gang__algo_two_level(NULL, ALGO_ALL_GATHER, &h, &close),
                   ALGO_HIER);
  assert_true(close);
  h.alpha_ns = 2000000; /* two levels 2.17 ms, flat 4.39 */
  assert_int_equal(gang__algo_two_level(NULL, ALGO_ALL_GATHER, &h, &close),
                   ALGO_HIER);
  assert_false(close);
  h.alpha_ns = 10000;
  h.bytes = 1024;
  h.count = 256;
  assert_int_equal(gang__algo_two_level(NULL, ALGO_ALL_GATHER, &h, &close),
                   ALGO_AUTO);
  h.bytes = 64 * 1024;
  h.count = 16384;
  algo_choice ring;
  assert_int_equal(gang__algo_choice_parse("all_gather=ring", &ring), GANG_OK);
  assert_int_equal(gang__algo_two_level(&ring, ALGO_ALL_GATHER, &h, &close),
                   ALGO_AUTO);
  assert_false(close);
  /* Broadcast's tree is not chosen by the model: no contest. */
  f.alpha_ns = 630000;
  f.beta_ns = 2.63;
  assert_int_equal(
      gang__algo_rival(NULL, ALGO_BROADCAST, &f, ALGO_TCP_BINOMIAL, &close),
      ALGO_AUTO);
}

/* A contest's steps (algo_contest), one member (the agreement is its
 * own medians): the model's choice runs its trial calls, holds where its
 * slowest median is within 1.25x of its price, and otherwise gives way to
 * timing both, the loser retried two calls in 128 unless it lost by more
 * than 2x; a close call is timed from the first call. */
static int contest_call(algo_ctx *a, algo_contest *t, double ms) {
  int way = -1;
  assert_int_equal(gang__algo_contest_way(a, t, &way), GANG_OK);
  gang__algo_contest_done(t, way, (int64_t)(ms * 1e6));
  return way;
}

/* The model's way 1, priced 1 ms for 1 MiB, taking `mine`, and way 0
 * taking `other`: the calls of each way over 400 calls. */
static void contest_run(algo_ctx *a, double mine, double other, int ran[2],
                        uint8_t *st) {
  gang__way_book b;
  memset(&b, 0, sizeof b);
  *st = 0;
  algo_contest t = {.book = &b,
                    .state = st,
                    .k = 4,
                    .chosen = 1,
                    .price_ns = 1e6,
                    .bytes = 1 << 20,
                    .tags = 0};
  ran[0] = ran[1] = 0;
  for (int i = 0; i < 400; i++) {
    int way = -1;
    assert_int_equal(gang__algo_contest_way(a, &t, &way), GANG_OK);
    if (i <= GANG__WAY_SAMPLES)
      assert_int_equal(way, 1); /* the model's choice on trial */
    gang__algo_contest_done(&t, way, (int64_t)((way ? mine : other) * 1e6));
    ran[way]++;
  }
}

static void test_contest_steps(void **state) {
  (void)state;
  algo_ctx a = {.size = 1, .rank = 0, .what = "test"};
  int ran[2];
  uint8_t st;
  /* 1.2 ms against a 1 ms price: holds, way 0 never runs. */
  contest_run(&a, 1.2, 0.5, ran, &st);
  assert_int_equal(st, 1);
  assert_int_equal(ran[0], 0);
  /* 1.5 ms: fails its trial; way 0 at 1.0 wins, and way 1, within 2x,
   * is retried: six trial calls plus two in each later 128. */
  contest_run(&a, 1.5, 1.0, ran, &st);
  assert_int_equal(st, 2);
  assert_true(ran[1] > GANG__WAY_SAMPLES + 1 + 2);
  assert_true(ran[0] > 300);
  /* 2.5 ms against 1.0: way 0 wins by more than 2x, no retries: way 1
   * runs only its trial calls. */
  contest_run(&a, 2.5, 1.0, ran, &st);
  assert_int_equal(st, 2);
  assert_int_equal(ran[1], GANG__WAY_SAMPLES + 1);
  /* A close call: both ways' trials from the first call. */
  gang__way_book b;
  memset(&b, 0, sizeof b);
  st = 0;
  algo_contest t = {.book = &b,
                    .state = &st,
                    .k = 4,
                    .chosen = 1,
                    .close = true,
                    .price_ns = 1e6,
                    .bytes = 1 << 20};
  assert_int_equal(contest_call(&a, &t, 1.0), 0);
  assert_int_equal(st, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_two_members_broadcast),
      GT_TEST(test_measured_when_crowded),
      GT_TEST(test_alltoall_measured_when_over),
      GT_TEST(test_link_model),
      GT_TEST(test_two_level_model),
      GT_TEST(test_contests),
      GT_TEST(test_contest_steps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
