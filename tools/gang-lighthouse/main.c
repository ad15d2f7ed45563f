/* gang-lighthouse: the quorum service of fault-tolerant jobs (torchft's
 * `torchft_lighthouse`), standalone. It runs gang_lighthouse_start until
 * SIGINT or SIGTERM. Replicas reach it at --bind (the store protocol);
 * people and scripts read its status page at --http.
 *
 * stdout gets two lines, for scripts: the lighthouse's port, then the
 * status page's (-1 without one). stderr says the same for people.
 * Exit codes: 0 stopped by a signal, 1 could not start, 2 usage error. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/hostport.h"
#include "gang/ft.h"
#include "gang/status.h"
#include "store/auth.h"

static const char usage_text[] =
    "usage: gang-lighthouse [--bind HOST:PORT] [--min-replicas N]\n"
    "                       [--join-timeout DUR] [--quorum-tick DUR]\n"
    "                       [--heartbeat-timeout DUR] [--http HOST:PORT|off]\n"
    "                       [--secret-file F] [--allow-kill]\n"
    "  --bind               where replicas reach it (0.0.0.0:29510; port 0:\n"
    "                       any free port)\n"
    "  --min-replicas       fewest replica groups in a quorum (1)\n"
    "  --join-timeout       how long a round waits for heartbeating replicas\n"
    "                       that have not joined, from the first join (60s)\n"
    "  --quorum-tick        how often quorums are computed (100ms)\n"
    "  --heartbeat-timeout  a replica silent this long is dead (5s)\n"
    "  --http               status page, GET / and /status (the --bind host,\n"
    "                       any free port); off: none\n"
    "  --secret-file        the store secret (else GANG_STORE_SECRET)\n"
    "  --allow-kill         the status page may kill a replica group\n"
    "                       (POST /kill?replica=ID), for drills\n"
    "Durations take units: 500ms, 5s, 1m (a bare number is seconds).\n"
    "stdout: the lighthouse's port, then the status page's (-1: none).\n"
    "Runs until SIGINT or SIGTERM. Exit: 0 stopped, 1 failed, 2 usage.\n";

/* flag NULL: msg names it already (the settings parsers' messages do). */
static int usage_error(const char *flag, const char *msg) {
  fprintf(stderr, "gang-lighthouse: %s%s%s\n%s", flag ? flag : "",
          flag ? ": " : "", msg, usage_text);
  return 2;
}

typedef struct args {
  gang__hostport bind, http;
  bool http_off, allow_kill;
  int64_t min_replicas, join_ms, tick_ms, hb_ms;
  const char *secret_file;
} args;

/* Parses a HOST:PORT flag value, port 0 allowed. */
static int parse_addr(const char *flag, const char *v, gang__hostport *out) {
  if (gang__hostport_parse(v, GANG__HOSTPORT_PORT_ZERO, out, NULL) != GANG_OK)
    return usage_error(flag, gang_last_error());
  return 0;
}

static int parse_dur(const char *flag, const char *v, int64_t lo, int64_t hi,
                     int64_t *out) {
  if (gang__parse_duration_ms(flag, v, out) != GANG_OK)
    return usage_error(NULL, gang_last_error());
  if (*out < lo || *out > hi) {
    char msg[128];
    snprintf(msg, sizeof msg,
             "'%s' is outside %" PRId64 " ms .. %" PRId64 " ms", v, lo, hi);
    return usage_error(flag, msg);
  }
  return 0;
}

/* Returns 0, or the exit status of a usage error. */
static int parse_args(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  snprintf(a->bind.host, sizeof a->bind.host, "0.0.0.0");
  a->bind.port = 29510;
  a->http.port = 0;
  a->min_replicas = 1;
  a->join_ms = 60000;
  a->tick_ms = 100;
  a->hb_ms = 5000;
  bool http_given = false;
  for (int i = 1; i < argc; i++) {
    char flag[64];
    const char *o = argv[i], *v;
    const char *eq = strchr(o, '=');
    if (strncmp(o, "--", 2) != 0)
      return usage_error(o, "unexpected argument");
    if (strcmp(o, "--allow-kill") == 0) {
      a->allow_kill = true;
      continue;
    }
    if (eq != NULL) { /* --flag=value */
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - o), o);
      v = eq + 1;
    } else {
      snprintf(flag, sizeof flag, "%s", o);
      if (i + 1 >= argc)
        return usage_error(flag, "needs a value");
      v = argv[++i];
    }
    int rc = 0;
    if (strcmp(flag, "--bind") == 0) {
      rc = parse_addr(flag, v, &a->bind);
    } else if (strcmp(flag, "--http") == 0) {
      http_given = true;
      a->http_off = strcmp(v, "off") == 0 || strcmp(v, "none") == 0;
      if (!a->http_off)
        rc = parse_addr(flag, v, &a->http);
    } else if (strcmp(flag, "--min-replicas") == 0) {
      if (gang__parse_int(flag, v, &a->min_replicas) != GANG_OK)
        rc = usage_error(NULL, gang_last_error());
      else if (a->min_replicas < 1 || a->min_replicas > 65536)
        rc = usage_error(flag, "must be in 1..65536");
    } else if (strcmp(flag, "--join-timeout") == 0) {
      rc = parse_dur(flag, v, 0, 86400000, &a->join_ms);
    } else if (strcmp(flag, "--quorum-tick") == 0) {
      rc = parse_dur(flag, v, 1, 60000, &a->tick_ms);
    } else if (strcmp(flag, "--heartbeat-timeout") == 0) {
      rc = parse_dur(flag, v, 1, 86400000, &a->hb_ms);
    } else if (strcmp(flag, "--secret-file") == 0) {
      a->secret_file = v;
    } else {
      rc = usage_error(flag, "unknown flag");
    }
    if (rc != 0)
      return rc;
  }
  if (!http_given) /* beside the lighthouse, on any free port */
    memcpy(a->http.host, a->bind.host, sizeof a->http.host);
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
  args a;
  int rc = parse_args(argc, argv, &a);
  if (rc != 0)
    return rc;
  char *secret = NULL;
  if (a.secret_file != NULL &&
      gang__auth_secret_file(a.secret_file, &secret) != GANG_OK) {
    fprintf(stderr, "gang-lighthouse: --secret-file: %s\n", gang_last_error());
    return 1;
  }
  /* Block the stop signals before the lighthouse's threads start, so that
   * they inherit the mask and sigwait is the only place they arrive. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
  o.host = a.bind.host;
  o.port = a.bind.port;
  o.min_replicas = (int)a.min_replicas;
  /* 0 in the options means the default: "do not wait" is 1 ms here. */
  o.join_timeout_ms = a.join_ms > 0 ? a.join_ms : 1;
  o.quorum_tick_ms = a.tick_ms;
  o.heartbeat_timeout_ms = a.hb_ms;
  o.http_host = a.http.host;
  o.http_port = a.http_off ? -1 : a.http.port;
  o.allow_kill = a.allow_kill;
  o.secret = secret;
  gang_lighthouse *lh = NULL;
  gang_status s = gang_lighthouse_start(&o, &lh);
  if (s != GANG_OK) {
    fprintf(stderr, "gang-lighthouse: cannot start: %s: %s\n", gang_strerror(s),
            gang_last_error());
    free(secret);
    return 1;
  }
  int port = gang_lighthouse_port(lh), hport = gang_lighthouse_http_port(lh);
  printf("%d\n%d\n", port, hport);
  fflush(stdout);
  char where[300];
  gang__hostport_format(where, sizeof where, a.bind.host, port);
  fprintf(stderr,
          "gang-lighthouse: replicas reach it at %s; min_replicas %d, "
          "join timeout %" PRId64 " ms, tick %" PRId64
          " ms, heartbeat timeout %" PRId64 " ms\n",
          where, o.min_replicas, o.join_timeout_ms, o.quorum_tick_ms,
          o.heartbeat_timeout_ms);
  if (hport >= 0) {
    gang__hostport_format(where, sizeof where, a.http.host, hport);
    fprintf(stderr, "gang-lighthouse: status page at http://%s/\n", where);
  }
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  gang_lighthouse_stop(lh);
  fprintf(stderr, "gang-lighthouse: %s, stopped\n", strsignal(sig));
  if (secret != NULL) {
    memset(secret, 0, strlen(secret));
    free(secret);
  }
  return 0;
}
