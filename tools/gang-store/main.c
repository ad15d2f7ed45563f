/* gang-store: the store for operators. `serve` runs a standalone store
 * server; get/set/add/delete/keys/check/wait are a small client for looking
 * at and nudging a running rendezvous; `bench` measures the store's
 * throughput and latency with N concurrent clients (docs/store-benchmark.md).
 *
 * A client command waits at most --timeout (else GANG_STORE_TIMEOUT when
 * set, else 30 s: an operator at a terminal should not wait the library's
 * 5 minutes), and while it waits, for the server to accept or for keys, it
 * says on stderr every few seconds what it is waiting for.
 *
 * Exit codes: 0 success, 1 the operation failed (the library's detail is
 * printed; for `check`, some key is missing; a host that does not
 * resolve), 2 usage error. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/hostport.h"
#include "gang/status.h"
#include "gang/store.h"
#include "store/auth.h"

static const char usage_text[] =
    "usage:\n"
    "  gang-store serve [--host H] [--port P] [--secret-file F]\n"
    "                   [--max-clients N]\n"
    "  gang-store get    ADDR KEY           print KEY's value (waits for it)\n"
    "  gang-store set    ADDR KEY VALUE\n"
    "  gang-store add    ADDR KEY [DELTA]   add DELTA (default 1), print "
    "result\n"
    "  gang-store delete ADDR KEY\n"
    "  gang-store keys   ADDR               print the number of keys\n"
    "  gang-store check  ADDR KEY...        exit 0 if all exist, 1 if not\n"
    "  gang-store wait   ADDR KEY...        wait until all exist\n"
    "  gang-store bench  ADDR|--embedded --clients N --ops N\n"
    "                   --op set|get|add|wait [--value-size B] [--json]\n"
    "client options: --timeout DURATION (e.g. 5s, 200ms; default 30s, or\n"
    "GANG_STORE_TIMEOUT when set), --secret-file F\n"
    "ADDR is host:port[/prefix], tcp://host:port[/prefix] or file:///path.\n"
    "The secret may also come from GANG_STORE_SECRET. `serve` prints the\n"
    "port it listens on as the first line of stdout and runs until SIGINT\n"
    "or SIGTERM. bench --ops is the total over all clients.\n"
    "exit status: 0 ok, 1 operation failed, 2 usage error\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "gang-store: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage_text);
  return 2;
}

static int failed(const char *what, gang_status s) {
  fprintf(stderr, "gang-store: %s failed: %s: %s\n", what, gang_strerror(s),
          gang_last_error());
  return 1;
}

/* Parsed command line: options anywhere after the command, "--" ends them. */
typedef struct args {
  const char *cmd;
  const char *pos[64];
  int npos;
  const char *host, *secret_file;
  int64_t port, timeout_ms, max_clients, clients, ops, value_size;
  const char *op;
  bool embedded, json, have_timeout;
  char *secret; /* read from secret_file */
} args;

static bool take_value(int argc, char **argv, int *i, const char **out) {
  if (*i + 1 >= argc)
    return false;
  *out = argv[++*i];
  return true;
}

/* Returns 0 on success or the exit status of a usage error. */
static int parse_args(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  a->port = 0;
  a->clients = 1;
  a->ops = 100000;
  a->value_size = 32;
  a->op = "set";
  a->cmd = argv[1];
  bool opts_done = false;
  for (int i = 2; i < argc; i++) {
    const char *o = argv[i], *v = NULL;
    if (opts_done || strncmp(o, "--", 2) != 0) {
      if (a->npos == (int)(sizeof a->pos / sizeof a->pos[0]))
        return usage_error("too many arguments (at '%s')", o);
      a->pos[a->npos++] = o;
      continue;
    }
    if (strcmp(o, "--") == 0) {
      opts_done = true;
      continue;
    }
    if (strcmp(o, "--embedded") == 0) {
      a->embedded = true;
      continue;
    }
    if (strcmp(o, "--json") == 0) {
      a->json = true;
      continue;
    }
    if (!take_value(argc, argv, &i, &v))
      return usage_error("option %s needs a value", o);
    gang_status s = GANG_OK;
    if (strcmp(o, "--host") == 0)
      a->host = v;
    else if (strcmp(o, "--secret-file") == 0)
      a->secret_file = v;
    else if (strcmp(o, "--op") == 0)
      a->op = v;
    else if (strcmp(o, "--port") == 0)
      s = gang__parse_int("--port", v, &a->port);
    else if (strcmp(o, "--timeout") == 0) {
      s = gang__parse_duration_ms("--timeout", v, &a->timeout_ms);
      a->have_timeout = true;
    } else if (strcmp(o, "--max-clients") == 0)
      s = gang__parse_int("--max-clients", v, &a->max_clients);
    else if (strcmp(o, "--clients") == 0)
      s = gang__parse_int("--clients", v, &a->clients);
    else if (strcmp(o, "--ops") == 0)
      s = gang__parse_int("--ops", v, &a->ops);
    else if (strcmp(o, "--value-size") == 0)
      s = gang__parse_size("--value-size", v, &a->value_size);
    else
      return usage_error("unknown option '%s'", o);
    if (s != GANG_OK)
      return usage_error("%s", gang_last_error());
  }
  if (a->port < 0 || a->port > 65535)
    return usage_error("--port must be in 0..65535", NULL);
  if (a->max_clients < 0 || a->max_clients > 1 << 20)
    return usage_error("--max-clients must be in 0..1048576", NULL);
  return 0;
}

/* Reads the secret file, when one is given. */
static int load_secret(args *a) {
  if (a->secret_file == NULL)
    return 0;
  if (gang__auth_secret_file(a->secret_file, &a->secret) != GANG_OK) {
    fprintf(stderr, "gang-store: --secret-file: %s\n", gang_last_error());
    return 1;
  }
  return 0;
}

/* ---- serve -------------------------------------------------------------- */

static int cmd_serve(args *a) {
  if (a->npos != 0)
    return usage_error("serve takes no arguments (got '%s')", a->pos[0]);
  /* Block the stop signals before the server thread starts, so that it
   * inherits the mask and sigwait below is the only place they arrive. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
  o.host = a->host;
  o.port = (int)a->port;
  o.secret = a->secret; /* NULL: GANG_STORE_SECRET */
  o.max_clients = (int)a->max_clients;
  gang_store_server *srv = NULL;
  gang_status s = gang_store_server_start(&o, &srv);
  if (s != GANG_OK)
    return failed("serve", s);
  printf("%d\n", gang_store_server_port(srv));
  fflush(stdout);
  fprintf(stderr, "gang-store: serving on %s:%d\n",
          a->host ? a->host : "127.0.0.1", gang_store_server_port(srv));
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  gang_store_server_stop(srv);
  fprintf(stderr, "gang-store: %s, stopped\n", strsignal(sig));
  return 0;
}

/* ---- what a waiting client waits for ------------------------------------ */

/* How often a waiting client command says so. */
#define REPORT_EVERY_MS 3000

/* A thread that, while the command is in a phase that may wait (`what` is
 * not empty), prints "waiting for <what> (N s of <limit>)" to stderr every
 * REPORT_EVERY_MS; a new phase starts its count again. */
typedef struct reporter {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  pthread_t thread;
  bool running, stop;
  unsigned phase; /* bumped by each report_phase */
  char what[512];
  char limit[32];
} reporter;

static void *report_run(void *arg) {
  reporter *r = arg;
  pthread_mutex_lock(&r->mu);
  unsigned phase = r->phase;
  int64_t start = gang__now_ns();
  int64_t next = start + REPORT_EVERY_MS * 1000000LL;
  while (!r->stop) {
    int64_t now = gang__now_ns();
    if (r->phase != phase) {
      phase = r->phase;
      start = now;
      next = now + REPORT_EVERY_MS * 1000000LL;
    }
    if (now >= next) {
      if (r->what[0] != '\0')
        fprintf(stderr, "gang-store: waiting for %s (%lld s of %s)\n", r->what,
                (long long)((now - start) / 1000000000LL), r->limit);
      next += REPORT_EVERY_MS * 1000000LL;
      continue;
    }
    struct timespec ts = {(time_t)(next / 1000000000LL),
                          (long)(next % 1000000000LL)};
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* Starts the reporter; without it (no thread) the command only says less. */
static void report_start(reporter *r, int64_t limit_ms) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (limit_ms % 1000 == 0)
    snprintf(r->limit, sizeof r->limit, "%lld s", (long long)(limit_ms / 1000));
  else
    snprintf(r->limit, sizeof r->limit, "%lld ms", (long long)limit_ms);
  r->running = pthread_create(&r->thread, NULL, report_run, r) == 0;
}

/* Names what the command waits for from now on ("" once it no longer
 * waits); printf-style. */
static void report_phase(reporter *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void report_phase(reporter *r, const char *fmt, ...) {
  pthread_mutex_lock(&r->mu);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->what, sizeof r->what, fmt, ap);
  va_end(ap);
  r->phase++;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void report_stop(reporter *r) {
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (r->running)
    pthread_join(r->thread, NULL);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

/* Describes keys[0..n) as "key 'a'" or "keys 'a', 'b'" (shortened). */
static void describe_keys(char *buf, size_t cap, const char *const *keys,
                          int n) {
  size_t len = (size_t)snprintf(buf, cap, "key%s ", n > 1 ? "s" : "");
  for (int i = 0; i < n && len < cap; i++) {
    if (i == 4) {
      snprintf(buf + len, cap - len, " and %d more", n - 4);
      return;
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s'%.64s'", i ? ", " : "",
                            keys[i]);
  }
}

/* ---- client commands ---------------------------------------------------- */

static gang_status open_store(args *a, const char *addr, gang_store **st) {
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  if (a->have_timeout) {
    /* 0 would mean "the default" to the library; the tool means "now". */
    o.timeout_ms = a->timeout_ms > 0 ? a->timeout_ms : 1;
    o.connect_timeout_ms = o.timeout_ms;
  }
  o.secret = a->secret;
  return gang_store_connect(addr, &o, st);
}

static int need_args(const args *a, int min, int max) {
  if (a->npos < min)
    return usage_error("%s: missing arguments", a->cmd);
  if (max >= 0 && a->npos > max)
    return usage_error("%s: too many arguments", a->cmd);
  return 0;
}

static int cmd_client(args *a) {
  const char *c = a->cmd;
  int rc;
  if (strcmp(c, "get") == 0 || strcmp(c, "delete") == 0)
    rc = need_args(a, 2, 2);
  else if (strcmp(c, "set") == 0)
    rc = need_args(a, 3, 3);
  else if (strcmp(c, "add") == 0)
    rc = need_args(a, 2, 3);
  else if (strcmp(c, "keys") == 0)
    rc = need_args(a, 1, 1);
  else /* check, wait */
    rc = need_args(a, 2, -1);
  if (rc != 0)
    return rc;
  int64_t delta = 1;
  if (strcmp(c, "add") == 0 && a->npos == 3 &&
      gang__parse_int("DELTA", a->pos[2], &delta) != GANG_OK)
    return usage_error("%s", gang_last_error());

  /* A malformed ADDR is the user's typo (usage, exit 2); a well-formed
   * one whose host does not resolve is an operation that failed (exit 1). */
  const char *addr = a->pos[0];
  if (strncmp(addr, "file://", 7) != 0) {
    gang__hostport hp;
    const char *hpt = strncmp(addr, "tcp://", 6) == 0 ? addr + 6 : addr;
    if (gang__hostport_parse(hpt, GANG__HOSTPORT_TAIL, &hp, NULL) != GANG_OK) {
      char msg[600];
      snprintf(msg, sizeof msg, "store address '%s': %s", addr,
               gang_last_error());
      return usage_error("%s", msg);
    }
  }
  if (!a->have_timeout) {
    a->timeout_ms = 30000;
    if (getenv("GANG_STORE_TIMEOUT") != NULL &&
        gang__setting_int(GANG_SETTING_STORE_TIMEOUT, &a->timeout_ms) !=
            GANG_OK) {
      fprintf(stderr, "gang-store: %s\n", gang_last_error());
      return 2;
    }
    a->have_timeout = true;
  }

  reporter rep;
  report_start(&rep, a->timeout_ms);
  report_phase(&rep, "the store at %s to accept a connection", addr);
  gang_store *st = NULL;
  gang_status s = open_store(a, addr, &st);
  if (s != GANG_OK) {
    report_stop(&rep);
    if (s == GANG_INVALID_ARGUMENT) { /* the name does not resolve */
      fprintf(stderr, "gang-store: %s: %s (check the host name)\n", c,
              gang_last_error());
      return 1;
    }
    return failed("connect", s);
  }
  char keys[400];
  describe_keys(keys, sizeof keys, &a->pos[1], a->npos - 1);
  if (strcmp(c, "get") == 0 || strcmp(c, "wait") == 0)
    report_phase(&rep, "%s at %s", keys, addr);
  else if (strcmp(c, "set") == 0 || strcmp(c, "add") == 0 ||
           strcmp(c, "delete") == 0 || strcmp(c, "check") == 0 ||
           strcmp(c, "keys") == 0)
    report_phase(&rep, "the store at %s to answer %s", addr, c);
  rc = 0;
  if (strcmp(c, "get") == 0) {
    void *v = NULL;
    size_t n = 0;
    s = gang_store_get(st, a->pos[1], &v, &n);
    if (s == GANG_OK) {
      fwrite(v, 1, n, stdout);
      putchar('\n');
      gang_store_free(v);
    }
  } else if (strcmp(c, "set") == 0) {
    s = gang_store_set(st, a->pos[1], a->pos[2], strlen(a->pos[2]));
  } else if (strcmp(c, "add") == 0) {
    int64_t nv = 0;
    s = gang_store_add(st, a->pos[1], delta, &nv);
    if (s == GANG_OK)
      printf("%" PRId64 "\n", nv);
  } else if (strcmp(c, "delete") == 0) {
    bool deleted = false;
    s = gang_store_delete(st, a->pos[1], &deleted);
    if (s == GANG_OK)
      printf("%s\n", deleted ? "deleted" : "absent");
  } else if (strcmp(c, "keys") == 0) {
    int64_t n = 0;
    s = gang_store_num_keys(st, &n);
    if (s == GANG_OK)
      printf("%" PRId64 "\n", n);
  } else if (strcmp(c, "check") == 0) {
    /* Checked one by one, so that the answer names what is missing. */
    for (int i = 1; i < a->npos && s == GANG_OK; i++) {
      bool here = false;
      s = gang_store_check(st, &a->pos[i], 1, &here);
      if (s == GANG_OK && !here) {
        printf("missing: %s\n", a->pos[i]);
        rc = 1;
      }
    }
    if (s == GANG_OK && rc == 0)
      printf("all present\n");
  } else { /* wait */
    s = gang_store_wait(st, &a->pos[1], (size_t)(a->npos - 1), -1);
    if (s == GANG_OK)
      printf("all present\n");
  }
  report_stop(&rep);
  if (s != GANG_OK)
    rc = failed(c, s);
  gang_store_close(st);
  return rc;
}

/* ---- bench -------------------------------------------------------------- */

/* Holds the clients until all are connected and started, so the timed
 * region is the ops alone; `abort` releases them without running. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open, abort;
} gate;

static bool gate_pass(gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->open)
    pthread_cond_wait(&g->cv, &g->mu);
  bool go = !g->abort;
  pthread_mutex_unlock(&g->mu);
  return go;
}

static void gate_open(gate *g, bool abort) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  g->abort = abort;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

typedef struct bench_client {
  gang_store *st;
  int id;
  int64_t nops;
  int64_t *lat_ns; /* one per op */
  const char *op;
  const uint8_t *value;
  size_t vlen;
  struct gate *start;
  gang_status status;
  char err[512];
} bench_client;

static void *bench_run(void *arg) {
  bench_client *c = arg;
  char key[64];
  snprintf(key, sizeof key, "bench/c%d", c->id);
  int op = c->op[0]; /* 's', 'g', 'a' or 'w' */
  const char *keys[1] = {key};
  if (!gate_pass(c->start))
    return NULL;
  for (int64_t i = 0; i < c->nops; i++) {
    int64_t t0 = gang__now_ns();
    gang_status s;
    if (op == 's') {
      s = gang_store_set(c->st, key, c->value, c->vlen);
    } else if (op == 'g') {
      void *v;
      size_t n;
      s = gang_store_get(c->st, key, &v, &n);
      if (s == GANG_OK)
        gang_store_free(v);
    } else if (op == 'w') {
      s = gang_store_wait(c->st, keys, 1, -1);
    } else {
      s = gang_store_add(c->st, "bench/ctr", 1, NULL);
    }
    c->lat_ns[i] = gang__now_ns() - t0;
    if (s != GANG_OK) {
      c->status = s;
      snprintf(c->err, sizeof c->err, "%s", gang_last_error());
      break;
    }
  }
  return NULL;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* Makes room for one descriptor per client (and the embedded server's
 * side of each connection). */
static void raise_nofile(int64_t want) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)want)
    return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)want
                    ? (rlim_t)want
                    : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < (rlim_t)want)
    fprintf(stderr,
            "gang-store: warning: RLIMIT_NOFILE is %llu, %lld clients may "
            "not fit\n",
            (unsigned long long)rl.rlim_cur, (long long)want);
}

static int cmd_bench(args *a) {
  if (a->embedded ? a->npos != 0 : a->npos != 1)
    return usage_error("bench needs ADDR or --embedded%s", "");
  if (strcmp(a->op, "set") != 0 && strcmp(a->op, "get") != 0 &&
      strcmp(a->op, "add") != 0 && strcmp(a->op, "wait") != 0)
    return usage_error("--op must be set, get, add or wait (got '%s')", a->op);
  if (a->clients < 1 || a->clients > 65536)
    return usage_error("--clients must be in 1..65536", NULL);
  if (a->ops < a->clients)
    return usage_error("--ops (the total) must be at least --clients", NULL);
  if (a->value_size < 0 || a->value_size > (64 << 20))
    return usage_error("--value-size must be in 0..64M", NULL);
  int nc = (int)a->clients;
  raise_nofile(2 * a->clients + 64);

  gang_store_server *srv = NULL;
  char addr[300];
  gang_status s;
  if (a->embedded) {
    gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
    so.secret = a->secret ? a->secret : "";
    so.max_clients = nc + 16;
    if ((s = gang_store_server_start(&so, &srv)) != GANG_OK)
      return failed("bench: start the embedded server", s);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_store_server_port(srv));
  } else {
    snprintf(addr, sizeof addr, "%s", a->pos[0]);
  }
  if (!a->have_timeout) {
    a->have_timeout = true;
    a->timeout_ms = 60000;
  }
  if (a->embedded && a->secret == NULL)
    a->secret = strdup("");

  bench_client *cl = calloc((size_t)nc, sizeof *cl);
  int64_t *lat = calloc((size_t)a->ops, sizeof *lat);
  uint8_t *value = malloc((size_t)a->value_size + 1);
  pthread_t *th = calloc((size_t)nc, sizeof *th);
  int rc = 0, started = 0;
  gate start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false,
                false};
  if (cl == NULL || lat == NULL || value == NULL || th == NULL) {
    fprintf(stderr, "gang-store: bench: out of memory\n");
    rc = 1;
    goto out;
  }
  memset(value, 'v', (size_t)a->value_size);
  int64_t off = 0;
  for (int i = 0; i < nc; i++) {
    cl[i].id = i;
    cl[i].nops = a->ops / nc + (i < a->ops % nc);
    cl[i].lat_ns = lat + off;
    off += cl[i].nops;
    cl[i].op = a->op;
    cl[i].value = value;
    cl[i].vlen = (size_t)a->value_size;
    cl[i].start = &start;
    if ((s = open_store(a, addr, &cl[i].st)) != GANG_OK) {
      fprintf(stderr, "gang-store: bench: client %d of %d: ", i, nc);
      rc = failed("connect", s);
      break;
    }
  }
  /* get and wait read each client's own key: put them there first. add
   * counts on one shared key, as a barrier does; start it from zero. */
  if (rc == 0 && (strcmp(a->op, "get") == 0 || strcmp(a->op, "wait") == 0))
    for (int i = 0; i < nc && rc == 0; i++) {
      char key[64];
      snprintf(key, sizeof key, "bench/c%d", i);
      if ((s = gang_store_set(cl[i].st, key, value, cl[i].vlen)) != GANG_OK)
        rc = failed("bench: preparing keys", s);
    }
  if (rc == 0 && strcmp(a->op, "add") == 0 &&
      (s = gang_store_delete(cl[0].st, "bench/ctr", NULL)) != GANG_OK)
    rc = failed("bench: resetting the counter", s);
  if (rc != 0)
    goto out;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (; started < nc; started++)
    if (pthread_create(&th[started], &attr, bench_run, &cl[started]) != 0)
      break;
  pthread_attr_destroy(&attr);
  if (started < nc) {
    fprintf(stderr, "gang-store: bench: cannot start thread %d of %d\n",
            started, nc);
    rc = 1;
  }
  int64_t t0 = gang__now_ns();
  gate_open(&start, rc != 0);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  double secs = (double)(gang__now_ns() - t0) / 1e9;
  for (int i = 0; i < nc && rc == 0; i++)
    if (cl[i].status != GANG_OK) {
      fprintf(stderr, "gang-store: bench: client %d: %s: %s\n", i,
              gang_strerror(cl[i].status), cl[i].err);
      rc = 1;
    }
  if (rc == 0 && strcmp(a->op, "add") == 0) {
    /* The counter must have seen every add exactly once. */
    void *v = NULL;
    size_t n;
    char want[32];
    snprintf(want, sizeof want, "%" PRId64, a->ops);
    if ((s = gang_store_get(cl[0].st, "bench/ctr", &v, &n)) != GANG_OK)
      rc = failed("bench: reading the counter", s);
    else if (n != strlen(want) || memcmp(v, want, n) != 0) {
      fprintf(stderr, "gang-store: bench: counter is %.*s, expected %s\n",
              (int)n, (char *)v, want);
      rc = 1;
    }
    gang_store_free(v);
  }
  if (rc == 0) {
    qsort(lat, (size_t)a->ops, sizeof *lat, cmp_i64);
    double p50 = (double)lat[(a->ops - 1) * 50 / 100] / 1e3;
    double p99 = (double)lat[(a->ops - 1) * 99 / 100] / 1e3;
    double rate = (double)a->ops / secs;
    if (a->json)
      printf("{\"impl\": \"gang\", \"op\": \"%s\", \"clients\": %d, "
             "\"ops\": %" PRId64 ", \"value_size\": %" PRId64
             ", \"seconds\": %.4f, \"ops_per_s\": %.0f, \"p50_us\": %.1f, "
             "\"p99_us\": %.1f}\n",
             a->op, nc, a->ops, a->value_size, secs, rate, p50, p99);
    else
      printf("gang-store bench: op=%s clients=%d ops=%" PRId64
             " value-size=%" PRId64 "\n"
             "  %.0f ops/s  p50 %.1f us  p99 %.1f us  (%.3f s)\n",
             a->op, nc, a->ops, a->value_size, rate, p50, p99, secs);
  }
out:
  for (int i = 0; cl != NULL && i < nc; i++)
    gang_store_close(cl[i].st);
  gang_store_server_stop(srv);
  free(cl);
  free(lat);
  free(value);
  free(th);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return usage_error("missing command%s", "");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    fputs(usage_text, stdout);
    return 0;
  }
  args a;
  int rc = parse_args(argc, argv, &a);
  if (rc != 0)
    return rc;
  if ((rc = load_secret(&a)) != 0)
    return rc;
  const char *c = a.cmd;
  if (strcmp(c, "serve") == 0)
    rc = cmd_serve(&a);
  else if (strcmp(c, "bench") == 0)
    rc = cmd_bench(&a);
  else if (strcmp(c, "get") == 0 || strcmp(c, "set") == 0 ||
           strcmp(c, "add") == 0 || strcmp(c, "delete") == 0 ||
           strcmp(c, "keys") == 0 || strcmp(c, "check") == 0 ||
           strcmp(c, "wait") == 0)
    rc = cmd_client(&a);
  else
    rc = usage_error("unknown command '%s'", c);
  free(a.secret);
  return rc;
}
