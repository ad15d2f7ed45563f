/* gangrun's command line. Every flag has a GANG_<FLAG> variable (declared
 * in src/core/settings.def, which also holds the defaults) so a job script
 * can set it once; a flag on the command line wins over the variable. Both
 * the "--nproc-per-node" and "--nproc_per_node" spellings, "--flag=value"
 * and "--flag value" are accepted, as torchrun accepts them. Values are
 * collected as text first and validated at the end, so a message can name
 * where a bad value came from (the flag, or the variable). */
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/hostport.h"
#include "gang/config.h"
#include "gang/status.h"
#include "gangrun.h"

enum {
  F_NPROC,
  F_NNODES,
  F_NODE_RANK,
  F_MASTER_ADDR,
  F_MASTER_PORT,
  F_STANDALONE,
  F_RDZV_ENDPOINT,
  F_RDZV_ID,
  F_MAX_RESTARTS,
  F_LOG_DIR,
  F_TEE,
  F_FILTER,
  F_TERM_GRACE,
  F_NO_STORE,
  F_REPLICA_GROUPS,
  F_SECRET_FILE,
  F_JOIN_TIMEOUT,
  F_COUNT
};

static const struct flag {
  const char *name; /* canonical, with '-' */
  const char *alias;
  gang__setting_id setting;
  bool is_bool; /* takes no value */
} flags[F_COUNT] = {
    [F_NPROC] = {"nproc-per-node", NULL, GANG_SETTING_NPROC_PER_NODE, false},
    [F_NNODES] = {"nnodes", NULL, GANG_SETTING_NNODES, false},
    [F_NODE_RANK] = {"node-rank", NULL, GANG_SETTING_NODE_RANK, false},
    [F_MASTER_ADDR] = {"master-addr", NULL, GANG_SETTING_MASTER_ADDR, false},
    [F_MASTER_PORT] = {"master-port", NULL, GANG_SETTING_MASTER_PORT, false},
    [F_STANDALONE] = {"standalone", NULL, GANG_SETTING_STANDALONE, true},
    [F_RDZV_ENDPOINT] = {"rdzv-endpoint", NULL, GANG_SETTING_RDZV_ENDPOINT,
                         false},
    [F_RDZV_ID] = {"rdzv-id", "run-id", GANG_SETTING_RDZV_ID, false},
    [F_MAX_RESTARTS] = {"max-restarts", NULL, GANG_SETTING_MAX_RESTARTS, false},
    [F_LOG_DIR] = {"log-dir", NULL, GANG_SETTING_LOG_DIR, false},
    [F_TEE] = {"tee", NULL, GANG_SETTING_TEE, false},
    [F_FILTER] = {"local-ranks-filter", NULL, GANG_SETTING_LOCAL_RANKS_FILTER,
                  false},
    [F_TERM_GRACE] = {"term-grace", NULL, GANG_SETTING_TERM_GRACE, false},
    [F_NO_STORE] = {"no-store", NULL, GANG_SETTING_NO_STORE, true},
    [F_REPLICA_GROUPS] = {"replica-groups", NULL, GANG_SETTING_REPLICA_GROUPS,
                          false},
    [F_SECRET_FILE] = {"secret-file", NULL, GANG_SETTING_SECRET_FILE, false},
    [F_JOIN_TIMEOUT] = {"join-timeout", NULL, GANG_SETTING_JOIN_TIMEOUT, false},
};

/* Where a value came from, for messages: "--nnodes" or "GANG_NNODES". */
typedef struct value {
  const char *text;
  char origin[64];
  bool given; /* by a flag or a variable, not the default */
} value;

void gr_usage(FILE *f) {
  fprintf(
      f,
      "usage: gangrun [options] program [args...]\n"
      "\n"
      "Starts --nproc-per-node workers running `program`, with torchrun's\n"
      "variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "MASTER_ADDR, MASTER_PORT) plus GANG_STORE_ADDR, GANG_STORE_SECRET,\n"
      "GANG_RUN_ID, GANG_RESTART_COUNT and GANG_MAX_RESTARTS. Node 0 hosts "
      "the\n"
      "store on a port of its own (GANG_STORE_ADDR), leaving MASTER_PORT to\n"
      "torch. Each flag can also be set by GANG_<FLAG> "
      "(GANG_NPROC_PER_NODE).\n"
      "\n"
      "  --nproc-per-node N|auto  workers on this node (auto: one per CPU)\n"
      "  --nnodes N               number of nodes (default 1)\n"
      "  --node-rank R            this node's index (default 0)\n"
      "  --master-addr HOST       node 0's address (default 127.0.0.1)\n"
      "  --master-port P          MASTER_PORT (default 29500; 0 = free); "
      "the\n"
      "                           store is on P + 1 with several nodes\n"
      "  --standalone             one node on 127.0.0.1, free ports\n"
      "  --rdzv-endpoint H[:P]    same as --master-addr H --master-port P\n"
      "  --rdzv-id ID, --run-id   run id (GANG_RUN_ID)\n"
      "  --max-restarts N         restart a failed group up to N times\n"
      "  --log-dir DIR            per-rank log files under DIR\n"
      "  --tee 0|1|2|3            console streams: none, stdout, stderr, "
      "both\n"
      "  --local-ranks-filter L   show only these local ranks (e.g. 0,3)\n"
      "  --term-grace DURATION    SIGTERM-to-SIGKILL grace (default 10s)\n"
      "  --no-store               do not host the store\n"
      "  --secret-file F          the store secret, from the first line of F\n"
      "                           (else GANG_STORE_SECRET; one per run is\n"
      "                           drawn on a single node)\n"
      "  --join-timeout DURATION  with --nnodes > 1, wait this long for every\n"
      "                           node before starting workers (default "
      "10m)\n"
      "  --replica-groups R       R replica groups of --nproc-per-node\n"
      "                           workers, each restarted on its own, under\n"
      "                           a lighthouse (fault tolerance, gang/ft.h)\n"
      "  -h, --help               this help\n"
      "\n"
      "Exit status: 0 if every worker succeeded; the failing worker's status\n"
      "(128+N for signal N) after the last restart; 128+N when gangrun got\n"
      "signal N; 2 for a usage error.\n");
}

/* The variable's name ("GANG_NNODES"); the table index is the id. */
static const char *setting_name(gang__setting_id id) {
  gang_setting_info info;
  if (gang_setting_describe((int)id, &info) != GANG_OK)
    return "?";
  return info.name;
}

static int usage_error(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "gangrun: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n(see gangrun --help)\n");
  return GR_EXIT_USAGE;
}

static const struct flag *find_flag(const char *name, size_t n, int *idx) {
  char canon[64];
  if (n == 0 || n >= sizeof canon)
    return NULL;
  for (size_t i = 0; i < n; i++)
    canon[i] = name[i] == '_' ? '-' : name[i];
  canon[n] = '\0';
  for (int i = 0; i < F_COUNT; i++)
    if (strcmp(canon, flags[i].name) == 0 ||
        (flags[i].alias && strcmp(canon, flags[i].alias) == 0)) {
      *idx = i;
      return &flags[i];
    }
  return NULL;
}

static int parse_long(const value *v, long lo, long hi, long *out) {
  int64_t x;
  if (gang__parse_int(v->origin, v->text, &x) != GANG_OK)
    return usage_error("%s: '%s' is not an integer", v->origin, v->text);
  if (x < lo || x > hi) {
    char range[64];
    snprintf(range, sizeof range, "%ld..%ld", lo, hi);
    fprintf(stderr, "gangrun: %s: '%s' is out of range (%s)\n", v->origin,
            v->text, range);
    return GR_EXIT_USAGE;
  }
  *out = (long)x;
  return 0;
}

static int parse_boolv(const value *v, bool *out) {
  if (gang__parse_bool(v->origin, v->text, out) != GANG_OK)
    return usage_error("%s: '%s' is not a boolean (1/0, true/false)", v->origin,
                       v->text);
  return 0;
}

static int cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* host[:port], host may be [v6]; port 0 asks for a free port. */
static int parse_endpoint(const value *v, gr_options *o) {
  gang__hostport hp;
  if (gang__hostport_parse(
          v->text, GANG__HOSTPORT_PORT_OPTIONAL | GANG__HOSTPORT_PORT_ZERO, &hp,
          NULL) != GANG_OK)
    return usage_error("%s %s", v->origin, gang_last_error());
  snprintf(o->master_addr, sizeof o->master_addr, "%s", hp.host);
  if (hp.port >= 0)
    o->master_port = hp.port;
  return 0;
}

static int parse_filter(const value *v, gr_options *o) {
  o->show = calloc((size_t)o->nproc, sizeof(bool));
  if (o->show == NULL)
    return usage_error("%s%s: out of memory", v->origin, "");
  if (v->text[0] == '\0') {
    for (int i = 0; i < o->nproc; i++)
      o->show[i] = true;
    return 0;
  }
  const char *s = v->text;
  for (;;) {
    char *end;
    if (!isdigit((unsigned char)*s))
      return usage_error("%s: '%s' is not a comma list of local ranks",
                         v->origin, v->text);
    long r = strtol(s, &end, 10);
    if (r >= o->nproc) {
      fprintf(stderr,
              "gangrun: %s: local rank %ld in '%s' is not below "
              "--nproc-per-node %d\n",
              v->origin, r, v->text, o->nproc);
      return GR_EXIT_USAGE;
    }
    o->show[r] = true;
    if (*end == '\0')
      return 0;
    if (*end != ',')
      return usage_error("%s: '%s' is not a comma list of local ranks",
                         v->origin, v->text);
    s = end + 1;
  }
}

int gr_parse_options(int argc, char **argv, gr_options *o) {
  memset(o, 0, sizeof *o);
  value vals[F_COUNT];
  for (int i = 0; i < F_COUNT; i++) {
    const char *env = getenv(setting_name(flags[i].setting));
    vals[i].text = gang__setting_str(flags[i].setting);
    vals[i].given = env != NULL;
    snprintf(vals[i].origin, sizeof vals[i].origin, "%s",
             setting_name(flags[i].setting));
  }

  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      gr_usage(stdout);
      return -1;
    }
    if (a[0] != '-' || a[1] == '\0')
      break; /* the program */
    if (a[1] != '-')
      return usage_error("unknown option '%s'%s", a, "");
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    int idx;
    const struct flag *f = find_flag(name, n, &idx);
    if (f == NULL)
      return usage_error("unknown flag '%s'%s", a, "");
    value *v = &vals[idx];
    snprintf(v->origin, sizeof v->origin, "--%s", f->name);
    v->given = true;
    if (eq != NULL)
      v->text = eq + 1;
    else if (f->is_bool)
      v->text = "1";
    else if (i + 1 < argc)
      v->text = argv[++i];
    else
      return usage_error("flag '%s' needs a value%s", a, "");
  }
  if (i >= argc)
    return usage_error("no program to run%s%s", "", "");
  o->argv = &argv[i];

  long x;
  /* nproc */
  if (strcmp(vals[F_NPROC].text, "auto") == 0 ||
      strcmp(vals[F_NPROC].text, "cpu") == 0) {
    o->nproc = cpus();
    if (o->nproc > GR_MAX_NPROC)
      o->nproc = GR_MAX_NPROC;
  } else {
    if (parse_long(&vals[F_NPROC], 1, GR_MAX_NPROC, &x))
      return GR_EXIT_USAGE;
    o->nproc = (int)x;
  }
  /* nnodes: N or N:N (torchrun's elastic MIN:MAX with MIN == MAX). */
  {
    value v = vals[F_NNODES];
    char buf[64];
    const char *colon = strchr(v.text, ':');
    if (colon != NULL) {
      size_t n = (size_t)(colon - v.text);
      if (n >= sizeof buf || strcmp(colon + 1, "") == 0 ||
          strncmp(v.text, colon + 1, n) != 0 || colon[1 + n] != '\0')
        return usage_error("%s: '%s': elastic node ranges (MIN:MAX with MIN "
                           "!= MAX) are not supported",
                           v.origin, v.text);
      memcpy(buf, v.text, n);
      buf[n] = '\0';
      v.text = buf;
    }
    if (parse_long(&v, 1, 65536, &x))
      return GR_EXIT_USAGE;
    o->nnodes = (int)x;
  }
  if (parse_long(&vals[F_NODE_RANK], 0, o->nnodes - 1, &x))
    return GR_EXIT_USAGE;
  o->node_rank = (int)x;
  if (vals[F_MASTER_ADDR].text[0] == '\0' ||
      strlen(vals[F_MASTER_ADDR].text) >= sizeof o->master_addr)
    return usage_error("%s: '%s' is not a host", vals[F_MASTER_ADDR].origin,
                       vals[F_MASTER_ADDR].text);
  snprintf(o->master_addr, sizeof o->master_addr, "%s",
           vals[F_MASTER_ADDR].text);
  if (parse_long(&vals[F_MASTER_PORT], 0, 65535, &x))
    return GR_EXIT_USAGE;
  o->master_port = (int)x;
  if (vals[F_RDZV_ENDPOINT].text[0] != '\0' &&
      parse_endpoint(&vals[F_RDZV_ENDPOINT], o))
    return GR_EXIT_USAGE;
  if (parse_boolv(&vals[F_STANDALONE], &o->standalone))
    return GR_EXIT_USAGE;
  if (o->standalone) {
    if (vals[F_NNODES].given && o->nnodes != 1)
      return usage_error("--standalone runs one node, but %s is '%s'",
                         vals[F_NNODES].origin, vals[F_NNODES].text);
    o->nnodes = 1;
    o->node_rank = 0;
    strcpy(o->master_addr, "127.0.0.1");
    o->master_port = 0;
  }
  if (parse_long(&vals[F_MAX_RESTARTS], 0, 1000000, &x))
    return GR_EXIT_USAGE;
  o->max_restarts = (int)x;
  o->log_dir = vals[F_LOG_DIR].text[0] ? vals[F_LOG_DIR].text : NULL;
  o->secret_file =
      vals[F_SECRET_FILE].text[0] ? vals[F_SECRET_FILE].text : NULL;
  if (parse_long(&vals[F_TEE], 0, 3, &x))
    return GR_EXIT_USAGE;
  o->tee = (int)x;
  if (o->tee == 0 && o->log_dir == NULL && vals[F_TEE].given)
    fprintf(stderr, "gangrun: warning: --tee 0 without --log-dir discards "
                    "all worker output\n");
  int64_t ms;
  if (gang__parse_duration_ms(vals[F_TERM_GRACE].origin,
                              vals[F_TERM_GRACE].text, &ms) != GANG_OK)
    return usage_error("%s: '%s' is not a duration (e.g. 10s, 500ms)",
                       vals[F_TERM_GRACE].origin, vals[F_TERM_GRACE].text);
  o->term_grace_ms = ms;
  if (gang__parse_duration_ms(vals[F_JOIN_TIMEOUT].origin,
                              vals[F_JOIN_TIMEOUT].text, &ms) != GANG_OK ||
      ms <= 0)
    return usage_error("%s: '%s' is not a positive duration",
                       vals[F_JOIN_TIMEOUT].origin, vals[F_JOIN_TIMEOUT].text);
  o->join_timeout_ms = ms;
  if (parse_boolv(&vals[F_NO_STORE], &o->no_store))
    return GR_EXIT_USAGE;
  if (o->nnodes > 1 && o->master_port == 0)
    return usage_error("%s 0 (pick a free port) works only with one node; "
                       "give every node the same port%s",
                       vals[F_MASTER_PORT].origin, "");
  const char *rid = vals[F_RDZV_ID].text;
  if (strlen(rid) >= sizeof o->run_id)
    return usage_error("%s: '%s' is too long", vals[F_RDZV_ID].origin, rid);
  strcpy(o->run_id, rid);
  if (parse_filter(&vals[F_FILTER], o))
    return GR_EXIT_USAGE;
  if (parse_long(&vals[F_REPLICA_GROUPS], 0, GR_MAX_GROUPS, &x))
    return GR_EXIT_USAGE;
  o->replica_groups = (int)x;
  if (o->replica_groups > 0 && o->nnodes > 1)
    return usage_error("%s runs every group on this node: it does not go "
                       "with --nnodes > 1%s",
                       vals[F_REPLICA_GROUPS].origin, "");
  /* One group of a --replica-groups run: gangrun started us. */
  const char *grp = getenv("GANG_REPLICA_GROUP");
  o->replica_group = -1;
  if (grp != NULL && grp[0] != '\0') {
    value v = {grp, "GANG_REPLICA_GROUP", true};
    if (parse_long(&v, -1, GR_MAX_GROUPS - 1, &x))
      return GR_EXIT_USAGE;
    o->replica_group = (int)x;
  }
  if (o->replica_group >= 0) {
    o->replica_groups = 0;
    /* Each group hosts a store of its own on a free port and gives its
     * workers a free MASTER_PORT apart from it (main.c). */
    o->master_port = 0;
  }
  return 0;
}

void gr_free_options(gr_options *o) {
  free(o->show);
  o->show = NULL;
}
