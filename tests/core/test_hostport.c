/* host:port parsing and formatting: every form the callers accept, the
 * reason given for each malformed one, and that formatting reads back. */
#include <string.h>

#include "harness/harness.h"

#include "core/hostport.h"

static void test_parse_ok(void **state) {
  (void)state;
  struct {
    const char *text;
    unsigned flags;
    const char *host;
    int port;
    const char *tail;
  } ok[] = {
      {"h:80", 0, "h", 80, ""},
      {"node-1.example.org:29500", 0, "node-1.example.org", 29500, ""},
      {"10.0.0.1:1", 0, "10.0.0.1", 1, ""},
      {"[::1]:65535", 0, "::1", 65535, ""},
      {"[fe80::1%eth0]:5", 0, "fe80::1%eth0", 5, ""},
      {"h:80", GANG__HOSTPORT_TAIL, "h", 80, ""},
      {"h:80/", GANG__HOSTPORT_TAIL, "h", 80, "/"},
      {"h:80/a/b", GANG__HOSTPORT_TAIL, "h", 80, "/a/b"},
      {"[::1]:80/p", GANG__HOSTPORT_TAIL, "::1", 80, "/p"},
      {"host", GANG__HOSTPORT_PORT_OPTIONAL, "host", -1, ""},
      {"[::1]", GANG__HOSTPORT_PORT_OPTIONAL, "::1", -1, ""},
      {"h:7", GANG__HOSTPORT_PORT_OPTIONAL, "h", 7, ""},
      {"h:0", GANG__HOSTPORT_PORT_ZERO, "h", 0, ""},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    gang__hostport hp;
    const char *tail = NULL;
    if (gang__hostport_parse(ok[i].text, ok[i].flags, &hp, &tail) != GANG_OK)
      fail_msg("'%s': %s", ok[i].text, gang_last_error());
    assert_string_equal(hp.host, ok[i].host);
    assert_int_equal(hp.port, ok[i].port);
    assert_string_equal(tail, ok[i].tail);
  }
  /* tail may be NULL. */
  gang__hostport hp;
  assert_gang_ok(gang__hostport_parse("h:9/x", GANG__HOSTPORT_TAIL, &hp, NULL));
  assert_int_equal(hp.port, 9);
}

static void test_parse_errors(void **state) {
  (void)state;
  char longest[GANG__HOSTPORT_HOST_CAP + 8],
      toolong[GANG__HOSTPORT_HOST_CAP + 8];
  memset(longest, 'a', GANG__HOSTPORT_HOST_CAP - 1);
  strcpy(longest + GANG__HOSTPORT_HOST_CAP - 1, ":1");
  memset(toolong, 'a', GANG__HOSTPORT_HOST_CAP);
  strcpy(toolong + GANG__HOSTPORT_HOST_CAP, ":1");
  gang__hostport hp;
  assert_gang_ok(gang__hostport_parse(longest, 0, &hp, NULL));
  assert_int_equal(strlen(hp.host), GANG__HOSTPORT_HOST_CAP - 1);

  struct {
    const char *text;
    unsigned flags;
    const char *want;
  } bad[] = {
      {"", 0, "expected host:port"},
      {"host", 0, "expected host:port"},
      {"host/x:1", GANG__HOSTPORT_TAIL, "expected host:port"},
      {"::1:80", 0, "[ipv6]:port"},
      {"a:b:80", GANG__HOSTPORT_PORT_OPTIONAL, "[ipv6]:port"},
      {"[::1", 0, "expected [ipv6]:port"},
      {"[::1]", 0, "expected [ipv6]:port"},
      {"[::1]80", 0, "expected [ipv6]:port"},
      {"[::1]80", GANG__HOSTPORT_PORT_OPTIONAL, "expected [ipv6]:port"},
      {":80", 0, "empty or overlong host"},
      {"[]:80", 0, "empty or overlong host"},
      {toolong, 0, "empty or overlong host"},
      {"h:", 0, "missing or bad port"},
      {"h:/x", GANG__HOSTPORT_TAIL, "missing or bad port"},
      {"h:0", 0, "port '0' is not in 1..65535"},
      {"h:65536", 0, "port '65536' is not in 1..65535"},
      {"h:-1", GANG__HOSTPORT_PORT_ZERO, "port '-1' is not in 0..65535"},
      {"h:x", 0, "port 'x' is not in 1..65535"},
      {"h:12ab", 0, "port '12ab' is not in 1..65535"},
      {"h:80/p", 0, "port '80/p' is not in 1..65535"},
      {"h:123456789012345678", 0, "is not in 1..65535"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&hp, 0x5a, sizeof hp);
    const char *tail = "untouched";
    gang_status st =
        gang__hostport_parse(bad[i].text, bad[i].flags, &hp, &tail);
    if (st != GANG_INVALID_ARGUMENT ||
        strstr(gang_last_error(), bad[i].want) == NULL)
      fail_msg("'%s': status %d detail '%s', want '%s'", bad[i].text, st,
               gang_last_error(), bad[i].want);
    assert_string_equal(tail, "untouched");
    assert_int_equal(hp.port, 0x5a5a5a5a);
  }
}

static void test_format(void **state) {
  (void)state;
  char buf[64];
  assert_int_equal(gang__hostport_format(buf, sizeof buf, "h", 80), 4);
  assert_string_equal(buf, "h:80");
  assert_int_equal(gang__hostport_format(buf, sizeof buf, "::1", 5), 7);
  assert_string_equal(buf, "[::1]:5");
  assert_int_equal(gang__hostport_format(buf, 5, "host", 80), -1);

  /* What is formatted parses back to the same host and port. */
  const char *hosts[] = {"n1", "192.168.0.1", "fe80::1%eth0", "::"};
  for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
    assert_true(gang__hostport_format(buf, sizeof buf, hosts[i], 29500) > 0);
    gang__hostport hp;
    assert_gang_ok(gang__hostport_parse(buf, 0, &hp, NULL));
    assert_string_equal(hp.host, hosts[i]);
    assert_int_equal(hp.port, 29500);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_parse_ok),
      GT_TEST(test_parse_errors),
      GT_TEST(test_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
