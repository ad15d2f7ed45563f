/* The fake gang against its documented model: every simulated rank holds
 * the same data as this one (fairseq2's FakeGang, where fairseq2 raises for
 * MEAN/MIN/MAX and foreign broadcast sources we compute the defined
 * result). Also covers the generic layer: argument checks, sticky errors,
 * abort, work handles, sub-gangs and variable-size payloads. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"

static const gang_device cpu = {GANG_DEVICE_CPU, 0};

static void test_create_validation(void **state) {
  (void)state;
  gang_t *g = NULL;
  assert_int_equal(gang_create_fake(cpu, 0, 0, &g), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "size"));
  assert_int_equal(gang_create_fake(cpu, 4, 4, &g), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "rank"));
  assert_int_equal(gang_create_fake(cpu, -1, 4, &g), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_create_fake(cpu, 0, 1, NULL), GANG_INVALID_ARGUMENT);
  assert_null(g);
  assert_gang_ok(gang_create_fake(cpu, 2, 5, &g));
  assert_int_equal(gang_rank(g), 2);
  assert_int_equal(gang_size(g), 5);
  assert_int_equal(gang_get_device(g).type, GANG_DEVICE_CPU);
  assert_string_equal(gang_get_last_error(g), "");
  /* A fake gang chooses no algorithm, before or after a call. */
  assert_null(gang_last_algorithm(g));
  float x = 1;
  assert_gang_ok(gang_all_reduce(g, &x, 1, GANG_FLOAT32, GANG_SUM));
  assert_null(gang_last_algorithm(g));
  assert_null(gang_last_algorithm(NULL));
  gang_destroy(g);
  gang_destroy(NULL);
}

static void test_all_reduce_int(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 1, 3, &g));
  int32_t v[7] = {1, -2, 3, 4, 0, 100000, -7};
  int32_t w[7];
  memcpy(w, v, sizeof v);
  assert_gang_ok(gang_all_reduce(g, w, 7, GANG_INT32, GANG_SUM));
  for (int i = 0; i < 7; i++)
    assert_int_equal(w[i], v[i] * 3);
  memcpy(w, v, sizeof v);
  assert_gang_ok(gang_all_reduce(g, w, 7, GANG_INT32, GANG_PRODUCT));
  for (int i = 0; i < 7; i++)
    assert_int_equal(
        w[i], (int32_t)((uint32_t)v[i] * (uint32_t)v[i] * (uint32_t)v[i]));
  gang_reduce_op same[] = {GANG_MEAN, GANG_MIN, GANG_MAX};
  for (int k = 0; k < 3; k++) {
    memcpy(w, v, sizeof v);
    assert_gang_ok(gang_all_reduce(g, w, 7, GANG_INT32, same[k]));
    assert_memory_equal(w, v, sizeof v);
  }
  gang_destroy(g);
}

static void test_all_reduce_float_and_sizes(void **state) {
  (void)state;
  /* x * size for several sizes, including non-powers of two, and x^size. */
  int sizes[] = {1, 2, 3, 5, 8, 13};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    gang_t *g;
    assert_gang_ok(gang_create_fake(cpu, 0, sizes[s], &g));
    double d[5] = {0.5, -1.25, 3.0, 1e-3, 2.0};
    double e[5];
    memcpy(e, d, sizeof d);
    assert_gang_ok(gang_all_reduce(g, e, 5, GANG_FLOAT64, GANG_SUM));
    for (int i = 0; i < 5; i++)
      assert_true(fabs(e[i] - d[i] * sizes[s]) <=
                  1e-12 * fabs(d[i] * sizes[s]));
    memcpy(e, d, sizeof d);
    assert_gang_ok(gang_all_reduce(g, e, 5, GANG_FLOAT64, GANG_PRODUCT));
    for (int i = 0; i < 5; i++) {
      double want = pow(d[i], sizes[s]);
      assert_true(fabs(e[i] - want) <= 1e-12 * fabs(want));
    }
    /* float16 1.5 * size stays exact for these sizes. */
    uint16_t h = 0x3e00; /* 1.5 */
    assert_gang_ok(gang_all_reduce(g, &h, 1, GANG_FLOAT16, GANG_SUM));
    float want = 1.5f * (float)sizes[s];
    /* decode the half: sign 0, exponent and mantissa */
    int exp = (h >> 10) & 0x1f;
    float got = ldexpf(1.0f + (float)(h & 0x3ff) / 1024.0f, exp - 15);
    assert_true(got == want);
    /* bool SUM is a logical or of equal values: unchanged. */
    uint8_t b[2] = {0, 1};
    assert_gang_ok(gang_all_reduce(g, b, 2, GANG_BOOL, GANG_SUM));
    assert_int_equal(b[0], 0);
    assert_int_equal(b[1], 1);
    gang_destroy(g);
  }
}

static void test_gather_scatter_broadcast(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 2, 4, &g));
  int64_t in[3] = {7, 8, 9};
  int64_t out[12];
  memset(out, 0xff, sizeof out);
  assert_gang_ok(gang_all_gather(g, out, in, 3, GANG_INT64));
  for (int r = 0; r < 4; r++)
    assert_memory_equal(out + 3 * r, in, sizeof in);
  /* In place: the input is the own slot of the output. */
  int64_t inplace[12] = {0};
  memcpy(inplace + 6, in, sizeof in);
  assert_gang_ok(gang_all_gather(g, inplace, inplace + 6, 3, GANG_INT64));
  for (int r = 0; r < 4; r++)
    assert_memory_equal(inplace + 3 * r, in, sizeof in);

  int64_t l0[3], l1[3], l2[3], l3[3];
  void *outs[4] = {l0, l1, l2, l3};
  assert_gang_ok(gang_all_gather_to_list(g, outs, in, 3, GANG_INT64));
  for (int r = 0; r < 4; r++)
    assert_memory_equal(outs[r], in, sizeof in);

  /* reduce_scatter: this rank's block (index 2) summed over 4 copies. */
  int32_t rs_in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int32_t rs_out[2];
  assert_gang_ok(
      gang_reduce_scatter(g, rs_out, rs_in, 2, GANG_INT32, GANG_SUM));
  assert_int_equal(rs_out[0], 5 * 4);
  assert_int_equal(rs_out[1], 6 * 4);

  /* all_to_all: every peer sends us its block 2, equal to ours. */
  int32_t a_out[8];
  assert_gang_ok(gang_all_to_all(g, a_out, rs_in, 2, GANG_INT32));
  for (int r = 0; r < 4; r++) {
    assert_int_equal(a_out[2 * r], 5);
    assert_int_equal(a_out[2 * r + 1], 6);
  }

  /* all_to_all_v: every peer sends us its block number 2 (in_counts[2]
   * elements, all ranks holding our data). */
  int32_t v_in[6] = {1, 2, 3, 4, 5, 6};
  size_t in_counts[4] = {1, 2, 2, 1}, out_counts[4] = {2, 2, 2, 2};
  int32_t v_out[8];
  assert_gang_ok(
      gang_all_to_all_v(g, v_out, out_counts, v_in, in_counts, GANG_INT32));
  for (int r = 0; r < 4; r++) {
    assert_int_equal(v_out[2 * r], 4);
    assert_int_equal(v_out[2 * r + 1], 5);
  }
  out_counts[1] = 3;
  assert_int_equal(
      gang_all_to_all_v(g, v_out, out_counts, v_in, in_counts, GANG_INT32),
      GANG_MISMATCH);
  assert_non_null(strstr(gang_last_error(), "out_counts[1] is 3"));
  float f[2] = {1.5f, -2.0f};
  assert_gang_ok(gang_broadcast(g, f, 2, GANG_FLOAT32, 0));
  assert_gang_ok(gang_broadcast(g, f, 2, GANG_FLOAT32, 2));
  assert_true(f[0] == 1.5f && f[1] == -2.0f);
  assert_gang_ok(gang_barrier(g));
  /* Count 0 is valid with NULL buffers. */
  assert_gang_ok(gang_all_reduce(g, NULL, 0, GANG_FLOAT32, GANG_SUM));
  assert_gang_ok(gang_all_gather(g, NULL, NULL, 0, GANG_FLOAT32));
  gang_destroy(g);
}

static void test_argument_errors(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 0, 2, &g));
  float f[4] = {0};
  assert_int_equal(gang_all_reduce(g, NULL, 4, GANG_FLOAT32, GANG_SUM),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "buf is NULL"));
  assert_int_equal(gang_all_reduce(g, f, 4, (gang_dtype)99, GANG_SUM),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "dtype"));
  assert_int_equal(gang_all_reduce(g, f, 4, GANG_FLOAT32, (gang_reduce_op)9),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_broadcast(g, f, 4, GANG_FLOAT32, 2),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "source_rank 2"));
  assert_int_equal(gang_all_to_all(g, f, f, 2, GANG_FLOAT32),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_all_gather(g, f, f, SIZE_MAX / 2, GANG_FLOAT32),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "overflows"));
  /* Bytes per rank that fit, times the 2 ranks that do not. */
  assert_int_equal(gang_all_gather(g, f, f, SIZE_MAX / 8 + 1, GANG_FLOAT32),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "overflows"));
  assert_int_equal(
      gang_all_reduce(g, f, SIZE_MAX / 4 + 1, GANG_FLOAT32, GANG_SUM),
      GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "overflows"));
  assert_int_equal(
      gang_reduce_scatter(g, f, f, SIZE_MAX / 8 + 1, GANG_FLOAT32, GANG_SUM),
      GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "overflows"));
  assert_int_equal(gang_send(g, f, 4, 0, 0), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "this rank"));
  assert_int_equal(gang_send(g, f, 4, 1, -1), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_barrier(NULL), GANG_INVALID_ARGUMENT);
  /* Argument errors do not break the gang. */
  assert_string_equal(gang_get_last_error(g), "");
  assert_gang_ok(gang_all_reduce(g, f, 4, GANG_FLOAT32, GANG_SUM));
  /* Point-to-point is not supported on a fake gang, and does not break it. */
  assert_int_equal(gang_send(g, f, 4, 1, 0), GANG_NOT_SUPPORTED);
  assert_non_null(strstr(gang_last_error(), "fake gang"));
  assert_int_equal(gang_recv(g, f, 4, 1, 0), GANG_NOT_SUPPORTED);
  assert_gang_ok(gang_barrier(g));
  gang_destroy(g);
}

static void test_abort_is_sticky(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 0, 2, &g));
  gang_abort(g);
  float f = 1;
  assert_int_equal(gang_all_reduce(g, &f, 1, GANG_FLOAT32, GANG_SUM),
                   GANG_ABORTED);
  assert_non_null(strstr(gang_last_error(), "failed earlier"));
  assert_int_equal(gang_barrier(g), GANG_ABORTED);
  assert_true(f == 1);
  assert_non_null(strstr(gang_get_last_error(g), "gang_abort"));
  gang_work *w = NULL;
  assert_int_equal(gang_barrier_post(g, &w), GANG_ABORTED);
  assert_null(w);
  gang_destroy(g);
}

static void test_work_handles(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 0, 4, &g));
  uint64_t v[3] = {1, 2, 3};
  gang_work *w = NULL;
  assert_gang_ok(gang_all_reduce_post(g, v, 3, GANG_UINT64, GANG_SUM, &w));
  int done = 0;
  assert_gang_ok(gang_work_test(w, &done));
  assert_true(done);
  assert_gang_ok(gang_work_wait(w, 1000));
  assert_int_equal(v[2], 12);
  gang_work_free(w);
  gang_work *ws[4];
  uint8_t buf[16] = {0}, out[64];
  assert_gang_ok(gang_barrier_post(g, &ws[0]));
  assert_gang_ok(gang_broadcast_post(g, buf, 16, GANG_UINT8, 3, &ws[1]));
  assert_gang_ok(gang_all_gather_post(g, out, buf, 16, GANG_UINT8, &ws[2]));
  assert_gang_ok(gang_send_post(g, buf, 1, 1, 0, &ws[3]));
  for (int i = 0; i < 3; i++)
    assert_gang_ok(gang_work_wait(ws[i], -1));
  assert_int_equal(gang_work_wait(ws[3], -1), GANG_NOT_SUPPORTED);
  for (int i = 0; i < 4; i++)
    gang_work_free(ws[i]);
  gang_work_free(NULL);
  gang_destroy(g);
}

static void test_subgangs(void **state) {
  (void)state;
  gang_t *g, *sub = (gang_t *)0x1;
  assert_gang_ok(gang_create_fake(cpu, 3, 6, &g));
  int members[] = {5, 3, 1};
  assert_gang_ok(gang_create_subgang(g, members, 3, &sub));
  assert_non_null(sub);
  assert_int_equal(gang_rank(sub), 1); /* position in the list */
  assert_int_equal(gang_size(sub), 3);
  int others[] = {0, 1};
  gang_t *none = (gang_t *)0x1;
  assert_gang_ok(gang_create_subgang(g, others, 2, &none));
  assert_null(none);
  int dup[] = {1, 1};
  assert_int_equal(gang_create_subgang(g, dup, 2, &none),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "twice"));
  int edge[] = {6}; /* fairseq2 would accept rank == size */
  assert_int_equal(gang_create_subgang(g, edge, 1, &none),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "ranks[0] = 6"));
  /* Sub-gangs of fake gangs are fake and compute with their own size. */
  int32_t x = 2;
  assert_gang_ok(gang_all_reduce(sub, &x, 1, GANG_INT32, GANG_SUM));
  assert_int_equal(x, 6);
  gang_t *split = NULL;
  assert_gang_ok(gang_split(g, GANG_SPLIT_NOCOLOR, 0, &split));
  assert_null(split);
  assert_gang_ok(gang_split(g, 7, 0, &split));
  assert_non_null(split);
  assert_int_equal(gang_size(split), 6);
  assert_int_equal(gang_rank(split), 3);
  gang_destroy(split);
  split = NULL;
  assert_gang_ok(gang_split(g, INT32_MAX, 0, &split)); /* a valid colour */
  assert_non_null(split);
  assert_int_equal(gang_split(g, -5, 0, &split), GANG_INVALID_ARGUMENT);
  gang_destroy(split);
  gang_destroy(sub);
  gang_destroy(g);
}

static void test_bytes(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 1, 3, &g));
  void *data = "hello";
  size_t len = 5;
  assert_gang_ok(gang_broadcast_bytes(g, &data, &len, 1));
  assert_int_equal(len, 5);
  assert_string_equal((char *)data, "hello");
  void *none = NULL;
  size_t nlen = 0;
  assert_int_equal(gang_broadcast_bytes(g, &none, &nlen, 0),
                   GANG_NOT_SUPPORTED);
  void **outs = NULL;
  size_t *lens = NULL;
  assert_gang_ok(gang_all_gather_bytes(g, "abc", 3, &outs, &lens));
  for (int i = 0; i < 3; i++) {
    assert_int_equal(lens[i], 3);
    assert_memory_equal(outs[i], "abc", 3);
  }
  gang_bytes_free(g, outs, lens);
  assert_gang_ok(gang_all_gather_bytes(g, NULL, 0, &outs, &lens));
  for (int i = 0; i < 3; i++)
    assert_int_equal(lens[i], 0);
  gang_bytes_free(g, outs, lens);
  gang_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_create_validation),
      GT_TEST(test_all_reduce_int),
      GT_TEST(test_all_reduce_float_and_sizes),
      GT_TEST(test_gather_scatter_broadcast),
      GT_TEST(test_argument_errors),
      GT_TEST(test_abort_is_sticky),
      GT_TEST(test_work_handles),
      GT_TEST(test_subgangs),
      GT_TEST(test_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
