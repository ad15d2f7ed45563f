/* Creating a process-group world: the store connection (and the store
 * itself on rank 0 when no launcher hosts it), the fabric, this host's
 * shared-memory arena and the world's first gang. A world is shared by
 * that gang and every sub-gang made from it, and freed when the last of
 * them is destroyed. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/cpus.h"
#include "core/error.h"
#include "core/hostport.h"
#include "core/log.h"
#include "core/options.h"
#include "gang/env.h"
#include "launch/pmix.h"
#include "pg_internal.h"
#include "store/auth.h"
#include "store/server.h"
#include "transport/ifname.h"

/* A field of the caller's options, or `def` when the caller's struct is
 * too old (smaller) to have it or there are no options. */
#define OPT(o, field, def) GANG__OPTS_GET(gang_options, o, field, def)

/* GANG_ALGO, the same on every rank: every member of a gang must choose
 * the same algorithm, so a rank whose setting differs from rank 0's fails
 * here instead of hanging or corrupting later. */
static gang_status agree_algo(pg_world *w, int rank) {
  const char *mine = gang__setting_str(GANG_SETTING_ALGO);
  GANG_CHECK(gang__algo_choice_parse(mine, &w->choice));
  if (w->store == NULL)
    return GANG_OK;
  if (rank == 0)
    return gang_store_set(w->store, "pg/algo", mine, strlen(mine) + 1);
  void *v = NULL;
  size_t len = 0;
  GANG_CHECK(gang_store_get(w->store, "pg/algo", &v, &len));
  bool same = len == strlen(mine) + 1 && memcmp(v, mine, len) == 0;
  gang_status st =
      same ? GANG_OK
           : gang__error(GANG_INVALID_ARGUMENT,
                         "GANG_ALGO differs between ranks: rank 0 has '%.*s', "
                         "rank %d '%s'; every rank must choose alike",
                         (int)(len ? len - 1 : 0), (const char *)v, rank, mine);
  gang_store_free(v);
  return st;
}

/* Each rank marks its arrival first, so that a rendezvous that times out
 * names the ranks that never came, not a store key one of them writes. */
static gang_status mark_here(gang_store *st, int rank) {
  char key[48], pid[24];
  snprintf(key, sizeof key, "pg/here/%d", rank);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  return gang_store_set(st, key, pid, strlen(pid));
}

/* A creation that timed out: appends the ranks whose arrival mark is not
 * in the store (each check bounded by `budget_ms`). */
static gang_status name_absent(gang_store *st, int size, int64_t budget_ms,
                               gang_status failed) {
  char why[1024];
  snprintf(why, sizeof why, "%s", gang_last_error());
  if (gang_store_set_timeout(st, budget_ms) != GANG_OK)
    return gang__error(failed, "%s", why);
  char absent[200] = "";
  size_t used = 0;
  int n = 0;
  for (int r = 0; r < size; r++) {
    char key[48];
    snprintf(key, sizeof key, "pg/here/%d", r);
    const char *k = key;
    bool there = true;
    if (gang_store_check(st, &k, 1, &there) != GANG_OK)
      return gang__error(failed, "%s", why); /* the store cannot say */
    if (there)
      continue;
    if (n++ < 16 && used < sizeof absent)
      used += (size_t)snprintf(absent + used, sizeof absent - used, "%s%d",
                               n > 1 ? "," : "", r);
  }
  if (n == 0)
    return gang__error(failed, "%s [every rank of the gang came to it]", why);
  return gang__error(failed,
                     "gang creation: rank%s %s%s of %d never came to the "
                     "rendezvous (%s)",
                     n > 1 ? "s" : "", absent, n > 16 ? ",..." : "", size, why);
}

/* `store_host`: the world rank whose process hosts the store (0 under
 * gang_create_default without a launcher; `server` is its server on that
 * rank), -1 when the store is not a rank's. */
/* The creation's store client is where a cancel finds it (NULL: done). */
static gang_status cancel_watch(gang__setup_cancel *c, gang_store *st) {
  if (c == NULL)
    return GANG_OK;
  pthread_mutex_lock(&c->mu);
  c->store = st;
  bool fired = atomic_load(&c->fired);
  char why[256];
  snprintf(why, sizeof why, "%s", c->why);
  pthread_mutex_unlock(&c->mu);
  if (fired && st != NULL)
    return gang__error(GANG_ABORTED, "gang creation aborted: %s", why);
  return GANG_OK;
}

void gang__setup_cancel_init(gang__setup_cancel *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  atomic_init(&c->fired, false);
}

void gang__setup_cancel_fini(gang__setup_cancel *c) {
  pthread_mutex_destroy(&c->mu);
}

void gang__setup_cancel_fire(gang__setup_cancel *c, const char *why) {
  pthread_mutex_lock(&c->mu);
  if (!atomic_load(&c->fired))
    snprintf(c->why, sizeof c->why, "%s", why);
  atomic_store(&c->fired, true);
  if (c->store != NULL)
    gang__store_interrupt(c->store, c->why);
  pthread_mutex_unlock(&c->mu);
}

/* secret: the store's (NULL: GANG_STORE_SECRET). */
static gang_status create(const gang_options *opts, const char *store_addr,
                          const char *secret, int rank, int size,
                          gang_store_server *server, int store_host,
                          gang__setup_cancel *cancel, gang_t **out) {
  gang_device cpu = {GANG_DEVICE_CPU, 0};
  gang_device dev = OPT(opts, device, cpu);
  if (dev.type != GANG_DEVICE_CPU) {
    gang_store_server_stop(server);
    return gang__error(GANG_NOT_SUPPORTED,
                       "gang: only CPU gangs move data (device type %d)",
                       (int)dev.type);
  }
  int64_t timeout_ms = OPT(opts, timeout_ms, 0);
  if (timeout_ms == 0) {
    gang_status st = gang__setting_int(GANG_SETTING_TIMEOUT, &timeout_ms);
    if (st != GANG_OK) {
      gang_store_server_stop(server);
      return st;
    }
  }
  pg_world *w = calloc(1, sizeof *w);
  if (w == NULL) {
    gang_store_server_stop(server);
    return gang__error(GANG_NO_MEMORY, "gang: out of memory");
  }
  pthread_mutex_init(&w->mu, NULL);
  w->refs = 1; /* the creation's own reference, dropped below */
  w->server = server;
  w->store_host = store_host;
  w->size = size;
  snprintf(w->name, sizeof w->name, "%s", store_addr);
  atomic_init(&w->diag_marked, false);
  atomic_init(&w->diag_done, false);
  atomic_init(&w->flight_dumped, false);
  gang_status st;
  char host[INET6_ADDRSTRLEN] = "127.0.0.1";
  if (size > 1) {
    gang_store_options so = GANG_STORE_OPTIONS_INIT;
    so.timeout_ms = timeout_ms;
    so.secret = secret;
    GANG_CHECK_GOTO(gang_store_connect(store_addr, &so, &w->store), st, fail);
    GANG_CHECK_GOTO(cancel_watch(cancel, w->store), st, fail);
    GANG_CHECK_GOTO(mark_here(w->store, rank), st, fail);
    GANG_CHECK_GOTO(gang__pg_listen_addr(store_addr, OPT(opts, host, NULL),
                                         host, sizeof host),
                    st, fail);
  }
  GANG_CHECK_GOTO(agree_algo(w, rank), st, fail);
  gang__fabric_config cfg = {rank,
                             size,
                             w->store,
                             host,
                             gang__deadline_in_ms(timeout_ms),
                             cancel != NULL ? &cancel->fired : NULL};
  GANG_CHECK_GOTO(gang__fabric_create(&cfg, &w->fabric), st, fail);
  /* From here on the peers know this rank: it must say goodbye if its
   * process exits with the world open. */
  w->pid = getpid();
  w->linger_ms = timeout_ms;
  if (gang__setting_is_set(GANG_SETTING_STORE_LINGER))
    GANG_CHECK_GOTO(gang__setting_int(GANG_SETTING_STORE_LINGER, &w->linger_ms),
                    st, fail);
  gang__pg_exit_add(w);
  double crowd = 1; /* ranks of the world per CPU of this machine, >= 1 */
  if (size > 1) {
    w->hosts = malloc(sizeof *w->hosts * (size_t)size);
    if (w->hosts == NULL) {
      st = gang__error(GANG_NO_MEMORY, "gang: out of memory");
      goto fail;
    }
    int kernel = 1;
    GANG_CHECK_GOTO(gang__shm_create(w->store, rank, size, w->fabric,
                                     cfg.deadline, w->hosts, &kernel, &w->shm,
                                     &w->shm_everywhere),
                    st, fail);
    /* With an arena, its ranks agreed on it (counting the CPUs they may
     * run on between them); without one, this rank counts its own. Either
     * way, ranks of other hosts on this kernel (containers, network
     * namespaces) take the same CPUs: a TCP wait that spins takes the CPU
     * such a peer needs as surely as a local rank's. */
    int local = 0;
    for (int i = 0; i < size; i++)
      local += w->hosts[i] == w->hosts[rank];
    int cpus = gang__cpus_available();
    if (cpus > 0 && kernel > cpus)
      crowd = (double)kernel / cpus;
    if ((w->shm != NULL ? gang__shm_oversubscribed(w->shm) : local > cpus) ||
        kernel > cpus) {
      GANG_INFO(INIT,
                "%d ranks of this world on this machine (%d on this host), "
                "%d CPUs here: TCP waits spin briefly",
                kernel, local, cpus);
      gang__fabric_set_oversubscribed(w->fabric);
    }
  }
  GANG_CHECK_GOTO(gang__pg_net_model(w, rank, size, crowd, cfg.deadline), st,
                  fail);
  /* After setup the store only serves timeout diagnoses, which must not
   * wait longer than their own budget on a lost or stopped store. */
  w->diag_budget_ms = gang__pg_diag_budget_ms(timeout_ms);
  if (w->store != NULL)
    gang_store_set_timeout(w->store, w->diag_budget_ms);
  int *map = malloc(sizeof *map * (size_t)size);
  if (map == NULL) {
    st = gang__error(GANG_NO_MEMORY, "gang: out of memory");
    goto fail;
  }
  for (int i = 0; i < size; i++)
    map[i] = i;
  st = gang__pg_new(w, map, size, rank, 1, dev, timeout_ms, out);
  free(map);
  if (st != GANG_OK)
    goto fail;
  if (OPT(opts, check, 0) != 0)
    (*out)->check = OPT(opts, check, 0) > 0;
  (void)cancel_watch(cancel, NULL);
  gang__log_set_rank(rank);
  GANG_INFO(INIT, "gang rank %d/%d ready (store %s, listening on %s)", rank,
            size, size > 1 ? store_addr : "none", host);
  gang__pg_world_release(w); /* the gang holds its own reference now */
  return GANG_OK;
fail:
  (void)cancel_watch(cancel, NULL);
  if (cancel != NULL && atomic_load(&cancel->fired) && st != GANG_ABORTED) {
    /* The store's or the fabric's error is what the cancel caused. */
    char why[256];
    pthread_mutex_lock(&cancel->mu);
    snprintf(why, sizeof why, "%s", cancel->why);
    pthread_mutex_unlock(&cancel->mu);
    st = gang__error(GANG_ABORTED, "gang creation aborted (%s): %s", why,
                     gang_last_error());
  }
  if (st == GANG_TIMEOUT && w->store != NULL)
    st = name_absent(w->store, size, gang__pg_diag_budget_ms(timeout_ms), st);
  gang__pg_world_release(w);
  return st;
}

gang_status gang_create_with_store(const gang_options *opts,
                                   const char *store_addr, int rank, int size,
                                   gang_t **out) {
  const char *fn = "gang_create_with_store";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(store_addr != NULL && *store_addr, fn, "store_addr is empty");
  GANG_ARG_CHECK(size >= 1, fn, "size must be at least 1, but is %d", size);
  GANG_ARG_CHECK(rank >= 0 && rank < size, fn,
                 "rank must be in [0, %d), but is %d", size, rank);
  return create(opts, store_addr, NULL, rank, size, NULL, -1, NULL, out);
}

gang_status gang__create_with_store_cancel(const gang_options *opts,
                                           const char *store_addr, int rank,
                                           int size, gang__setup_cancel *cancel,
                                           gang_t **out) {
  return create(opts, store_addr, NULL, rank, size, NULL, -1, cancel, out);
}

/* Without a launcher that hosts the store (gangrun sets GANG_STORE_ADDR),
 * rank 0 hosts it at master_addr:master_port, as torch's rank 0 does. */
static gang_status host_store(const gang_world_info *info,
                              gang_store_server **out) {
  gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
  so.host = info->master_addr[0] ? info->master_addr : "127.0.0.1";
  so.port = info->master_port;
  gang_status st = gang_store_server_start(&so, out);
  if (st != GANG_OK)
    return gang__error_wrap(st,
                            "rank 0 hosting the store at %s:%d (run under "
                            "gangrun, or set GANG_STORE_ADDR to a running "
                            "gang-store)",
                            so.host, so.port);
  return GANG_OK;
}

/* Under an engine that says rank and size but not where rank 0 is (mpirun
 * across hosts), its PMIx server carries rank 0's store address -- and,
 * unless the user set a secret, a fresh one -- to every rank (pmix.h).
 * Rank 0 hosts the store on the first interface GANG_SOCKET_IFNAME selects
 * (unset: any but loopback), at MASTER_PORT or a free port. Writes the
 * store's address to base and the secret to secret ("" when the user's
 * setting holds). */
static gang_status pmix_rendezvous(const gang_world_info *info,
                                   gang_store_server **server, char *base,
                                   size_t cap, char *secret, size_t scap) {
  int64_t timeout_ms = 0;
  GANG_CHECK(gang__setting_int(GANG_SETTING_STORE_TIMEOUT, &timeout_ms));
  bool own_secret = *gang__setting_str(GANG_SETTING_STORE_SECRET) == '\0';
  char msg[GANG_WORLD_URL_MAX + 100] = "";
  if (info->rank == 0) {
    const char *spec = gang__setting_str(GANG_SETTING_SOCKET_IFNAME);
    char host[64];
    GANG_CHECK(gang__ifname_addr(*spec ? spec : "^lo", NULL, host, sizeof host,
                                 NULL, 0));
    char fresh[33] = "";
    if (own_secret) {
      uint8_t rnd[16];
      GANG_CHECK(gang__auth_random(rnd, sizeof rnd));
      for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(fresh + 2 * i, 3, "%02x", rnd[i]);
    }
    gang_store_server_options so = GANG_STORE_SERVER_OPTIONS_INIT;
    so.host = host;
    so.port = getenv("MASTER_PORT") != NULL ? info->master_port : 0;
    so.secret = own_secret ? fresh : NULL;
    gang_status st = gang_store_server_start(&so, server);
    if (st != GANG_OK)
      return gang__error_wrap(st,
                              "rank 0 hosting the store at %s:%d for the "
                              "PMIx rendezvous",
                              host, so.port);
    int n = gang__hostport_format(msg, sizeof msg, host,
                                  gang_store_server_port(*server));
    snprintf(msg + n, sizeof msg - (size_t)n, " %s", fresh);
  }
  gang_status st = gang__pmix_exchange(info->rank, info->rank == 0 ? msg : NULL,
                                       msg, sizeof msg, timeout_ms);
  if (st != GANG_OK) {
    gang_store_server_stop(*server);
    *server = NULL;
    return gang__error_wrap(st,
                            "world of %d ranks (from %s) without MASTER_ADDR: "
                            "asking the launcher's PMIx server where rank 0 "
                            "is",
                            info->world_size,
                            gang_world_source_name(info->source));
  }
  char *space = strchr(msg, ' ');
  if (space == NULL || (size_t)(space - msg) >= cap ||
      strlen(space + 1) >= scap) {
    gang_store_server_stop(*server);
    *server = NULL;
    return gang__error(GANG_SYSTEM,
                       "PMIx: rank 0 published '%s', not "
                       "'host:port secret'",
                       msg);
  }
  size_t hl = (size_t)(space - msg);
  memcpy(base, msg, hl);
  base[hl] = '\0';
  snprintf(secret, scap, "%s", space + 1);
  return GANG_OK;
}

gang_status gang_create_default(const gang_options *opts, gang_t **out) {
  const char *fn = "gang_create_default";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  gang_world_info info = GANG_WORLD_INFO_INIT;
  GANG_CHECK(gang_world_info_from_env(&info));
  const char *given = OPT(opts, store_addr, NULL);
  const char *base = given ? given : info.store_addr;
  gang_store_server *server = NULL;
  char met[GANG_WORLD_URL_MAX], secret[64] = "";
  /* PMIx when nothing says where rank 0 is, and under Slurm when only the
   * job's variables do (its first node, a port from the job id): the
   * launcher's PMIx server gives a free port and a secret instead. */
  bool derived = base[0] == '\0' || (info.source == GANG_WORLD_SOURCE_SLURM &&
                                     getenv("MASTER_ADDR") == NULL &&
                                     getenv("MASTER_PORT") == NULL &&
                                     getenv("GANG_STORE_ADDR") == NULL);
  bool via_pmix =
      info.world_size > 1 && given == NULL && derived && gang__pmix_offered();
  if (via_pmix) {
    GANG_CHECK(pmix_rendezvous(&info, &server, met, sizeof met, secret,
                               sizeof secret));
    base = met;
  }
  if (info.world_size > 1 && base[0] == '\0')
    return gang__error(
        GANG_INVALID_ARGUMENT,
        "%s: world of %d ranks (from %s) but no rendezvous address: set "
        "MASTER_ADDR (the host of rank 0, reachable from every rank) and "
        "MASTER_PORT (a free port there) in every rank's environment, or "
        "GANG_STORE_ADDR=host:port of a running gang-store; or start the "
        "ranks with gangrun, or with a launcher whose PMIx server gang can "
        "ask (Open MPI's mpirun, srun --mpi=pmix)",
        fn, info.world_size, gang_world_source_name(info.source));
  bool rank0_hosts =
      via_pmix || (info.world_size > 1 && getenv("GANG_STORE_ADDR") == NULL &&
                   given == NULL && strncmp(base, "file://", 7) != 0 &&
                   strncmp(base, "torch://", 8) != 0);
  if (rank0_hosts && info.rank == 0 && !via_pmix) {
    if (info.master_port == 0)
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s: rank 0 must host the store but MASTER_PORT is "
                         "not set",
                         fn);
    GANG_CHECK(host_store(&info, &server));
  }
  /* Each run and each restart of it gets its own namespace, so keys of an
   * earlier attempt cannot satisfy this one's waits. */
  char addr[GANG_WORLD_URL_MAX + 200];
  snprintf(addr, sizeof addr, "%s/gang/%s/%d", base,
           info.run_id[0] ? info.run_id : "run", info.restart_count);
  return create(opts, addr, secret[0] ? secret : NULL, info.rank,
                info.world_size, server, rank0_hosts ? 0 : -1, NULL, out);
}
