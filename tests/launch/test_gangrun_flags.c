/* gangrun's usage errors: each bad flag or value exits 2 naming what was
 * wrong, and starts no worker. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include "harness/harness.h"
#include "gang/status.h"
#include "gangrun_test.h"

static void test_bad_flags(void **state) {
  (void)state;
  struct {
    const char *env;
    const char *args[6];
    const char *want;
  } cases[] = {
      {NULL, {"--bogus", GR_WORKER}, "'--bogus'"},
      {NULL, {"-x", GR_WORKER}, "'-x'"},
      {NULL, {"--nproc-per-node", "x", GR_WORKER}, "--nproc-per-node: 'x'"},
      {NULL, {"--nproc-per-node=0", GR_WORKER}, "--nproc-per-node: '0'"},
      {NULL, {"--nnodes", "1:2", GR_WORKER}, "--nnodes: '1:2'"},
      {NULL,
       {"--nnodes", "2", "--node-rank", "2", GR_WORKER},
       "--node-rank: '2'"},
      {NULL, {"--tee", "5", GR_WORKER}, "--tee: '5'"},
      {NULL,
       {"--nproc-per-node", "2", "--local-ranks-filter", "0,2", GR_WORKER},
       "--local-ranks-filter"},
      {NULL, {"--local-ranks-filter", "a", GR_WORKER}, "--local-ranks-filter"},
      {NULL, {"--master-port", "70000", GR_WORKER}, "--master-port: '70000'"},
      {NULL, {"--rdzv-endpoint", "h:x", GR_WORKER}, "--rdzv-endpoint port"},
      {NULL, {"--term-grace", "soon", GR_WORKER}, "--term-grace: 'soon'"},
      {NULL,
       {"--nnodes", "2", "--master-port", "0", GR_WORKER},
       "--master-port 0"},
      {NULL, {"--standalone", "--nnodes", "2", GR_WORKER}, "--standalone"},
      {NULL, {"--standalone"}, "no program"},
      {NULL, {"--max-restarts"}, "'--max-restarts' needs a value"},
      {NULL,
       {"--secret-file", "/nonexistent/secret", GR_WORKER},
       "--secret-file: cannot read secret file /nonexistent/secret"},
      {"GANG_SECRET_FILE=/dev/null",
       {GR_WORKER},
       "--secret-file: secret file /dev/null holds no secret"},
      {"GANG_NNODES=abc", {GR_WORKER}, "GANG_NNODES: 'abc'"},
      {"GANG_TEE=9", {GR_WORKER}, "GANG_TEE: '9'"},
      {"GANG_STANDALONE=maybe", {GR_WORKER}, "GANG_STANDALONE: 'maybe'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[10];
    int n = 0;
    argv[n++] = gangrun_path;
    for (int k = 0; cases[i].args[k]; k++)
      argv[n++] = (char *)cases[i].args[k];
    argv[n] = NULL;
    const char *env[] = {cases[i].env, NULL};
    char *out = NULL;
    int st = gt_run_cmd(argv, cases[i].env ? (char *const *)env : NULL, &out,
                        TIMEOUT_MS);
    if (exit_code(st) != 2 || strstr(out, cases[i].want) == NULL)
      fail_msg("case %zu: exit %d, output '%s', want 2 and '%s'", i,
               exit_code(st), out, cases[i].want);
    free(out);
  }
  char *out = NULL;
  char *help[] = {gangrun_path, "--help", NULL};
  assert_int_equal(exit_code(gt_run_cmd(help, NULL, &out, TIMEOUT_MS)), 0);
  must_contain(out, "--nproc-per-node");
  free(out);
  /* A program that cannot be run: the value, the reason in words, the fix
   * where there is one, and a shell's status (127 not found, 126 found but
   * not runnable). */
  char dir[] = "/tmp/gangrun-progs-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char noexec[64], garbage[64], nofile[64];
  snprintf(noexec, sizeof noexec, "%s/noexec.sh", dir);
  snprintf(garbage, sizeof garbage, "%s/garbage", dir);
  snprintf(nofile, sizeof nofile, "%s/missing", dir);
  FILE *f = fopen(noexec, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\ntrue\n", f);
  fclose(f);
  assert_int_equal(chmod(noexec, 0644), 0);
  f = fopen(garbage, "w");
  assert_non_null(f);
  fputs("\x7f\x01 not a program\n", f);
  fclose(f);
  assert_int_equal(chmod(garbage, 0755), 0);
  struct {
    const char *prog;
    int code;
    const char *want[3];
  } progs[] = {
      {"no-such-program-xyz",
       127,
       {"cannot run 'no-such-program-xyz'", "not found in PATH",
        "./no-such-program-xyz"}},
      {nofile, 127, {"cannot run '", "/missing'", "No such file"}},
      {noexec, 126, {"noexec.sh'", "permission denied", "chmod +x"}},
      {dir, 126, {"cannot run '", "is a directory", NULL}},
      {garbage, 126, {"cannot run '", "garbage'", "Exec format error"}},
  };
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    char *argv[] = {gangrun_path, "--standalone", (char *)progs[i].prog, NULL};
    int code = exit_code(gt_run_cmd(argv, NULL, &out, TIMEOUT_MS));
    if (code != progs[i].code)
      fail_msg("program %s: exit %d, want %d; output '%s'", progs[i].prog, code,
               progs[i].code, out);
    for (int k = 0; k < 3 && progs[i].want[k]; k++)
      if (strstr(out, progs[i].want[k]) == NULL)
        fail_msg("program %s: output '%s' lacks '%s'", progs[i].prog, out,
                 progs[i].want[k]);
    assert_null(strstr(out, "errno"));
    free(out);
  }
  unlink(noexec);
  unlink(garbage);
  rmdir(dir);
  /* A program found on PATH, --flag=value for a port, "--" separator. */
  char *path_prog[] = {gangrun_path, "--master-port=0", "--", "true", NULL};
  assert_int_equal(exit_code(gt_run_cmd(path_prog, NULL, &out, TIMEOUT_MS)), 0);
  free(out);
}

int main(void) {
  gangrun_path = gt_tool_path("gangrun");
  gr_hermetic();
  const struct CMUnitTest tests[] = {
      GT_TEST(test_bad_flags),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(gangrun_path);
  return rc;
}
