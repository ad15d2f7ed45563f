/* heal_bench: how fast the manager moves a replica's state to a replica
 * that is behind (healing, gang/ft.h), against a plain send/recv of the
 * same bytes between the same two processes on the same transport.
 *
 *   heal_bench [--bytes N[,N...]] [--reps R]
 *
 * Two processes, one replica group of one rank each, under a lighthouse in
 * the parent. The source replica steps ahead; for every repetition the
 * target first receives the bytes with gang_recv from the source's
 * gang_send on a plain gang of the two (both already at a barrier), then
 * starts a new manager (a new replica at step 0) that heals from the
 * source: the time is the manager's own heal_ms (gang_manager_last_timings:
 * from the new quorum's replica gang being ready to the last byte in). The
 * same buffers serve both, touched before the first repetition. Medians
 * over the repetitions, interleaved; "heal/plain" is the heal's rate as a
 * fraction of the plain transfer's. Public API only. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gang/ft.h>
#include <gang/gang.h>

#define MAX_SIZES 8
#define MAX_REPS 64

#define CHECK(call)                                                            \
  do {                                                                         \
    gang_status st_ = (call);                                                  \
    if (st_ != GANG_OK) {                                                      \
      fprintf(stderr, "heal_bench: %s: %s (%s)\n", #call, gang_strerror(st_),  \
              gang_last_error());                                              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct cfg {
  char lighthouse[64];
  size_t bytes[MAX_SIZES];
  int nsizes, reps;
} cfg;

static gang_manager *new_manager(const cfg *c, const char *name, void *buf,
                                 size_t len) {
  gang_manager_options mo = GANG_MANAGER_OPTIONS_INIT;
  mo.lighthouse = c->lighthouse;
  mo.name = name;
  mo.timeout_ms = 60000;
  mo.quorum_timeout_ms = 60000;
  gang_manager *m = NULL;
  CHECK(gang_manager_create(&mo, &m));
  CHECK(gang_manager_register_state(m, "state", buf, len));
  return m;
}

/* One step; true if it committed with `want` participants. */
static bool step(gang_manager *m, int want, gang_manager_timings *t) {
  CHECK(gang_manager_start_quorum(m, true, false));
  (void)gang_manager_wait_quorum(m);
  if (t != NULL)
    gang_manager_last_timings(m, t);
  int part = gang_manager_participants(m);
  bool commit = false;
  CHECK(gang_manager_should_commit(m, &commit));
  return commit && part == want;
}

/* The replica that is ahead: steps alone, then once per repetition sends
 * the plain transfer and steps until the newcomer has healed. */
static int source(const cfg *c, gang_t *plain, int si) {
  size_t len = c->bytes[si];
  char *buf = malloc(len);
  if (buf == NULL)
    return 1;
  for (size_t i = 0; i < len; i++)
    buf[i] = (char)(i * 7 + (size_t)si);
  char name[32];
  snprintf(name, sizeof name, "src%d", si);
  gang_manager *m = new_manager(c, name, buf, len);
  while (!step(m, 1, NULL) || gang_manager_step(m) < 3) {
  }
  for (int r = 0; r < c->reps; r++) {
    CHECK(gang_barrier(plain));
    CHECK(gang_send(plain, buf, len, 1, 7));
    CHECK(gang_barrier(plain));
    while (!step(m, 2, NULL)) {
    }
    CHECK(gang_barrier(plain)); /* the target has its figure */
  }
  gang_manager_destroy(m);
  free(buf);
  return 0;
}

static int target(const cfg *c, gang_t *plain, int si) {
  size_t len = c->bytes[si];
  char *buf = malloc(len);
  if (buf == NULL)
    return 1;
  memset(buf, 0, len);
  double plain_ms[MAX_REPS], heal_ms[MAX_REPS];
  for (int r = 0; r < c->reps; r++) {
    CHECK(gang_barrier(plain));
    double t0 = now_ms();
    CHECK(gang_recv(plain, buf, len, 0, 7));
    plain_ms[r] = now_ms() - t0;
    memset(buf, 0, len);
    CHECK(gang_barrier(plain));
    char name[32];
    snprintf(name, sizeof name, "dst%d", si);
    gang_manager *m = new_manager(c, name, buf, len);
    gang_manager_timings t;
    heal_ms[r] = -1;
    while (!step(m, 2, &t))
      if (t.heal_bytes > 0)
        heal_ms[r] = t.heal_ms;
    if (t.heal_bytes > 0)
      heal_ms[r] = t.heal_ms;
    gang_manager_destroy(m);
    for (size_t i = 0; i < len; i += 4093)
      if (buf[i] != (char)(i * 7 + (size_t)si)) {
        fprintf(stderr, "heal_bench: byte %zu is wrong after healing\n", i);
        return 1;
      }
    if (heal_ms[r] < 0) {
      fprintf(stderr, "heal_bench: repetition %d did not heal\n", r);
      return 1;
    }
    CHECK(gang_barrier(plain));
  }
  printf("%12zu", len);
  for (int r = 0; r < c->reps; r++)
    printf(" %s%.1f/%.1f", r ? "" : " plain/heal ms:", plain_ms[r], heal_ms[r]);
  double p = median(plain_ms, c->reps), h = median(heal_ms, c->reps);
  printf("\n%12s  median plain %.2f ms (%.2f GB/s), heal %.2f ms (%.2f GB/s),"
         " heal/plain %.2f\n",
         "", p, (double)len / p / 1e6, h, (double)len / h / 1e6, p / h);
  fflush(stdout);
  free(buf);
  return 0;
}

static int run_rank(const cfg *c, int rank) {
  char addr[128];
  snprintf(addr, sizeof addr, "%s/plain", c->lighthouse);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 120000;
  gang_t *plain = NULL;
  CHECK(gang_create_with_store(&o, addr, rank, 2, &plain));
  int rc = 0;
  for (int si = 0; si < c->nsizes && rc == 0; si++)
    rc = rank == 0 ? source(c, plain, si) : target(c, plain, si);
  gang_destroy(plain);
  return rc;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mul = 1;
  if (*end == 'K' || *end == 'k')
    mul = 1024;
  else if (*end == 'M' || *end == 'm')
    mul = 1024 * 1024;
  else if (*end == 'G' || *end == 'g')
    mul = 1024 * 1024 * 1024;
  else if (*end != '\0')
    return 0;
  return v > 0 ? (size_t)(v * (double)mul) : 0;
}

int main(int argc, char **argv) {
  cfg c = {.nsizes = 2, .reps = 5};
  c.bytes[0] = 64u << 20;
  c.bytes[1] = 1u << 30;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      c.reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
      c.nsizes = 0;
      for (char *tok = strtok(argv[++i], ","); tok && c.nsizes < MAX_SIZES;
           tok = strtok(NULL, ","))
        if ((c.bytes[c.nsizes++] = parse_size(tok)) == 0) {
          fprintf(stderr,
                  "heal_bench: --bytes: '%s' is not a size (e.g. "
                  "64M, 1G)\n",
                  tok);
          return 2;
        }
    } else {
      fprintf(stderr, "usage: heal_bench [--bytes 64M,1G] [--reps 5]\n");
      return 2;
    }
  }
  if (c.reps < 1 || c.reps > MAX_REPS) {
    fprintf(stderr, "heal_bench: --reps must be 1..%d\n", MAX_REPS);
    return 2;
  }
  gang_lighthouse_options lo = GANG_LIGHTHOUSE_OPTIONS_INIT;
  lo.host = "127.0.0.1";
  lo.heartbeat_timeout_ms = 500;
  lo.join_timeout_ms = 200;
  lo.quorum_tick_ms = 10;
  lo.http_port = -1;
  gang_lighthouse *lh = NULL;
  CHECK(gang_lighthouse_start(&lo, &lh));
  snprintf(c.lighthouse, sizeof c.lighthouse, "127.0.0.1:%d",
           gang_lighthouse_port(lh));
  printf("# heal_bench: %d repetitions; per size the plain/heal times of each"
         ", then the medians\n",
         c.reps);
  fflush(stdout);
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    if (pid[r] == 0)
      _exit(run_rank(&c, r));
  }
  int rc = 0;
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      rc = 1;
  }
  gang_lighthouse_stop(lh);
  return rc;
}
