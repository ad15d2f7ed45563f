/* The replicas' event log of test_ft_manager (ft_log.h): reading it, and
 * the checks on it -- what was committed and when, the job's step never
 * going back, the final parameters against the fault-free run. */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness/harness.h"
#include "lh_proc.h"
#include "gang/ft.h"
#include "gang/gang.h"
#include "ft_log.h"

int read_log(const char *path, ev *evs, int cap) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  char line[512];
  int n = 0;
  while (n < cap && fgets(line, sizeof line, f) != NULL) {
    ev e;
    memset(&e, 0, sizeof e);
    if (sscanf(line, "%7s", e.kind) != 1)
      continue;
    const char *p;
    if ((p = strstr(line, " g=")) != NULL)
      e.g = atoi(p + 3);
    if ((p = strstr(line, " inc=")) != NULL)
      e.inc = atoi(p + 5);
    if ((p = strstr(line, " rank=")) != NULL)
      e.rank = atoi(p + 6);
    if ((p = strstr(line, " step=")) != NULL)
      e.step = atoll(p + 6);
    if ((p = strstr(line, " q=")) != NULL)
      e.q = atoll(p + 3);
    if ((p = strstr(line, " part=")) != NULL)
      e.part = atoi(p + 6);
    if ((p = strstr(line, " commit=")) != NULL)
      e.commit = atoi(p + 8);
    if ((p = strstr(line, " t=")) != NULL)
      e.t = atof(p + 3);
    if ((p = strstr(line, " hash=")) != NULL)
      sscanf(p + 6, "%16s", e.hash);
    if ((p = strstr(line, " primary=")) != NULL)
      e.primary = atoi(p + 9);
    if ((p = strstr(line, " err=")) != NULL)
      e.err = atof(p + 5);
    evs[n++] = e;
  }
  fclose(f);
  return n;
}

ev g_evs[MAX_LINES];

/* Highest committed step logged by group g, incarnation inc. */
int64_t committed(const char *log, int g, int inc) {
  int n = read_log(log, g_evs, MAX_LINES);
  int64_t best = -1;
  for (int i = 0; i < n; i++)
    if (strcmp(g_evs[i].kind, "step") == 0 && g_evs[i].g == g &&
        g_evs[i].inc == inc && g_evs[i].commit && g_evs[i].step > best)
      best = g_evs[i].step;
  return best;
}

void wait_committed(const char *log, int g, int inc, int64_t step,
                    double timeout_s) {
  double end = gt_now_s() + timeout_s;
  while (committed(log, g, inc) < step && gt_now_s() < end)
    gt_nap_ms(5);
  if (committed(log, g, inc) < step)
    fail_msg("group %d never committed step %" PRId64, g, step);
}

/* Every "done" line: at `target`; for each group rank r, one hash and
 * one primary for all groups, and the fault-free run's parameters from
 * that primary's start within ORACLE_TOL. Returns how many. */
int check_done(const char *log, int64_t target) {
  int n = read_log(log, g_evs, MAX_LINES);
  int done = 0;
  const ev *first[MAX_PROCS] = {NULL};
  double worst = 0;
  for (int i = 0; i < n; i++) {
    const ev *e = &g_evs[i];
    if (strcmp(e->kind, "done") != 0)
      continue;
    done++;
    if (e->step != target)
      fail_msg("group %d ended at step %" PRId64 ", not %" PRId64, e->g,
               e->step, target);
    if (!(e->err <= ORACLE_TOL))
      fail_msg("group %d rank %d ended %.3g (relative) from the fault-free "
               "run: a step went wrong",
               e->g, e->rank, e->err);
    worst = e->err > worst ? e->err : worst;
    if (e->rank < 0 || e->rank >= MAX_PROCS)
      continue;
    const ev *f = first[e->rank];
    if (f == NULL)
      first[e->rank] = e;
    else if (strcmp(f->hash, e->hash) != 0 || f->primary != e->primary)
      fail_msg("rank %d: group %d ended with parameters %s (from group %d's "
               "start), group %d with %s (from group %d's)",
               e->rank, e->g, e->hash, e->primary, f->g, f->hash, f->primary);
  }
  printf("oracle: %d ranks at step %" PRId64 ", largest difference from the "
         "fault-free run %.3g (bound %g)\n",
         done, target, worst, ORACLE_TOL);
  return done;
}

/* The job's committed step -- the highest step the latest incarnation of
 * any group has committed -- never goes back, and no incarnation commits
 * a step twice or goes back itself. Returns the job's last step. */
int64_t check_never_back(const char *log) {
  int n = read_log(log, g_evs, MAX_LINES);
  int inc[MAX_PROCS];
  int64_t last[MAX_PROCS], job = 0;
  for (int g = 0; g < MAX_PROCS; g++) {
    inc[g] = -1;
    last[g] = 0;
  }
  for (int i = 0; i < n; i++) {
    const ev *e = &g_evs[i];
    if (strcmp(e->kind, "step") != 0 || !e->commit || e->rank != 0 ||
        e->g < 0 || e->g >= MAX_PROCS)
      continue;
    if (e->inc > inc[e->g]) {
      inc[e->g] = e->inc;
      last[e->g] = 0;
    } else if (e->inc < inc[e->g]) {
      continue; /* a dead incarnation's line, read late */
    }
    if (e->step <= last[e->g])
      fail_msg("group %d incarnation %d committed step %" PRId64
               " after step %" PRId64,
               e->g, e->inc, e->step, last[e->g]);
    last[e->g] = e->step;
    int64_t now = 0;
    for (int g = 0; g < MAX_PROCS; g++)
      now = last[g] > now ? last[g] : now;
    if (now < job)
      fail_msg("the job's committed step went back from %" PRId64 " to %" PRId64
               " (group %d incarnation %d)",
               job, now, e->g, e->inc);
    job = now;
  }
  return job;
}

char *new_log(void) {
  char *path = strdup("/tmp/gang-ft-manager-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  return path;
}

/* The first commit with at most `part` participants after time t0 by a
 * group other than `skip`; 0 when none. */
double first_commit_after(const char *log, double t0, int part, int skip) {
  int n = read_log(log, g_evs, MAX_LINES);
  for (int i = 0; i < n; i++)
    if (strcmp(g_evs[i].kind, "step") == 0 && g_evs[i].commit &&
        g_evs[i].t > t0 && g_evs[i].part <= part && g_evs[i].g != skip)
      return g_evs[i].t;
  return 0;
}

double wait_commit_after(const char *log, double t0, int part, int skip,
                         double timeout_s) {
  double end = gt_now_s() + timeout_s, t = 0;
  while ((t = first_commit_after(log, t0, part, skip)) == 0 && gt_now_s() < end)
    gt_nap_ms(5);
  return t;
}
