/* The replicas' event log of test_ft_manager (ft_log.c). */
#ifndef GANG_TESTS_FT_LOG_H
#define GANG_TESTS_FT_LOG_H

#include <stdint.h>

/* Lines a log may hold; MAX_PROCS: groups (and ranks of a group). */
enum { MAX_LINES = 20000, MAX_PROCS = 16 };
/* The largest difference from the fault-free run's parameters allowed. */
#define ORACLE_TOL 1e-5

/* One line of the log. */
typedef struct ev {
  char kind[8];
  int g, inc, rank, part, commit, primary;
  int64_t step, q;
  double t, err;
  char hash[24];
} ev;

/* Lines read by the checks (and by the tests, through read_log). */
extern ev g_evs[MAX_LINES];

int read_log(const char *path, ev *evs, int cap);
int64_t committed(const char *log, int g, int inc);
void wait_committed(const char *log, int g, int inc, int64_t step,
                    double timeout_s);
int check_done(const char *log, int64_t target);
int64_t check_never_back(const char *log);
char *new_log(void);
double first_commit_after(const char *log, double t0, int part, int skip);
double wait_commit_after(const char *log, double t0, int part, int skip,
                         double timeout_s);

#endif
