/* A worker program for test_gangrun: gangrun starts it, and its first
 * argument says what to do.
 *   env                 print the variables gangrun set and the world info
 *   lines               write lines in awkward pieces (partial, long, last
 *                       without a newline) to stdout and stderr
 *   fail R CODE         rank R exits CODE, the others wait for SIGTERM
 *                       (recording pid files in $GR_DIR)
 *   failonce R CODE     rank R exits CODE when GANG_RESTART_COUNT is 0;
 *                       every rank prints its restart count and exits 0
 *   failuntil R N CODE  rank R exits CODE while GANG_RESTART_COUNT < N;
 *                       every rank prints its restart count
 *   failcrash R         rank R exits 3 in attempt 0, kills itself with
 *                       SIGKILL in attempt 1, succeeds after
 *   crash R             rank R kills itself with SIGKILL; others wait
 *   wait [ignore-term]  record $GR_DIR/pid.RANK, then wait for SIGTERM and
 *                       record $GR_DIR/term.RANK (or ignore SIGTERM)
 *   store               rendezvous through GANG_STORE_ADDR with the secret
 *   store-nosecret      try the store without the secret (must be refused)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gang/env.h"
#include "gang/gang.h"
#include "gang/store.h"

static volatile sig_atomic_t got_term;
static void on_term(int sig) {
  (void)sig;
  got_term = 1;
}

static int env_int(const char *name) {
  const char *v = getenv(name);
  return v ? atoi(v) : -1;
}

static void put_file(const char *what, int rank, const char *text) {
  const char *dir = getenv("GR_DIR");
  if (dir == NULL)
    return;
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, what, rank);
  snprintf(path, sizeof path, "%s/%s.%d", dir, what, rank);
  FILE *f = fopen(tmp, "w");
  if (f == NULL)
    return;
  fputs(text, f);
  fclose(f);
  rename(tmp, path); /* the test sees the file whole or not at all */
}

/* Records the pid, then waits for SIGTERM (or forever, ignoring it). */
static int wait_mode(int rank, int ignore) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &old);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  if (getenv("GR_IGNORE_TERM") != NULL)
    ignore = 1;
  sa.sa_handler = ignore ? SIG_IGN : on_term;
  sigaction(SIGTERM, &sa, NULL);
  char pid[32];
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  put_file("pid", rank, pid);
  for (;;) {
    if (got_term) {
      put_file("term", rank, "1\n");
      return 143;
    }
    sigsuspend(&old);
  }
}

/* Fails only after every other rank recorded its pid and is waiting, so
 * the test can check that each of them is stopped. Bounded: 10 s. */
static void wait_for_peers(int rank) {
  const char *dir = getenv("GR_DIR");
  int size = env_int("WORLD_SIZE");
  for (int i = 0; dir != NULL && i < size; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/pid.%d", dir, i);
    for (int t = 0; i != rank && t < 10000 && access(path, F_OK) != 0; t++)
      usleep(1000);
  }
}

static int world_info(void) {
  gang_world_info w = GANG_WORLD_INFO_INIT;
  if (gang_world_info_from_env(&w) != GANG_OK) {
    printf("WORLD error %s\n", gang_last_error());
    return 1;
  }
  printf("WORLD source=%s rank=%d size=%d local=%d/%d node=%d/%d store=%s "
         "run=%s restart=%d\n",
         gang_world_source_name(w.source), w.rank, w.world_size, w.local_rank,
         w.local_world_size, w.node_rank, w.num_nodes, w.store_addr, w.run_id,
         w.restart_count);
  return 0;
}

static int store_mode(int rank, int with_secret) {
  const char *addr = getenv("GANG_STORE_ADDR");
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = 20000;
  if (!with_secret)
    so.secret = "";
  gang_store *st = NULL;
  gang_status s = gang_store_connect(addr, &so, &st);
  if (!with_secret) {
    printf("%s %s\n", s == GANG_OK ? "AUTH ACCEPTED" : "AUTH REFUSED",
           gang_status_name(s));
    gang_store_close(st);
    return 0;
  }
  if (s != GANG_OK) {
    printf("STORE connect %s: %s\n", addr, gang_last_error());
    return 1;
  }
  int size = env_int("WORLD_SIZE");
  char key[64];
  snprintf(key, sizeof key, "r%d/rank/%d", env_int("GANG_RESTART_COUNT"), rank);
  int64_t count = 0;
  const char **keys = calloc((size_t)size, sizeof *keys);
  char(*names)[64] = calloc((size_t)size, 64);
  for (int i = 0; i < size; i++) {
    snprintf(names[i], 64, "r%d/rank/%d", env_int("GANG_RESTART_COUNT"), i);
    keys[i] = names[i];
  }
  int rc = 1;
  if (gang_store_set(st, key, "x", 1) == GANG_OK &&
      gang_store_add(st, "arrived", 1, &count) == GANG_OK &&
      gang_store_wait(st, keys, (size_t)size, -1) == GANG_OK) {
    printf("STORE OK size=%d\n", size);
    rc = 0;
  } else {
    printf("STORE failed: %s\n", gang_last_error());
  }
  free(keys);
  free(names);
  gang_store_close(st);
  return rc;
}

/* A gang that records its calls (GANG_FLIGHT) and dumps them to
 * $GR_DIR/flight.<rank>: three all_reduces, then the pid file, then it
 * waits (10 s at most) for its dump, which only gangrun passing SIGUSR1
 * on makes. Exits 0 when the dump came and the gang still works. */
static int flight_mode(int rank) {
  char prefix[4096], path[4200];
  snprintf(prefix, sizeof prefix, "%s/flight.", getenv("GR_DIR"));
  snprintf(path, sizeof path, "%s%d", prefix, rank);
  setenv("GANG_FLIGHT", "8", 1);
  setenv("GANG_FLIGHT_DUMP", prefix, 1);
  gang_t *g = NULL;
  if (gang_create_default(NULL, &g) != GANG_OK) {
    printf("FLIGHT create: %s\n", gang_last_error());
    return 1;
  }
  int32_t x = 1;
  for (int k = 0; k < 3; k++)
    if (gang_all_reduce(g, &x, 1, GANG_INT32, GANG_SUM) != GANG_OK)
      return 1;
  char pid[32];
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  put_file("pid", rank, pid);
  int got = 0;
  for (int t = 0; t < 10000 && !got; t += 5) {
    FILE *f = fopen(path, "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
      got |= strncmp(line, "gang-flight end ", 16) == 0;
    if (f != NULL)
      fclose(f);
    if (!got)
      usleep(5000);
  }
  gang_status st = gang_barrier(g);
  gang_destroy(g);
  printf("FLIGHT rank %d dump %s, barrier %s\n", rank, got ? "seen" : "absent",
         gang_status_name(st));
  return got && st == GANG_OK ? 0 : 1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int rank = env_int("RANK");
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "env") == 0) {
    static const char *vars[] = {"RANK",
                                 "LOCAL_RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_WORLD_SIZE",
                                 "GROUP_RANK",
                                 "GROUP_WORLD_SIZE",
                                 "MASTER_ADDR",
                                 "MASTER_PORT",
                                 "GANG_RESTART_COUNT",
                                 "GANG_MAX_RESTARTS",
                                 "GANG_RUN_ID",
                                 "GANG_STORE_SECRET",
                                 "GANG_STORE_ADDR",
                                 "TORCHELASTIC_RUN_ID",
                                 "OMP_NUM_THREADS",
                                 "GANG_REPLICA_GROUP",
                                 "GANG_LIGHTHOUSE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
      const char *v = getenv(vars[i]);
      printf("ENV %s=%s\n", vars[i], v ? v : "(unset)");
    }
    return world_info();
  }
  if (strcmp(mode, "lines") == 0) {
    /* Pieces that only make whole lines once joined. */
    write(1, "ab", 2);
    write(1, "c\nde", 4);
    write(1, "f\n", 2);
    size_t n = 100000;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\n';
    write(1, big, n + 1);
    free(big);
    write(2, "err line\n", 9);
    write(1, "tail", 4);
    return 0;
  }
  if (strcmp(mode, "fail") == 0 && argc > 3) {
    if (rank == atoi(argv[2])) {
      wait_for_peers(rank);
      return atoi(argv[3]);
    }
    return wait_mode(rank, 0);
  }
  if (strcmp(mode, "failonce") == 0 && argc > 3) {
    int restart = env_int("GANG_RESTART_COUNT");
    printf("restart=%d\n", restart);
    if (rank == atoi(argv[2]) && restart == 0)
      return atoi(argv[3]);
    return 0;
  }
  if (strcmp(mode, "failuntil") == 0 && argc > 4) {
    int restart = env_int("GANG_RESTART_COUNT");
    printf("restart=%d\n", restart);
    fflush(stdout);
    if (rank == atoi(argv[2]) && restart < atoi(argv[3]))
      return atoi(argv[4]);
    return 0;
  }
  if (strcmp(mode, "failcrash") == 0 && argc > 2) {
    int restart = env_int("GANG_RESTART_COUNT");
    printf("restart=%d\n", restart);
    fflush(stdout);
    if (rank == atoi(argv[2]) && restart == 0)
      return 3;
    if (rank == atoi(argv[2]) && restart == 1)
      raise(SIGKILL);
    return 0;
  }
  if (strcmp(mode, "crash") == 0 && argc > 2) {
    if (rank == atoi(argv[2])) {
      wait_for_peers(rank);
      raise(SIGKILL);
    }
    return wait_mode(rank, 0);
  }
  if (strcmp(mode, "flight") == 0)
    return flight_mode(rank);
  if (strcmp(mode, "wait") == 0)
    return wait_mode(rank, argc > 2 && strcmp(argv[2], "ignore-term") == 0);
  if (strcmp(mode, "store") == 0)
    return store_mode(rank, 1);
  if (strcmp(mode, "store-nosecret") == 0)
    return store_mode(rank, 0);
  fprintf(stderr, "gangrun_worker: unknown mode '%s'\n", mode);
  return 64;
}
