/* gang_mem_alloc: its arguments and what it gives back; collectives whose
 * buffers come from it on some ranks, none or all (the others' buffers
 * from malloc), for each shared-memory algorithm that reads a peer's
 * buffer (single copy, and the direct steps of staged all_gather and
 * reduce_scatter), on 2 and 3 ranks, with results checked element by
 * element and the mapped copies counted; and peers' mappings dropped once
 * the owner frees the segment. */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "transport/shm.h"

#define PRIME 1000003u

static int g_round;

static float val(int r, size_t i) {
  return (float)((i * 7919u + (size_t)r * 104729u) % PRIME % 4096);
}

static void test_alloc_args(void **state) {
  (void)state;
  int fds = gt_count_fds();
  void *p = (void *)1;
  assert_int_equal(gang_mem_alloc(0, &p), GANG_INVALID_ARGUMENT);
  assert_null(p);
  assert_non_null(strstr(gang_last_error(), "0 bytes"));
  assert_int_equal(gang_mem_alloc(16, NULL), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_mem_alloc((size_t)1 << 50, &p), GANG_INVALID_ARGUMENT);
  int x;
  assert_int_equal(gang_mem_free(&x), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "not a pointer gang_mem_alloc"));
  assert_int_equal(gang_mem_free(NULL), GANG_OK);
  void *a[3];
  size_t sizes[3] = {1, 4096, 3 * 1024 * 1024 + 5};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(gang_mem_alloc(sizes[k], &a[k]), GANG_OK);
    assert_int_equal((uintptr_t)a[k] % 4096, 0);
    unsigned char *b = a[k];
    for (size_t i = 0; i < sizes[k]; i += 4093)
      assert_int_equal(b[i], 0);
    memset(b, 0x5a, sizes[k]);
    /* Inside the segment, and the whole segment: one's own. */
    gang__mem_ref ref;
    assert_true(gang__shm_direct_mine(b, sizes[k], &ref));
    assert_true(gang__shm_direct_mine(b + sizes[k] - 1, 1, &ref));
  }
  assert_int_equal(gt_count_fds(), fds + 3);
  gang__mem_ref ref;
  assert_false(gang__shm_direct_mine(&x, sizeof x, &ref));
  /* A range running past its segment's end is not in it. */
  assert_false(gang__shm_direct_mine(a[1], 4096 * 2 + 1, &ref));
  for (int k = 2; k >= 0; k--)
    assert_int_equal(gang_mem_free(a[k]), GANG_OK);
  assert_int_equal(gang_mem_free(a[0]), GANG_INVALID_ARGUMENT); /* twice */
  assert_int_equal(gt_count_fds(), fds);
}

typedef struct mcase {
  const char *setting; /* GANG_ALGO */
  const char *coll;
  size_t n;       /* elements (per rank's block where there are blocks) */
  bool all_masks; /* also none and the last rank only registered */
} mcase;

/* Staged sizes that span several chunks of 2 and 3 ranks (1 MiB, 128 KiB)
 * and one that fits one. */
static const mcase cases[] = {
    {"all_gather=staged", "all_gather", 300001, true},
    {"all_gather=staged", "all_gather", 5000, false},
    {"all_gather=single_copy", "all_gather", 300001, false},
    {"reduce_scatter=staged", "reduce_scatter", 300001, true},
    {"reduce_scatter=staged", "reduce_scatter", 5000, false},
    {"reduce_scatter=single_copy", "reduce_scatter", 300001, false},
    {"reduce_scatter=staged_or_single_copy", "reduce_scatter", 300001, false},
    {"all_to_all=single_copy", "all_to_all", 300001, false},
    {"all_to_all=staged", "all_to_all", 300001, true},
    {"all_to_all=staged", "all_to_all", 5000, false},
    {"broadcast=single_copy", "broadcast", 300001, false},
    {"broadcast=two_ends", "broadcast", 300001, false},
    {"all_reduce=single_copy", "all_reduce", 600001, false},
    {"all_reduce=staged", "all_reduce", 600001, true},
    {"all_reduce=staged", "all_reduce", 5000, false},
    {"all_reduce=staged_or_single_copy", "all_reduce", 600001, false},
};

static const mcase *g_case;
static unsigned g_mask; /* bit r: rank r's buffers from gang_mem_alloc */

static void *buf(int rank, size_t bytes) {
  void *p = NULL;
  if (g_mask >> rank & 1u)
    RCHECK_OK(gang_mem_alloc(bytes, &p));
  else
    RCHECK((p = calloc(1, bytes)) != NULL);
  return p;
}

static void unbuf(int rank, void *p) {
  if (g_mask >> rank & 1u)
    RCHECK_OK(gang_mem_free(p));
  else
    free(p);
}

/* The ranks whose buffers (not staging buffers) this rank reads or, the
 * two_ends root, writes: a registered one among them is reached through
 * the mapping. Broadcasts here are from rank 0. */
static unsigned touches(int rank, int size) {
  unsigned all = ((1u << size) - 1) & ~(1u << rank);
  if (strcmp(g_case->setting, "broadcast=two_ends") == 0)
    return all;
  if (strcmp(g_case->coll, "broadcast") == 0)
    return rank == 0 ? 0u : 1u;
  return all;
}

static void run_case(gang_t *g, int rank, int size, float **keep) {
  size_t n = g_case->n, es = sizeof(float);
  const char *coll = g_case->coll;
  if (strcmp(coll, "all_gather") == 0) {
    /* Out of place, then in place (input in its own slot of out). */
    float *in = buf(rank, n * es), *out = buf(rank, (size_t)size * n * es);
    for (size_t i = 0; i < n; i++)
      in[i] = val(rank, i);
    RCHECK_OK(gang_all_gather(g, out, in, n, GANG_FLOAT32));
    for (int q = 0; q < size; q++)
      for (size_t i = 0; i < n; i++)
        RCHECK(out[(size_t)q * n + i] == val(q, i));
    memset(out, 0, (size_t)size * n * es);
    for (size_t i = 0; i < n; i++)
      out[(size_t)rank * n + i] = val(rank, i);
    RCHECK_OK(gang_all_gather(g, out, out + (size_t)rank * n, n, GANG_FLOAT32));
    for (int q = 0; q < size; q++)
      for (size_t i = 0; i < n; i++)
        RCHECK(out[(size_t)q * n + i] == val(q, i));
    unbuf(rank, in);
    *keep = out;
  } else if (strcmp(coll, "reduce_scatter") == 0) {
    size_t total = (size_t)size * n;
    float *in = buf(rank, total * es), *out = buf(rank, n * es);
    for (int pass = 0; pass < 2; pass++) { /* out of place, in place */
      for (size_t i = 0; i < total; i++)
        in[i] = val(rank, i);
      float *o = pass == 0 ? out : in + (size_t)rank * n;
      RCHECK_OK(gang_reduce_scatter(g, o, in, n, GANG_FLOAT32, GANG_SUM));
      for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < size; q++)
          want += val(q, (size_t)rank * n + i);
        RCHECK(o[i] == want);
      }
    }
    unbuf(rank, out);
    *keep = in;
  } else if (strcmp(coll, "all_to_all") == 0) {
    size_t total = (size_t)size * n;
    float *in = buf(rank, total * es), *out = buf(rank, total * es);
    for (size_t i = 0; i < total; i++)
      in[i] = val(rank, i);
    RCHECK_OK(gang_all_to_all(g, out, in, n, GANG_FLOAT32));
    for (int q = 0; q < size; q++)
      for (size_t i = 0; i < n; i++)
        RCHECK(out[(size_t)q * n + i] == val(q, (size_t)rank * n + i));
    unbuf(rank, out);
    *keep = in;
  } else if (strcmp(coll, "broadcast") == 0) {
    float *b = buf(rank, n * es);
    for (size_t i = 0; i < n; i++)
      b[i] = rank == 0 ? val(0, i) : -1.0f;
    RCHECK_OK(gang_broadcast(g, b, n, GANG_FLOAT32, 0));
    for (size_t i = 0; i < n; i++)
      RCHECK(b[i] == val(0, i));
    *keep = b;
  } else {
    float *b = buf(rank, n * es);
    for (size_t i = 0; i < n; i++)
      b[i] = val(rank, i);
    RCHECK_OK(gang_all_reduce(g, b, n, GANG_FLOAT32, GANG_SUM));
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int q = 0; q < size; q++)
        want += val(q, i);
      RCHECK(b[i] == want);
    }
    *keep = b;
  }
}

static int rank_main(int rank, int size, void *arg) {
  (void)arg;
  gang_t *g = gt_join("mem", g_round, rank, size, 60000, 0);
  uint64_t before = atomic_load(&gang__mem_copies);
  uint64_t ways = atomic_load(&gang__shm_way_taken[0]) +
                  atomic_load(&gang__shm_way_taken[1]);
  float *keep = NULL;
  run_case(g, rank, size, &keep);
  /* Every member's buffer registered: the measured entry goes direct
   * without a measure; otherwise it measures, taking one way or the
   * other. */
  if (strstr(g_case->setting, "staged_or_single_copy") != NULL)
    RCHECK((atomic_load(&gang__shm_way_taken[0]) +
                atomic_load(&gang__shm_way_taken[1]) ==
            ways) == (g_mask == (1u << size) - 1));
  RCHECK(strcmp(gang_last_algorithm(g), strchr(g_case->setting, '=') + 1) == 0);
  bool mapped = atomic_load(&gang__mem_copies) > before;
  /* A registered peer this rank reads is read mapped; none, never. */
  RCHECK(mapped == ((g_mask & touches(rank, size)) != 0));
  if (mapped)
    RCHECK(gang__mem_peer_mapped() > 0);
  /* Every owner frees its segments (after everyone's last read: the
   * barrier), then every reader's mappings go at its next look. */
  RCHECK_OK(gang_barrier(g));
  unbuf(rank, keep);
  RCHECK_OK(gang_barrier(g));
  RCHECK(gang__mem_peer_mapped() == 0);
  gang_destroy(g);
  return 0;
}

static void test_collectives(void **state) {
  (void)state;
  /* rank 0 only and all; for the staged cases also none and the last
   * rank only */
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    g_case = &cases[c];
    setenv("GANG_ALGO", g_case->setting, 1);
    for (int size = 2; size <= 3; size++) {
      if (strcmp(g_case->setting, "broadcast=two_ends") == 0 && size != 2)
        continue;
      unsigned masks[4] = {1u, (1u << size) - 1, 0u, 1u << (size - 1)};
      for (int m = 0; m < (g_case->all_masks ? 4 : 2); m++) {
        g_mask = masks[m];
        print_message("%s, %zu elements, %d ranks, mask %x\n", g_case->setting,
                      g_case->n, size, g_mask);
        g_round++;
        assert_int_equal(gt_run_ranks(size, rank_main, NULL, 60000), 0);
      }
    }
  }
  unsetenv("GANG_ALGO");
}

int main(void) {
  /* Single copy with more ranks than CPUs too (2-core machines). */
  setenv("GANG_SHM_CMA", "1", 1);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_alloc_args),
      GT_TEST(test_collectives),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
