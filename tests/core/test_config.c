/* Settings: the unit parsers accept what the docs promise and reject
 * garbage naming the variable; the public listing covers the table. */
#include <string.h>

#include "harness/harness.h"

#include "core/config.h"
#include "gang/config.h"

static void test_parse_size(void **state) {
  (void)state;
  struct {
    const char *text;
    int64_t want;
  } ok[] = {{"0", 0},          {"8", 8},          {"8k", 8192},
            {"8K", 8192},      {"8kB", 8192},     {"8KiB", 8192},
            {"1M", 1 << 20},   {"2g", 2LL << 30}, {" 3 m", 3 << 20},
            {"1t", 1LL << 40}, {"17b", 17}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int64_t v = -1;
    assert_gang_ok(gang__parse_size("X", ok[i].text, &v));
    assert_int_equal(v, ok[i].want);
  }
  const char *bad[] = {"",           "k",   "8q", "8kk",
                       "-1",         "1.5", "0x", "99999999999999999999",
                       "9999999999T"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = -1;
    assert_int_equal(gang__parse_size("GANG_X", bad[i], &v),
                     GANG_INVALID_ARGUMENT);
    assert_non_null(strstr(gang_last_error(), "GANG_X"));
    assert_int_equal(v, -1);
  }
}

static void test_parse_duration(void **state) {
  (void)state;
  struct {
    const char *text;
    int64_t want;
  } ok[] = {{"30", 30000},   {"30s", 30000},   {"100ms", 100},
            {"15m", 900000}, {"2h", 7200000},  {"5min", 300000},
            {"0", 0},        {"10 sec", 10000}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int64_t v = -1;
    assert_gang_ok(gang__parse_duration_ms("X", ok[i].text, &v));
    assert_int_equal(v, ok[i].want);
  }
  const char *bad[] = {"", "s", "10x", "-5s", "1.5s", "10 s s"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = -1;
    assert_int_equal(gang__parse_duration_ms("GANG_T", bad[i], &v),
                     GANG_INVALID_ARGUMENT);
    assert_non_null(strstr(gang_last_error(), "GANG_T"));
  }
}

static void test_parse_int_bool(void **state) {
  (void)state;
  int64_t v;
  assert_gang_ok(gang__parse_int("X", "-42", &v));
  assert_int_equal(v, -42);
  assert_int_equal(gang__parse_int("X", "4x", &v), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang__parse_int("X", NULL, &v), GANG_INVALID_ARGUMENT);
  bool b = false;
  assert_gang_ok(gang__parse_bool("X", "Yes", &b));
  assert_true(b);
  assert_gang_ok(gang__parse_bool("X", "off", &b));
  assert_false(b);
  assert_int_equal(gang__parse_bool("GANG_B", "maybe", &b),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "GANG_B"));
}

static void test_settings_from_env(void **state) {
  (void)state;
  int64_t v;
  unsetenv("GANG_TIMEOUT");
  assert_gang_ok(gang__setting_int(GANG_SETTING_TIMEOUT, &v));
  assert_int_equal(v, 15 * 60 * 1000);
  setenv("GANG_TIMEOUT", "30s", 1);
  assert_gang_ok(gang__setting_int(GANG_SETTING_TIMEOUT, &v));
  assert_int_equal(v, 30000);
  setenv("GANG_TIMEOUT", "soon", 1);
  assert_int_equal(gang__setting_int(GANG_SETTING_TIMEOUT, &v),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "GANG_TIMEOUT"));
  assert_non_null(strstr(gang_last_error(), "soon"));

  int found = 0;
  for (int i = 0; i < gang_setting_count(); i++) {
    gang_setting_info info;
    assert_gang_ok(gang_setting_describe(i, &info));
    assert_non_null(info.doc);
    assert_true(strncmp(info.name, "GANG_", 5) == 0);
    if (strcmp(info.name, "GANG_TIMEOUT") == 0) {
      found = 1;
      assert_string_equal(info.env_value, "soon");
      assert_int_equal(info.parse_status, GANG_INVALID_ARGUMENT);
    }
  }
  assert_true(found);
  unsetenv("GANG_TIMEOUT");
  gang_setting_info info;
  assert_int_equal(gang_setting_describe(-1, &info), GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_setting_describe(gang_setting_count(), &info),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang_setting_describe(0, NULL), GANG_INVALID_ARGUMENT);
}

static void test_gang_info_tool(void **state) {
  (void)state;
  char *path = gt_tool_path("gang-info");
  char *argv[] = {path, NULL};
  char *out = NULL;
  int st = gt_run_cmd(argv, NULL, &out, 10000);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "GANG_TIMEOUT"));
  assert_non_null(strstr(out, "900000 ms"));
  free(out);
  char *env[] = {"GANG_TIMEOUT=never", NULL};
  st = gt_run_cmd(argv, env, &out, 10000);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  assert_non_null(strstr(out, "'never' is not a duration (e.g. 10s"));
  free(out);
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_parse_size),     GT_TEST(test_parse_duration),
      GT_TEST(test_parse_int_bool), GT_TEST(test_settings_from_env),
      GT_TEST(test_gang_info_tool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
