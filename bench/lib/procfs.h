/* What a process holds and which processes it started, read from /proc:
 * shared by the test harness (tests/harness) and the chaos benchmark
 * (bench/chaos_rank.c), which check that nothing outlives a gang.
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

#endif
