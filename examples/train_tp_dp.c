/* train_tp_dp: data × tensor parallel training of a small MLP, checked
 * against the same model trained in one process.
 *
 *   gangrun --nproc-per-node 4 train_tp_dp          tp = 2, dp = 2
 *   gangrun --nproc-per-node 8 train_tp_dp --tp 4   tp = 4, dp = 2
 *   train_tp_dp                                     one process: tp = dp = 1
 *
 * The model is y = tanh((x ⊙ s) W1 + b1) W2 + b2 with loss
 * mean_b 0.5 |y_b - t_b|^2 on synthetic data (a random "teacher" network
 * plus noise, from a fixed seed). Megatron-style tensor parallelism splits
 * the hidden layer over the tp gang: W1 and b1 by columns (each rank
 * computes its slice of the hidden units), W2 by rows (each rank's slice
 * gives a partial output, summed with an all_reduce over tp). Backward
 * mirrors it: the gradient of the input of the column-parallel layer is a
 * partial sum per rank and is all_reduced over tp (the input scale s, which
 * every rank holds whole, needs it). Data parallelism splits the batch over
 * the dp gang and averages the gradients with one all_reduce (MEAN) per
 * step, as DDP does with one bucket.
 *
 * Every rank then trains the full model on the full batch alone, with
 * plain loops written separately from the parallel code, and compares its
 * shard of the parameters with the same slice of the reference. The
 * tolerance is explained at TOLERANCE below. Exit status 0 when every rank
 * matches, 1 otherwise. Uses only the public API. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gang/gang.h>
#include <gang/topology.h>

enum { IN = 32, HID = 128, OUT = 8, BATCH = 256 };
static const float LR = 0.1f;
static int steps = 40;

/* The parallel result differs from the reference only by the order in
 * which float32 sums are taken: the tp all_reduce adds tp partial sums of
 * HID/tp hidden units instead of one running sum of HID, and dp averages
 * dp per-shard means instead of one mean over BATCH rows. Each reordered
 * sum of n terms moves the result by a few ulps (typically sqrt(n) * 2^-24
 * relative, about 1e-6 for n = 256; at most n * 2^-24, 1.5e-5), and
 * gradient descent on this smooth loss carries such differences forward
 * without amplifying them much over 40 steps (measured: a few 1e-7). A
 * real sharding bug (a wrong slice, a missing reduction, a sum instead of
 * a mean) moves parameters by 1e-3 or more within a step, so 1e-4 relative
 * to the parameter's magnitude (at least 1) separates the two cases. */
static const double TOLERANCE = 1e-4;

#define CHECK(call)                                                            \
  do {                                                                         \
    gang_status st_ = (call);                                                  \
    if (st_ != GANG_OK) {                                                      \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, gang_strerror(st_),       \
              gang_last_error());                                              \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

/* ---- Data and initial parameters (identical on every rank) -------------- */

static uint64_t rng_state;
static float uniform(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
  return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct params {
  float s[IN], w1[IN][HID], b1[HID], w2[HID][OUT], b2[OUT];
} params;

static float xs[BATCH][IN], ts[BATCH][OUT];

static void make_data(params *init) {
  rng_state = 20260611;
  static float a[IN][HID], b[HID][OUT];
  for (int i = 0; i < IN; i++)
    for (int h = 0; h < HID; h++)
      a[i][h] = uniform() * 0.5f;
  for (int h = 0; h < HID; h++)
    for (int o = 0; o < OUT; o++)
      b[h][o] = uniform() * 0.3f;
  for (int n = 0; n < BATCH; n++) {
    for (int i = 0; i < IN; i++)
      xs[n][i] = uniform();
    for (int o = 0; o < OUT; o++) {
      double y = 0;
      for (int h = 0; h < HID; h++) {
        double z = 0;
        for (int i = 0; i < IN; i++)
          z += xs[n][i] * a[i][h];
        y += tanh(z) * b[h][o];
      }
      ts[n][o] = (float)y + 0.05f * uniform();
    }
  }
  for (int i = 0; i < IN; i++)
    init->s[i] = 1.0f;
  for (int i = 0; i < IN; i++)
    for (int h = 0; h < HID; h++)
      init->w1[i][h] = uniform() * 0.25f;
  for (int h = 0; h < HID; h++)
    init->b1[h] = 0;
  for (int h = 0; h < HID; h++)
    for (int o = 0; o < OUT; o++)
      init->w2[h][o] = uniform() * 0.1f;
  for (int o = 0; o < OUT; o++)
    init->b2[o] = 0;
}

/* ---- The parallel model -------------------------------------------------- */

/* This rank's parameters: s and b2 whole, hidden units [h0, h0 + hl) of
 * W1's columns, b1, and W2's rows. Gradients share the layout, packed in
 * one buffer so dp needs one all_reduce per step. */
typedef struct shard {
  int h0, hl;
  float *s, *w1, *b1, *w2, *b2; /* views into buf */
  float *buf;
  size_t n;
} shard;

static void shard_init(shard *p, int h0, int hl) {
  p->h0 = h0;
  p->hl = hl;
  p->n = IN + (size_t)IN * hl + hl + (size_t)hl * OUT + OUT;
  p->buf = calloc(p->n, sizeof(float));
  if (p->buf == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  p->s = p->buf;
  p->w1 = p->s + IN;
  p->b1 = p->w1 + (size_t)IN * hl;
  p->w2 = p->b1 + hl;
  p->b2 = p->w2 + (size_t)hl * OUT;
}

static void shard_load(shard *p, const params *full) {
  memcpy(p->s, full->s, sizeof full->s);
  for (int i = 0; i < IN; i++)
    for (int h = 0; h < p->hl; h++)
      p->w1[i * p->hl + h] = full->w1[i][p->h0 + h];
  for (int h = 0; h < p->hl; h++) {
    p->b1[h] = full->b1[p->h0 + h];
    for (int o = 0; o < OUT; o++)
      p->w2[h * OUT + o] = full->w2[p->h0 + h][o];
  }
  memcpy(p->b2, full->b2, sizeof full->b2);
}

/* One training step on rows [r0, r0 + bl) of the batch; returns the local
 * loss sum (over rows). Uses the current gangs of this thread. */
static double parallel_step(shard *p, shard *grad, int r0, int bl) {
  const gangs *gs = gangs_current((gang_device){GANG_DEVICE_CPU, 0});
  int hl = p->hl;
  float *u = malloc(sizeof(float) * (size_t)bl * IN);
  float *hid = malloc(sizeof(float) * (size_t)bl * hl);
  float *y = malloc(sizeof(float) * (size_t)bl * OUT);
  float *du = malloc(sizeof(float) * (size_t)bl * IN);
  if (!u || !hid || !y || !du) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  /* Forward: column-parallel layer 1, row-parallel layer 2. */
  for (int n = 0; n < bl; n++) {
    for (int i = 0; i < IN; i++)
      u[n * IN + i] = xs[r0 + n][i] * p->s[i];
    for (int h = 0; h < hl; h++) {
      float z = p->b1[h];
      for (int i = 0; i < IN; i++)
        z += u[n * IN + i] * p->w1[i * hl + h];
      hid[n * hl + h] = tanhf(z);
    }
    for (int o = 0; o < OUT; o++) {
      float acc = 0;
      for (int h = 0; h < hl; h++)
        acc += hid[n * hl + h] * p->w2[h * OUT + o];
      y[n * OUT + o] = acc;
    }
  }
  /* The partial outputs of the row-parallel layer are summed over tp. */
  CHECK(gang_all_reduce(gs->tp, y, (size_t)bl * OUT, GANG_FLOAT32, GANG_SUM));
  double loss = 0;
  memset(grad->buf, 0, grad->n * sizeof(float));
  for (int n = 0; n < bl; n++)
    for (int o = 0; o < OUT; o++) {
      float e = y[n * OUT + o] + p->b2[o] - ts[r0 + n][o];
      loss += 0.5 * (double)e * e;
      y[n * OUT + o] = e / (float)bl; /* dL/dy of the local mean */
    }
  /* Backward. */
  for (int n = 0; n < bl; n++) {
    const float *dy = &y[n * OUT];
    for (int o = 0; o < OUT; o++)
      grad->b2[o] += dy[o];
    for (int i = 0; i < IN; i++)
      du[n * IN + i] = 0;
    for (int h = 0; h < hl; h++) {
      float hv = hid[n * hl + h], dh = 0;
      for (int o = 0; o < OUT; o++) {
        grad->w2[h * OUT + o] += hv * dy[o];
        dh += dy[o] * p->w2[h * OUT + o];
      }
      float dz = dh * (1 - hv * hv);
      grad->b1[h] += dz;
      for (int i = 0; i < IN; i++) {
        grad->w1[i * hl + h] += u[n * IN + i] * dz;
        du[n * IN + i] += dz * p->w1[i * hl + h];
      }
    }
  }
  /* The input gradient of the column-parallel layer: a partial sum over
   * this rank's hidden units, summed over tp. */
  CHECK(gang_all_reduce(gs->tp, du, (size_t)bl * IN, GANG_FLOAT32, GANG_SUM));
  for (int n = 0; n < bl; n++)
    for (int i = 0; i < IN; i++)
      grad->s[i] += du[n * IN + i] * xs[r0 + n][i];
  /* Data parallel: average the gradients of the dp replicas of this shard.
   * (The replicated s and b2 are also equal across tp, so no tp step.) */
  CHECK(gang_all_reduce(gs->dp, grad->buf, grad->n, GANG_FLOAT32, GANG_MEAN));
  for (size_t k = 0; k < p->n; k++)
    p->buf[k] -= LR * grad->buf[k];
  free(u);
  free(hid);
  free(y);
  free(du);
  return loss;
}

/* ---- The single-process reference: plain loops, full model ------------ */

static double reference_step(params *p) {
  static float u[BATCH][IN], hid[BATCH][HID], dy[BATCH][OUT];
  static params g;
  memset(&g, 0, sizeof g);
  double loss = 0;
  for (int n = 0; n < BATCH; n++) {
    for (int i = 0; i < IN; i++)
      u[n][i] = xs[n][i] * p->s[i];
    for (int h = 0; h < HID; h++) {
      float z = p->b1[h];
      for (int i = 0; i < IN; i++)
        z += u[n][i] * p->w1[i][h];
      hid[n][h] = tanhf(z);
    }
    for (int o = 0; o < OUT; o++) {
      float yv = 0;
      for (int h = 0; h < HID; h++)
        yv += hid[n][h] * p->w2[h][o];
      float e = yv + p->b2[o] - ts[n][o];
      loss += 0.5 * (double)e * e;
      dy[n][o] = e / BATCH;
    }
  }
  for (int n = 0; n < BATCH; n++) {
    float du[IN] = {0};
    for (int o = 0; o < OUT; o++)
      g.b2[o] += dy[n][o];
    for (int h = 0; h < HID; h++) {
      float dh = 0;
      for (int o = 0; o < OUT; o++) {
        g.w2[h][o] += hid[n][h] * dy[n][o];
        dh += dy[n][o] * p->w2[h][o];
      }
      float dz = dh * (1 - hid[n][h] * hid[n][h]);
      g.b1[h] += dz;
      for (int i = 0; i < IN; i++) {
        g.w1[i][h] += u[n][i] * dz;
        du[i] += dz * p->w1[i][h];
      }
    }
    for (int i = 0; i < IN; i++)
      g.s[i] += du[i] * xs[n][i];
  }
  float *pv = (float *)p, *gv = (float *)&g;
  for (size_t k = 0; k < sizeof g / sizeof(float); k++)
    pv[k] -= LR * gv[k];
  return loss / BATCH;
}

/* ---- Driver ------------------------------------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double worst = 0; /* largest |diff| / max(1, |ref|) */
static void compare(float got, float want) {
  double d = fabs((double)got - want) / fmax(1.0, fabs(want));
  if (!(d <= worst)) /* NaN counts as worst */
    worst = isnan(d) ? INFINITY : d;
}

int main(int argc, char **argv) {
  int tp_size = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tp") == 0 && i + 1 < argc)
      tp_size = atoi(argv[++i]);
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--tp N] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  gang_t *world;
  CHECK(gang_create_default(NULL, &world));
  int rank = gang_rank(world), size = gang_size(world);
  if (tp_size < 0)
    tp_size = size % 2 == 0 ? 2 : 1;
  gangs gs;
  CHECK(gangs_create_parallel(world, tp_size, 1, &gs));
  CHECK(gangs_push_current(&gs));
  int tp = gang_size(gs.tp), dp = gang_size(gs.dp);
  if (HID % tp || BATCH % dp) {
    fprintf(stderr, "tp %d must divide %d and dp %d must divide %d\n", tp, HID,
            dp, BATCH);
    return 2;
  }
  static params init, ref;
  make_data(&init);
  int hl = HID / tp, h0 = gang_rank(gs.tp) * hl;
  int bl = BATCH / dp, r0 = gang_rank(gs.dp) * bl;
  shard p, grad;
  shard_init(&p, h0, hl);
  shard_init(&grad, h0, hl);
  shard_load(&p, &init);
  if (rank == 0)
    printf("train_tp_dp: %d ranks = dp %d x tp %d; MLP %d-%d-%d, batch %d "
           "(%d per dp rank), %d steps of SGD (lr %g)\n",
           size, dp, tp, IN, HID, OUT, BATCH, bl, steps, (double)LR);

  CHECK(gang_barrier(world));
  double t0 = now_s();
  double first = 0, last = 0;
  for (int step = 0; step < steps; step++) {
    /* The loss of the whole batch: each dp rank's sum and row count,
     * reduced by name. */
    const char *names[2] = {"loss_sum", "rows"};
    double metrics[2] = {parallel_step(&p, &grad, r0, bl), bl};
    CHECK(gang_all_reduce_dict(gs.dp, names, metrics, 2, GANG_SUM));
    last = metrics[0] / metrics[1];
    if (step == 0)
      first = last;
    if (rank == 0)
      printf("step %3d  loss %.6f\n", step, last);
  }
  CHECK(gang_barrier(world));
  double t_par = now_s() - t0;

  /* The same training alone, on every rank. */
  ref = init;
  t0 = now_s();
  double ref_last = 0;
  for (int step = 0; step < steps; step++)
    ref_last = reference_step(&ref);
  double t_ref = now_s() - t0;

  for (int i = 0; i < IN; i++)
    compare(p.s[i], ref.s[i]);
  for (int i = 0; i < IN; i++)
    for (int h = 0; h < hl; h++)
      compare(p.w1[i * hl + h], ref.w1[i][h0 + h]);
  for (int h = 0; h < hl; h++) {
    compare(p.b1[h], ref.b1[h0 + h]);
    for (int o = 0; o < OUT; o++)
      compare(p.w2[h * OUT + o], ref.w2[h0 + h][o]);
  }
  for (int o = 0; o < OUT; o++)
    compare(p.b2[o], ref.b2[o]);
  /* The verdict of every rank: the worst difference anywhere. */
  double all_worst = worst;
  CHECK(gang_all_reduce(world, &all_worst, 1, GANG_FLOAT64, GANG_MAX));
  int ok = all_worst <= TOLERANCE && last < 0.5 * first;
  /* Rank 0's training time is the run's; every rank's reference is the
   * same computation. */
  int flag = ok;
  CHECK(gang_broadcast_flag(world, &flag, 0));
  if (rank == 0) {
    printf("loss %.6f -> %.6f (reference alone: %.6f)\n", first, last,
           ref_last);
    printf("parameters vs single-process reference: max relative "
           "difference %.3g (tolerance %.0e): %s\n",
           all_worst, TOLERANCE, all_worst <= TOLERANCE ? "match" : "MISMATCH");
    printf("time: %d-rank training %.3f s, single-process reference %.3f s\n",
           size, t_par, t_ref);
    printf("train_tp_dp: %s\n", flag ? "PASS" : "FAIL");
  }
  CHECK(gangs_pop_current());
  gangs_close(&gs);
  free(p.buf);
  free(grad.buf);
  gang_destroy(world);
  return flag ? 0 : 1;
}
