/* chaos_bench: random faults against real gangs, and what the survivors see
 * (the parent's side; chaos_rank.c is the ranks', chaos.h what they share).
 *
 * Each trial starts 2-8 rank processes that form a gang through a store,
 * over shared memory, over TCP (GANG_SHM_DISABLE=1) or mixed: GANG_HOST_ID
 * makes even and odd ranks two hosts, and from 4 ranks on all_reduce,
 * broadcast and barrier run hierarchically (shared memory within a host,
 * TCP between them), the other collectives flat over TCP. The store is
 * this program's (as gangrun hosts it) or, in half of the trials, rank
 * 0's (as gang_create_default's rank 0 hosts it without a launcher). Half
 * of the trials also make sub-gangs (gang_split or gang_create_subgang).
 * Every rank then loops over the same random list of collectives of
 * random kind, size and dtype, on the world or its sub-gang, blocking or
 * posted in batches of 1-3 works (_post, then gang_work_wait). At a random
 * moment one rank, the victim, meets its fault:
 *   kill   SIGKILL;
 *   stop   SIGSTOP (until every survivor has returned);
 *   abort  gang_abort of its world or sub-gang, from a thread of its own.
 *
 * Per trial it checks:
 *   - every survivor (and an aborting victim) returns an error: none hangs
 *     (a survivor still running after the hang limit is one);
 *   - the status is the fault's (PEER_LOST, TIMEOUT, ABORTED);
 *   - it comes in time, counted from the fault or from the start of the
 *     call that failed, whichever is later (a call's deadline starts with
 *     it): within 2 s for kill and abort, the gang's timeout + 1 s for stop;
 *   - its text names the call (the collective) and the lost rank;
 *   - nothing is left behind: after gang_destroy each survivor has the
 *     file descriptors, threads and child processes it had before it made
 *     the gang and no memfd; no /dev/shm entry a rank had open survives
 *     the trial; no process the ranks started outlives them (this program
 *     is their subreaper, so orphans come back to it);
 *   - a fresh gang of as many ranks on the same transport works right
 *     after (an all_reduce with the right sums and a barrier).
 *
 * One case is counted apart, not as a failure: a survivor that gets
 * PEER_LOST from a rank that failed first (the aborting victim, or another
 * survivor) and closed its connections without telling it why. A failing
 * rank sends its reason on every connection but one in the middle of a
 * frame or with a full send buffer, so the reader of that frame sees only
 * the close (docs/gang.md, "Failures seen by survivors").
 *
 * It prints a line per failed check, and a summary: trials, hangs, p50,
 * p99 and max time to error per fault, leaks, the survivors counted apart.
 * Exit status 0 when no check failed, 1 otherwise, 2 on a usage error.
 *
 *   chaos_bench [--trials N] [--seed S] [--timeout-ms T] [--ranks MIN:MAX]
 *               [--max-bytes B] [--modes shm,tcp,mixed]
 *               [--faults kill,stop,abort] [--only T] [--json FILE]
 *               [--commit C] [-v|-vv]
 *
 * --only T runs trial T alone, as the full run drew it (same seed and
 * options), to look at a failure again. *
 * --timeout-ms is the gangs' timeout in stop trials (default 2000); kill and
 * abort trials give their gangs one longer than the hang limit, so a missed
 * failure shows as a hang, not as a late TIMEOUT. Public API only. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chaos.h"
#include "procfs.h"
#include "gang/store.h"
#include "store_proc.h"

/* ---- The store, samples and totals --------------------------------------- */

/* A port nobody listens on now, for a rank 0 to host its store at. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

/* Times to error (s), per fault. */
typedef struct samples {
  double *v;
  int n, cap;
} samples;

static void push(samples *s, double x) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    double *v = realloc(s->v, sizeof *v * (size_t)cap);
    if (v == NULL)
      return;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = x;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank); 0 without samples. */
static double pct(samples *s, int p) {
  if (s->n == 0)
    return 0;
  qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_d);
  int i = (int)((double)p / 100.0 * (s->n - 1) + 0.5);
  return s->v[i];
}

typedef struct totals {
  int trials, hangs, wrong_status, late, unnamed, leaks, fresh_fail, setup;
  int untold, untold_trials; /* survivors told only of a closed connection */
  int shm_trials;            /* trials where a rank held a memfd */
  samples destroy;           /* gang_destroy after the error (s) */
  int per_fault[FAULT_N], per_mode[MODE_N], sub_trials, post_trials,
      rank0_store, store_host_stops, json_records;
  samples t[FAULT_N];
} totals;

static double bound_s(int fault, int64_t timeout_ms) {
  return fault == FAULT_STOP ? timeout_ms / 1000.0 + 1.0 : KILL_ABORT_LIMIT_S;
}

/* ---- Judging an error ---------------------------------------------------- */

/* Whether the list of ranks at `list` ("1,3]" or "1,3;") holds v. */
static bool list_holds(const char *list, int v) {
  for (const char *d = list; *d != '\0' && *d != ']' && *d != ';';) {
    char *end;
    long r = strtol(d, &end, 10);
    if (end == d)
      return false;
    if (r == v)
      return true;
    d = *end == ',' ? end + 1 : end;
  }
  return false;
}

/* Does the error name rank v? Ranks appear as "rank V" (world ranks, and
 * gang ranks as "gang rank V (pid P)"), and in the diagnosis' lists of
 * those that did not answer ("within 200 ms: 1,3") or were in no
 * diagnosis ("other world ranks in no diagnosis: 3"). */
static bool names_rank(const char *err, int v) {
  char want[32];
  int n = snprintf(want, sizeof want, "rank %d", v);
  for (const char *p = err; (p = strstr(p, want)) != NULL; p += n) {
    /* "(gang rank R/N" is the caller's own place in the call's name. */
    bool own = p - err >= 6 && strncmp(p - 6, "(gang ", 6) == 0;
    if (!own && (p[n] < '0' || p[n] > '9'))
      return true;
  }
  const char *d = strstr(err, "did not answer within");
  if (d != NULL && (d = strstr(d, "ms: ")) != NULL && list_holds(d + 4, v))
    return true;
  const char *lead = "other world ranks in no diagnosis: ";
  d = strstr(err, lead);
  return d != NULL && list_holds(d + strlen(lead), v);
}

/* The rank the error blames for closing its connection: N of the last
 * "rank N ... closed the connection", "connection to rank N ... failed"
 * or "sending to rank N ...: <reason>" (a send that found it closed), or
 * -1. */
static int closed_by(const char *err) {
  int who = -1;
  for (const char *p = err; (p = strstr(p, "rank ")) != NULL; p += 5) {
    char *end;
    long r = strtol(p + 5, &end, 10);
    if (end == p + 5)
      continue;
    const char *tail = end;
    if (*tail == ' ' && tail[1] == '(') /* "rank 0 (127.0.0.1:4000)" */
      tail = strchr(tail, ')') ? strchr(tail, ')') + 1 : tail;
    bool to = p >= err + 14 && strncmp(p - 14, "connection to ", 14) == 0;
    bool sending = p >= err + 11 && strncmp(p - 11, "sending to ", 11) == 0;
    if (strncmp(tail, " closed the connection", 22) == 0 ||
        (to && strncmp(tail, " failed", 7) == 0) || (sending && tail[0] == ':'))
      who = (int)r;
  }
  return who;
}

/* The victim's rank in the sub-gang of survivor r, or -1. */
static int victim_sub_rank(const plan *p, int r) {
  if (p->sub_kind == 2) {
    for (int i = 0; i < p->nmembers; i++)
      if (p->members[i] == p->victim)
        return i;
  } else if (p->sub_kind == 1 && p->color[r] == p->color[p->victim]) {
    int k = 0;
    for (int q = 0; q < p->victim; q++)
      k += p->color[q] == p->color[p->victim];
    return k;
  }
  return -1;
}

static void report(int trial, const plan *p, const char *what, int rank,
                   const rank_rec *rec) {
  fprintf(stderr,
          "chaos: trial %d (%d ranks, %s, %s of rank %d, store %s, sub %d): "
          "%s",
          trial, p->n, chaos_mode_names[p->mode], chaos_fault_names[p->fault],
          p->victim, p->rank0_store ? "rank 0" : "apart", p->sub_kind, what);
  if (rec != NULL)
    fprintf(stderr, " [rank %d: %s in %s, step %d: %s]", rank,
            gang_status_name((gang_status)rec->status), chaos_op_names[rec->op],
            rec->step, rec->err);
  fputc('\n', stderr);
}

/* ---- Running a trial ----------------------------------------------------- */

/* Waits for the rank processes not yet reaped (pids[r] > 0) but `skip`;
 * false when one still runs at `limit` (then all of them are killed). */
static bool reap_all(pid_t *pids, int n, int64_t limit, pid_t skip) {
  for (;;) {
    bool left = false;
    for (int r = 0; r < n; r++) {
      if (pids[r] <= 0 || pids[r] == skip)
        continue;
      if (waitpid(pids[r], NULL, WNOHANG) == pids[r])
        pids[r] = 0;
      else
        left = true;
    }
    if (!left)
      return true;
    if (chaos_now_ns() >= limit) {
      for (int r = 0; r < n; r++)
        if (pids[r] > 0 && pids[r] != skip) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          pids[r] = 0;
        }
      return false;
    }
    /* No fd tells of a child's exit without a signal handler. */
    chaos_nap_ms(2);
  }
}

/* Until every rank is in its loop; false when one exited or 60 s passed. */
static bool wait_running(const plan *p, pid_t *pids, trial_shared *sh) {
  int64_t limit = chaos_now_ns() + 60000000000LL;
  for (int r = 0; r < p->n; r++)
    while (atomic_load(&sh->r[r].state) < R_RUNNING) {
      if (chaos_now_ns() > limit || waitpid(pids[r], NULL, WNOHANG) == pids[r])
        return false;
      chaos_nap_ms(1);
    }
  return true;
}

static bool run_fresh(const plan *p, int port, int trial) {
  pid_t pids[MAX_RANKS];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < p->n; r++) {
    pids[r] = fork();
    if (pids[r] == 0)
      chaos_fresh_rank(p, r, port, trial);
  }
  bool ok = true;
  int64_t limit = chaos_now_ns() + 30000000000LL;
  for (int r = 0; r < p->n; r++) {
    int wst = 0;
    while (waitpid(pids[r], &wst, WNOHANG) == 0) {
      if (chaos_now_ns() >= limit) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &wst, 0);
        break;
      }
      chaos_nap_ms(2);
    }
    ok &= WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
  }
  return ok;
}

/* The survivor's time to error: from the fault, or from the start of the
 * call that failed when that came later. */
static double to_error_s(const rank_rec *rec, int64_t t_fault) {
  int64_t from = rec->t_call > t_fault ? rec->t_call : t_fault;
  return (rec->t_err - from) / 1e9;
}

/* Checks each survivor's record; false when one check failed. */
static bool judge_survivors(const plan *p, int trial, trial_shared *sh,
                            totals *tot, bool *hung, bool *untold_here) {
  bool ok = true;
  int64_t t_fault = atomic_load(&sh->t_fault);
  gang_status want = p->fault == FAULT_KILL   ? GANG_PEER_LOST
                     : p->fault == FAULT_STOP ? GANG_TIMEOUT
                                              : GANG_ABORTED;
  double bound = bound_s(p->fault, p->timeout_ms);
  for (int r = 0; r < p->n; r++) {
    if (r == p->victim && p->fault != FAULT_ABORT)
      continue;
    rank_rec *rec = &sh->r[r];
    int state = atomic_load(&rec->state);
    if (state < R_ERRORED) {
      *hung = true;
      report(trial, p, "hang: no error", r, NULL);
      continue;
    }
    if (state < R_DONE) {
      *hung = true;
      report(trial, p, "hang after the error (gang_destroy)", r, rec);
    }
    double took = to_error_s(rec, t_fault);
    push(&tot->t[p->fault], took);
    if (state == R_DONE)
      push(&tot->destroy, rec->destroy_ns / 1e9);
    /* A rank that fails tells its peers why, but not on a connection in
     * the middle of a frame (or with a full send buffer): a peer reading
     * from it then sees only the connection close, and blames that rank
     * with PEER_LOST. Counted apart when the rank blamed did fail first:
     * the aborting victim, or a survivor that got its own error. */
    int x = closed_by(rec->err);
    bool untold = rec->status == GANG_PEER_LOST && x >= 0 && x < p->n &&
                  x != r &&
                  (x == p->victim ? p->fault == FAULT_ABORT
                                  : atomic_load(&sh->r[x].state) >= R_ERRORED);
    if (untold) {
      tot->untold++;
      *untold_here = true;
      if (strstr(rec->err, chaos_op_names[rec->op]) == NULL) {
        tot->unnamed++;
        ok = false;
        report(trial, p, "the error does not name the call", r, rec);
      }
    } else if (rec->status != (int)want) {
      tot->wrong_status++;
      ok = false;
      report(trial, p, "wrong status", r, rec);
    }
    if (took > bound) {
      tot->late++;
      ok = false;
      char what[96];
      snprintf(what, sizeof what, "late: %.3f s (bound %.1f s)", took, bound);
      report(trial, p, what, r, rec);
    }
    /* The call by its collective's name; the lost rank by its world rank
     * or its rank in the sub-gang the call ran on. */
    int sub_rank = rec->on_sub || (p->fault == FAULT_ABORT && p->abort_sub)
                       ? victim_sub_rank(p, r)
                       : -1;
    if (!untold && (strstr(rec->err, chaos_op_names[rec->op]) == NULL ||
                    !(names_rank(rec->err, p->victim) ||
                      (sub_rank >= 0 && names_rank(rec->err, sub_rank))))) {
      tot->unnamed++;
      ok = false;
      report(trial, p, "the error does not name the call and the lost rank", r,
             rec);
    }
    if (state == R_DONE && rec->leak_fds + rec->leak_threads +
                                   rec->leak_children + rec->leak_memfds !=
                               0) {
      tot->leaks++;
      ok = false;
      char what[160];
      snprintf(what, sizeof what,
               "leak after gang_destroy: %d fds, %d threads, %d children, "
               "%d memfds",
               rec->leak_fds, rec->leak_threads, rec->leak_children,
               rec->leak_memfds);
      report(trial, p, what, r, rec);
    }
  }
  return ok;
}

/* /dev/shm entries any rank had open, and processes the ranks started
 * (orphans come back to this subreaper): none may outlive the trial. */
static bool check_leftovers(const plan *p, int trial, trial_shared *sh,
                            pid_t store_pid, totals *tot) {
  bool ok = true;
  for (int r = 0; r < p->n; r++)
    for (int i = 0; i < sh->r[r].nshm; i++) {
      struct stat sb;
      if (stat(sh->r[r].shm[i], &sb) == 0) {
        tot->leaks++;
        ok = false;
        char what[600];
        snprintf(what, sizeof what, "leak: %s outlived the trial",
                 sh->r[r].shm[i]);
        report(trial, p, what, -1, NULL);
      }
    }
  pid_t left[16];
  int n = chaos_children_of(getpid(), left, 16);
  for (int i = 0; i < n && i < 16; i++) {
    if (left[i] == store_pid)
      continue;
    tot->leaks++;
    ok = false;
    report(trial, p, "leak: a process the ranks started outlived them", -1,
           NULL);
    kill(left[i], SIGKILL);
    waitpid(left[i], NULL, 0);
  }
  return ok;
}

static void record_json(FILE *json, const plan *p, int trial, bool ok,
                        bool hung, bool fresh, bool posts, bool untold,
                        trial_shared *sh, totals *tot) {
  fprintf(json,
          "%s\n  {\"trial\": %d, \"ranks\": %d, \"mode\": \"%s\", "
          "\"fault\": \"%s\", \"victim\": %d, \"store\": \"%s\", "
          "\"sub\": \"%s\", \"posted\": %s, \"delay_ms\": %d, "
          "\"ok\": %s, \"hang\": %s, \"fresh\": %s, \"untold\": %s, "
          "\"to_error_s\": [",
          tot->json_records++ ? "," : "", trial, p->n,
          chaos_mode_names[p->mode], chaos_fault_names[p->fault], p->victim,
          p->rank0_store ? "rank0" : "apart",
          p->sub_kind == 0   ? "none"
          : p->sub_kind == 1 ? "split"
                             : "subgang",
          posts ? "true" : "false", p->delay_ms, ok ? "true" : "false",
          hung ? "true" : "false", fresh ? "true" : "false",
          untold ? "true" : "false");
  int64_t t_fault = atomic_load(&sh->t_fault);
  bool first = true;
  for (int r = 0; r < p->n; r++) {
    if ((r == p->victim && p->fault != FAULT_ABORT) ||
        atomic_load(&sh->r[r].state) < R_ERRORED)
      continue;
    fprintf(json, "%s%.4f", first ? "" : ", ", to_error_s(&sh->r[r], t_fault));
    first = false;
  }
  fprintf(json, "]}");
}

static void run_trial(const config *cfg, int trial, int port, pid_t store_pid,
                      trial_shared *sh, totals *tot, FILE *json) {
  plan p = chaos_make_plan(cfg, trial);
  memset(sh, 0, sizeof *sh);
  int abort_pipe[2];
  if (pipe(abort_pipe) != 0) {
    perror("chaos_bench: pipe");
    exit(1);
  }
  int rank_port = p.rank0_store ? free_port() : port;
  pid_t pids[MAX_RANKS];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < p.n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(abort_pipe[1]);
      chaos_rank_main(&p, r, rank_port, trial, abort_pipe[0], sh);
    }
  }
  close(abort_pipe[0]);
  bool posts = false;
  for (int i = 0; i < p.nsteps; i++)
    posts |= p.steps[i].batch > 0;
  tot->trials++;
  tot->per_fault[p.fault]++;
  tot->per_mode[p.mode]++;
  tot->sub_trials += p.sub_kind != 0;
  tot->post_trials += posts;
  tot->rank0_store += p.rank0_store;
  tot->store_host_stops +=
      p.rank0_store && p.victim == 0 && p.fault == FAULT_STOP;
  if (!wait_running(&p, pids, sh)) {
    tot->setup++;
    report(trial, &p, "setup failed (a rank exited, or over 60 s)", -1, NULL);
    for (int r = 0; r < p.n; r++) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
    close(abort_pipe[1]);
    return;
  }

  /* The fault, at a random moment of the loop. */
  chaos_nap_ms(p.delay_ms);
  pid_t victim = pids[p.victim];
  if (p.fault == FAULT_ABORT) {
    if (write(abort_pipe[1], "a", 1) != 1)
      perror("chaos_bench: write");
  } else {
    atomic_store(&sh->t_fault, chaos_now_ns());
    kill(victim, p.fault == FAULT_KILL ? SIGKILL : SIGSTOP);
  }
  close(abort_pipe[1]);
  int64_t limit =
      chaos_now_ns() +
      (int64_t)((bound_s(p.fault, p.timeout_ms) + HANG_EXTRA_S) * 1e9);
  bool hung = !reap_all(pids, p.n, limit, p.fault == FAULT_STOP ? victim : -1);
  if (p.fault == FAULT_STOP) {
    kill(victim, SIGKILL);
    kill(victim, SIGCONT);
    waitpid(victim, NULL, 0);
  }

  bool untold = false;
  bool ok = judge_survivors(&p, trial, sh, tot, &hung, &untold);
  tot->untold_trials += untold;
  bool memfd = false;
  for (int r = 0; r < p.n; r++)
    memfd |= sh->r[r].memfds > 0;
  tot->shm_trials += memfd;
  ok &= check_leftovers(&p, trial, sh, store_pid, tot);
  if (hung) {
    tot->hangs++;
    ok = false;
  }
  bool fresh = run_fresh(&p, port, trial);
  if (!fresh) {
    tot->fresh_fail++;
    ok = false;
    report(trial, &p, "a fresh gang failed right after", -1, NULL);
  }
  if (cfg->verbose)
    printf("trial %4d: %d ranks %-5s %-5s victim %d store %-5s sub %d %s\n",
           trial, p.n, chaos_mode_names[p.mode], chaos_fault_names[p.fault],
           p.victim, p.rank0_store ? "rank0" : "apart", p.sub_kind,
           ok ? "ok" : "FAILED");
  for (int r = 0; cfg->verbose > 1 && r < p.n; r++)
    if (atomic_load(&sh->r[r].state) >= R_ERRORED)
      printf("  rank %d: %.3f s %s in %s%s: %s\n", r,
             to_error_s(&sh->r[r], atomic_load(&sh->t_fault)),
             gang_status_name((gang_status)sh->r[r].status),
             chaos_op_names[sh->r[r].op], sh->r[r].on_sub ? " (sub-gang)" : "",
             sh->r[r].err);
  if (json != NULL)
    record_json(json, &p, trial, ok, hung, fresh, posts, untold, sh, tot);
}

/* ---- Summary ------------------------------------------------------------- */

static int failures(const totals *t) {
  return t->hangs + t->wrong_status + t->late + t->unnamed + t->leaks +
         t->fresh_fail + t->setup;
}

static void print_summary(const config *cfg, totals *tot, double wall) {
  printf("# chaos_bench: %d trials, seed %" PRIu64 ", %d-%d ranks, stop "
         "timeout %" PRId64 " ms, blocks up to %zu bytes, %.0f s\n",
         tot->trials, cfg->seed, cfg->min_ranks, cfg->max_ranks,
         cfg->timeout_ms, cfg->max_bytes, wall);
  printf("# modes: shm %d, tcp %d, mixed %d; sub-gangs in %d, posted works "
         "in %d; store on rank 0 in %d (%d of them stop rank 0)\n",
         tot->per_mode[0], tot->per_mode[1], tot->per_mode[2], tot->sub_trials,
         tot->post_trials, tot->rank0_store, tot->store_host_stops);
  printf("%-6s %7s %10s %9s %9s %9s %9s\n", "fault", "trials", "survivors",
         "p50 s", "p99 s", "max s", "bound s");
  for (int f = 0; f < FAULT_N; f++)
    if (cfg->faults[f])
      printf("%-6s %7d %10d %9.3f %9.3f %9.3f %9.1f\n", chaos_fault_names[f],
             tot->per_fault[f], tot->t[f].n, pct(&tot->t[f], 50),
             pct(&tot->t[f], 99), pct(&tot->t[f], 100),
             bound_s(f, cfg->timeout_ms));
  printf("hangs %d, wrong status %d, late %d, unnamed %d, leaks %d, fresh "
         "gang failures %d, setup failures %d\n",
         tot->hangs, tot->wrong_status, tot->late, tot->unnamed, tot->leaks,
         tot->fresh_fail, tot->setup);
  printf("told only that a rank which failed first closed its connection: "
         "%d survivors in %d trials\n",
         tot->untold, tot->untold_trials);
  printf("gang_destroy after the error: p50 %.3f s, max %.3f s; shared "
         "memory in use in %d trials\n",
         pct(&tot->destroy, 50), pct(&tot->destroy, 100), tot->shm_trials);
}

typedef struct run_info {
  time_t start;
  double wall, load0[3], load1[3];
  int argc;
  char **argv;
} run_info;

static void write_json(FILE *json, const config *cfg, totals *tot,
                       const run_info *ri, const char *records) {
  char date[32], cpu[160];
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&ri->start));
  procfs_cpu_model(cpu, sizeof cpu);
  fprintf(json, "{\n \"date\": \"%s\",\n \"commit\": \"%s\",\n", date,
          cfg->commit ? cfg->commit : "");
  fprintf(json, " \"command\": \"");
  for (int i = 0; i < ri->argc; i++)
    fprintf(json, "%s%s", i ? " " : "", ri->argv[i]);
  fprintf(json,
          "\",\n \"host\": {\"cpu\": \"%s\", \"nproc\": %ld, "
          "\"loadavg_start\": [%.2f, %.2f, %.2f], "
          "\"loadavg_end\": [%.2f, %.2f, %.2f]},\n",
          cpu, sysconf(_SC_NPROCESSORS_ONLN), ri->load0[0], ri->load0[1],
          ri->load0[2], ri->load1[0], ri->load1[1], ri->load1[2]);
  fprintf(json,
          " \"args\": {\"trials\": %d, \"seed\": %" PRIu64 ", "
          "\"min_ranks\": %d, \"max_ranks\": %d, \"timeout_ms\": %" PRId64
          ", \"max_bytes\": %zu},\n",
          cfg->trials, cfg->seed, cfg->min_ranks, cfg->max_ranks,
          cfg->timeout_ms, cfg->max_bytes);
  fprintf(json,
          " \"wall_s\": %.1f,\n \"trials\": %d,\n \"hangs\": %d,\n"
          " \"wrong_status\": %d,\n \"late\": %d,\n \"unnamed\": %d,\n"
          " \"leaks\": %d,\n \"fresh_failures\": %d,\n"
          " \"setup_failures\": %d,\n \"untold_survivors\": %d,\n"
          " \"untold_trials\": %d,\n",
          ri->wall, tot->trials, tot->hangs, tot->wrong_status, tot->late,
          tot->unnamed, tot->leaks, tot->fresh_fail, tot->setup, tot->untold,
          tot->untold_trials);
  fprintf(json,
          " \"coverage\": {\"shm\": %d, \"tcp\": %d, \"mixed\": %d, "
          "\"sub_gangs\": %d, \"posted\": %d, \"store_on_rank0\": %d, "
          "\"store_host_stopped\": %d, \"shared_memory_used\": %d},\n",
          tot->per_mode[0], tot->per_mode[1], tot->per_mode[2], tot->sub_trials,
          tot->post_trials, tot->rank0_store, tot->store_host_stops,
          tot->shm_trials);
  fprintf(json, " \"destroy_s\": {\"p50\": %.4f, \"max\": %.4f},\n",
          pct(&tot->destroy, 50), pct(&tot->destroy, 100));
  fprintf(json, " \"to_error_s\": {");
  bool first = true;
  for (int f = 0; f < FAULT_N; f++) {
    if (!cfg->faults[f])
      continue;
    fprintf(json,
            "%s\n  \"%s\": {\"trials\": %d, \"survivors\": %d, \"p50\": "
            "%.4f, \"p99\": %.4f, \"max\": %.4f, \"bound\": %.1f}",
            first ? "" : ",", chaos_fault_names[f], tot->per_fault[f],
            tot->t[f].n, pct(&tot->t[f], 50), pct(&tot->t[f], 99),
            pct(&tot->t[f], 100), bound_s(f, cfg->timeout_ms));
    first = false;
  }
  fprintf(json, "\n },\n \"trial_records\": [%s\n ]\n}\n",
          records ? records : "");
}

/* ---- Command line -------------------------------------------------------- */

static bool parse_list(const char *arg, const char *const *names, int n,
                       bool *on) {
  for (int i = 0; i < n; i++)
    on[i] = false;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", arg);
  for (char *save, *t = strtok_r(buf, ",", &save); t != NULL;
       t = strtok_r(NULL, ",", &save)) {
    int i = 0;
    while (i < n && strcmp(t, names[i]) != 0)
      i++;
    if (i == n)
      return false;
    on[i] = true;
  }
  for (int i = 0; i < n; i++)
    if (on[i])
      return true;
  return false;
}

static int usage(void) {
  fprintf(stderr, "usage: chaos_bench [--trials N] [--seed S] [--timeout-ms T] "
                  "[--ranks MIN:MAX]\n"
                  "                   [--max-bytes B] [--modes shm,tcp,mixed] "
                  "[--faults kill,stop,abort]\n"
                  "                   [--only T] [--json FILE] [--commit C] "
                  "[-v|-vv]\n");
  return 2;
}

static int parse_args(int argc, char **argv, config *cfg) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-v") || !strcmp(a, "-vv")) {
      cfg->verbose = a[2] == 'v' ? 2 : 1;
      continue;
    }
    if (v == NULL)
      return usage();
    i++;
    if (!strcmp(a, "--trials"))
      cfg->trials = atoi(v);
    else if (!strcmp(a, "--only"))
      cfg->only = atoi(v);
    else if (!strcmp(a, "--seed"))
      cfg->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--timeout-ms"))
      cfg->timeout_ms = atoll(v);
    else if (!strcmp(a, "--ranks")) {
      if (sscanf(v, "%d:%d", &cfg->min_ranks, &cfg->max_ranks) != 2)
        return usage();
    } else if (!strcmp(a, "--max-bytes"))
      cfg->max_bytes = (size_t)strtoull(v, NULL, 10);
    else if (!strcmp(a, "--modes")) {
      if (!parse_list(v, chaos_mode_names, MODE_N, cfg->modes))
        return usage();
    } else if (!strcmp(a, "--faults")) {
      if (!parse_list(v, chaos_fault_names, FAULT_N, cfg->faults))
        return usage();
    } else if (!strcmp(a, "--json"))
      cfg->json = v;
    else if (!strcmp(a, "--commit"))
      cfg->commit = v;
    else
      return usage();
  }
  if (cfg->trials < 1 || cfg->min_ranks < 2 || cfg->max_ranks > MAX_RANKS ||
      cfg->min_ranks > cfg->max_ranks || cfg->timeout_ms < 100 ||
      cfg->max_bytes < 1) {
    fprintf(stderr,
            "chaos_bench: --trials >= 1, --ranks within 2:%d, "
            "--timeout-ms >= 100, --max-bytes >= 1\n",
            MAX_RANKS);
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  config cfg = {.trials = 100,
                .only = -1,
                .seed = 1,
                .timeout_ms = 2000,
                .min_ranks = 2,
                .max_ranks = 8,
                .max_bytes = 1 << 20,
                .modes = {true, true, true},
                .faults = {true, true, true}};
  int rc = parse_args(argc, argv, &cfg);
  if (rc != 0)
    return rc;
  /* Orphans of the ranks come back to us, to be counted. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int port = -1;
  pid_t store = bench_store_start(&port);
  if (store < 0 || port <= 0) {
    fprintf(stderr, "chaos_bench: the store did not start\n");
    return 1;
  }
  trial_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  FILE *json = NULL, *records = NULL;
  char *rec_text = NULL;
  size_t rec_len = 0;
  if (sh == MAP_FAILED ||
      (cfg.json != NULL &&
       ((json = fopen(cfg.json, "w")) == NULL ||
        (records = open_memstream(&rec_text, &rec_len)) == NULL))) {
    perror(cfg.json ? cfg.json : "chaos_bench: mmap");
    kill(store, SIGKILL);
    waitpid(store, NULL, 0);
    return 1;
  }
  run_info ri = {.start = time(NULL), .argc = argc, .argv = argv};
  procfs_loadavg(ri.load0);
  int64_t t0 = chaos_now_ns();
  totals tot;
  memset(&tot, 0, sizeof tot);
  for (int t = 0; t < cfg.trials; t++)
    if (cfg.only < 0 || t == cfg.only)
      run_trial(&cfg, t, port, store, sh, &tot, records);
  ri.wall = (chaos_now_ns() - t0) / 1e9;
  procfs_loadavg(ri.load1);
  kill(store, SIGKILL);
  waitpid(store, NULL, 0);
  print_summary(&cfg, &tot, ri.wall);
  if (json != NULL) {
    fclose(records);
    write_json(json, &cfg, &tot, &ri, rec_text);
    free(rec_text);
    fclose(json);
  }
  for (int f = 0; f < FAULT_N; f++)
    free(tot.t[f].v);
  free(tot.destroy.v);
  munmap(sh, sizeof *sh);
  return failures(&tot) ? 1 : 0;
}
