/* lh_scale: the lighthouse (gang-lighthouse) under many replica groups.
 *
 *   lh_scale [--replicas N] [--beat-ms MS] [--tick-ms MS] [--seconds S]
 *            [--rounds R] [--spread-ms MS] [--json FILE]
 *
 * Starts gang-lighthouse as a process of its own and simulates N replica
 * groups over real connections, each as a manager (src/ft/manager.c) speaks
 * to it: a heartbeat connection that beats every --beat-ms, a notice
 * connection that waits for failure notices (as long as a manager's
 * watcher waits, GANG__LH_NOTICE_WAIT_MS), and a quorum
 * connection that joins rounds (gang__lh_join). The beats of a group are
 * spread evenly over the period, as independent jobs' beats are.
 *
 * It measures:
 *   - the lighthouse's CPU (every thread's run time, /proc/PID/task/..
 *     /schedstat) over --seconds of steady heartbeating, as a fraction of
 *     one core;
 *   - for each of --rounds rounds, in which every group joins at a random
 *     moment within --spread-ms: from the last group's call to join to the
 *     first group receiving the quorum (an upper bound of the time the
 *     lighthouse took to decide after the last join), and to the last
 *     group receiving it; the first round is a new quorum, the next ones
 *     the same members again;
 *   - the status page (GET /status and GET /, a new connection each, in
 *     turn every 500 ms: each once a second, as the page itself asks):
 *     time to the whole answer, in steady state and while the groups join;
 *   - how long a heartbeat call takes (most send a datagram; one in 100 is
 *     answered over the store).
 *
 * The targets it prints are those of docs/performance.md ("The lighthouse
 * at scale"): at most 5 % of a core, a quorum within one tick of the last
 * join, the status page within 50 ms. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>

#include "ft/lighthouse.h"
#include "gang/gang.h"
#include "procfs.h"

#define MAX_SAMPLES 200000

typedef struct cfg {
  int replicas, beat_ms, tick_ms, seconds, rounds, spread_ms, hb_threads;
  int notice_ms; /* each notice wait (0: no notice watchers) */
  const char *json;
} cfg;

typedef struct rep {
  char id[32];
  gang__lh_client *hb, *notice, *quorum;
  pthread_t notice_thread, quorum_thread;
  int64_t call_ns, ret_ns; /* this round's join */
  int quorum_n;            /* members of the quorum it received (-1: error) */
  int64_t quorum_id;
} rep;

typedef struct samples {
  double *v;
  int n;
  pthread_mutex_t mu;
} samples;

static cfg C = {1000, 100, 100, 10, 3, 500, 0, GANG__LH_NOTICE_WAIT_MS, NULL};
static rep *R;
static char lh_addr[64];
static int http_port;
static pid_t lh_pid;
static atomic_bool stopping;
static pthread_barrier_t round_start, round_end;
static samples beat_rtt, page_status, page_html, page_rounds;
static atomic_int phase; /* 0: setup, 1: rounds, 2: steady */
static atomic_long beat_errors, late_beats;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void sleep_until(int64_t t) {
  struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void die(const char *what) {
  fprintf(stderr, "lh_scale: %s: %s\n", what, gang_last_error());
  if (lh_pid > 0)
    kill(lh_pid, SIGKILL);
  exit(1);
}

static void add_sample(samples *s, double v) {
  pthread_mutex_lock(&s->mu);
  if (s->n < MAX_SAMPLES)
    s->v[s->n++] = v;
  pthread_mutex_unlock(&s->mu);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of v[0..n) (sorted in place); 0 when empty. */
static double quantile(double *v, int n, double q) {
  if (n == 0)
    return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  int k = (int)(q * (n - 1) + 0.5);
  return v[k];
}

/* ---- The lighthouse process -----------------------------------------------
 */

static void start_lighthouse(const char *path) {
  int out[2];
  if (pipe(out) != 0)
    die("pipe");
  char min[16], tick[32], bind[] = "127.0.0.1:0";
  snprintf(min, sizeof min, "%d", C.replicas);
  snprintf(tick, sizeof tick, "%dms", C.tick_ms);
  lh_pid = fork();
  if (lh_pid < 0)
    die("fork");
  if (lh_pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl(path, path, "--bind", bind, "--http", bind, "--min-replicas", min,
          "--quorum-tick", tick, "--join-timeout", "60s", "--heartbeat-timeout",
          "5s", (char *)NULL);
    fprintf(stderr, "lh_scale: exec %s: %s\n", path, strerror(errno));
    _exit(127);
  }
  close(out[1]);
  FILE *f = fdopen(out[0], "r");
  int port = -1;
  if (f == NULL || fscanf(f, "%d %d", &port, &http_port) != 2) {
    fprintf(stderr, "lh_scale: %s printed no ports\n", path);
    kill(lh_pid, SIGKILL);
    exit(1);
  }
  fclose(f);
  snprintf(lh_addr, sizeof lh_addr, "127.0.0.1:%d", port);
}

/* The lighthouse's threads: name and nanoseconds run so far. */
#define MAX_THREADS 16
typedef struct threads {
  int n;
  int tid[MAX_THREADS];
  char comm[MAX_THREADS][20];
  int64_t ns[MAX_THREADS];
} threads;

static int64_t lighthouse_threads(threads *t) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)lh_pid);
  DIR *d = opendir(dir);
  int64_t total = 0;
  t->n = 0;
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.' || t->n == MAX_THREADS)
      continue;
    char path[400];
    long long ns = 0;
    snprintf(path, sizeof path, "%s/%s/schedstat", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%lld", &ns) != 1)
      ns = 0;
    if (f != NULL)
      fclose(f);
    int k = t->n++;
    t->tid[k] = atoi(e->d_name);
    t->ns[k] = ns;
    snprintf(t->comm[k], sizeof t->comm[k], "?");
    snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
    f = fopen(path, "r");
    if (f != NULL) {
      if (fgets(t->comm[k], sizeof t->comm[k], f) != NULL)
        t->comm[k][strcspn(t->comm[k], "\n")] = '\0';
      fclose(f);
    }
    total += ns;
  }
  if (d != NULL)
    closedir(d);
  return total;
}

static int64_t lighthouse_run_ns(void) {
  threads t;
  return lighthouse_threads(&t);
}

/* Each thread's share of a core between two snapshots, into names. */
static void thread_shares(const threads *a, const threads *b, double secs,
                          char *names, size_t cap) {
  size_t off = 0;
  names[0] = '\0';
  for (int k = 0; k < b->n && off < cap; k++) {
    int64_t before = 0;
    for (int j = 0; j < a->n; j++)
      if (a->tid[j] == b->tid[k])
        before = a->ns[j];
    off += (size_t)snprintf(names + off, cap - off, "%s%s %.2f %%",
                            off ? ", " : "", b->comm[k],
                            100 * (b->ns[k] - before) / 1e9 / secs);
  }
}

/* ---- Simulated groups ------------------------------------------------------
 */

/* Beats for the groups i with i % hb_threads == t, each once a period at
 * its own offset in it. */
static void *beat_main(void *arg) {
  int t = (int)(intptr_t)arg;
  int mine = 0;
  for (int i = t; i < C.replicas; i += C.hb_threads)
    mine++;
  int64_t period = (int64_t)C.beat_ms * 1000000, t0 = now_ns();
  for (int64_t k = 0; !atomic_load(&stopping); k++) {
    int j = 0;
    for (int i = t; i < C.replicas && !atomic_load(&stopping);
         i += C.hb_threads, j++) {
      int64_t due = t0 + k * period + period * j / mine;
      if (now_ns() > due + period)
        atomic_fetch_add(&late_beats, 1);
      sleep_until(due);
      int64_t a = now_ns();
      if (gang__lh_heartbeat(R[i].hb, R[i].id) != GANG_OK)
        atomic_fetch_add(&beat_errors, 1);
      if (atomic_load(&phase) == 2)
        add_sample(&beat_rtt, (now_ns() - a) / 1e3);
    }
  }
  return NULL;
}

/* As a manager's notice thread: waits for the next failure notice in
 * slices of GANG__LH_NOTICE_WAIT_MS (--notice-ms). */
static void *notice_main(void *arg) {
  rep *r = arg;
  int64_t cursor = 0;
  while (!atomic_load(&stopping)) {
    char id[GANG_LH_ID_MAX];
    bool kill_it = false;
    gang_status s = gang__lh_next_notice(r->notice, &cursor, id, sizeof id,
                                         C.notice_ms, &kill_it);
    if (s != GANG_OK && s != GANG_TIMEOUT && !atomic_load(&stopping)) {
      fprintf(stderr, "lh_scale: %s: notice: %s\n", r->id, gang_last_error());
      return NULL;
    }
  }
  return NULL;
}

/* Joins every round at a random moment within --spread-ms. */
static void *quorum_main(void *arg) {
  rep *r = arg;
  unsigned seed = (unsigned)(r - R) * 2654435761u + 12345u;
  for (int round = 0; round < C.rounds; round++) {
    pthread_barrier_wait(&round_start);
    int64_t start = now_ns();
    sleep_until(start + (int64_t)(rand_r(&seed) % (unsigned)(C.spread_ms + 1)) *
                            1000000);
    gang__lh_member me;
    memset(&me, 0, sizeof me);
    snprintf(me.replica_id, sizeof me.replica_id, "%s", r->id);
    me.step = round;
    me.world_size = 1;
    gang__lh_quorum q;
    memset(&q, 0, sizeof q);
    r->call_ns = now_ns();
    gang_status s = gang__lh_join(r->quorum, &me, 60000, &q);
    r->ret_ns = now_ns();
    r->quorum_n = s == GANG_OK ? q.n : -1;
    r->quorum_id = s == GANG_OK ? q.quorum_id : -1;
    if (s != GANG_OK)
      fprintf(stderr, "lh_scale: %s: join: %s\n", r->id, gang_last_error());
    else
      gang__lh_quorum_fini(&q);
    pthread_barrier_wait(&round_end);
  }
  return NULL;
}

/* ---- The status page -------------------------------------------------------
 */

/* GET path over a new connection; milliseconds to the whole answer, -1 on
 * an error or an answer that is not 200. */
static double http_get(const char *path) {
  int64_t a = now_ns();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)http_port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  char req[128];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
  if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
    close(fd);
    return -1;
  }
  char buf[65536], head[16] = "";
  size_t got = 0;
  for (ssize_t r; (r = recv(fd, buf, sizeof buf, 0)) > 0; got += (size_t)r)
    if (got < sizeof head - 1)
      memcpy(head + got, buf,
             (size_t)r < sizeof head - 1 - got ? (size_t)r
                                               : sizeof head - 1 - got);
  close(fd);
  if (strncmp(head, "HTTP/1.0 200", 12) != 0 &&
      strncmp(head, "HTTP/1.1 200", 12) != 0)
    return -1;
  return (now_ns() - a) / 1e6;
}

static atomic_long page_errors;

static void *probe_main(void *arg) {
  (void)arg;
  for (int k = 0; !atomic_load(&stopping); k++) {
    usleep(500 * 1000); /* each page once a second, as the page itself */
    if (atomic_load(&phase) == 0)
      continue;
    double ms = http_get(k % 2 ? "/" : "/status");
    if (ms < 0)
      atomic_fetch_add(&page_errors, 1);
    else
      add_sample(atomic_load(&phase) == 1 ? &page_rounds
                 : k % 2                  ? &page_html
                                          : &page_status,
                 ms);
  }
  return NULL;
}

/* ---- Main ------------------------------------------------------------------
 */

static void usage(void) {
  fprintf(stderr,
          "usage: lh_scale [--replicas N] [--beat-ms MS] [--tick-ms MS]\n"
          "                [--seconds S] [--rounds R] [--spread-ms MS]\n"
          "                [--json FILE]\n");
  exit(2);
}

static int int_arg(const char *flag, const char *v, int lo, int hi) {
  char *end;
  long x = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
    fprintf(stderr, "lh_scale: %s %s is not an integer in %d..%d\n", flag, v,
            lo, hi);
    exit(2);
  }
  return (int)x;
}

static void parse(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (i + 1 >= argc)
      usage();
    const char *v = argv[++i];
    if (strcmp(f, "--replicas") == 0)
      C.replicas = int_arg(f, v, 1, 4000);
    else if (strcmp(f, "--beat-ms") == 0)
      C.beat_ms = int_arg(f, v, 1, 60000);
    else if (strcmp(f, "--tick-ms") == 0)
      C.tick_ms = int_arg(f, v, 1, 60000);
    else if (strcmp(f, "--seconds") == 0)
      C.seconds = int_arg(f, v, 1, 3600);
    else if (strcmp(f, "--rounds") == 0)
      C.rounds = int_arg(f, v, 0, 100);
    else if (strcmp(f, "--spread-ms") == 0)
      C.spread_ms = int_arg(f, v, 0, 60000);
    else if (strcmp(f, "--hb-threads") == 0)
      C.hb_threads = int_arg(f, v, 1, 4000);
    else if (strcmp(f, "--notice-ms") == 0)
      C.notice_ms = int_arg(f, v, 0, 600000);
    else if (strcmp(f, "--json") == 0)
      C.json = v;
    else
      usage();
  }
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, 256 * 1024);
  if (pthread_create(t, &a, fn, arg) != 0) {
    fprintf(stderr, "lh_scale: cannot start a thread\n");
    kill(lh_pid, SIGKILL);
    exit(1);
  }
  pthread_attr_destroy(&a);
}

typedef struct round_result {
  double decide_ms, all_ms; /* last call -> first return, -> last return */
  int64_t quorum_id;
  int bad; /* groups that got no quorum or one without every group */
} round_result;

int main(int argc, char **argv) {
  parse(argc, argv);
  if (C.hb_threads == 0) /* a beat may wait ~1 ms: 10 groups a thread */
    C.hb_threads = C.replicas / 10 > 0 ? C.replicas / 10 : 1;
  raise_nofile();
  signal(SIGPIPE, SIG_IGN);
  char secret[33];
  srand((unsigned)now_ns());
  for (int i = 0; i < 32; i++)
    secret[i] = "0123456789abcdef"[rand() % 16];
  secret[32] = '\0';
  setenv("GANG_STORE_SECRET", secret, 1);
  samples *all[] = {&beat_rtt, &page_status, &page_html, &page_rounds};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    all[i]->v = malloc(MAX_SAMPLES * sizeof(double));
    pthread_mutex_init(&all[i]->mu, NULL);
  }
  start_lighthouse(GANG_LIGHTHOUSE_TOOL);
  R = calloc((size_t)C.replicas, sizeof *R);
  int64_t t_conn = now_ns();
  for (int i = 0; i < C.replicas; i++) {
    snprintf(R[i].id, sizeof R[i].id, "group%04d:0", i);
    if (gang__lh_connect(lh_addr, 30000, &R[i].hb) != GANG_OK ||
        gang__lh_connect(lh_addr, 30000, &R[i].notice) != GANG_OK ||
        gang__lh_connect(lh_addr, 60000, &R[i].quorum) != GANG_OK)
      die("connect");
  }
  printf("lh_scale: %d groups, %d connections to %s in %.2f s\n", C.replicas,
         3 * C.replicas, lh_addr, (now_ns() - t_conn) / 1e9);
  pthread_barrier_init(&round_start, NULL, (unsigned)C.replicas + 1);
  pthread_barrier_init(&round_end, NULL, (unsigned)C.replicas + 1);
  pthread_t *beats = calloc((size_t)C.hb_threads, sizeof *beats), probe;
  for (int t = 0; t < C.hb_threads; t++)
    spawn(&beats[t], beat_main, (void *)(intptr_t)t);
  for (int i = 0; i < C.replicas; i++) {
    if (C.notice_ms > 0)
      spawn(&R[i].notice_thread, notice_main, &R[i]);
    spawn(&R[i].quorum_thread, quorum_main, &R[i]);
  }
  spawn(&probe, probe_main, NULL);
  usleep(2 * (useconds_t)C.beat_ms * 1000 + 500000); /* every id registered */

  /* Rounds. */
  atomic_store(&phase, 1);
  round_result *rr = calloc((size_t)C.rounds + 1, sizeof *rr);
  int64_t cpu0 = lighthouse_run_ns(), w0 = now_ns();
  for (int k = 0; k < C.rounds; k++) {
    pthread_barrier_wait(&round_start);
    pthread_barrier_wait(&round_end);
    int64_t last_call = 0, first_ret = INT64_MAX, last_ret = 0;
    for (int i = 0; i < C.replicas; i++) {
      last_call = R[i].call_ns > last_call ? R[i].call_ns : last_call;
      first_ret = R[i].ret_ns < first_ret ? R[i].ret_ns : first_ret;
      last_ret = R[i].ret_ns > last_ret ? R[i].ret_ns : last_ret;
      rr[k].bad += R[i].quorum_n != C.replicas;
    }
    rr[k].decide_ms = (first_ret - last_call) / 1e6;
    rr[k].all_ms = (last_ret - last_call) / 1e6;
    rr[k].quorum_id = R[0].quorum_id;
    printf("round %d: quorum %" PRId64 " of %d groups; last join -> first "
           "group has it %.1f ms, -> every group %.1f ms%s\n",
           k + 1, rr[k].quorum_id, R[0].quorum_n, rr[k].decide_ms, rr[k].all_ms,
           rr[k].bad ? " (SOME GROUPS GOT NO FULL QUORUM)" : "");
    usleep(300 * 1000);
  }
  double rounds_s = (now_ns() - w0) / 1e9;
  double rounds_cpu = C.rounds ? (lighthouse_run_ns() - cpu0) / 1e9 : 0;

  /* Steady heartbeating. */
  atomic_store(&phase, 2);
  char names[2048];
  threads t0, t1;
  int64_t c0 = lighthouse_threads(&t0), s0 = now_ns();
  long late0 = atomic_load(&late_beats);
  sleep((unsigned)C.seconds);
  int64_t c1 = lighthouse_threads(&t1), s1 = now_ns();
  thread_shares(&t0, &t1, (s1 - s0) / 1e9, names, sizeof names);
  double steady = (double)(c1 - c0) / (double)(s1 - s0);
  long late = atomic_load(&late_beats) - late0;
  atomic_store(&stopping, true);
  for (int i = 0; i < C.replicas; i++) /* their waits are long */
    gang__lh_interrupt(R[i].notice, "the benchmark is over");
  for (int t = 0; t < C.hb_threads; t++)
    pthread_join(beats[t], NULL);
  pthread_join(probe, NULL);
  for (int i = 0; i < C.replicas; i++) {
    if (C.notice_ms > 0)
      pthread_join(R[i].notice_thread, NULL);
    pthread_join(R[i].quorum_thread, NULL);
  }
  double load[3];
  procfs_loadavg(load);

  double decide_max = 0, all_max = 0;
  int bad = 0;
  for (int k = 0; k < C.rounds; k++) {
    decide_max = rr[k].decide_ms > decide_max ? rr[k].decide_ms : decide_max;
    all_max = rr[k].all_ms > all_max ? rr[k].all_ms : all_max;
    bad += rr[k].bad;
  }
  int nst = page_status.n, nht = page_html.n;
  double st50 = quantile(page_status.v, nst, 0.5),
         st_max = quantile(page_status.v, nst, 1.0);
  double ht50 = quantile(page_html.v, nht, 0.5),
         ht_max = quantile(page_html.v, nht, 1.0);
  int nrd = page_rounds.n;
  double rd50 = quantile(page_rounds.v, nrd, 0.5),
         rd_max = quantile(page_rounds.v, nrd, 1.0);
  double b50 = quantile(beat_rtt.v, beat_rtt.n, 0.5),
         b99 = quantile(beat_rtt.v, beat_rtt.n, 0.99);
  printf("steady: the lighthouse used %.2f %% of a core over %.1f s (%s)\n",
         100 * steady, (s1 - s0) / 1e9, names);
  printf("rounds: %.2f %% of a core over %.1f s\n",
         rounds_s > 0 ? 100 * rounds_cpu / rounds_s : 0, rounds_s);
  printf("heartbeats: %d in steady state, a call p50 %.0f us, p99 %.0f "
         "us; %ld late by a period, %ld errors\n",
         beat_rtt.n, b50, b99, late, atomic_load(&beat_errors));
  printf("status page, steady: /status p50 %.1f ms, max %.1f ms (%d); / p50 "
         "%.1f ms, max %.1f ms (%d); %ld errors\n",
         st50, st_max, nst, ht50, ht_max, nht, atomic_load(&page_errors));
  printf("status page while the groups join: p50 %.1f ms, max %.1f ms (%d)\n",
         rd50, rd_max, nrd);
  printf("load average %.2f\n", load[0]);
  bool cpu_ok = steady <= 0.05, q_ok = decide_max <= C.tick_ms && bad == 0,
       page_ok = st_max <= 50 && ht_max <= 50 && page_errors == 0;
  printf("targets: cpu <= 5 %% %s; quorum within a tick (%d ms) %s; status "
         "page within 50 ms (steady) %s\n",
         cpu_ok ? "met" : "MISSED", C.tick_ms, q_ok ? "met" : "MISSED",
         page_ok ? "met" : "MISSED");
  if (C.json != NULL) {
    FILE *f = fopen(C.json, "w");
    if (f == NULL) {
      perror(C.json);
    } else {
      char model[128];
      procfs_cpu_model(model, sizeof model);
      fprintf(f,
              "{\"replicas\": %d, \"beat_ms\": %d, \"tick_ms\": %d, "
              "\"seconds\": %d, \"rounds\": %d, \"spread_ms\": %d,\n"
              " \"cpu_model\": \"%s\", \"ncpu\": %ld, \"loadavg\": %.2f,\n"
              " \"steady_core_fraction\": %.5f, \"rounds_core_fraction\": "
              "%.5f,\n \"threads\": \"%s\",\n \"round_decide_ms\": [",
              C.replicas, C.beat_ms, C.tick_ms, C.seconds, C.rounds,
              C.spread_ms, model, sysconf(_SC_NPROCESSORS_ONLN), load[0],
              steady, rounds_s > 0 ? rounds_cpu / rounds_s : 0, names);
      for (int k = 0; k < C.rounds; k++)
        fprintf(f, "%s%.2f", k ? ", " : "", rr[k].decide_ms);
      fprintf(f, "],\n \"round_all_ms\": [");
      for (int k = 0; k < C.rounds; k++)
        fprintf(f, "%s%.2f", k ? ", " : "", rr[k].all_ms);
      fprintf(
          f,
          "],\n \"bad_quorums\": %d,\n"
          " \"status_ms\": {\"p50\": %.2f, \"max\": %.2f, \"n\": %d},\n"
          " \"page_ms\": {\"p50\": %.2f, \"max\": %.2f, \"n\": %d},\n"
          " \"page_rounds_ms\": {\"p50\": %.2f, \"max\": %.2f, \"n\": %d},\n"
          " \"page_errors\": %ld,\n"
          " \"beat_us\": {\"p50\": %.1f, \"p99\": %.1f, \"n\": %d},\n"
          " \"late_beats\": %ld, \"beat_errors\": %ld}\n",
          bad, st50, st_max, nst, ht50, ht_max, nht, rd50, rd_max, nrd,
          atomic_load(&page_errors), b50, b99, beat_rtt.n, late,
          atomic_load(&beat_errors));
      fclose(f);
    }
  }
  for (int i = 0; i < C.replicas; i++) {
    gang__lh_close(R[i].hb);
    gang__lh_close(R[i].notice);
    gang__lh_close(R[i].quorum);
  }
  kill(lh_pid, SIGTERM);
  int status = 0;
  waitpid(lh_pid, &status, 0);
  return 0;
}
