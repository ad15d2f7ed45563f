/* Slurm's hostlist grammar (SLURM_JOB_NODELIST: "node[01-04,07],gpu3") and
 * tasks-per-node lists (SLURM_TASKS_PER_NODE: "2(x3),1"), table-driven:
 * every form that expands, every malformed one with the reason given, and
 * the caps that keep a hostile list from exhausting memory. */
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"

#include "launch/hostlist.h"

typedef struct {
  const char *expr;
  const char *want; /* space-separated expansion */
} hl_ok;

static const hl_ok hl_ok_cases[] = {
    {"node1", "node1"},
    {"  node1  ", "node1"},
    {"a,b,c", "a b c"},
    {"node[01-04,07],gpu3", "node01 node02 node03 node04 node07 gpu3"},
    {"n[8-11]", "n8 n9 n10 n11"},
    {"n[08-11]", "n08 n09 n10 n11"},
    {"n[098-101]", "n098 n099 n100 n101"},
    {"a[1-2]b[3-4]", "a1b3 a1b4 a2b3 a2b4"},
    {"a[1,3]-ib,x[5]", "a1-ib a3-ib x5"},
    {"[1-3]", "1 2 3"},
    {"r[1-2]n[01-02].cluster", "r1n01.cluster r1n02.cluster r2n01.cluster "
                               "r2n02.cluster"},
    {"h[7]", "h7"},
    {"h[0-0]", "h0"},
    {"10.0.0.[1-3]", "10.0.0.1 10.0.0.2 10.0.0.3"},
};

static const char *hl_bad_cases[][2] = {
    {"", "empty host list"},
    {"   ", "empty host list"},
    {"a[1-2", "unbalanced '['"},
    {"a1-2]", "unbalanced ']'"},
    {"a[[1]]", "expected a number"},
    {"a[1[2]]", "nested '['"},
    {"a[2-1]", "reversed range 2-1"},
    {"a[]", "expected a number"},
    {"a[1,]", "expected a number"},
    {"a[x]", "expected a number"},
    {"a[1-]", "expected a number"},
    {"a[1-2-3]", "unexpected '-'"},
    {"a,,b", "empty host name"},
    {",a", "empty host name"},
    {"a,", "trailing ','"},
    {"a b", "invalid character"},
    {"a\tb", "invalid character"},
    {"n[0-999999999]", "more than 65536 hosts"},
    {"n[0-99999999999999999]", "more than 65536 hosts"},
    {"a[0-999]b[0-999]", "more than 65536 hosts"},
    {"n[0-1000],m[0-65000]", "more than 65536 hosts"},
    {"n[1234567890123456789]", "more than 18 digits"},
};

static char *join(const gang__hostlist *l) {
  size_t n = 1;
  for (size_t i = 0; i < l->n; i++)
    n += strlen(l->hosts[i]) + 1;
  char *s = calloc(1, n);
  for (size_t i = 0; i < l->n; i++) {
    if (i)
      strcat(s, " ");
    strcat(s, l->hosts[i]);
  }
  return s;
}

static void test_hostlist(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof hl_ok_cases / sizeof hl_ok_cases[0]; i++) {
    gang__hostlist l;
    gang_status st = gang__hostlist_expand("L", hl_ok_cases[i].expr, 0, &l);
    if (st != GANG_OK)
      fail_msg("'%s': %s", hl_ok_cases[i].expr, gang_last_error());
    char *s = join(&l);
    if (strcmp(s, hl_ok_cases[i].want) != 0)
      fail_msg("'%s' expanded to '%s', want '%s'", hl_ok_cases[i].expr, s,
               hl_ok_cases[i].want);
    char first[256];
    assert_gang_ok(
        gang__hostlist_first("L", hl_ok_cases[i].expr, first, sizeof first));
    assert_string_equal(first, l.hosts[0]);
    free(s);
    gang__hostlist_free(&l);
  }
  for (size_t i = 0; i < sizeof hl_bad_cases / sizeof hl_bad_cases[0]; i++) {
    gang__hostlist l = {777, NULL};
    gang_status st = gang__hostlist_expand("NODES", hl_bad_cases[i][0], 0, &l);
    if (st != GANG_INVALID_ARGUMENT)
      fail_msg("'%s': status %d, want INVALID_ARGUMENT", hl_bad_cases[i][0],
               st);
    if (strstr(gang_last_error(), hl_bad_cases[i][1]) == NULL ||
        strstr(gang_last_error(), "NODES") == NULL)
      fail_msg("'%s': detail '%s' lacks '%s'", hl_bad_cases[i][0],
               gang_last_error(), hl_bad_cases[i][1]);
    assert_int_equal(l.n, 777);
    char first[256];
    assert_int_equal(
        gang__hostlist_first("NODES", hl_bad_cases[i][0], first, sizeof first),
        GANG_INVALID_ARGUMENT);
  }
}

static void test_hostlist_limits(void **state) {
  (void)state;
  /* Exactly the cap is fine; the cap can be lowered. */
  gang__hostlist l;
  assert_gang_ok(gang__hostlist_expand("L", "n[1-65536]", 0, &l));
  assert_int_equal(l.n, 65536);
  assert_string_equal(l.hosts[65535], "n65536");
  gang__hostlist_free(&l);
  assert_int_equal(gang__hostlist_expand("L", "a,b,c", 2, &l),
                   GANG_INVALID_ARGUMENT);
  assert_int_equal(gang__hostlist_expand("L", NULL, 0, &l),
                   GANG_INVALID_ARGUMENT);
  /* Names are capped at 255 characters. */
  char name[300];
  memset(name, 'x', 255);
  name[255] = '\0';
  assert_gang_ok(gang__hostlist_expand("L", name, 0, &l));
  gang__hostlist_free(&l);
  strcpy(name + 254, "[1-99]");
  assert_int_equal(gang__hostlist_expand("L", name, 0, &l),
                   GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "longer than 255"));
  /* The first host must fit the caller's buffer. */
  char small[4];
  assert_int_equal(gang__hostlist_first("L", "abcd", small, sizeof small),
                   GANG_INVALID_ARGUMENT);
  assert_gang_ok(gang__hostlist_first("L", "abc", small, sizeof small));
}

static void test_tasks_per_node(void **state) {
  (void)state;
  struct {
    const char *text;
    int index, want;
  } ok[] = {{"4", 0, 4},       {"2(x3),1", 0, 2},
            {"2(x3),1", 2, 2}, {"2(x3),1", 3, 1},
            {"1,2,3", 1, 2},   {"5(x1000000),7", 1000000, 7}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int n = -1;
    assert_gang_ok(gang__tasks_per_node("T", ok[i].text, ok[i].index, &n));
    assert_int_equal(n, ok[i].want);
  }
  struct {
    const char *text;
    int index;
  } bad[] = {{"", 0},     {"x", 0},    {"2(x3),1", 4}, {"2(3)", 0},
             {"2(x3", 0}, {"0", 0},    {"2(x0)", 0},   {"1,,2", 1},
             {"1;2", 1},  {"2,3", -1}, {"2(x2)z", 0},  {"99999999999", 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int n = -1;
    if (gang__tasks_per_node("T", bad[i].text, bad[i].index, &n) !=
        GANG_INVALID_ARGUMENT)
      fail_msg("'%s' [%d] accepted", bad[i].text, bad[i].index);
    assert_int_equal(n, -1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_hostlist),
      GT_TEST(test_hostlist_limits),
      GT_TEST(test_tasks_per_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
