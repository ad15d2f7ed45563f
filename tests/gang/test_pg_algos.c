/* Every algorithm of the selection table (src/algo/select.c), forced with
 * GANG_ALGO on gangs of 2 and 3 ranks on this host, over sizes that reach
 * the algorithm's paths (one element, a small slot, several staging
 * chunks), with results checked element by element and the algorithm
 * that ran checked by name. The table's automatic choices are covered by
 * test_pg_gang's matrix; this covers what the table would not choose on
 * this machine (single copy between two ranks, the busy choice, TCP
 * algorithms on a shared-memory gang).
 *
 * Values depend on the index modulo a large prime, so a block put in the
 * wrong place shows. GANG_SHM_CMA=1 allows single copy with more ranks than
 * CPUs. */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

#include "algo/algo.h"
#include "algo/run.h"
#include "transport/shm.h"
#include "gang/gang.h"
#include "pg.h"

#define PRIME 1000003u

static int g_round;

typedef struct forced {
  const char *setting; /* GANG_ALGO */
  const char *coll;
  const char *algo; /* the name gang_last_algorithm must report */
  size_t counts[3]; /* elements (per rank for all_gather etc.) */
  int only_size;    /* 0: every world size */
} forced;

/* Sizes: flagged lines hold 504 bytes, small slots 1 KiB; 2 staging
 * chunks of 1 MiB need 2^19 floats. */
static const forced cases[] = {
    {"all_reduce=flagged", "all_reduce", "flagged", {1, 7, 126}, 0},
    {"all_reduce=small", "all_reduce", "small", {1, 200, 256}, 0},
    {"all_reduce=allread", "all_reduce", "allread", {3, 5000, 300001}, 0},
    {"all_reduce=staged", "all_reduce", "staged", {3, 5000, 600001}, 0},
    {"all_reduce=staged_or_single_copy",
     "all_reduce",
     "staged_or_single_copy",
     {3, 5000, 600001},
     0},
    {"all_reduce=single_copy",
     "all_reduce",
     "single_copy",
     {3, 5000, 600001},
     0},
    {"all_reduce=ring", "all_reduce", "ring", {3, 5000, 70001}, 0},
    {"all_reduce=halving_doubling",
     "all_reduce",
     "halving_doubling",
     {3, 5000, 70001},
     0},
    {"all_reduce=recursive_doubling",
     "all_reduce",
     "recursive_doubling",
     {1, 5000, 70001},
     0},
    {"all_reduce=doubling_or_halving",
     "all_reduce",
     "doubling_or_halving",
     {1, 5000, 70001},
     2},
    {"broadcast=small", "broadcast", "small", {1, 100, 256}, 0},
    {"broadcast=two_ends", "broadcast", "two_ends", {1, 5000, 600001}, 2},
    {"broadcast=staged_or_single_copy",
     "broadcast",
     "staged_or_single_copy",
     {1, 5000, 600001},
     2},
    {"broadcast=single_copy", "broadcast", "single_copy", {1, 5000, 600001}, 0},
    {"broadcast=staged", "broadcast", "staged", {1, 5000, 600001}, 0},
    {"broadcast=binomial", "broadcast", "binomial", {1, 5000, 70001}, 0},
    {"broadcast=scatter_allgather",
     "broadcast",
     "scatter_allgather",
     {3, 5003, 70001},
     0},
    {"all_gather=small", "all_gather", "small", {1, 100, 256}, 0},
    {"all_gather=staged", "all_gather", "staged", {1, 5000, 300001}, 0},
    {"all_gather=single_copy",
     "all_gather",
     "single_copy",
     {1, 5000, 300001},
     0},
    {"all_gather=staged_or_single_copy",
     "all_gather",
     "staged_or_single_copy",
     {1, 5000, 300001},
     0},
    {"all_gather=ring", "all_gather", "ring", {1, 5000, 70001}, 0},
    {"all_gather=bruck", "all_gather", "bruck", {1, 5000, 70001}, 0},
    {"reduce_scatter=staged", "reduce_scatter", "staged", {1, 5000, 300001}, 0},
    {"reduce_scatter=single_copy",
     "reduce_scatter",
     "single_copy",
     {1, 5000, 300001},
     0},
    {"reduce_scatter=staged_or_single_copy",
     "reduce_scatter",
     "staged_or_single_copy",
     {1, 5000, 300001},
     0},
    /* a block of 1.2 MB: two pieces of the TCP ring (1 MiB) */
    {"reduce_scatter=ring", "reduce_scatter", "ring", {1, 5000, 300001}, 0},
    {"reduce_scatter=recursive_halving",
     "reduce_scatter",
     "recursive_halving",
     {1, 5000, 70001},
     0},
    {"all_to_all=staged", "all_to_all", "staged", {1, 5000, 300001}, 0},
    {"all_to_all=single_copy",
     "all_to_all",
     "single_copy",
     {1, 5000, 300001},
     0},
    {"all_to_all=pairwise", "all_to_all", "pairwise", {1, 5000, 70001}, 0},
    {"all_to_all_v=single_copy",
     "all_to_all_v",
     "single_copy",
     {1, 5000, 300001},
     0},
    {"all_to_all_v=pairwise", "all_to_all_v", "pairwise", {1, 5000, 70001}, 0},
    {"barrier=flagged", "barrier", "flagged", {0, 0, 0}, 0},
    {"barrier=lines", "barrier", "lines", {0, 0, 0}, 0},
    {"barrier=dissemination", "barrier", "dissemination", {0, 0, 0}, 0},
};

static const forced *g_case;

/* Rank r's value at index i (exact in float). */
static float val(int r, size_t i) {
  return (float)((i * 7919u + (size_t)r * 104729u) % PRIME % 4096);
}

/* (algo NULL: anything but the hierarchical path) */
static void check_last(gang_t *g) {
  if (g_case->algo != NULL)
    RCHECK(gt_ran(g, g_case->algo, g_case->setting));
  else
    RCHECK(strcmp(gang_last_algorithm(g), "hierarchical") != 0);
}

static void run_all_reduce(gang_t *g, int rank, int size, size_t n) {
  float *b = malloc((n + 1) * sizeof *b);
  for (size_t i = 0; i < n; i++)
    b[i] = val(rank, i);
  RCHECK_OK(gang_all_reduce(g, b, n, GANG_FLOAT32, GANG_SUM));
  check_last(g);
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int q = 0; q < size; q++)
      want += val(q, i);
    RCHECK(b[i] == want);
  }
  free(b);
}

/* From the last rank and from rank 0 (a tree's shape depends on the
 * root). */
static void run_broadcast(gang_t *g, int rank, int size, size_t n) {
  float *b = malloc((n + 1) * sizeof *b);
  int roots[2] = {size - 1, 0};
  for (int r = 0; r < (size > 1 ? 2 : 1); r++) {
    int root = roots[r];
    for (size_t i = 0; i < n; i++)
      b[i] = rank == root ? val(root, i) : -1.0f;
    RCHECK_OK(gang_broadcast(g, b, n, GANG_FLOAT32, root));
    check_last(g);
    for (size_t i = 0; i < n; i++)
      RCHECK(b[i] == val(root, i));
  }
  free(b);
}

static void run_all_gather(gang_t *g, int rank, int size, size_t n) {
  float *in = malloc((n + 1) * sizeof *in);
  float *out = malloc(((size_t)size * n + 1) * sizeof *out);
  for (size_t i = 0; i < n; i++)
    in[i] = val(rank, i);
  RCHECK_OK(gang_all_gather(g, out, in, n, GANG_FLOAT32));
  check_last(g);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < n; i++)
      RCHECK(out[(size_t)q * n + i] == val(q, i));
  /* In place, then with the input in the next member's slot of out (the
   * others' blocks land on it while they may still be reading it). */
  for (int where = 0; where < 2; where++) {
    size_t at = (size_t)((rank + where) % size) * n;
    memset(out, 0, (size_t)size * n * sizeof *out);
    for (size_t i = 0; i < n; i++)
      out[at + i] = val(rank, i);
    RCHECK_OK(gang_all_gather(g, out, out + at, n, GANG_FLOAT32));
    check_last(g);
    for (int q = 0; q < size; q++)
      for (size_t i = 0; i < n; i++)
        RCHECK(out[(size_t)q * n + i] == val(q, i));
  }
  free(in);
  free(out);
}

static void run_reduce_scatter(gang_t *g, int rank, int size, size_t n) {
  size_t total = (size_t)size * n;
  float *in = malloc((total + 1) * sizeof *in);
  float *out = malloc((n + 1) * sizeof *out);
  for (size_t i = 0; i < total; i++)
    in[i] = val(rank, i);
  RCHECK_OK(gang_reduce_scatter(g, out, in, n, GANG_FLOAT32, GANG_SUM));
  check_last(g);
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int q = 0; q < size; q++)
      want += val(q, (size_t)rank * n + i);
    RCHECK(out[i] == want);
  }
  /* in place: the output is this rank's block of the input */
  float *mine = in + (size_t)rank * n;
  RCHECK_OK(gang_reduce_scatter(g, mine, in, n, GANG_FLOAT32, GANG_SUM));
  check_last(g);
  for (size_t i = 0; i < n; i++)
    RCHECK(mine[i] == out[i]);
  free(in);
  free(out);
}

static void run_all_to_all(gang_t *g, int rank, int size, size_t n) {
  size_t total = (size_t)size * n;
  float *in = malloc((total + 1) * sizeof *in);
  float *out = malloc((total + 1) * sizeof *out);
  for (size_t i = 0; i < total; i++)
    in[i] = val(rank, i);
  RCHECK_OK(gang_all_to_all(g, out, in, n, GANG_FLOAT32));
  check_last(g);
  /* Block q of out is block `rank` of q's input. */
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < n; i++)
      RCHECK(out[(size_t)q * n + i] == val(q, (size_t)rank * n + i));
  free(in);
  free(out);
}

/* Rank r sends n + r + q elements to rank q (so it receives n + j + r from
 * rank j); element i of the block for q is val(r, q * n + i). */
static void run_all_to_all_v(gang_t *g, int rank, int size, size_t n) {
  RCHECK(size >= 1 && size <= 3); /* the counts' arrays */
  size_t in_counts[3], out_counts[3], in_total = 0, out_total = 0;
  for (int q = 0; q < size; q++) {
    in_counts[q] = n + (size_t)rank + (size_t)q;
    out_counts[q] = n + (size_t)q + (size_t)rank;
    in_total += in_counts[q];
    out_total += out_counts[q];
  }
  float *in = malloc((in_total + 1) * sizeof *in);
  float *out = malloc((out_total + 1) * sizeof *out);
  size_t at = 0;
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < in_counts[q]; i++)
      in[at++] = val(rank, (size_t)q * n + i);
  RCHECK_OK(gang_all_to_all_v(g, out, out_counts, in, in_counts, GANG_FLOAT32));
  check_last(g);
  at = 0;
  for (int j = 0; j < size; j++)
    for (size_t i = 0; i < out_counts[j]; i++)
      RCHECK(out[at++] == val(j, (size_t)rank * n + i));
  free(in);
  free(out);
}

/* One call (two or three for some) of `coll` with n elements, checked. */
static void run_coll(gang_t *g, const char *coll, int rank, int size,
                     size_t n) {
  if (strcmp(coll, "all_reduce") == 0)
    run_all_reduce(g, rank, size, n);
  else if (strcmp(coll, "broadcast") == 0)
    run_broadcast(g, rank, size, n);
  else if (strcmp(coll, "all_gather") == 0)
    run_all_gather(g, rank, size, n);
  else if (strcmp(coll, "reduce_scatter") == 0)
    run_reduce_scatter(g, rank, size, n);
  else if (strcmp(coll, "all_to_all") == 0)
    run_all_to_all(g, rank, size, n);
  else if (strcmp(coll, "all_to_all_v") == 0)
    run_all_to_all_v(g, rank, size, n);
  else {
    RCHECK_OK(gang_barrier(g));
    check_last(g);
  }
}

static int rank_main(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("algos", g_round, rank, size, 60000, 0);
  for (int k = 0; k < 3; k++)
    run_coll(g, g_case->coll, rank, size, g_case->counts[k]);
  gang_destroy(g);
  return 0;
}

static void test_every_algorithm(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    g_case = &cases[c];
    setenv("GANG_ALGO", g_case->setting, 1);
    for (int size = 2; size <= 3; size++) {
      if (g_case->only_size != 0 && size != g_case->only_size)
        continue;
      print_message("%s, %d ranks\n", g_case->setting, size);
      g_round++;
      assert_int_equal(gt_run_ranks(size, rank_main, NULL, 60000), 0);
    }
  }
  unsetenv("GANG_ALGO");
}

/* The measured ways (staged_or_single_copy, src/algo/shm_way.c): two
 * members try staging, then single copy, then keep the faster, so a
 * dozen calls of each size run both; every call's result must be right
 * whichever ran, with sizes of one chunk and of several (all_gather in
 * place and out, which measure apart). arg: the collective. */
static int ways_rank(int rank, int size, void *arg) {
  const char *coll = arg;
  gang_t *g = gt_join("ways", g_round, rank, size, 60000, 0);
  /* doubling_or_halving runs over TCP and counts apart */
  _Atomic uint64_t *taken = strcmp(g_case->algo, "doubling_or_halving") == 0
                                ? gang__tcp_way_taken
                                : gang__shm_way_taken;
  uint64_t before[2] = {atomic_load(&taken[0]), atomic_load(&taken[1])};
  /* one chunk, several; all_gather out of place and in place, which
   * measure apart */
  for (int it = 0; it < 12; it++)
    run_coll(g, coll, rank, size, it % 2 == 0 ? 5000 : 300001);
  /* Broadcast agrees only when a choice is due (gang__shm_way_sparse):
   * past two rounds of its retries and fresh choices, each call's way
   * must still be the same on both members, or a result would be wrong
   * or the call would hang. */
  for (int it = 0; strcmp(coll, "broadcast") == 0 && it < 150; it++)
    run_broadcast(g, rank, size, 4096);
  /* So does two TCP members' all_reduce (allreduce_measured.c), from 64
   * KiB: 18000 floats. */
  for (int it = 0; taken == gang__tcp_way_taken && it < 150; it++)
    run_all_reduce(g, rank, size, 18000);
  RCHECK(atomic_load(&taken[0]) > before[0]);
  RCHECK(atomic_load(&taken[1]) > before[1]);
  gang_destroy(g);
  return 0;
}

static void test_measured_ways_take_both(void **state) {
  (void)state;
  static const forced measured[] = {
      {"all_reduce=staged_or_single_copy",
       "all_reduce",
       "staged_or_single_copy",
       {0, 0, 0},
       2},
      {"all_gather=staged_or_single_copy",
       "all_gather",
       "staged_or_single_copy",
       {0, 0, 0},
       2},
      {"reduce_scatter=staged_or_single_copy",
       "reduce_scatter",
       "staged_or_single_copy",
       {0, 0, 0},
       2},
      {"broadcast=staged_or_single_copy",
       "broadcast",
       "staged_or_single_copy",
       {0, 0, 0},
       2},
      {"all_reduce=doubling_or_halving",
       "all_reduce",
       "doubling_or_halving",
       {0, 0, 0},
       2},
      /* Four members (the table measures them where they are at most two
       * per CPU): the agreeing step gathers every member's proposal. */
      {"all_gather=staged_or_single_copy",
       "all_gather",
       "staged_or_single_copy",
       {0, 0, 0},
       4},
      {"reduce_scatter=staged_or_single_copy",
       "reduce_scatter",
       "staged_or_single_copy",
       {0, 0, 0},
       4},
      /* all_to_all measures where members outnumber the CPUs, agreeing
       * only when a choice is due. */
      {"all_to_all=staged_or_single_copy",
       "all_to_all",
       "staged_or_single_copy",
       {0, 0, 0},
       4},
  };
  for (size_t c = 0; c < sizeof measured / sizeof measured[0]; c++) {
    g_case = &measured[c];
    int ranks = g_case->only_size;
    setenv("GANG_ALGO", g_case->setting, 1);
    print_message("%s, %d ranks, 12 calls\n", g_case->setting, ranks);
    g_round++;
    assert_int_equal(
        gt_run_ranks(ranks, ways_rank, (void *)g_case->coll, 60000), 0);
  }
  unsetenv("GANG_ALGO");
}

/* The selection table and the handlers (src/algo/run.c) name the same
 * pairs: a rule without a handler would fail when chosen, a handler
 * without a rule could never run. The hierarchical path is no handler: it
 * runs the others (pg_hier.c). A pair without a handler fails, naming it,
 * and runs nothing else. */
static void test_table_and_handlers_agree(void **state) {
  (void)state;
  int pairs = 0;
  for (int c = 0; c < ALGO_COLL_COUNT; c++)
    for (int a = 0; a < ALGO_COUNT; a++) {
      if (a == ALGO_AUTO || a == ALGO_HIER || a == ALGO_HIER_RAILS)
        continue;
      bool rule = gang__algo_in_table((algo_coll)c, (algo_id)a);
      bool handler = gang__algo_runs((algo_coll)c, (algo_id)a);
      if (rule != handler)
        fail_msg("%s / %s: %s", gang__algo_coll_name((algo_coll)c),
                 gang__algo_name((algo_id)a),
                 rule ? "in the table, no handler" : "a handler, no rule");
      pairs += rule;
    }
  assert_int_equal(pairs, 37);
  algo_call k = {0};
  assert_int_equal(gang__algo_run_tcp(NULL, ALGO_BARRIER, ALGO_TCP_RING, &k),
                   GANG_INTERNAL);
  assert_non_null(strstr(gang_last_error(), "barrier over TCP: no algorithm "
                                            "'ring'"));
  assert_int_equal(
      gang__algo_run_shm(NULL, ALGO_ALL_TO_ALL_V, ALGO_SHM_STAGED, &k),
      GANG_INTERNAL);
  assert_non_null(strstr(gang_last_error(), "all_to_all_v over shared memory"));
}

/* Ranks that disagree on GANG_ALGO fail at creation, naming both. */
static int disagree_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_ALGO", rank == 0 ? "all_reduce=ring" : "", 1);
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/algos-disagree%d", gt_store_port(),
           g_round);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 3000; /* rank 0 waits that long for the rank that left */
  gang_t *g = NULL;
  gang_status st = gang_create_with_store(&o, addr, rank, size, &g);
  if (rank == 0) {
    /* Rank 0 publishes; it may still fail when the other gives up. */
    gang_destroy(g);
    return 0;
  }
  RCHECK(st == GANG_INVALID_ARGUMENT && g == NULL);
  RCHECK(strstr(gang_last_error(), "GANG_ALGO differs") != NULL);
  RCHECK(strstr(gang_last_error(), "all_reduce=ring") != NULL);
  return 0;
}

static void test_ranks_must_agree(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(2, disagree_rank, NULL, 60000), 0);
}

/* A malformed GANG_ALGO is refused with the reason. */
static void test_bad_setting(void **state) {
  (void)state;
  const char *bad[] = {"all_reduce", "all_reduce=bogus", "bogus=ring",
                       "broadcast=ring", "barrier=single_copy"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("GANG_ALGO", bad[i], 1);
    gang_t *g = NULL;
    char addr[160];
    snprintf(addr, sizeof addr, "127.0.0.1:%d/algos-bad%zu", gt_store_port(),
             i);
    gang_status st = gang_create_with_store(NULL, addr, 0, 1, &g);
    assert_int_equal(st, GANG_INVALID_ARGUMENT);
    assert_null(g);
    assert_non_null(strstr(gang_last_error(), "GANG_ALGO"));
  }
  unsetenv("GANG_ALGO");
}

/* Case c forced at 4 to 7 ranks: a power of two, and every shape of the
 * ranks past one. */
static void run_forced_4_to_7(const forced *c, int timeout_ms) {
  g_case = c;
  setenv("GANG_ALGO", c->setting, 1);
  for (int size = 4; size <= 7; size++) {
    print_message("%s, %d ranks\n", c->setting, size);
    g_round++;
    assert_int_equal(gt_run_ranks(size, rank_main, NULL, timeout_ms), 0);
  }
  unsetenv("GANG_ALGO");
}

/* Bruck's steps for every shape of the last one: 4 (whole steps), 5, 6
 * and 7 ranks (a partial last step of 1, 2 and 3 blocks). */
static void test_bruck_sizes(void **state) {
  (void)state;
  static const forced bruck = {
      "all_gather=bruck", "all_gather", "bruck", {1, 333, 5000}, 0};
  run_forced_4_to_7(&bruck, 60000);
}

/* Recursive halving-doubling at 4 (a power of two), 5, 6 and 7 ranks (1,
 * 2 and 3 folded in), with counts that split unevenly and one over its 4
 * MiB piece. */
static void test_halving_doubling_sizes(void **state) {
  (void)state;
  static const forced hd = {"all_reduce=halving_doubling",
                            "all_reduce",
                            "halving_doubling",
                            {7, 5003, 1100003},
                            0};
  run_forced_4_to_7(&hd, 120000);
}

/* The scatter-allgather broadcast at 4 to 7 ranks: every shape of the
 * binomial scatter's last round, blocks that split unevenly (5003) and
 * fewer elements than blocks would need for all to be equal (7). */
static void test_scatter_allgather_sizes(void **state) {
  (void)state;
  static const forced sag = {"broadcast=scatter_allgather",
                             "broadcast",
                             "scatter_allgather",
                             {7, 5003, 300007},
                             0};
  run_forced_4_to_7(&sag, 60000);
}

/* Recursive halving's reduce_scatter at 4 (a power of two), 5, 6 and 7
 * ranks (1, 2 and 3 folded in: their blocks travel in their partners'
 * groups), with blocks of one element, uneven pieces and over 4 MiB of
 * input at 7 ranks (the fold moves in pieces). */
static void test_recursive_halving_sizes(void **state) {
  (void)state;
  static const forced rh = {"reduce_scatter=recursive_halving",
                            "reduce_scatter",
                            "recursive_halving",
                            {1, 5003, 160001},
                            0};
  run_forced_4_to_7(&rh, 120000);
}

/* Ranks whose link models differ take rank 0's: three ranks over TCP, rank
 * 0 with a 10 us link (a 512 KiB all_reduce goes round the ring), the
 * others with a 1 s one (they would choose recursive doubling). Every
 * rank must run the ring, and the result must be right. */
static int model_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_NET_LATENCY_US", rank == 0 ? "10" : "1000000", 1);
  gang_t *g = gt_join("algos-model", g_round, rank, size, 60000, 0);
  static const forced ring = {"", "all_reduce", "ring", {0, 0, 0}, 0};
  g_case = &ring;
  run_all_reduce(g, rank, size, 128 * 1024);
  gang_destroy(g);
  return 0;
}

static void test_rank_zero_model_holds(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(3, model_rank, NULL, 60000), 0);
}

/* Contests over TCP (tcp_timed.c): on loopback with the default link
 * model, all_gather of 64 KiB blocks prices Bruck within 2x of the ring
 * at 3 and 4 members, so the members time both and agree on the faster
 * whenever a choice is due; with a far faster link the ring runs first
 * and, missing its price, is timed against Bruck. Every call's result must be
 * right (members taking different algorithms would get wrong blocks or hang),
 * both algorithms must have run, and gang_last_algorithm names each. */
static int close_rank(int rank, int size, void *arg) {
  setenv("GANG_SHM_DISABLE", "1", 1);
  if (arg != NULL) { /* a link far faster than loopback: not close */
    setenv("GANG_NET_LATENCY_US", "1", 1);
    setenv("GANG_NET_BANDWIDTH", "1000000000000", 1);
  }
  gang_t *g = gt_join("algos-close", g_round, rank, size, 60000, 0);
  static const forced any = {"", "all_gather", NULL, {0, 0, 0}, 0};
  g_case = &any;
  uint64_t before[2] = {atomic_load(&gang__tcp_timed_taken[0]),
                        atomic_load(&gang__tcp_timed_taken[1])};
  bool ring = false, bruck = false;
  for (int it = 0; it < 30; it++) {
    run_all_gather(g, rank, size, 16384 + (size_t)(it % 3));
    ring |= strcmp(gang_last_algorithm(g), "ring") == 0;
    bruck |= strcmp(gang_last_algorithm(g), "bruck") == 0;
    run_reduce_scatter(g, rank, size, 20000);
    run_all_reduce(g, rank, size, 70001);
  }
  RCHECK(atomic_load(&gang__tcp_timed_taken[0]) > before[0]);
  RCHECK(atomic_load(&gang__tcp_timed_taken[1]) > before[1]);
  RCHECK(ring && bruck);
  gang_destroy(g);
  unsetenv("GANG_NET_LATENCY_US");
  unsetenv("GANG_NET_BANDWIDTH");
  return 0;
}

/* The two paths' contest (pg_exec.c): 2 hosts of 2 ranks here
 * (GANG_HOST_ID), where the default link model prices the two-level
 * all_gather of 64 KiB blocks within 2x of flat TCP, a close call: both
 * paths run, agreed on by every member, with every result right (by
 * hand: run_all_gather's check refuses the two-level path). */
static int paths_rank(int rank, int size, void *arg) {
  (void)arg;
  char host[16];
  snprintf(host, sizeof host, "h%d", rank / 2);
  setenv("GANG_HOST_ID", host, 1);
  gang_t *g = gt_join("algos-paths", g_round, rank, size, 60000, 0);
  static const forced any = {"", "all_gather", NULL, {0, 0, 0}, 0};
  g_case = &any;
  uint64_t before[2] = {atomic_load(&gang__paths_timed_taken[0]),
                        atomic_load(&gang__paths_timed_taken[1])};
  bool two = false, flat = false;
  for (int it = 0; it < 30; it++) {
    float *in = malloc(16384 * sizeof *in),
          *out = malloc(16384 * (size_t)size * sizeof *out);
    for (size_t i = 0; i < 16384; i++)
      in[i] = val(rank, i);
    RCHECK_OK(gang_all_gather(g, out, in, 16384, GANG_FLOAT32));
    for (int q = 0; q < size; q++)
      for (size_t i = 0; i < 16384; i++)
        RCHECK(out[(size_t)q * 16384 + i] == val(q, i));
    bool hier = strcmp(gang_last_algorithm(g), "hierarchical") == 0;
    two |= hier;
    flat |= !hier;
    free(in);
    free(out);
  }
  RCHECK(atomic_load(&gang__paths_timed_taken[0]) > before[0]);
  RCHECK(atomic_load(&gang__paths_timed_taken[1]) > before[1]);
  RCHECK(two && flat);
  gang_destroy(g);
  unsetenv("GANG_HOST_ID");
  return 0;
}

/* Broadcast across hosts (algo_facts.spread): 4 ranks, each its own
 * host by GANG_HOST_ID, with the default link model set (10 us, 1.07
 * GB/s). At 4 KiB the tree's 2 alphas win; at 1 MiB scatter-allgather's
 * 1.5 n beta prices below the tree's 2 n beta, within 2x of it, so the
 * members time both. On one host (arg NULL, shared memory off) the same
 * model never takes scatter-allgather. Every result must be right from
 * either root. */
static int spread_rank(int rank, int size, void *arg) {
  char host[16];
  snprintf(host, sizeof host, "h%d", rank);
  if (arg != NULL)
    setenv("GANG_HOST_ID", host, 1);
  else
    setenv("GANG_SHM_DISABLE", "1", 1);
  setenv("GANG_NET_LATENCY_US", "10", 1);
  setenv("GANG_NET_BANDWIDTH", "1073741824", 1);
  gang_t *g = gt_join("algos-spread", g_round, rank, size, 60000, 0);
  static const forced any = {"", "broadcast", NULL, {0, 0, 0}, 0};
  g_case = &any;
  bool tree = false, sag = false;
  for (int it = 0; it < 16; it++) {
    run_broadcast(g, rank, size, 1024);
    RCHECK(strcmp(gang_last_algorithm(g), "binomial") == 0);
    run_broadcast(g, rank, size, (size_t)1 << 18);
    tree |= strcmp(gang_last_algorithm(g), "binomial") == 0;
    sag |= strcmp(gang_last_algorithm(g), "scatter_allgather") == 0;
  }
  RCHECK(tree);
  RCHECK(sag == (arg != NULL));
  gang_destroy(g);
  unsetenv("GANG_HOST_ID");
  unsetenv("GANG_SHM_DISABLE");
  unsetenv("GANG_NET_LATENCY_US");
  unsetenv("GANG_NET_BANDWIDTH");
  return 0;
}

static void test_broadcast_across_hosts(void **state) {
  (void)state;
  g_round++;
  assert_int_equal(gt_run_ranks(4, spread_rank, "hosts", 120000), 0);
  g_round++;
  assert_int_equal(gt_run_ranks(4, spread_rank, NULL, 120000), 0);
}

static void test_close_calls_take_both(void **state) {
  (void)state;
  for (int ranks = 3; ranks <= 4; ranks++) {
    g_round++;
    assert_int_equal(gt_run_ranks(ranks, close_rank, NULL, 120000), 0);
  }
  /* With 1 us and 1 TB/s the model prices the ring at a few us and Bruck
   * 8x that: no close call, but the ring takes far more than twice its
   * price over loopback, so the two are timed after its trial calls. */
  g_round++;
  assert_int_equal(gt_run_ranks(4, close_rank, "fast", 120000), 0);
  g_round++;
  assert_int_equal(gt_run_ranks(4, paths_rank, NULL, 120000), 0);
}

/* all_gather and reduce_scatter over hosts (GANG_HOST_ID makes them here)
 * in two levels where each host holds a block of consecutive ranks -- 2
 * hosts of 2, 3 of 2, 2 of 3 -- and flat over TCP where they do not (even
 * and odd ranks): results checked (all_gather also in place and with the
 * input in another member's slot), and the path by name. */
typedef struct layout {
  int size, per; /* ranks, ranks per host */
  bool strided;  /* host = rank % hosts instead of rank / per */
  const char *want;
} layout;

static int layout_rank(int rank, int size, void *arg) {
  const layout *l = arg;
  char host[16];
  int hosts = size / l->per;
  snprintf(host, sizeof host, "h%d", l->strided ? rank % hosts : rank / l->per);
  setenv("GANG_HOST_ID", host, 1);
  /* A network's link between the hosts (the probe would measure
   * loopback, as fast as shared memory's copies, where the link model
   * rightly goes flat at large blocks). */
  setenv("GANG_NET_LATENCY_US", "50", 1);
  setenv("GANG_NET_BANDWIDTH", "100m", 1);
  gang_t *g = gt_join("algos-layout", g_round, rank, size, 60000, 0);
  forced want = {"", "", l->want, {0, 0, 0}, 0};
  g_case = &want;
  static const size_t counts[] = {1, 100, 5000, 70001};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    run_all_gather(g, rank, size, counts[i]);
    run_reduce_scatter(g, rank, size, counts[i]);
  }
  gang_destroy(g);
  unsetenv("GANG_HOST_ID");
  unsetenv("GANG_NET_LATENCY_US");
  unsetenv("GANG_NET_BANDWIDTH");
  return 0;
}

static void test_gather_scatter_over_hosts(void **state) {
  (void)state;
  static const layout layouts[] = {
      {4, 2, false, "hierarchical"},
      {6, 2, false, "hierarchical"},
      {6, 3, false, "hierarchical"},
      {4, 2, true, NULL}, /* flat: the table's TCP choice */
  };
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    layout l = layouts[i];
    print_message("%d ranks, %d per host%s\n", l.size, l.per,
                  l.strided ? ", strided" : "");
    g_round++;
    assert_int_equal(gt_run_ranks(l.size, layout_rank, &l, 120000), 0);
  }
}

/* Oversubscription counts the CPUs the host's ranks may run on together:
 * ranks pinned to one CPU each (as taskset or a launcher's binding does)
 * have one apiece and are not oversubscribed; two ranks pinned to the same
 * CPU are. The barrier shows which: flagged with a CPU per member, step
 * lines when oversubscribed. */
static int pinned_rank(int rank, int size, void *arg) {
  const int *cpu_of = arg;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu_of[rank], &one);
  RCHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  gang_t *g = gt_join("algos-pinned", g_round, rank, size, 60000, 0);
  RCHECK_OK(gang_barrier(g));
  const char *want = cpu_of[0] == cpu_of[1] ? "lines" : "flagged";
  RCHECK(gt_ran(g, want, "pinned ranks' barrier"));
  gang_destroy(g);
  return 0;
}

static void test_pinned_ranks(void **state) {
  (void)state;
  cpu_set_t mine;
  assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpus[2], n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &mine))
      cpus[n++] = c;
  if (n < 2) {
    print_message("one CPU: pinning cannot be told from oversubscription\n");
    skip();
  }
  int apart[2] = {cpus[0], cpus[1]}, together[2] = {cpus[0], cpus[0]};
  g_round++;
  assert_int_equal(gt_run_ranks(2, pinned_rank, apart, 60000), 0);
  g_round++;
  assert_int_equal(gt_run_ranks(2, pinned_rank, together, 60000), 0);
}

int main(void) {
  setenv("GANG_SHM_CMA", "1", 1);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_table_and_handlers_agree),
      GT_TEST(test_bad_setting),
      GT_TEST(test_ranks_must_agree),
      GT_TEST(test_pinned_ranks),
      GT_TEST(test_every_algorithm),
      GT_TEST(test_measured_ways_take_both),
      GT_TEST(test_bruck_sizes),
      GT_TEST(test_halving_doubling_sizes),
      GT_TEST(test_scatter_allgather_sizes),
      GT_TEST(test_broadcast_across_hosts),
      GT_TEST(test_recursive_halving_sizes),
      GT_TEST(test_rank_zero_model_holds),
      GT_TEST(test_close_calls_take_both),
      GT_TEST(test_gather_scatter_over_hosts),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
