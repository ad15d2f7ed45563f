/* The world from the environment: which launcher started this process, and
 * what it says about rank, size, locality and the rendezvous address.
 *
 * Each source is a function that returns GANG_NOT_FOUND when its variables
 * are absent, GANG_OK when it filled the info, and GANG_INVALID_ARGUMENT
 * (naming the variable and value) when they are present but wrong. The
 * first source that is present wins; a present-but-wrong source is an error
 * rather than a fall-through, because silently using the next launcher's
 * idea of the world would make ranks disagree and hang later.
 *
 * One exception to the order: Slurm's variables leak into everything that
 * runs inside an allocation, including `mpirun` run from an sbatch script.
 * When an MPI launcher's variables are present and describe a different
 * rank or size than Slurm's, the MPI launcher started this process and the
 * Slurm variables describe the enclosing job, so Slurm is skipped. */
#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "core/hostport.h"
#include "core/log.h"
#include "gang/env.h"
#include "launch/env_internal.h"
#include "launch/hostlist.h"

extern char **environ;

/* The first version of gang_world_info ends after restart_count; a caller
 * built against it passes this size. Keep it fixed when appending. */
#define WORLD_INFO_V1_SIZE                                                     \
  (offsetof(gang_world_info, restart_count) + sizeof(int))

typedef struct env {
  const char *const *envp; /* NULL = process environment */
} env;

static const char *env_get(const env *e, const char *name) {
  if (e->envp == NULL)
    return getenv(name);
  size_t n = strlen(name);
  for (const char *const *p = e->envp; *p != NULL; p++)
    if (strncmp(*p, name, n) == 0 && (*p)[n] == '=')
      return *p + n + 1;
  return NULL;
}

/* Reads an integer variable into *out when set (*set tells), checking
 * lo <= v <= hi. The message names the variable and the text. */
static gang_status env_int(const env *e, const char *name, int64_t lo,
                           int64_t hi, int *out, bool *set) {
  const char *text = env_get(e, name);
  *set = text != NULL;
  if (text == NULL)
    return GANG_OK;
  int64_t v;
  if (gang__parse_int(name, text, &v) != GANG_OK)
    return gang__error(GANG_INVALID_ARGUMENT, "%s='%s' is not an integer", name,
                       text);
  if (v < lo || v > hi)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s='%s' is out of range (%lld..%lld)", name, text,
                       (long long)lo, (long long)hi);
  *out = (int)v;
  return GANG_OK;
}

static gang_status need(const char *name, bool set, const char *because,
                        const char *because_value) {
  if (set)
    return GANG_OK;
  return gang__error(GANG_INVALID_ARGUMENT, "%s is not set but %s='%s' is",
                     name, because, because_value);
}

/* A pair like LOCAL_RANK / LOCAL_WORLD_SIZE must be both set or both not. */
static gang_status pair(const env *e, const char *a, bool a_set, const char *b,
                        bool b_set) {
  if (a_set && !b_set)
    return need(b, false, a, env_get(e, a));
  if (b_set && !a_set)
    return need(a, false, b, env_get(e, b));
  return GANG_OK;
}

static gang_status rank_below(const env *e, const char *rname, int r,
                              const char *sname, int s) {
  if (r < s)
    return GANG_OK;
  return gang__error(GANG_INVALID_ARGUMENT,
                     "%s='%s' is out of range: must be less than %s=%d", rname,
                     env_get(e, rname), sname, s);
}

static gang_status size_within(const env *e, const char *sname, int s,
                               const char *wname, int w) {
  if (s <= w)
    return GANG_OK;
  return gang__error(GANG_INVALID_ARGUMENT,
                     "%s='%s' is out of range: must not exceed %s=%d", sname,
                     env_get(e, sname), wname, w);
}

static gang_status copy_str(const char *name, const char *text, char *dst,
                            size_t cap) {
  size_t n = strlen(text);
  if (n >= cap)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s='%.64s...' is longer than %zu characters", name,
                       text, cap - 1);
  memcpy(dst, text, n + 1);
  return GANG_OK;
}

/* MASTER_ADDR: a host name or address, no spaces; brackets around an IPv6
 * literal are removed. */
static gang_status set_master_addr(const char *name, const char *text,
                                   gang_world_info *w) {
  if (*text == '\0')
    return gang__error(GANG_INVALID_ARGUMENT, "%s is set but empty", name);
  for (const char *p = text; *p; p++)
    if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p) || *p == '/')
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s='%s' is not a host name or address", name, text);
  size_t n = strlen(text);
  if (text[0] == '[' && n > 2 && text[n - 1] == ']') {
    if (n - 2 >= sizeof w->master_addr)
      return gang__error(GANG_INVALID_ARGUMENT, "%s='%s' is too long", name,
                         text);
    memcpy(w->master_addr, text + 1, n - 2);
    w->master_addr[n - 2] = '\0';
    return GANG_OK;
  }
  return copy_str(name, text, w->master_addr, sizeof w->master_addr);
}

/* MASTER_ADDR / MASTER_PORT when set, for every source. */
static gang_status read_master(const env *e, gang_world_info *w, bool *addr_set,
                               bool *port_set) {
  const char *addr = env_get(e, "MASTER_ADDR");
  *addr_set = addr != NULL;
  if (addr != NULL)
    GANG_CHECK(set_master_addr("MASTER_ADDR", addr, w));
  GANG_CHECK(env_int(e, "MASTER_PORT", 1, 65535, &w->master_port, port_set));
  return GANG_OK;
}

/* torchrun / gangrun. */
static gang_status from_torchrun(const env *e, gang_world_info *w) {
  static const char *const trigger[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                        "LOCAL_WORLD_SIZE", "GROUP_RANK"};
  const char *why = NULL;
  for (size_t i = 0; i < sizeof trigger / sizeof trigger[0] && !why; i++)
    if (env_get(e, trigger[i]) != NULL)
      why = trigger[i];
  if (why == NULL)
    return GANG_NOT_FOUND;

  bool rs, ws, lrs, lws, grs, gws, as, ps;
  int group_rank = -1, group_size = -1;
  GANG_CHECK(env_int(e, "WORLD_SIZE", 1, INT_MAX, &w->world_size, &ws));
  GANG_CHECK(need("WORLD_SIZE", ws, why, env_get(e, why)));
  GANG_CHECK(env_int(e, "RANK", 0, INT_MAX, &w->rank, &rs));
  GANG_CHECK(need("RANK", rs, why, env_get(e, why)));
  GANG_CHECK(rank_below(e, "RANK", w->rank, "WORLD_SIZE", w->world_size));

  GANG_CHECK(
      env_int(e, "LOCAL_WORLD_SIZE", 1, INT_MAX, &w->local_world_size, &lws));
  GANG_CHECK(env_int(e, "LOCAL_RANK", 0, INT_MAX, &w->local_rank, &lrs));
  GANG_CHECK(pair(e, "LOCAL_RANK", lrs, "LOCAL_WORLD_SIZE", lws));
  if (lws) {
    GANG_CHECK(size_within(e, "LOCAL_WORLD_SIZE", w->local_world_size,
                           "WORLD_SIZE", w->world_size));
    GANG_CHECK(rank_below(e, "LOCAL_RANK", w->local_rank, "LOCAL_WORLD_SIZE",
                          w->local_world_size));
  }

  /* Nodes: GROUP_RANK / GROUP_WORLD_SIZE when given; otherwise derived
   * assuming every node runs LOCAL_WORLD_SIZE workers (torchrun's
   * --nproc-per-node is the same on every node), which is only possible
   * when that divides WORLD_SIZE. */
  GANG_CHECK(env_int(e, "GROUP_WORLD_SIZE", 1, INT_MAX, &group_size, &gws));
  if (gws)
    GANG_CHECK(size_within(e, "GROUP_WORLD_SIZE", group_size, "WORLD_SIZE",
                           w->world_size));
  GANG_CHECK(env_int(e, "GROUP_RANK", 0, INT_MAX, &group_rank, &grs));
  bool homogeneous = lws && w->world_size % w->local_world_size == 0;
  w->num_nodes = gws ? group_size
                     : (homogeneous ? w->world_size / w->local_world_size : -1);
  if (grs && w->num_nodes > 0) {
    if (group_rank >= w->num_nodes)
      return gang__error(
          GANG_INVALID_ARGUMENT,
          "GROUP_RANK='%s' is out of range: must be less than the number of "
          "nodes, %d (%s)",
          env_get(e, "GROUP_RANK"), w->num_nodes,
          gws ? "GROUP_WORLD_SIZE" : "WORLD_SIZE / LOCAL_WORLD_SIZE");
  }
  w->node_rank =
      grs ? group_rank : (homogeneous ? w->rank / w->local_world_size : -1);

  GANG_CHECK(read_master(e, w, &as, &ps));
  if (w->world_size > 1 && env_get(e, "GANG_STORE_ADDR") == NULL) {
    /* torch's env:// needs both to rendezvous; torchrun always sets them.
     * GANG_STORE_ADDR names the store itself, which is all gang needs. */
    GANG_CHECK(need("MASTER_ADDR", as, "WORLD_SIZE", env_get(e, "WORLD_SIZE")));
    GANG_CHECK(need("MASTER_PORT", ps, "WORLD_SIZE", env_get(e, "WORLD_SIZE")));
  } else if (!as && w->world_size == 1) {
    strcpy(w->master_addr, "127.0.0.1");
  }
  w->source = GANG_WORLD_SOURCE_TORCHRUN;
  return GANG_OK;
}

/* Rank and size an MPI launcher describes, if any (parsed leniently: this
 * is only to tell whether Slurm's variables are ours). */
static bool mpi_world(const env *e, long *rank, long *size) {
  static const char *const names[][2] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"}};
  for (size_t i = 0; i < 2; i++) {
    const char *r = env_get(e, names[i][0]), *s = env_get(e, names[i][1]);
    if (r != NULL || s != NULL) {
      *rank = r ? strtol(r, NULL, 10) : -1;
      *size = s ? strtol(s, NULL, 10) : -1;
      return true;
    }
  }
  return false;
}

static gang_status from_slurm(const env *e, gang_world_info *w) {
  const char *procid = env_get(e, "SLURM_PROCID");
  if (procid == NULL)
    return GANG_NOT_FOUND;
  /* The step's values describe this srun; the job's the whole allocation
   * (a step may use part of it). */
  const char *ntasks_name = env_get(e, "SLURM_STEP_NUM_TASKS")
                                ? "SLURM_STEP_NUM_TASKS"
                                : "SLURM_NTASKS";
  const char *nnodes_name = env_get(e, "SLURM_STEP_NUM_NODES")
                                ? "SLURM_STEP_NUM_NODES"
                                : "SLURM_NNODES";
  const char *tpn_name = env_get(e, "SLURM_STEP_TASKS_PER_NODE")
                             ? "SLURM_STEP_TASKS_PER_NODE"
                             : "SLURM_TASKS_PER_NODE";
  const char *list_name = env_get(e, "SLURM_STEP_NODELIST")
                              ? "SLURM_STEP_NODELIST"
                              : "SLURM_JOB_NODELIST";
  bool set, lset, nset, nnset, as, ps;

  GANG_CHECK(env_int(e, ntasks_name, 1, INT_MAX, &w->world_size, &set));
  GANG_CHECK(need(ntasks_name, set, "SLURM_PROCID", procid));
  GANG_CHECK(env_int(e, "SLURM_PROCID", 0, INT_MAX, &w->rank, &set));
  GANG_CHECK(
      rank_below(e, "SLURM_PROCID", w->rank, ntasks_name, w->world_size));

  long mr, ms;
  if (mpi_world(e, &mr, &ms) && (mr != w->rank || ms != w->world_size)) {
    GANG_INFO(ENV,
              "Slurm says rank %d of %d but an MPI launcher says %ld of %ld: "
              "the MPI launcher started this process, ignoring Slurm",
              w->rank, w->world_size, mr, ms);
    return GANG_NOT_FOUND;
  }

  int nodeid = 0, nnodes = 0, localid = 0;
  GANG_CHECK(env_int(e, nnodes_name, 1, INT_MAX, &nnodes, &nnset));
  if (nnset)
    GANG_CHECK(size_within(e, nnodes_name, nnodes, ntasks_name, w->world_size));
  GANG_CHECK(env_int(e, "SLURM_NODEID", 0, INT_MAX, &nodeid, &nset));
  if (nset && nnset)
    GANG_CHECK(rank_below(e, "SLURM_NODEID", nodeid, nnodes_name, nnodes));
  GANG_CHECK(env_int(e, "SLURM_LOCALID", 0, INT_MAX, &localid, &lset));

  /* Tasks on this node: Slurm's compressed per-node list ("2(x3),1")
   * handles uneven layouts; else --ntasks-per-node; else an even split. */
  const char *tpn = env_get(e, tpn_name);
  int lws = 0;
  bool lws_set = false;
  if (tpn != NULL && nset) {
    GANG_CHECK(gang__tasks_per_node(tpn_name, tpn, nodeid, &lws));
    lws_set = true;
  } else {
    GANG_CHECK(env_int(e, "SLURM_NTASKS_PER_NODE", 1, INT_MAX, &lws, &lws_set));
  }
  if (!lws_set) {
    if (nnset && w->world_size % nnodes == 0) {
      lws = w->world_size / nnodes;
    } else if (nnset && nnodes == 1) {
      lws = w->world_size;
    } else if (!lset) {
      lws = 1; /* nothing said about locality: assume alone */
    } else {
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s is not set and %s='%s' does not divide %s='%s': "
                         "cannot tell how many tasks run on this node",
                         tpn_name, nnodes_name,
                         nnset ? env_get(e, nnodes_name) : "(unset)",
                         ntasks_name, env_get(e, ntasks_name));
    }
  }
  if (lws > w->world_size)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s gives %d tasks on node %d, more than %s=%d",
                       tpn ? tpn_name : "SLURM_NTASKS_PER_NODE", lws, nodeid,
                       ntasks_name, w->world_size);
  if (localid >= lws)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "SLURM_LOCALID='%s' is out of range: this node runs %d "
                       "tasks",
                       env_get(e, "SLURM_LOCALID"), lws);
  w->local_rank = localid;
  w->local_world_size = lws;
  w->node_rank = nset ? nodeid : -1;
  w->num_nodes = nnset ? nnodes : -1;

  GANG_CHECK(read_master(e, w, &as, &ps));
  if (!as) {
    const char *list = env_get(e, list_name);
    if (list != NULL)
      GANG_CHECK(gang__hostlist_first(list_name, list, w->master_addr,
                                      sizeof w->master_addr));
    else if (w->world_size == 1)
      strcpy(w->master_addr, "127.0.0.1");
    else
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s is not set (and MASTER_ADDR is not): no master "
                         "address for %s=%d tasks",
                         list_name, ntasks_name, w->world_size);
  }
  if (!ps) {
    const char *job = env_get(e, "SLURM_JOB_ID");
    int64_t id;
    if (job != NULL) {
      if (gang__parse_int("SLURM_JOB_ID", job, &id) != GANG_OK || id < 0)
        return gang__error(GANG_INVALID_ARGUMENT,
                           "SLURM_JOB_ID='%s' is not a job number (needed "
                           "for the port when MASTER_PORT is not set)",
                           job);
      w->master_port =
          GANG__SLURM_PORT_BASE + (int)(id % GANG__SLURM_PORT_SPAN);
    } else if (w->world_size > 1) {
      return gang__error(GANG_INVALID_ARGUMENT,
                         "neither MASTER_PORT nor SLURM_JOB_ID is set: no "
                         "rendezvous port for %s=%d tasks",
                         ntasks_name, w->world_size);
    }
  }
  w->source = GANG_WORLD_SOURCE_SLURM;
  return GANG_OK;
}

/* Open MPI and MPICH say rank, size and locality, never a rendezvous
 * address: MASTER_ADDR / MASTER_PORT when set, else loopback when every
 * rank is on this node, else unknown (empty / 0). */
static gang_status from_mpi(const env *e, gang_world_info *w, const char *rn,
                            const char *sn, const char *lrn, const char *lsn,
                            gang_world_source source) {
  const char *why = env_get(e, rn) ? rn : env_get(e, sn) ? sn : NULL;
  if (why == NULL)
    return GANG_NOT_FOUND;
  bool rs, ss, lrs, lss, as, ps;
  GANG_CHECK(env_int(e, sn, 1, INT_MAX, &w->world_size, &ss));
  GANG_CHECK(need(sn, ss, why, env_get(e, why)));
  GANG_CHECK(env_int(e, rn, 0, INT_MAX, &w->rank, &rs));
  GANG_CHECK(need(rn, rs, why, env_get(e, why)));
  GANG_CHECK(rank_below(e, rn, w->rank, sn, w->world_size));
  GANG_CHECK(env_int(e, lsn, 1, INT_MAX, &w->local_world_size, &lss));
  GANG_CHECK(env_int(e, lrn, 0, INT_MAX, &w->local_rank, &lrs));
  GANG_CHECK(pair(e, lrn, lrs, lsn, lss));
  if (lss) {
    GANG_CHECK(size_within(e, lsn, w->local_world_size, sn, w->world_size));
    GANG_CHECK(rank_below(e, lrn, w->local_rank, lsn, w->local_world_size));
  }
  /* MPI maps ranks to nodes by slot, by node or by a rank file: only a
   * single-node world tells the node index for sure. */
  bool one_node = w->local_world_size == w->world_size;
  w->node_rank = one_node ? 0 : -1;
  w->num_nodes = one_node ? 1 : -1;
  GANG_CHECK(read_master(e, w, &as, &ps));
  if (!as && one_node)
    strcpy(w->master_addr, "127.0.0.1");
  w->source = source;
  return GANG_OK;
}

static gang_status from_single(const env *e, gang_world_info *w) {
  bool as, ps;
  GANG_CHECK(read_master(e, w, &as, &ps));
  if (!as)
    strcpy(w->master_addr, "127.0.0.1");
  w->source = GANG_WORLD_SOURCE_SINGLE;
  return GANG_OK;
}

/* Fields every source shares: store address, run id, restart count. */
static gang_status finish(const env *e, gang_world_info *w) {
  const char *sa = env_get(e, "GANG_STORE_ADDR");
  if (sa != NULL) {
    if (*sa == '\0')
      return gang__error(GANG_INVALID_ARGUMENT, "GANG_STORE_ADDR is set but "
                                                "empty");
    GANG_CHECK(
        copy_str("GANG_STORE_ADDR", sa, w->store_addr, sizeof w->store_addr));
  } else if (w->store_addr[0] == '\0' && w->master_addr[0] != '\0' &&
             w->master_port > 0) {
    /* torchrun's agent holds MASTER_PORT with a torch TCPStore and says so
     * with TORCHELASTIC_USE_AGENT_STORE (torch compares it with "True"):
     * meet there, in torch's protocol (src/store/torch_client.c), rather
     * than have rank 0 listen on a port that is taken. */
    const char *agent = env_get(e, "TORCHELASTIC_USE_AGENT_STORE");
    bool torch = agent != NULL &&
                 (strcmp(agent, "True") == 0 || strcmp(agent, "true") == 0 ||
                  strcmp(agent, "1") == 0);
    size_t skip = torch ? strlen("torch://") : 0;
    if (torch)
      memcpy(w->store_addr, "torch://", skip);
    gang__hostport_format(w->store_addr + skip, sizeof w->store_addr - skip,
                          w->master_addr, w->master_port);
  }
  static const char *const run_ids[] = {"GANG_RUN_ID", "TORCHELASTIC_RUN_ID",
                                        "SLURM_JOB_ID"};
  for (size_t i = 0; i < 3; i++) {
    const char *v = env_get(e, run_ids[i]);
    if (v != NULL) {
      GANG_CHECK(copy_str(run_ids[i], v, w->run_id, sizeof w->run_id));
      break;
    }
  }
  bool set;
  GANG_CHECK(
      env_int(e, "GANG_RESTART_COUNT", 0, INT_MAX, &w->restart_count, &set));
  if (!set)
    GANG_CHECK(env_int(e, "TORCHELASTIC_RESTART_COUNT", 0, INT_MAX,
                       &w->restart_count, &set));
  return GANG_OK;
}

static void info_init(gang_world_info *w) {
  memset(w, 0, sizeof *w);
  w->size = sizeof *w;
  w->source = GANG_WORLD_SOURCE_SINGLE;
  w->world_size = 1;
  w->local_world_size = 1;
  w->num_nodes = 1;
}

static gang_status check_out(const char *fn, const gang_world_info *info) {
  GANG_ARG_CHECK(info != NULL, fn, "info is NULL");
  if (info->size < WORLD_INFO_V1_SIZE)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: info->size is %zu, expected at least %zu (use "
                       "GANG_WORLD_INFO_INIT)",
                       fn, info->size, (size_t)WORLD_INFO_V1_SIZE);
  return GANG_OK;
}

/* Copies what the caller's version of the struct has room for. */
static void publish(const gang_world_info *w, gang_world_info *info) {
  size_t n = info->size < sizeof *w ? info->size : sizeof *w;
  size_t keep = info->size;
  memcpy(info, w, n);
  info->size = keep;
}

static gang_status read_env(const env *e, gang_world_info *w) {
  info_init(w);
  gang_status st = from_torchrun(e, w);
  if (st == GANG_NOT_FOUND)
    st = from_slurm(e, (info_init(w), w));
  if (st == GANG_NOT_FOUND)
    st = from_mpi(e, (info_init(w), w), "OMPI_COMM_WORLD_RANK",
                  "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                  "OMPI_COMM_WORLD_LOCAL_SIZE", GANG_WORLD_SOURCE_OPENMPI);
  if (st == GANG_NOT_FOUND)
    st =
        from_mpi(e, (info_init(w), w), "PMI_RANK", "PMI_SIZE",
                 "MPI_LOCALRANKID", "MPI_LOCALNRANKS", GANG_WORLD_SOURCE_MPICH);
  if (st == GANG_NOT_FOUND)
    st = from_single(e, (info_init(w), w));
  if (st != GANG_OK)
    return st;
  GANG_CHECK(finish(e, w));
  strcpy(w->init_method, "env://");
  return GANG_OK;
}

gang_status gang__world_info_from_envp(const char *const *envp,
                                       gang_world_info *info) {
  GANG_CHECK(check_out("gang_world_info_from_env", info));
  env e = {envp};
  gang_world_info w;
  GANG_CHECK(read_env(&e, &w));
  GANG_INFO(ENV,
            "world from %s: rank %d of %d, local %d of %d, node %d of %d, "
            "master %s:%d, store '%s'",
            gang_world_source_name(w.source), w.rank, w.world_size,
            w.local_rank, w.local_world_size, w.node_rank, w.num_nodes,
            w.master_addr, w.master_port, w.store_addr);
  publish(&w, info);
  return GANG_OK;
}

gang_status gang_world_info_from_env(gang_world_info *info) {
  return gang__world_info_from_envp(NULL, info);
}

/* ---- init methods -------------------------------------------------------- */

/* Applies "?rank=R&world_size=N" (torch's query form) to *rank / *size,
 * refusing a value that contradicts an argument. Other keys are ignored, as
 * torch ignores them. */
static gang_status parse_query(const char *um, const char *q, int *rank,
                               int *size) {
  while (*q != '\0') {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (eq == NULL || eq == q)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "init_method '%s': query parameter '%.*s' is not "
                         "key=value",
                         um, (int)n, q);
    size_t kn = (size_t)(eq - q);
    int *dst = NULL;
    const char *label = NULL;
    if (kn == 4 && strncmp(q, "rank", 4) == 0)
      dst = rank, label = "rank";
    else if (kn == 10 && strncmp(q, "world_size", 10) == 0)
      dst = size, label = "world_size";
    if (dst != NULL) {
      char val[32];
      size_t vn = n - kn - 1;
      if (vn == 0 || vn >= sizeof val)
        return gang__error(GANG_INVALID_ARGUMENT,
                           "init_method '%s': bad %s value '%.*s'", um, label,
                           (int)vn, eq + 1);
      memcpy(val, eq + 1, vn);
      val[vn] = '\0';
      int64_t v;
      if (gang__parse_int(label, val, &v) != GANG_OK || v < 0 || v > INT_MAX)
        return gang__error(GANG_INVALID_ARGUMENT,
                           "init_method '%s': %s='%s' is not a non-negative "
                           "integer",
                           um, label, val);
      if (*dst >= 0 && *dst != (int)v)
        return gang__error(GANG_INVALID_ARGUMENT,
                           "init_method '%s': %s=%s contradicts the %s "
                           "argument %d",
                           um, label, val, label, *dst);
      *dst = (int)v;
    }
    q += n;
    if (*q == '&')
      q++;
  }
  return GANG_OK;
}

static gang_status check_rank_size(const char *um, int rank, int size) {
  if (size < 1)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "init_method '%s': world_size %d must be given and at "
                       "least 1",
                       um, size);
  if (rank < 0 || rank >= size)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "init_method '%s': rank %d must be given and in "
                       "0..%d",
                       um, rank, size - 1);
  return GANG_OK;
}

static gang_status parse_tcp(const char *um, const char *hp, size_t n,
                             gang_world_info *w) {
  char buf[GANG_WORLD_URL_MAX];
  if (n >= sizeof buf)
    return gang__error(GANG_INVALID_ARGUMENT, "init_method: too long");
  memcpy(buf, hp, n);
  buf[n] = '\0';
  /* The tail: torch tolerates a trailing '/' after the port. */
  gang__hostport a;
  gang_status st = gang__hostport_parse(buf, GANG__HOSTPORT_TAIL, &a, NULL);
  if (st != GANG_OK)
    return gang__error_wrap(st, "init_method '%s'", um);
  GANG_CHECK(set_master_addr("init_method host", a.host, w));
  w->master_port = a.port;
  gang__hostport_format(w->store_addr, sizeof w->store_addr, w->master_addr,
                        w->master_port);
  return GANG_OK;
}

gang_status gang__world_info_from_init_method_envp(const char *const *envp,
                                                   const char *init_method,
                                                   int rank, int world_size,
                                                   gang_world_info *info) {
  static const char fn[] = "gang_world_info_from_init_method";
  GANG_CHECK(check_out(fn, info));
  env e = {envp};
  gang_world_info w;
  const char *um = init_method;
  if (rank < -1 || world_size < -1 || world_size == 0)
    return gang__error(GANG_INVALID_ARGUMENT,
                       "%s: rank %d / world_size %d: pass -1 for \"from the "
                       "environment\"",
                       fn, rank, world_size);

  if (um == NULL || *um == '\0' || strncmp(um, "env://", 6) == 0) {
    if (um != NULL && um[0] != '\0' && um[6] != '\0') {
      if (um[6] != '?')
        return gang__error(GANG_INVALID_ARGUMENT,
                           "init_method '%s': env:// takes no address", um);
      GANG_CHECK(parse_query(um, um + 7, &rank, &world_size));
    }
    GANG_CHECK(read_env(&e, &w));
    if ((rank >= 0 && rank != w.rank) ||
        (world_size >= 1 && world_size != w.world_size)) {
      int r = rank >= 0 ? rank : w.rank;
      int s = world_size >= 1 ? world_size : w.world_size;
      GANG_CHECK(check_rank_size("env://", r, s));
      /* The caller redefined the world: the launcher's locality no longer
       * describes it. */
      w.rank = r;
      w.world_size = s;
      w.local_rank = 0;
      w.local_world_size = 1;
      w.node_rank = s == 1 ? 0 : -1;
      w.num_nodes = s == 1 ? 1 : -1;
    }
    publish(&w, info);
    return GANG_OK;
  }

  info_init(&w);
  w.source = GANG_WORLD_SOURCE_INIT_METHOD;
  w.node_rank = w.num_nodes = -1;
  const char *q = strchr(um, '?');
  size_t body = q ? (size_t)(q - um) : strlen(um);
  if (q != NULL)
    GANG_CHECK(parse_query(um, q + 1, &rank, &world_size));
  if (strncmp(um, "tcp://", 6) == 0) {
    GANG_CHECK(parse_tcp(um, um + 6, body - 6, &w));
  } else if (strncmp(um, "file://", 7) == 0) {
    if (body <= 7 || um[7] != '/')
      return gang__error(GANG_INVALID_ARGUMENT,
                         "init_method '%s': expected file:///absolute/path",
                         um);
    if (body >= sizeof w.store_addr)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "init_method: path longer than %zu characters",
                         sizeof w.store_addr - 8);
    memcpy(w.store_addr, um, body);
    w.store_addr[body] = '\0';
  } else {
    return gang__error(GANG_INVALID_ARGUMENT,
                       "init_method '%s': unsupported scheme (use env://, "
                       "tcp://host:port or file:///path)",
                       um);
  }
  GANG_CHECK(check_rank_size(um, rank, world_size));
  w.rank = rank;
  w.world_size = world_size;
  if (world_size == 1)
    w.node_rank = 0, w.num_nodes = 1;
  if (strlen(um) >= sizeof w.init_method)
    return gang__error(GANG_INVALID_ARGUMENT, "init_method: too long");
  strcpy(w.init_method, um);

  /* Locality from the launcher, when it describes the same world. Errors
   * in unrelated variables do not matter here. */
  gang_world_info l;
  gang_status saved = gang_last_status();
  if (read_env(&e, &l) == GANG_OK && l.source != GANG_WORLD_SOURCE_SINGLE &&
      l.rank == rank && l.world_size == world_size) {
    w.local_rank = l.local_rank;
    w.local_world_size = l.local_world_size;
    w.node_rank = l.node_rank;
    w.num_nodes = l.num_nodes;
    w.restart_count = l.restart_count;
    memcpy(w.run_id, l.run_id, sizeof w.run_id);
  } else if (saved == GANG_OK) {
    gang_clear_error();
  }
  publish(&w, info);
  return GANG_OK;
}

gang_status gang_world_info_from_init_method(const char *init_method, int rank,
                                             int world_size,
                                             gang_world_info *info) {
  return gang__world_info_from_init_method_envp(NULL, init_method, rank,
                                                world_size, info);
}

const char *gang_world_source_name(gang_world_source source) {
  switch (source) {
  case GANG_WORLD_SOURCE_SINGLE:
    return "single";
  case GANG_WORLD_SOURCE_TORCHRUN:
    return "torchrun";
  case GANG_WORLD_SOURCE_SLURM:
    return "slurm";
  case GANG_WORLD_SOURCE_OPENMPI:
    return "openmpi";
  case GANG_WORLD_SOURCE_MPICH:
    return "mpich";
  case GANG_WORLD_SOURCE_INIT_METHOD:
    return "init_method";
  }
  return "unknown";
}
