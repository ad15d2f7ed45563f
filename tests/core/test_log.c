/* Logging: level and subsystem filters, the line prefix, the log file
 * with %h/%p expansion, and filters read by threads while another thread
 * reconfigures them (ThreadSanitizer checks the lock-free reads). */
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

#include "harness/harness.h"

#include "core/log.h"

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  char *buf = calloc(1, 65536);
  size_t n = fread(buf, 1, 65535, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void test_levels_and_subsystems(void **state) {
  (void)state;
  char path[] = "/tmp/gang-log-test-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  unlink(path);
  char pattern[128];
  snprintf(pattern, sizeof pattern, "%s-%%p", path);
  setenv("GANG_DEBUG_FILE", pattern, 1);
  setenv("GANG_DEBUG", "INFO", 1);
  setenv("GANG_DEBUG_SUBSYS", "^TCP", 1);
  gang__log_reconfigure();
  gang__log_set_rank(3);
  assert_true(gang__log_on(GANG_LOG_INFO, GANG_SUB_STORE));
  assert_false(gang__log_on(GANG_LOG_TRACE, GANG_SUB_STORE));
  assert_false(gang__log_on(GANG_LOG_INFO, GANG_SUB_TCP));
  GANG_INFO(STORE, "hello %d", 42);
  GANG_INFO(TCP, "excluded");
  GANG_TRACE(STORE, "too verbose");
  setenv("GANG_DEBUG_SUBSYS", "TCP,SHM", 1);
  setenv("GANG_DEBUG", "NONE", 1);
  unsetenv("GANG_DEBUG_FILE");
  gang__log_reconfigure();
  assert_false(gang__log_on(GANG_LOG_WARN, GANG_SUB_TCP));
  setenv("GANG_DEBUG", "TRACE", 1);
  gang__log_reconfigure();
  assert_true(gang__log_on(GANG_LOG_TRACE, GANG_SUB_SHM));
  assert_false(gang__log_on(GANG_LOG_WARN, GANG_SUB_STORE));

  char file[160];
  snprintf(file, sizeof file, "%s-%d", path, (int)getpid());
  char *text = read_file(file);
  assert_non_null(text);
  char host[64];
  gethostname(host, sizeof host);
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s:%d rank 3 [INFO STORE] hello 42", host,
           (int)getpid());
  assert_non_null(strstr(text, prefix));
  assert_null(strstr(text, "excluded"));
  assert_null(strstr(text, "too verbose"));
  free(text);
  unlink(file);
  unsetenv("GANG_DEBUG");
  unsetenv("GANG_DEBUG_SUBSYS");
  gang__log_set_rank(-1);
  gang__log_reconfigure();
}

static void *filter_reader(void *arg) {
  long on = 0;
  for (int i = 0; i < 200000; i++)
    on += gang__log_on(GANG_LOG_TRACE, GANG_SUB_SHM);
  *(long *)arg = on;
  return NULL;
}

static void test_reconfigure_while_read(void **state) {
  (void)state;
  pthread_t t[3];
  long on[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&t[i], NULL, filter_reader, &on[i]), 0);
  for (int i = 0; i < 200; i++) {
    setenv("GANG_DEBUG", i % 2 ? "TRACE" : "NONE", 1);
    setenv("GANG_DEBUG_SUBSYS", i % 3 ? "SHM" : "^SHM", 1);
    gang__log_reconfigure();
  }
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  unsetenv("GANG_DEBUG");
  unsetenv("GANG_DEBUG_SUBSYS");
  gang__log_reconfigure();
  assert_false(gang__log_on(GANG_LOG_INFO, GANG_SUB_SHM));
  assert_true(gang__log_on(GANG_LOG_WARN, GANG_SUB_SHM));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_levels_and_subsystems),
      GT_TEST(test_reconfigure_while_read),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
