/* train_ft: data-parallel training that goes on while replica groups die
 * and come back (gang/ft.h; torchft's model).
 *
 *   gang-lighthouse --bind 127.0.0.1:29510 &
 *   gangrun --nproc-per-node 2 --max-restarts 100 \
 *       train_ft --lighthouse 127.0.0.1:29510 --group a    # and b, c, ...
 *
 * or, all in one command, under a lighthouse gangrun hosts:
 *
 *   gangrun --replica-groups 3 --nproc-per-node 2 --max-restarts 100 train_ft
 *
 * examples/train_ft.py runs R groups that way and kills one at random every
 * few steps (--chaos).
 *
 * A replica group is one gangrun job: its ranks hold the whole model, the
 * MLP of train_tp_dp with its hidden layer split over the group's ranks
 * (tensor parallel, the group's own gang). Data parallelism runs across the
 * groups through the manager's gang, whose size is the number of groups in
 * the current quorum: each takes its share of the step's batch and the
 * gradients are averaged there. A step counts only when should_commit says
 * so; a group that starts (again) receives the parameters from one that is
 * up to date before its first step. The step's batch comes from the step
 * number, so which groups are alive changes who computes what, never what
 * is learned.
 *
 * With --same-data every group computes on the whole batch instead of its
 * share, and the groups of the first attempt start from one state: the
 * gradients of a step are then the same everywhere, so whatever fails,
 * the parameters at the end must equal a fault-free run's (a run of one
 * group), which examples/train_ft.py checks with --dump. A group that
 * starts again (GANG_RESTART_COUNT > 0) starts from garbage: only healing
 * brings it back.
 *
 * Rank 0 of each group prints one line per step (quorum, participants,
 * commit, the quorum's timings); every rank prints a hash of its
 * parameters at the end: every group's rank r must print the same. A
 * group whose own gang failed (a rank of it stopped past the timeout, or
 * killed) exits with status 3, for its launcher to start it again. Uses
 * only the public API. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gang/ft.h>
#include <gang/gang.h>

enum { IN = 32, HID = 128, OUT = 8, BATCH = 240 };
static const float LR = 0.05f;

#define CHECK(call)                                                            \
  do {                                                                         \
    gang_status st_ = (call);                                                  \
    if (st_ != GANG_OK) {                                                      \
      fprintf(stderr, "train_ft: %s failed: %s (%s)\n", #call,                 \
              gang_strerror(st_), gang_last_error());                          \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- Data: a fixed teacher network, a fresh batch per step --------------- */

static uint64_t rng;
static float uniform(void) { /* xorshift64*, in [-1, 1) */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  uint64_t r = rng * 0x2545f4914f6cdd1dull;
  return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float teacher1[IN][HID], teacher2[HID][OUT];
static float xs[BATCH][IN], ts[BATCH][OUT];

static void make_teacher(void) {
  rng = 20261126;
  for (int i = 0; i < IN; i++)
    for (int h = 0; h < HID; h++)
      teacher1[i][h] = uniform() * 0.5f;
  for (int h = 0; h < HID; h++)
    for (int o = 0; o < OUT; o++)
      teacher2[h][o] = uniform() * 0.3f;
}

/* Rows [r0, r1) of step `step`'s batch. */
static void make_batch(int64_t step, int r0, int r1) {
  for (int n = r0; n < r1; n++) {
    rng = 0x9e3779b97f4a7c15ull * (uint64_t)(step * BATCH + n + 1);
    for (int i = 0; i < IN; i++)
      xs[n][i] = uniform();
    double y[OUT] = {0};
    for (int h = 0; h < HID; h++) {
      double z = 0;
      for (int i = 0; i < IN; i++)
        z += xs[n][i] * teacher1[i][h];
      double a = tanh(z);
      for (int o = 0; o < OUT; o++)
        y[o] += a * teacher2[h][o];
    }
    for (int o = 0; o < OUT; o++)
      ts[n][o] = (float)y[o];
  }
}

/* ---- This rank's shard of the model ----------------------------------------
 */

/* Hidden units [h0, h0 + hl) of W1's columns, b1 and W2's rows; b2 whole.
 * Gradients share the layout in one buffer: one all_reduce per step. */
typedef struct shard {
  int h0, hl;
  float *w1, *b1, *w2, *b2, *buf;
  size_t n;
} shard;

static void shard_init(shard *p, int h0, int hl) {
  p->h0 = h0;
  p->hl = hl;
  p->n = (size_t)IN * hl + hl + (size_t)hl * OUT + OUT;
  p->buf = calloc(p->n, sizeof(float));
  if (p->buf == NULL) {
    fprintf(stderr, "train_ft: out of memory\n");
    exit(2);
  }
  p->w1 = p->buf;
  p->b1 = p->w1 + (size_t)IN * hl;
  p->w2 = p->b1 + hl;
  p->b2 = p->w2 + (size_t)hl * OUT;
}

/* Initial values from the group's name: groups start apart, so only
 * init_sync (healing at step 0) makes them alike. */
static void shard_fill(shard *p, uint64_t seed) {
  rng = seed * 2654435761u + 1;
  for (size_t k = 0; k < p->n; k++)
    p->buf[k] = uniform() * 0.2f;
}

/* Forward and backward on rows [r0, r1) of the batch; the gradient of the
 * mean loss over those rows into g. tp sums partial outputs and input
 * gradients over the group. Returns the rows' loss sum. */
static double forward_backward(gang_t *tp, const shard *p, shard *g, int r0,
                               int r1) {
  int hl = p->hl, bl = r1 - r0;
  memset(g->buf, 0, g->n * sizeof(float));
  if (bl == 0)
    return 0;
  float *hid = malloc(sizeof(float) * (size_t)bl * hl);
  float *y = malloc(sizeof(float) * (size_t)bl * OUT);
  if (hid == NULL || y == NULL) {
    fprintf(stderr, "train_ft: out of memory\n");
    exit(2);
  }
  for (int n = 0; n < bl; n++) {
    for (int h = 0; h < hl; h++) {
      float z = p->b1[h];
      for (int i = 0; i < IN; i++)
        z += xs[r0 + n][i] * p->w1[i * hl + h];
      hid[n * hl + h] = tanhf(z);
    }
    for (int o = 0; o < OUT; o++) {
      float acc = 0;
      for (int h = 0; h < hl; h++)
        acc += hid[n * hl + h] * p->w2[h * OUT + o];
      y[n * OUT + o] = acc;
    }
  }
  CHECK(gang_all_reduce(tp, y, (size_t)bl * OUT, GANG_FLOAT32, GANG_SUM));
  double loss = 0;
  for (int n = 0; n < bl; n++)
    for (int o = 0; o < OUT; o++) {
      float e = y[n * OUT + o] + p->b2[o] - ts[r0 + n][o];
      loss += 0.5 * (double)e * e;
      y[n * OUT + o] = e / (float)bl;
    }
  for (int n = 0; n < bl; n++) {
    const float *dy = &y[n * OUT];
    for (int o = 0; o < OUT; o++)
      g->b2[o] += dy[o];
    for (int h = 0; h < hl; h++) {
      float hv = hid[n * hl + h], dh = 0;
      for (int o = 0; o < OUT; o++) {
        g->w2[h * OUT + o] += hv * dy[o];
        dh += dy[o] * p->w2[h * OUT + o];
      }
      float dz = dh * (1 - hv * hv);
      g->b1[h] += dz;
      for (int i = 0; i < IN; i++)
        g->w1[i * hl + h] += xs[r0 + n][i] * dz;
    }
  }
  free(hid);
  free(y);
  return loss;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void usage(const char *me) {
  fprintf(stderr,
          "usage: %s --lighthouse HOST:PORT [--group NAME] [--steps N]\n"
          "          [--state-mib M] [--timeout-ms T] [--step-ms S]\n"
          "          [--same-data] [--dump DIR] [--steps-file F]\n"
          "  --lighthouse   the lighthouse (or $GANG_LIGHTHOUSE)\n"
          "  --group        this replica group's name (default: the run id)\n"
          "  --steps        steps to commit (200)\n"
          "  --state-mib    more state a late group must receive (0)\n"
          "  --timeout-ms   collectives, votes, healing (1000)\n"
          "  --step-ms      extra compute time per step (0)\n"
          "  --same-data    every group on the whole batch, from one start\n"
          "  --dump DIR     write this rank's parameters to "
          "DIR/<group>.rank<r>.f32\n"
          "  --steps-file F fewer steps, if F holds a smaller number (read "
          "every step)\n",
          me);
}

/* The group's own gang failed, or another call that cannot go on: the
 * group ends, for its launcher to start it again. */
static void fatal_exit(gang_status st, const char *what) {
  fprintf(stderr, "train_ft: %s failed: %s (%s): the group exits\n", what,
          gang_strerror(st), gang_last_error());
  exit(3);
}

/* The steps to commit: `steps`, or fewer where --steps-file names a file
 * that holds a smaller number (examples/train_ft.py --end-after-faults
 * writes it, with a margin of steps, once its faults are over). Read at
 * every step by every rank: the number is written once and is ahead of
 * every group's step then, so the group's ranks all see it in time. */
static int64_t steps_now(const char *file, int64_t steps) {
  FILE *f = file != NULL ? fopen(file, "r") : NULL;
  if (f == NULL)
    return steps;
  long long v = 0;
  bool ok = fscanf(f, "%lld", &v) == 1;
  fclose(f);
  return ok && v > 0 && v < steps ? (int64_t)v : steps;
}

int main(int argc, char **argv) {
  const char *lighthouse = getenv("GANG_LIGHTHOUSE");
  const char *group_name = getenv("GANG_RUN_ID"); /* gangrun sets it */
  int64_t steps = 200, timeout_ms = 1000;
  int state_mib = 0, step_ms = 0;
  bool same_data = false;
  const char *dump = NULL, *steps_file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--same-data")) {
      same_data = true;
      continue;
    }
    if (v == NULL) {
      usage(argv[0]);
      return 2;
    }
    if (!strcmp(a, "--lighthouse"))
      lighthouse = v;
    else if (!strcmp(a, "--group"))
      group_name = v;
    else if (!strcmp(a, "--steps"))
      steps = atoll(v);
    else if (!strcmp(a, "--state-mib"))
      state_mib = atoi(v);
    else if (!strcmp(a, "--timeout-ms"))
      timeout_ms = atoll(v);
    else if (!strcmp(a, "--step-ms"))
      step_ms = atoi(v);
    else if (!strcmp(a, "--dump"))
      dump = v;
    else if (!strcmp(a, "--steps-file"))
      steps_file = v;
    else {
      usage(argv[0]);
      return 2;
    }
    i++;
  }
  if (lighthouse == NULL || steps < 1 || state_mib < 0 || timeout_ms < 1) {
    usage(argv[0]);
    return 2;
  }
  if (group_name == NULL)
    group_name = "replica";

  gang_t *tp;
  CHECK(gang_create_default(NULL, &tp)); /* the group: gangrun's world */
  int rank = gang_rank(tp), size = gang_size(tp);
  if (HID % size) {
    fprintf(stderr, "train_ft: the group's size %d must divide %d\n", size,
            HID);
    return 2;
  }
  gang_manager_options mo = GANG_MANAGER_OPTIONS_INIT;
  mo.lighthouse = lighthouse;
  mo.name = group_name;
  mo.group = tp;
  mo.timeout_ms = timeout_ms;
  mo.quorum_timeout_ms = 30000;
  gang_manager *m;
  CHECK(gang_manager_create(&mo, &m));
  gang_t *dp = gang_manager_gang(m);

  make_teacher();
  int hl = HID / size;
  shard p, g;
  shard_init(&p, rank * hl, hl);
  shard_init(&g, rank * hl, hl);
  /* Groups start apart (init_sync makes them alike at step 0); with
   * --same-data the first attempt's groups start alike, and a group
   * started again from garbage. */
  const char *rc = getenv("GANG_RESTART_COUNT");
  int restart = rc != NULL ? atoi(rc) : 0;
  uint64_t seed = fnv(1469598103934665603ull, group_name, strlen(group_name));
  if (same_data)
    seed = restart == 0 ? 20261128u : seed * 31u + (uint64_t)restart;
  shard_fill(&p, seed + (uint64_t)rank);
  size_t extra_n = (size_t)state_mib << 18; /* floats */
  float *extra = calloc(extra_n ? extra_n : 1, sizeof(float));
  if (extra == NULL) {
    fprintf(stderr, "train_ft: out of memory\n");
    return 2;
  }
  CHECK(gang_manager_register_state(m, "params", p.buf, p.n * sizeof(float)));
  if (extra_n)
    CHECK(gang_manager_register_state(m, "extra", extra,
                                      extra_n * sizeof(float)));
  if (rank == 0)
    printf("train_ft: group %s (%s), %d ranks (tp), lighthouse %s, %" PRId64
           " steps\n",
           group_name, gang_manager_replica_id(m), size, lighthouse, steps);
  fflush(stdout);

  while (gang_manager_step(m) < (steps = steps_now(steps_file, steps))) {
    gang_status ms = gang_manager_start_quorum(m, true, false);
    if (ms != GANG_OK)
      fatal_exit(ms, "gang_manager_start_quorum");
    gang_status qs = gang_manager_wait_quorum(m);
    if (qs == GANG_ABORTED)
      fatal_exit(qs, "gang_manager_wait_quorum");
    double t_quorum = now_s();
    int64_t step = gang_manager_step(m); /* after healing */
    int parts = gang_size(dp), me = gang_rank(dp);
    double loss = 0;
    if (qs == GANG_OK && parts > 0) {
      int r0 = same_data ? 0 : (int)((int64_t)me * BATCH / parts);
      int r1 = same_data ? BATCH : (int)((int64_t)(me + 1) * BATCH / parts);
      make_batch(step, r0, r1);
      loss = forward_backward(tp, &p, &g, r0, r1);
      if (step_ms > 0) {
        struct timespec ts = {step_ms / 1000, (step_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
      }
      /* The managed gang's all_reduce is the manager's: MEAN over the
       * participants, errors kept for the vote. */
      ms = gang_all_reduce(dp, g.buf, g.n, GANG_FLOAT32, GANG_MEAN);
      if (ms != GANG_OK)
        fatal_exit(ms, "gang_all_reduce(dp)");
    }
    bool commit = false;
    ms = gang_manager_should_commit(m, &commit);
    if (ms != GANG_OK)
      fatal_exit(ms, "gang_manager_should_commit");
    if (commit) {
      /* The step just committed: a group that healed in this step has
       * its state, and its step, from should_commit on. */
      int64_t done_step = gang_manager_step(m) - 1;
      for (size_t k = 0; k < p.n; k++)
        p.buf[k] -= LR * g.buf[k];
      for (size_t k = 0; k < extra_n && k < 1024; k++)
        extra[((size_t)done_step * 4099 + k) % extra_n] += 1.0f;
    }
    if (rank == 0) {
      gang_manager_timings t;
      gang_manager_last_timings(m, &t);
      char why[200] = "";
      if (!commit) {
        gang_manager_errored(m, why, sizeof why);
        if (qs != GANG_OK)
          snprintf(why, sizeof why, "%s", gang_last_error());
        for (char *c = why; *c; c++)
          if (*c == '\n' || *c == '|')
            *c = ' ';
      }
      printf(
          "train_ft: group=%s step=%" PRId64 " quorum=%" PRId64
          " participants=%d commit=%d loss=%.6f t_quorum=%.6f t=%.6f "
          "quorum_ms=%.1f configure_ms=%.1f heal_ms=%.1f heal_bytes=%" PRId64
          " heal_sent_bytes=%" PRId64 " error_t=%.6f why=|%s|\n",
          group_name, gang_manager_step(m), gang_manager_quorum_id(m), parts,
          commit, loss / (same_data ? BATCH : BATCH / (parts > 0 ? parts : 1)),
          t_quorum, now_s(), t.quorum_ms, t.configure_ms, t.heal_ms,
          t.heal_bytes > 0 ? t.heal_bytes : 0,
          t.heal_bytes < 0 ? -t.heal_bytes : 0, (double)t.error_ns / 1e9, why);
      fflush(stdout);
    }
  }
  if (dump != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.rank%d.f32", dump, group_name, rank);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p.buf, sizeof(float), p.n, f) != p.n) {
      fprintf(stderr, "train_ft: cannot write %s\n", path);
      return 2;
    }
    fclose(f);
  }
  uint64_t h = fnv(1469598103934665603ull, p.buf, p.n * sizeof(float));
  h = fnv(h, extra, extra_n * sizeof(float));
  printf("train_ft: done group=%s rank=%d step=%" PRId64 " hash=%016" PRIx64
         "\n",
         group_name, rank, gang_manager_step(m), h);
  fflush(stdout);
  /* Leave together: a rank still in a collective of the group would see
   * the others' exit as a failure. */
  CHECK(gang_barrier(tp));
  gang_manager_destroy(m);
  gang_destroy(tp);
  free(p.buf);
  free(g.buf);
  free(extra);
  return 0;
}
