/* gangrun: starts a group of workers the way torchrun does, hosts their
 * rendezvous store, and restarts the group when a worker fails.
 *
 * Node 0's gangrun runs the store server itself rather than leaving it to
 * rank 0: the store then outlives any worker, so a restarted group finds it
 * again, and a worker crash cannot take the rendezvous down with it.
 * Workers learn where it is from GANG_STORE_ADDR and prove they belong to
 * the run with GANG_STORE_SECRET, which gangrun generates fresh for a
 * single-node run.
 *
 * The store does not sit on MASTER_PORT: torch.distributed's env://
 * rendezvous makes rank 0 listen there with its own TCPStore, so a torch
 * program under gangrun needs the port free. The store takes a free port
 * on a single node and master_port + 1 across nodes (every node must
 * compute the same address without talking). docs/launcher.md is the
 * manual. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/hostport.h"
#include "gang/status.h"
#include "gang/store.h"
#include "gangrun.h"
#include "store/auth.h"

extern char **environ;

/* Variables gangrun sets for its workers; inherited copies are dropped. */
static const char *const owned[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GANG_STORE_ADDR",
    "GANG_STORE_SECRET",
    "GANG_RUN_ID",
    "GANG_RESTART_COUNT",
    "GANG_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "GANG_REPLICA_GROUP",
};
#define NOWNED (sizeof owned / sizeof owned[0])

static bool is_owned(const char *kv) {
  for (size_t i = 0; i < NOWNED; i++) {
    size_t n = strlen(owned[i]);
    if (strncmp(kv, owned[i], n) == 0 && kv[n] == '=')
      return true;
  }
  return false;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char *s = NULL;
  if (vasprintf(&s, f, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

typedef struct run {
  const gr_options *o;
  const char *secret;
  char store_addr[300];
  int port; /* MASTER_PORT: left free for torch's rank 0 */
} run;

/* The environment of local worker i in attempt `attempt`. NULL on OOM. */
static char **worker_env(const run *r, int i, int attempt) {
  const gr_options *o = r->o;
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **env = calloc(n + NOWNED + 2, sizeof *env);
  if (env == NULL)
    return NULL;
  size_t k = 0;
  bool omp = false;
  for (size_t j = 0; j < n; j++) {
    if (is_owned(environ[j]))
      continue;
    omp |= strncmp(environ[j], "OMP_NUM_THREADS=", 16) == 0;
    env[k++] = strdup(environ[j]);
  }
  int world = o->nproc * o->nnodes, rank = o->node_rank * o->nproc + i;
  env[k++] = fmt("RANK=%d", rank);
  env[k++] = fmt("LOCAL_RANK=%d", i);
  env[k++] = fmt("WORLD_SIZE=%d", world);
  env[k++] = fmt("LOCAL_WORLD_SIZE=%d", o->nproc);
  env[k++] = fmt("GROUP_RANK=%d", o->node_rank);
  env[k++] = fmt("GROUP_WORLD_SIZE=%d", o->nnodes);
  env[k++] = fmt("ROLE_RANK=%d", rank);
  env[k++] = fmt("ROLE_WORLD_SIZE=%d", world);
  env[k++] = fmt("MASTER_ADDR=%s", o->master_addr);
  env[k++] = fmt("MASTER_PORT=%d", r->port);
  env[k++] = fmt("GANG_STORE_ADDR=%s", r->store_addr);
  env[k++] = fmt("GANG_STORE_SECRET=%s", r->secret);
  env[k++] = fmt("GANG_RUN_ID=%s", o->run_id);
  env[k++] = fmt("GANG_RESTART_COUNT=%d", attempt);
  env[k++] = fmt("GANG_MAX_RESTARTS=%d", o->max_restarts);
  env[k++] = fmt("TORCHELASTIC_RUN_ID=%s", o->run_id);
  env[k++] = fmt("TORCHELASTIC_RESTART_COUNT=%d", attempt);
  env[k++] = fmt("TORCHELASTIC_MAX_RESTARTS=%d", o->max_restarts);
  env[k++] = fmt("GANG_REPLICA_GROUP=%d", o->replica_group);
  /* torchrun's default: N workers each using every core oversubscribe. */
  if (!omp && o->nproc > 1)
    env[k++] = fmt("OMP_NUM_THREADS=1");
  for (size_t j = 0; j < k; j++)
    if (env[j] == NULL) {
      for (size_t m = 0; m < k; m++)
        free(env[m]);
      free(env);
      return NULL;
    }
  return env;
}

static void free_env(char **env) {
  for (size_t j = 0; env && env[j]; j++)
    free(env[j]);
  free(env);
}

/* PATH lookup done here, before fork: execvpe is not async-signal-safe. */
/* Why a program cannot be run, with the exit status a shell would give
 * (127: not found; 126: found but not runnable). */
typedef struct why_not {
  char text[256];
  int code;
} why_not;

/* A path that names the program: NULL with *why when it cannot be run. */
static char *check_path(const char *prog, why_not *why) {
  struct stat st;
  if (stat(prog, &st) != 0) {
    snprintf(why->text, sizeof why->text, "%s", strerror(errno));
    why->code = errno == ENOENT || errno == ENOTDIR ? 127 : 126;
    return NULL;
  }
  if (S_ISDIR(st.st_mode)) {
    snprintf(why->text, sizeof why->text, "it is a directory");
    why->code = 126;
    return NULL;
  }
  if (access(prog, X_OK) != 0) {
    snprintf(why->text, sizeof why->text,
             "permission denied: not executable (chmod +x %s, or run it "
             "through its interpreter)",
             prog);
    why->code = 126;
    return NULL;
  }
  return strdup(prog);
}

static char *resolve(const char *prog, why_not *why) {
  if (strchr(prog, '/') != NULL)
    return check_path(prog, why);
  snprintf(why->text, sizeof why->text,
           "command not found in PATH (give a path, e.g. ./%s)", prog);
  why->code = 127;
  const char *path = getenv("PATH");
  if (path == NULL)
    path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    char *cand = fmt("%.*s/%s", (int)n, n ? path : ".", prog);
    struct stat st;
    if (cand && stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
        access(cand, X_OK) == 0)
      return cand;
    free(cand);
    path += n + (colon != NULL);
  }
  return NULL;
}

static void hex(const unsigned char *b, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

static int random_hex(size_t bytes, char *out) {
  unsigned char b[64];
  if (bytes > sizeof b || RAND_bytes(b, (int)bytes) != 1)
    return -1;
  hex(b, bytes, out);
  return 0;
}

/* --master-port 0: find a free port for MASTER_PORT the way torchrun does
 * (bind port 0, read it, close). Racy by nature (another process may take
 * it before torch's rank 0 does); the store hosted by gangrun itself binds
 * port 0 directly and does not need this. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void describe_exit(const gr_exit *e, char *buf, size_t cap) {
  if (WIFSIGNALED(e->status))
    snprintf(buf, cap, "signal %d (%s)", WTERMSIG(e->status),
             gr_signal_name(WTERMSIG(e->status)));
  else
    snprintf(buf, cap, "exit code %d", WEXITSTATUS(e->status));
}

static void summary(const gr_group_result *res, int attempt, int max_restarts) {
  char how[64], when[64];
  struct tm tm;
  localtime_r(&res->first.at.tv_sec, &tm);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  describe_exit(&res->first, how, sizeof how);
  fprintf(stderr,
          "gangrun: worker group failed (attempt %d of %d)\n"
          "gangrun: root cause (first failure): rank %d (local_rank %d), "
          "pid %d, %s, at %s.%03ld\n",
          attempt + 1, max_restarts + 1, res->first.rank, res->first.local_rank,
          (int)res->first.pid, how, when, res->first.at.tv_nsec / 1000000);
  size_t shown = sizeof res->others / sizeof res->others[0];
  for (int i = 1; i < res->nfailed && (size_t)(i - 1) < shown; i++) {
    describe_exit(&res->others[i - 1], how, sizeof how);
    fprintf(stderr,
            "gangrun:   also failed: rank %d (local_rank %d), pid %d, "
            "%s\n",
            res->others[i - 1].rank, res->others[i - 1].local_rank,
            (int)res->others[i - 1].pid, how);
  }
  if ((size_t)res->nfailed > shown + 1)
    fprintf(stderr, "gangrun:   ... and %d more\n",
            res->nfailed - 1 - (int)shown);
}

static int exit_code_of(int status) {
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

/* A signal gangrun got while it waits (0: none), from the signalfd. */
static int pending_signal(int sigfd) {
  struct signalfd_siginfo si;
  return read(sigfd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo
                                                           : 0;
}

/* With several nodes: every node's gangrun marks its arrival at the store
 * (node 0 hosts it) and waits, up to --join-timeout, until every node has,
 * before any starts its workers. So a node that never comes is named on
 * every node that did, instead of its workers' gang creation timing out
 * much later with rank numbers. Returns 0, or the exit status. */
static int join_nodes(const gr_options *o, const char *store_addr,
                      const char *secret, int sigfd) {
  int64_t deadline = gang__deadline_in_ms(o->join_timeout_ms);
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.secret = secret;
  gang_store *st = NULL;
  gang_status s = GANG_TIMEOUT;
  char why[512] = "";
  /* Node 0 may start later than this one: try again until the deadline,
   * in slices so that a signal still ends the wait. */
  while (gang__now_ns() < deadline) {
    int64_t left = (deadline - gang__now_ns()) / 1000000;
    so.timeout_ms = left < 1000 ? (left > 0 ? left : 1) : 1000;
    s = gang_store_connect(store_addr, &so, &st);
    if (s == GANG_OK)
      break;
    snprintf(why, sizeof why, "%s", gang_last_error());
    if (s == GANG_AUTH)
      break;
    int sig = pending_signal(sigfd);
    if (sig != 0) {
      fprintf(stderr, "gangrun: stopped by %s\n", gr_signal_name(sig));
      return 128 + sig;
    }
  }
  if (s != GANG_OK) {
    fprintf(stderr,
            "gangrun: node %d of %d cannot reach the store of node 0 at %s "
            "within --join-timeout (%" PRId64 " ms): %s\n",
            o->node_rank, o->nnodes, store_addr, o->join_timeout_ms, why);
    return 1;
  }
  char host[256] = "?", key[300];
  gethostname(host, sizeof host - 1);
  char **keys = calloc((size_t)o->nnodes, sizeof *keys);
  int code = keys == NULL ? 1 : 0;
  for (int i = 0; code == 0 && i < o->nnodes; i++) {
    snprintf(key, sizeof key, "gangrun/%s/node/%d", o->run_id, i);
    if ((keys[i] = strdup(key)) == NULL)
      code = 1;
  }
  if (code == 0 &&
      gang_store_set(st, keys[o->node_rank], host, strlen(host)) != GANG_OK) {
    fprintf(stderr, "gangrun: node %d: cannot mark its arrival: %s\n",
            o->node_rank, gang_last_error());
    code = 1;
  }
  while (code == 0) {
    int64_t left = (deadline - gang__now_ns()) / 1000000;
    s = gang_store_wait(st, (const char *const *)keys, (size_t)o->nnodes,
                        left < 200 ? (left > 0 ? left : 0) : 200);
    if (s == GANG_OK)
      break;
    int sig = pending_signal(sigfd);
    if (sig != 0) {
      fprintf(stderr, "gangrun: stopped by %s\n", gr_signal_name(sig));
      code = 128 + sig;
    } else if (s != GANG_TIMEOUT) {
      fprintf(stderr,
              "gangrun: node %d: the store of node 0 failed while "
              "the nodes arrive: %s\n",
              o->node_rank, gang_last_error());
      code = 1;
    } else if (left <= 0) {
      char missing[512] = "";
      size_t used = 0;
      int n = 0;
      gang_store_set_timeout(st, 2000);
      for (int i = 0; i < o->nnodes; i++) {
        bool here = true;
        if (gang_store_check(st, (const char *const *)&keys[i], 1, &here) ==
                GANG_OK &&
            !here && n++ < 16 && used < sizeof missing)
          used += (size_t)snprintf(missing + used, sizeof missing - used,
                                   "%s%d", n > 1 ? ", " : "", i);
      }
      fprintf(stderr,
              "gangrun: node%s %s%s of %d never arrived within --join-timeout "
              "(%" PRId64 " ms; the store is on node 0 at %s): no worker "
              "starts\n",
              n > 1 ? "s" : "", missing, n > 16 ? ", ..." : "", o->nnodes,
              o->join_timeout_ms, store_addr);
      code = 1;
    }
  }
  for (int i = 0; keys != NULL && i < o->nnodes; i++)
    free(keys[i]);
  free(keys);
  gang_store_close(st);
  return code;
}

int main(int argc, char **argv) {
  gr_options o;
  int prc = gr_parse_options(argc, argv, &o);
  if (prc != 0) {
    gr_free_options(&o);
    return prc < 0 ? 0 : prc;
  }

  /* Signals are read from a signalfd; block them before the store thread
   * starts so it inherits the mask and never takes one. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1); /* passed on: the flight recorder's dump */
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) {
    fprintf(stderr, "gangrun: signalfd: %s\n", strerror(errno));
    gr_free_options(&o);
    return 1;
  }

  int code = 1;
  gang_store_server *srv = NULL;
  why_not why = {"", 0};
  char *path = resolve(o.argv[0], &why);
  char secret[130];
  run r = {&o, secret, "", o.master_port};
  if (path == NULL) {
    fprintf(stderr, "gangrun: cannot run '%s': %s\n", o.argv[0], why.text);
    code = why.code;
    goto out;
  }

  const char *given = getenv("GANG_STORE_SECRET");
  if (o.secret_file != NULL) {
    /* From a file, never from the command line, where every user of the
     * machine can read it (ps). */
    char *s = NULL;
    if (gang__auth_secret_file(o.secret_file, &s) != GANG_OK) {
      fprintf(stderr, "gangrun: --secret-file: %s\n", gang_last_error());
      code = GR_EXIT_USAGE;
      goto out;
    }
    size_t n = strlen(s);
    if (n >= sizeof secret)
      fprintf(stderr,
              "gangrun: --secret-file %s: a secret of %zu bytes is "
              "too long (at most %zu)\n",
              o.secret_file, n, sizeof secret - 1);
    else
      memcpy(secret, s, n + 1);
    memset(s, 0, n);
    free(s);
    if (n >= sizeof secret) {
      code = GR_EXIT_USAGE;
      goto out;
    }
  } else if (given != NULL) {
    snprintf(secret, sizeof secret, "%s", given);
  } else if (o.nnodes == 1) {
    if (random_hex(32, secret) != 0) {
      fprintf(stderr, "gangrun: cannot generate a store secret\n");
      goto out;
    }
  } else {
    /* Each node would draw a different secret: the run needs one shared. */
    secret[0] = '\0';
    fprintf(stderr, "gangrun: warning: no --secret-file and no "
                    "GANG_STORE_SECRET; with --nnodes > 1 the store runs "
                    "without authentication (give every node the same "
                    "secret)\n");
  }
  if (o.run_id[0] == '\0') {
    if (o.nnodes == 1)
      random_hex(8, o.run_id);
    else /* the same on every node without coordination */
      snprintf(o.run_id, sizeof o.run_id, "gangrun-%.100s-%d", o.master_addr,
               o.master_port);
  }
  if (o.replica_groups > 0) {
    /* The parent of the groups: each group is a gangrun of its own. */
    setenv("GANG_STORE_SECRET", secret, 1); /* one for the whole run */
    setenv("GANG_RDZV_ID", o.run_id, 1);
    code = gr_run_replica_groups(&o, argv, sigfd);
    goto out;
  }
  if (o.replica_group >= 0) {
    size_t n = strlen(o.run_id);
    snprintf(o.run_id + n, sizeof o.run_id - n, "-g%d", o.replica_group);
  }

  /* --no-store: the program hosts its store on MASTER_PORT itself. */
  int store_port = o.no_store     ? o.master_port
                   : o.nnodes > 1 ? o.master_port + 1
                                  : 0;
  if (!o.no_store && store_port > 65535) {
    fprintf(stderr,
            "gangrun: the store takes --master-port + 1 with several "
            "nodes; %d is not a port\n",
            store_port);
    code = 2;
    goto out;
  }
  if (o.node_rank == 0 && !o.no_store) {
    gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
    so.host = o.master_addr;
    so.port = store_port;
    so.secret = secret;
    if (gang_store_server_start(&so, &srv) != GANG_OK) {
      fprintf(stderr, "gangrun: cannot host the store on %s:%d: %s\n",
              o.master_addr, store_port, gang_last_error());
      goto out;
    }
    store_port = gang_store_server_port(srv);
  }
  /* After the store is listening, so the kernel cannot hand out its port. */
  if (r.port == 0) {
    r.port = free_port();
    if (r.port < 0) {
      fprintf(stderr, "gangrun: cannot find a free port: %s\n",
              strerror(errno));
      goto out;
    }
    if (o.no_store)
      store_port = r.port;
  }
  if (gang__hostport_format(r.store_addr, sizeof r.store_addr, o.master_addr,
                            store_port) < 0) {
    fprintf(stderr, "gangrun: master address too long\n");
    goto out;
  }

  if (o.nnodes > 1 && !o.no_store) {
    code = join_nodes(&o, r.store_addr, secret, sigfd);
    if (code != 0)
      goto out;
    code = 1;
  }

  for (int attempt = 0;; attempt++) {
    char ***envs = calloc((size_t)o.nproc, sizeof *envs);
    bool ok = envs != NULL;
    for (int i = 0; ok && i < o.nproc; i++)
      ok = (envs[i] = worker_env(&r, i, attempt)) != NULL;
    gr_group_result res;
    int rc =
        ok ? gr_run_group(&o, attempt, path, (char **const *)envs, sigfd, &res)
           : (fprintf(stderr, "gangrun: out of memory\n"), -1);
    for (int i = 0; envs && i < o.nproc; i++)
      free_env(envs[i]);
    free(envs);
    if (rc < 0) {
      code = 1;
      break;
    }
    if (res.nfailed > 0)
      summary(&res, attempt, o.max_restarts);
    if (res.signal != 0) {
      fprintf(stderr, "gangrun: stopped by %s\n", gr_signal_name(res.signal));
      code = 128 + res.signal;
      break;
    }
    if (res.nfailed == 0) {
      code = 0;
      break;
    }
    if (attempt < o.max_restarts) {
      fprintf(stderr,
              "gangrun: restarting the worker group (restart %d of %d)\n",
              attempt + 1, o.max_restarts);
      continue;
    }
    code = exit_code_of(res.first.status);
    if (o.max_restarts > 0)
      fprintf(stderr, "gangrun: no restarts left (--max-restarts %d)\n",
              o.max_restarts);
    fprintf(stderr, "gangrun: exiting with status %d\n", code);
    break;
  }

out:
  gang_store_server_stop(srv);
  free(path);
  close(sigfd);
  gr_free_options(&o);
  return code;
}
