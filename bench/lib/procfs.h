/* What a process holds and which processes it started, read from /proc:
 * shared by the test harness (tests/harness) and the chaos benchmark
 * (bench/chaos_rank.c), which check that nothing outlives a gang; and the
 * machine a benchmark ran on (bench/chaos_bench.c's record).
 * Header-only (static inline): the benchmark links only libgang's public
 * API, and the harness no bench library. */
#ifndef GANG_BENCH_PROCFS_H
#define GANG_BENCH_PROCFS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Entries of a directory (not . or ..), -1 when it cannot be read:
 * /proc/self/fd (one of them is the directory's own), /proc/self/task. */
static inline int procfs_count(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Processes whose parent is `parent` (and, comm not NULL, whose command
 * is comm): their pids in out[0..cap), and how many there are; -1 when
 * /proc cannot be read. */
static inline int procfs_children(pid_t parent, const char *comm, pid_t *out,
                                  int cap) {
  DIR *d = opendir("/proc");
  if (d == NULL)
    return -1;
  char want[64] = "";
  if (comm != NULL)
    snprintf(want, sizeof want, "(%s)", comm);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces; parse after ')'. */
    char *rp = strrchr(buf, ')');
    char state;
    int ppid;
    if (rp == NULL || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 ||
        ppid != parent || (comm != NULL && strstr(buf, want) == NULL))
      continue;
    if (n < cap)
      out[n] = (pid_t)atoi(e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

/* The 1, 5 and 15 minute load averages; out[0] is -1 when unknown. */
static inline void procfs_loadavg(double out[3]) {
  out[0] = out[1] = out[2] = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f != NULL) {
    if (fscanf(f, "%lf %lf %lf", &out[0], &out[1], &out[2]) != 3)
      out[0] = -1;
    fclose(f);
  }
}

/* The first CPU's model name, "unknown" when /proc/cpuinfo has none. */
static inline void procfs_cpu_model(char *out, size_t cap) {
  snprintf(out, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    char *c = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && c != NULL) {
      c += 1 + (c[1] == ' ');
      c[strcspn(c, "\n")] = '\0';
      snprintf(out, cap, "%s", c);
      break;
    }
  }
  if (f != NULL)
    fclose(f);
}

#endif
