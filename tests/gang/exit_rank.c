/* One rank of a world in which some ranks finish early, for
 * test_pg_exit: a real program, so that returning from main and exit()
 * run the process's exit handlers as they do for users (the harness's
 * forked ranks end with _exit).
 *
 * The world (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
 * environment; rank 0 hosts the store) is split into sub-gangs of --group
 * ranks, blocks of consecutive ranks or, with --stride, every
 * (size/group)-th rank. The ranks of sub-gang --leave are the leavers: a
 * few collectives in their sub-gang, a pause, then they end as --how
 * says. The others are the workers: after a pause they run --ops
 * checked collectives of assorted sizes in their own sub-gang.
 *
 * Ways to end (--how; "random" draws one per leaver from the seed):
 *   return        return from main with every gang open
 *   exit          exit(0) from a function, gangs open
 *   thread-exit   exit(0) from another thread while main sleeps
 *   destroy       gang_destroy of the sub-gang and the world, then return
 *   destroy-sub   gang_destroy of the sub-gang only, then exit(0)
 *   posted        return with the work of its last collective (posted
 *                 and waited for) never freed
 *   kill          SIGKILL itself (a crash)
 *   abort         abort() (a crash)
 *
 * --need: after their collectives the workers meet in a barrier of their
 * own (which must succeed: it does not need the leavers), then call a
 * barrier of the world, which does. After a clean leave it must fail with
 * GANG_PEER_LEFT within 3 s, saying the rank left; after a crash the
 * workers must fail (in their collectives or that barrier) with
 * GANG_PEER_LOST within 3 s of starting the call that fails.
 *
 * --diag MS (with --leave 0: rank 0, the store's host, leaves): the two
 * workers' last collective has the second worker arrive MS late, past
 * GANG_TIMEOUT; the first must get GANG_TIMEOUT with the diagnosis,
 * which needs the store, so rank 0 must still be serving it.
 *
 * --topo: 8 ranks build fairseq2's parallel (tp 2) and FSDP (2 per node)
 * gangs, check each with one all_gather, pause a random while and return
 * without closing them.
 *
 * Prints "exit_rank: rank R ..." lines; exits 0 when everything it saw
 * was as expected, 1 otherwise. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gang/gang.h"
#include "gang/store.h"
#include "gang/topology.h"

static int rank_, size_;

#define FAIL(...)                                                              \
  do {                                                                         \
    printf("exit_rank: rank %d FAIL: ", rank_);                                \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    fflush(stdout);                                                            \
    _exit(1);                                                                  \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* splitmix64: the same stream on every rank for the same seed. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static const char *const hows[] = {"return",  "exit",        "thread-exit",
                                   "destroy", "destroy-sub", "posted",
                                   "kill",    "abort"};
enum { N_CLEAN = 6, N_HOWS = 8 };

static int how_index(const char *s) {
  for (int i = 0; i < N_HOWS; i++)
    if (strcmp(s, hows[i]) == 0)
      return i;
  return -1;
}

static void *exit_thread(void *arg) {
  (void)arg;
  exit(0);
}

/* The sizes of a sub-gang's collectives: the same on its members. */
static size_t op_count(uint64_t seed, int sub, int i) {
  static const size_t counts[] = {2, 1024, 65536, 262144};
  return counts[mix(seed ^ ((uint64_t)sub << 32) ^ (uint64_t)i) % 4];
}

/* One checked all_reduce (SUM of (member rank + 1) * (i + 1)). */
static gang_status checked_all_reduce(gang_t *g, float *buf, size_t n, int i) {
  int gs = gang_size(g);
  for (size_t k = 0; k < n; k++)
    buf[k] = (float)((gang_rank(g) + 1) * (i + 1));
  gang_status st = gang_all_reduce(g, buf, n, GANG_FLOAT32, GANG_SUM);
  if (st != GANG_OK)
    return st;
  float want = (float)(gs * (gs + 1) / 2 * (i + 1));
  for (size_t k = 0; k < n; k++)
    if (buf[k] != want)
      FAIL("all_reduce %d: element %zu is %g, expected %g", i, k,
           (double)buf[k], (double)want);
  return GANG_OK;
}

/* One checked all_gather of one int per member. */
static void checked_all_gather(gang_t *g, const char *name) {
  int n = gang_size(g);
  int mine = 1000 + rank_, *all = calloc((size_t)n, sizeof *all);
  if (all == NULL)
    FAIL("out of memory");
  gang_status st = gang_all_gather(g, all, &mine, 1, GANG_INT32);
  if (st != GANG_OK)
    FAIL("all_gather over %s: %s: %s", name, gang_status_name(st),
         gang_get_last_error(g));
  for (int k = 0; k < n; k++)
    if (all[k] < 1000 || all[k] >= 1000 + size_)
      FAIL("all_gather over %s: slot %d holds %d", name, k, all[k]);
  free(all);
}

static int run_topo(gang_t *world, uint64_t seed) {
  gangs par, fsdp;
  if (gangs_create_parallel(world, 2, 1, &par) != GANG_OK)
    FAIL("gangs_create_parallel: %s", gang_last_error());
  if (gangs_create_fsdp(&par, 2, &fsdp) != GANG_OK)
    FAIL("gangs_create_fsdp: %s", gang_last_error());
  /* Each rank reaches each check and its return at its own moment. */
  gang_t *const gs[] = {par.tp, par.dp, fsdp.sdp, fsdp.rdp};
  const char *const names[] = {"tp", "dp", "sdp", "rdp"};
  for (int i = 0; i < 4; i++) {
    nap_ms((int)(mix(seed ^ (uint64_t)(rank_ * 8 + i)) % 40));
    checked_all_gather(gs[i], names[i]);
  }
  nap_ms((int)(mix(seed ^ (uint64_t)rank_ * 77) % 40));
  printf("exit_rank: rank %d checked tp, dp, sdp and rdp; returns\n", rank_);
  fflush(stdout);
  return 0; /* nothing closed */
}

/* Registered before the first gang, so it runs after the library's exit
 * handler (handlers run in reverse order): the time the process really
 * ends, lingering included. */
static void say_end(void) {
  printf("exit_rank: rank %d ends at %.6f\n", rank_, now_s());
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: exit_rank SEED [--group G] [--stride] [--leave C]"
                    " [--how H] [--ops N] [--need] [--diag MS] [--topo]\n");
    return 2;
  }
  uint64_t seed = strtoull(argv[1], NULL, 10);
  int group = 2, leave = -1, ops = 200, diag_ms = 0;
  bool stride = false, need = false, topo = false;
  const char *how_arg = "random";
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--group") == 0 && i + 1 < argc)
      group = atoi(argv[++i]);
    else if (strcmp(argv[i], "--stride") == 0)
      stride = true;
    else if (strcmp(argv[i], "--leave") == 0 && i + 1 < argc)
      leave = atoi(argv[++i]);
    else if (strcmp(argv[i], "--how") == 0 && i + 1 < argc)
      how_arg = argv[++i];
    else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc)
      ops = atoi(argv[++i]);
    else if (strcmp(argv[i], "--need") == 0)
      need = true;
    else if (strcmp(argv[i], "--diag") == 0 && i + 1 < argc)
      diag_ms = atoi(argv[++i]);
    else if (strcmp(argv[i], "--topo") == 0)
      topo = true;
    else {
      fprintf(stderr, "exit_rank: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  rank_ = atoi(getenv("RANK") ? getenv("RANK") : "0");
  atexit(say_end);
  gang_t *world = NULL;
  if (gang_create_default(NULL, &world) != GANG_OK) {
    printf("exit_rank: gang_create_default: %s\n", gang_last_error());
    return 1;
  }
  rank_ = gang_rank(world);
  size_ = gang_size(world);
  if (topo)
    return run_topo(world, seed);

  int nsub = size_ / group;
  int sub = stride ? rank_ % nsub : rank_ / group;
  int key = stride ? rank_ / nsub : rank_ % group;
  if (leave < 0)
    leave = (int)(mix(seed) % (uint64_t)nsub);
  /* For --need: a store client of the workers' own, opened while rank 0,
   * which hosts the store, is surely there. */
  gang_store *store = NULL;
  if (need && sub != leave) {
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%s/exit_rank/",
             getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "127.0.0.1",
             getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0");
    (void)gang_store_connect(addr, NULL, &store);
  }
  gang_t *mine = NULL, *workers = NULL;
  if (gang_split(world, sub, key, &mine) != GANG_OK)
    FAIL("gang_split: %s", gang_last_error());
  /* Every worker, for --need: they meet before the world barrier, so
   * that none fails the world while another still works. */
  if (gang_split(world, sub == leave ? GANG_SPLIT_NOCOLOR : 0, rank_,
                 &workers) != GANG_OK)
    FAIL("gang_split (workers): %s", gang_last_error());
  size_t cap = 262144;
  float *buf = malloc(cap * sizeof *buf);
  if (buf == NULL)
    FAIL("out of memory");

  if (sub == leave) {
    int how = how_index(how_arg);
    if (how < 0)
      how = (int)(mix(seed ^ 0x5eed ^ (uint64_t)rank_) % N_CLEAN);
    /* The same number on the sub-gang; the last one posted and waited
     * for, its work freed unless this rank ends by "posted". */
    int k = (int)(mix(seed ^ 0xa11) % 4);
    gang_work *w = NULL;
    for (int i = 0; i < k; i++) {
      gang_status st;
      if (i == k - 1) {
        for (size_t j = 0; j < 64; j++)
          buf[j] = 1.0f;
        st = gang_all_reduce_post(mine, buf, 64, GANG_FLOAT32, GANG_SUM, &w);
        if (st == GANG_OK)
          st = gang_work_wait(w, -1);
        if (st == GANG_OK && buf[0] != (float)group)
          FAIL("posted all_reduce: %g, expected %d", (double)buf[0], group);
        if (how != 5) {
          gang_work_free(w);
          w = NULL;
        }
      } else {
        st = checked_all_reduce(mine, buf, op_count(seed, sub, i), i);
      }
      if (st != GANG_OK)
        FAIL("leaver's all_reduce %d: %s: %s", i, gang_status_name(st),
             gang_get_last_error(mine));
    }
    /* A crash waits until its partners are surely out of the last
     * collective: a crash during one is chaos_bench's business. */
    int pause = (int)(mix(seed ^ 0x9a ^ (uint64_t)rank_) % 150) +
                (how >= N_CLEAN ? 50 : 0);
    nap_ms(pause);
    printf("exit_rank: rank %d leaves by %s after %d collectives and %d ms\n",
           rank_, hows[how], k, pause);
    fflush(stdout);
    switch (how) {
    case 0: /* return */
      return 0;
    case 1: /* exit */
      exit(0);
    case 2: { /* thread-exit */
      pthread_t t;
      if (pthread_create(&t, NULL, exit_thread, NULL) != 0)
        FAIL("pthread_create");
      for (;;)
        nap_ms(1000);
    }
    case 3: /* destroy */
      gang_destroy(mine);
      gang_destroy(world);
      free(buf);
      return 0;
    case 4: /* destroy-sub */
      gang_destroy(mine);
      exit(0);
    case 5: /* posted: w (if any) is never freed */
      return 0;
    case 6: /* kill */
      kill(getpid(), SIGKILL);
      for (;;)
        nap_ms(1000);
    default: /* abort */
      abort();
    }
  }

  /* A worker. */
  bool crash = how_index(how_arg) >= N_CLEAN;
  if (store == NULL && need)
    FAIL("gang_store_connect: %s", gang_last_error());
  nap_ms((int)(mix(seed ^ 0x3c ^ (uint64_t)sub) % 300));
  int i;
  for (i = 0; i < ops; i++) {
    size_t n = op_count(seed, sub, i);
    if (diag_ms > 0 && i == ops - 1 && key == 1)
      nap_ms(diag_ms); /* late: the first worker times out */
    double t0 = now_s();
    gang_status st = checked_all_reduce(mine, buf, n, i);
    if (st == GANG_OK)
      continue;
    double took = now_s() - t0;
    const char *why = gang_get_last_error(mine);
    if (diag_ms > 0 && i == ops - 1 && key == 1 && st == GANG_TIMEOUT) {
      printf("exit_rank: rank %d (late) failed as expected: %s\n", rank_, why);
      return 0;
    }
    if (diag_ms > 0 && i == ops - 1 && key == 0) {
      if (st != GANG_TIMEOUT || strstr(why, "that reached") == NULL)
        FAIL("late all_reduce: %s, expected a TIMEOUT with the diagnosis "
             "through the store: %s",
             gang_status_name(st), why);
      printf("exit_rank: rank %d timed out as expected, with the "
             "diagnosis: %s\n",
             rank_, why);
      return 0;
    }
    if (crash && st == GANG_PEER_LOST && took < 3.0) {
      printf("exit_rank: rank %d: all_reduce %d failed %.3f s in, as a "
             "crash should: %s\n",
             rank_, i, took, why);
      return 0;
    }
    FAIL("all_reduce %d of %zu floats: %s after %.3f s: %s", i, n,
         gang_status_name(st), took, why);
  }
  printf("exit_rank: rank %d did %d checked all_reduces\n", rank_, ops);
  if (need) {
    /* A collective that does not need the leavers goes on. */
    gang_status wst = gang_barrier(workers);
    if (wst != GANG_OK)
      FAIL("barrier of the workers: %s: %s", gang_status_name(wst),
           gang_get_last_error(workers));
    /* The world barrier fails the world, as every failure does: first
     * every worker must be out of its last collective, which a barrier
     * cannot tell (the first out may fail the world while another is
     * still receiving its last message), but the store can. */
    char name[32];
    snprintf(name, sizeof name, "passed/%d", rank_);
    if (gang_store_set(store, name, "1", 1) != GANG_OK)
      FAIL("store set: %s", gang_last_error());
    for (int r = 0; r < size_; r++) {
      int rsub = stride ? r % nsub : r / group;
      snprintf(name, sizeof name, "passed/%d", r);
      const char *k = name;
      if (rsub != leave && gang_store_wait(store, &k, 1, -1) != GANG_OK)
        FAIL("store wait: %s", gang_last_error());
    }
    double t0 = now_s();
    gang_status st = gang_barrier(world);
    double took = now_s() - t0;
    const char *why = gang_get_last_error(world);
    gang_status want = crash ? GANG_PEER_LOST : GANG_PEER_LEFT;
    if (st != want || took >= 3.0 || (!crash && strstr(why, " left (") == NULL))
      FAIL("world barrier after the leavers: %s after %.3f s (expected %s "
           "within 3 s%s): %s",
           gang_status_name(st), took, gang_status_name(want),
           crash ? "" : ", saying who left", why);
    printf("exit_rank: rank %d: world barrier failed as expected after "
           "%.3f s: %s\n",
           rank_, took, why);
  }
  gang_store_close(store);
  gang_destroy(workers);
  gang_destroy(mine);
  gang_destroy(world);
  free(buf);
  return 0;
}
