/* What the subprocess gang's tests (test_ft_baby.c, test_ft_baby_faults.c)
 * share: store addresses with a fresh prefix per test, the pid of this
 * process's gang-baby child, counts of its mappings, and a checked
 * all_reduce. */
#ifndef GANG_TESTS_FT_BABY_TEST_H
#define GANG_TESTS_FT_BABY_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"

#include "gang/ft.h"
#include "gang/gang.h"
#include "gang/store.h"

/* Each test's number, in its store prefixes. */
static int g_round;

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void nap_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static inline void addr_of(char *buf, size_t cap, const char *what, int n) {
  snprintf(buf, cap, "127.0.0.1:%d/baby-%s-%d-%d", gt_store_port(), what,
           g_round, n);
}

static inline gang_store *sync_store(const char *what) {
  char a[160];
  addr_of(a, sizeof a, what, 999);
  gang_store *st = NULL;
  RCHECK_OK(gang_store_connect(a, NULL, &st));
  return st;
}

static inline void store_wait(gang_store *st, const char *key) {
  void *v = NULL;
  size_t n = 0;
  RCHECK_OK(gang_store_get(st, key, &v, &n));
  gang_store_free(v);
}

/* The state letter of /proc/<path>/stat ('S' sleeping, 'T' stopped). */
static inline char proc_state(const char *path) {
  char buf[512];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return '?';
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *rp = strrchr(buf, ')');
  return rp != NULL && rp[1] == ' ' ? rp[2] : '?';
}

/* The pid of this process's gang-baby child (the only child it has). */
static inline pid_t baby_pid(void) {
  pid_t pid = -1;
  return gt_children("gang-baby", &pid, 1) >= 1 ? pid : -1;
}

/* Mappings of a subprocess gang's memfd in this process. */
static inline int baby_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int n = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    n += strstr(line, "gang-baby") != NULL;
  if (f != NULL)
    fclose(f);
  return n;
}

static inline gang_t *baby_new(int64_t timeout_ms) {
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  gang_t *g = NULL;
  RCHECK_OK(gang_baby_create(&o, &g));
  return g;
}

static inline void check_all_reduce(gang_t *g, int rank, int size) {
  float f[1000];
  for (int i = 0; i < 1000; i++)
    f[i] = (float)(rank + i);
  RCHECK_OK(gang_all_reduce(g, f, 1000, GANG_FLOAT32, GANG_SUM));
  for (int i = 0; i < 1000; i++)
    RCHECK(f[i] == (float)(size * i + size * (size - 1) / 2));
  int64_t m[7];
  for (int i = 0; i < 7; i++)
    m[i] = rank * 10 + i;
  RCHECK_OK(gang_all_reduce(g, m, 7, GANG_INT64, GANG_MAX));
  for (int i = 0; i < 7; i++)
    RCHECK(m[i] == (size - 1) * 10 + i);
  RCHECK_OK(gang_all_reduce(g, NULL, 0, GANG_FLOAT32, GANG_SUM));
}

#endif
