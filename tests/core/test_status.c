/* Status codes: every code has a distinct name and message; the detail text
 * is per thread and says what the reporter wrote. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "harness/harness.h"

#include "core/error.h"
#include "gang/status.h"
#include "gang/types.h"
#include "gang/version.h"

static void test_every_code_named(void **state) {
  (void)state;
  const gang_status all[] = {
#define X(name, value, msg) GANG_##name,
      GANG_STATUS_LIST(X)
#undef X
  };
  size_t n = sizeof all / sizeof all[0];
  assert_true(n >= 16);
  for (size_t i = 0; i < n; i++) {
    assert_string_not_equal(gang_strerror(all[i]), "unknown status");
    assert_string_not_equal(gang_status_name(all[i]), "UNKNOWN");
    for (size_t j = 0; j < i; j++) {
      assert_int_not_equal(all[i], all[j]);
      assert_string_not_equal(gang_strerror(all[i]), gang_strerror(all[j]));
    }
  }
  assert_int_equal(GANG_OK, 0);
  assert_string_equal(gang_status_name(GANG_PEER_LOST), "PEER_LOST");
  assert_string_equal(gang_status_name(GANG_PEER_LEFT), "PEER_LEFT");
  assert_string_equal(gang_strerror((gang_status)999), "unknown status");
  assert_string_equal(gang_status_name((gang_status)-1), "UNKNOWN");
}

static void test_detail_text(void **state) {
  (void)state;
  gang_clear_error();
  assert_string_equal(gang_last_error(), "");
  assert_int_equal(gang_last_status(), GANG_OK);
  assert_int_equal(gang__error(GANG_TIMEOUT, "get '%s' after %d ms", "k", 5),
                   GANG_TIMEOUT);
  assert_string_equal(gang_last_error(), "get 'k' after 5 ms");
  assert_int_equal(gang_last_status(), GANG_TIMEOUT);
  assert_int_equal(gang__error_wrap(GANG_TIMEOUT, "store %s", "x"),
                   GANG_TIMEOUT);
  assert_string_equal(gang_last_error(), "store x: get 'k' after 5 ms");
  gang__error_errno(GANG_SYSTEM, ECONNREFUSED, "connect to %s", "h:1");
  assert_non_null(strstr(gang_last_error(), "connect to h:1: "));
  assert_non_null(strstr(gang_last_error(), "(errno 111)"));
  /* Reporting the current detail as an argument must not corrupt it. */
  gang__error(GANG_INTERNAL, "again: %s", gang_last_error());
  assert_non_null(strstr(gang_last_error(), "again: connect to h:1"));
}

static void *other_thread(void *arg) {
  (void)arg;
  gang__error(GANG_AUTH, "thread detail");
  return NULL;
}

static void test_detail_is_per_thread(void **state) {
  (void)state;
  gang__error(GANG_ABORTED, "main detail");
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
  pthread_join(t, NULL);
  assert_string_equal(gang_last_error(), "main detail");
  assert_int_equal(gang_last_status(), GANG_ABORTED);
}

static void test_types_and_version(void **state) {
  (void)state;
  assert_int_equal(gang_dtype_size(GANG_FLOAT32), 4);
  assert_int_equal(gang_dtype_size(GANG_BFLOAT16), 2);
  assert_int_equal(gang_dtype_size(GANG_INT16), 2);
  assert_int_equal(gang_dtype_size(GANG_UINT64), 8);
  assert_int_equal(gang_dtype_size(GANG_BOOL), 1);
  assert_int_equal(gang_dtype_size((gang_dtype)77), 0);
  assert_string_equal(gang_dtype_name(GANG_FLOAT16), "float16");
  assert_string_equal(gang_dtype_name((gang_dtype)-3), "invalid");
  assert_int_equal(GANG_SUM, 1);
  assert_int_equal(GANG_MAX, 5);
  assert_string_equal(gang_reduce_op_name(GANG_MEAN), "mean");
  assert_string_equal(gang_reduce_op_name((gang_reduce_op)0), "invalid");
  assert_int_equal(gang_version(), GANG_VERSION_MAJOR * 10000 +
                                       GANG_VERSION_MINOR * 100 +
                                       GANG_VERSION_PATCH);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", GANG_VERSION_MAJOR,
           GANG_VERSION_MINOR, GANG_VERSION_PATCH);
  assert_string_equal(gang_version_string(), want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_every_code_named),
      GT_TEST(test_detail_text),
      GT_TEST(test_detail_is_per_thread),
      GT_TEST(test_types_and_version),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
