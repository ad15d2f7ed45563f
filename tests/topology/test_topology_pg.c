/* Topologies and meshes over real multi-process gangs, for world sizes 1,
 * 2, 4 and 8 (8 oversubscribes the 2-core test machine).
 *
 * For every sub-gang a rank gets, it all-gathers the world ranks of the
 * sub-gang's members and compares them, in gang-rank order, with a table
 * the test computes on its own: from fairseq2's documented formulas (tp =
 * consecutive ranks, dp = stride tp, fsdp rows/columns of dp), from
 * PyTorch's definition of a mesh dimension's group (scan every position,
 * keep those equal to mine except in that dimension), and from the literal
 * 8-rank examples of both projects' documentation. Then it all_reduces on
 * the sub-gang and checks the sums, so a gang that has the right members
 * but does not work fails too. */
#include <stdbool.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/mesh.h"
#include "gang/topology.h"

static int g_port;
static int g_run; /* a fresh store prefix per run */
static int g_wr;  /* this child's world rank */

#define MAXW 8

/* Fails the child with `what` when g's members are not `want` (world
 * ranks, in gang-rank order) or an all_reduce on it gives a wrong sum. */
static void check_group(gang_t *g, const int *want, int n, const char *what) {
  int pos = -1;
  for (int i = 0; i < n; i++)
    if (want[i] == g_wr)
      pos = i;
  if (g == NULL || pos < 0 || gang_size(g) != n || gang_rank(g) != pos) {
    fprintf(stderr,
            "rank %d: %s: gang %p size %d rank %d, want size %d rank %d\n",
            g_wr, what, (void *)g, gang_size(g), gang_rank(g), n, pos);
    _exit(1);
  }
  int32_t got[MAXW], mine = g_wr;
  RCHECK_OK(gang_all_gather(g, got, &mine, 1, GANG_INT32));
  for (int i = 0; i < n; i++) {
    if (got[i] != want[i]) {
      fprintf(stderr, "rank %d: %s: member %d is world rank %d, want %d\n",
              g_wr, what, i, (int)got[i], want[i]);
      _exit(1);
    }
  }
  int64_t v[2] = {g_wr + 1, (int64_t)(g_wr + 1) * (g_wr + 1)}, s0 = 0, s1 = 0;
  for (int i = 0; i < n; i++) {
    s0 += want[i] + 1;
    s1 += (int64_t)(want[i] + 1) * (want[i] + 1);
  }
  RCHECK_OK(gang_all_reduce(g, v, 2, GANG_INT64, GANG_SUM));
  if (v[0] != s0 || v[1] != s1) {
    fprintf(stderr, "rank %d: %s: sums %lld %lld, want %lld %lld\n", g_wr, what,
            (long long)v[0], (long long)v[1], (long long)s0, (long long)s1);
    _exit(1);
  }
}

/* The group of a documented table ({-1}-terminated rows) holding me. */
static void check_table(gang_t *g, const int table[][MAXW + 1], int rows,
                        const char *what) {
  for (int r = 0; r < rows; r++) {
    int n = 0;
    bool mine = false;
    while (table[r][n] >= 0)
      mine |= table[r][n++] == g_wr;
    if (mine) {
      check_group(g, table[r], n, what);
      return;
    }
  }
  fprintf(stderr, "rank %d: %s: not in the table\n", g_wr, what);
  _exit(1);
}

/* ---- fairseq2 topologies ------------------------------------------------ */

static void check_parallel(gang_t *world, int tp, int pp, int fsdp_k) {
  int w = gang_size(world), block = tp * pp, dp = w / block;
  char what[96];
  gangs gs;
  RCHECK_OK(gangs_create_parallel(world, tp, pp, &gs));
  RCHECK(gs.root == world && gs.rdp == gs.dp);
  int want[MAXW];
  /* tp: tp consecutive ranks. */
  for (int i = 0; i < tp; i++)
    want[i] = g_wr - g_wr % tp + i;
  snprintf(what, sizeof what, "W=%d tp=%d pp=%d: tp", w, tp, pp);
  check_group(gs.tp, want, tp, what);
  /* pp: stride tp inside a block of pp*tp. */
  for (int i = 0; i < pp; i++)
    want[i] = g_wr / block * block + i * tp + g_wr % tp;
  snprintf(what, sizeof what, "W=%d tp=%d pp=%d: pp", w, tp, pp);
  check_group(gs.pp, want, pp, what);
  /* dp: stride pp*tp. */
  for (int i = 0; i < dp; i++)
    want[i] = g_wr % block + i * block;
  snprintf(what, sizeof what, "W=%d tp=%d pp=%d: dp", w, tp, pp);
  check_group(gs.dp, want, dp, what);
  int dp_ranks[MAXW];
  memcpy(dp_ranks, want, sizeof want);
  int my_dp = g_wr / block;
  want[0] = g_wr;
  snprintf(what, sizeof what, "W=%d tp=%d pp=%d: sdp", w, tp, pp);
  check_group(gs.sdp, want, 1, what);
  /* fairseq2: a dimension of the world's size is the root; of size 1 a
   * fake gang; rank 0 is rank 0 everywhere. */
  RCHECK((tp == w && w > 1) == (gs.tp == world));
  RCHECK((dp == w && w > 1) == (gs.dp == world));
  RCHECK((pp == w && w > 1) == (gs.pp == world));
  if (g_wr == 0)
    RCHECK(gang_rank(gs.dp) == 0 && gang_rank(gs.tp) == 0 &&
           gang_rank(gs.pp) == 0);

  /* FSDP over that dp gang. */
  gangs fs;
  RCHECK_OK(gangs_create_fsdp(&gs, fsdp_k, &fs));
  RCHECK(fs.root == gs.root && fs.dp == gs.dp && fs.tp == gs.tp &&
         fs.pp == gs.pp);
  int k = fsdp_k == 0 ? dp : fsdp_k;
  for (int i = 0; i < k; i++)
    want[i] = dp_ranks[my_dp - my_dp % k + i];
  snprintf(what, sizeof what, "W=%d tp=%d pp=%d fsdp %d: sdp", w, tp, pp,
           fsdp_k);
  check_group(fs.sdp, want, k, what);
  for (int i = 0; i < dp / k; i++)
    want[i] = dp_ranks[my_dp % k + i * k];
  snprintf(what, sizeof what, "W=%d tp=%d pp=%d fsdp %d: rdp", w, tp, pp,
           fsdp_k);
  check_group(fs.rdp, want, dp / k, what);
  if (k == dp)
    RCHECK(fs.sdp == gs.dp);
  /* Close the input first: fs keeps the shared gangs alive. */
  gangs_close(&gs);
  RCHECK(gs.dp == NULL && gs.owner == NULL);
  gangs_close(&gs); /* idempotent */
  int64_t one = 1;
  RCHECK_OK(gang_all_reduce(fs.dp, &one, 1, GANG_INT64, GANG_SUM));
  RCHECK(one == dp);
  gangs_close(&fs);
  gangs_close(&fs);
}

/* The documentation's 8-rank examples, literally. */
static void check_documented_8(gang_t *world) {
  static const int tp2[][MAXW + 1] = {
      {0, 1, -1}, {2, 3, -1}, {4, 5, -1}, {6, 7, -1}};
  static const int dp4[][MAXW + 1] = {{0, 2, 4, 6, -1}, {1, 3, 5, 7, -1}};
  gangs gs;
  RCHECK_OK(gangs_create_parallel(world, 2, 1, &gs));
  check_table(gs.tp, tp2, 4, "fairseq2 example tp");
  check_table(gs.dp, dp4, 2, "fairseq2 example dp");
  gangs_close(&gs);

  static const int pp2[][MAXW + 1] = {
      {0, 2, -1}, {1, 3, -1}, {4, 6, -1}, {5, 7, -1}};
  static const int dp2[][MAXW + 1] = {
      {0, 4, -1}, {1, 5, -1}, {2, 6, -1}, {3, 7, -1}};
  RCHECK_OK(gangs_create_parallel(world, 2, 2, &gs));
  check_table(gs.tp, tp2, 4, "pp extension example tp");
  check_table(gs.pp, pp2, 4, "pp extension example pp");
  check_table(gs.dp, dp2, 4, "pp extension example dp");
  gangs_close(&gs);

  static const int sdp4[][MAXW + 1] = {{0, 1, 2, 3, -1}, {4, 5, 6, 7, -1}};
  gangs fs;
  RCHECK_OK(gangs_create_parallel(world, 1, 1, &gs));
  RCHECK_OK(gangs_create_fsdp(&gs, 4, &fs));
  check_table(fs.sdp, sdp4, 2, "fairseq2 example sdp");
  check_table(fs.rdp, dp2, 4, "fairseq2 example rdp");
  gangs_close(&fs);
  gangs_close(&gs);
}

/* ---- PyTorch meshes -------------------------------------------------------
 */

typedef struct mesh_case {
  int ndim;
  int shape[3];
} mesh_case;

static void coords_of(int pos, const int *shape, int ndim, int *c) {
  for (int d = ndim - 1; d >= 0; d--) {
    c[d] = pos % shape[d];
    pos /= shape[d];
  }
}

/* World ranks of the group holding position `me` that varies the dims in
 * `vary` (a bitmask): scan every position, keep those whose other
 * coordinates equal mine; the scan is row-major, which is the order of the
 * varying coordinates. map: position -> world rank. Returns the count. */
static int expect_group(const int *map, const int *shape, int ndim, int me,
                        unsigned vary, int *out) {
  int size = 1, n = 0, mc[3], c[3];
  for (int d = 0; d < ndim; d++)
    size *= shape[d];
  coords_of(me, shape, ndim, mc);
  for (int q = 0; q < size; q++) {
    coords_of(q, shape, ndim, c);
    bool same = true;
    for (int d = 0; d < ndim; d++)
      if (!(vary & (1u << d)))
        same &= c[d] == mc[d];
    if (same)
      out[n++] = map[q];
  }
  return n;
}

static const char *const k_names[3] = {"dp", "cp", "tp"};

/* A mesh over `g` whose position i is world rank map[i] and rank gmap[i]
 * of g; `mine` is this rank's position or -1. */
static void check_mesh(gang_t *g, const int *map, const int *gmap,
                       const mesh_case *mc, int mine, gang_t *reused,
                       const char *tag) {
  const int *shape = mc->shape;
  int ndim = mc->ndim, size = 1;
  for (int d = 0; d < ndim; d++)
    size *= shape[d];
  char what[128];
  gang_mesh *m;
  RCHECK_OK(gang_mesh_create(g, shape, ndim, k_names, &m));
  RCHECK(gang_mesh_ndim(m) == ndim && gang_mesh_size(m) == size);
  for (int d = 0; d < ndim; d++)
    RCHECK(gang_mesh_shape(m)[d] == shape[d] &&
           strcmp(gang_mesh_names(m)[d], k_names[d]) == 0);
  int coord[3], want_c[3], want[MAXW];
  if (mine < 0) {
    RCHECK(gang_mesh_coordinate(m, coord) == 0);
    RCHECK(gang_mesh_local_rank(m, "dp") == -1);
    for (int d = 0; d < ndim; d++) {
      gang_t *x = (gang_t *)1;
      RCHECK_OK(gang_mesh_group_at(m, d, &x));
      RCHECK(x == NULL);
    }
    gang_mesh_destroy(m);
    return;
  }
  RCHECK(gang_mesh_coordinate(m, coord) == 1);
  coords_of(mine, shape, ndim, want_c);
  int ranks[MAXW];
  RCHECK_OK(gang_mesh_ranks(m, ranks));
  for (int i = 0; i < size; i++)
    RCHECK(ranks[i] == gmap[i]);
  for (int d = 0; d < ndim; d++) {
    RCHECK(coord[d] == want_c[d]);
    RCHECK(gang_mesh_local_rank(m, k_names[d]) == want_c[d]);
    gang_t *byname, *byidx;
    RCHECK_OK(gang_mesh_group(m, k_names[d], &byname));
    RCHECK_OK(gang_mesh_group_at(m, d, &byidx));
    RCHECK(byname == byidx);
    int n = expect_group(map, shape, ndim, mine, 1u << d, want);
    snprintf(what, sizeof what, "%s mesh dim %s (%d of %d)", tag, k_names[d], d,
             ndim);
    check_group(byname, want, n, what);
    if (ndim == 1)
      RCHECK(byname == reused);
    /* A slice of one dimension: the same gang, no new one. */
    gang_mesh *s;
    RCHECK_OK(gang_mesh_slice(m, &k_names[d], 1, &s));
    gang_t *sg;
    RCHECK_OK(gang_mesh_group(s, NULL, &sg));
    RCHECK(sg == byname);
    RCHECK(gang_mesh_local_rank(s, NULL) == want_c[d]);
    /* The sub-grid holding me, in g's ranks. */
    int sr[MAXW], gwant[MAXW];
    RCHECK_OK(gang_mesh_ranks(s, sr));
    RCHECK(expect_group(gmap, shape, ndim, mine, 1u << d, gwant) == n);
    for (int i = 0; i < n; i++)
      RCHECK(sr[i] == gwant[i]);
    gang_mesh_destroy(s);
  }
  if (ndim >= 2) {
    /* Flatten all dims: one gang over the whole mesh (the gang itself when
     * the mesh is the gang in order). */
    gang_t *all;
    RCHECK_OK(gang_mesh_flatten(m, "all", &all));
    int n = expect_group(map, shape, ndim, mine, (1u << ndim) - 1, want);
    snprintf(what, sizeof what, "%s mesh flattened", tag);
    check_group(all, want, n, what);
    gang_t *again;
    RCHECK_OK(gang_mesh_flatten(m, "all", &again));
    RCHECK(again == all);
    /* Slice the first two dims, transpose them, and flatten the pair. */
    const char *pair[2] = {k_names[0], k_names[1]};
    gang_mesh *s;
    RCHECK_OK(gang_mesh_slice(m, pair, 2, &s));
    gang_t *f;
    RCHECK_OK(gang_mesh_flatten(s, NULL, &f));
    n = expect_group(map, shape, ndim, mine, 3u, want);
    snprintf(what, sizeof what, "%s mesh flattened dp_cp", tag);
    check_group(f, want, n, what);
    gang_t *byname;
    RCHECK_OK(gang_mesh_group(m, "dp_cp", &byname));
    RCHECK(byname == f);
    RCHECK(gang_mesh_local_rank(m, "dp_cp") == gang_rank(f));
    const char *rev[2] = {k_names[1], k_names[0]};
    gang_mesh *t;
    RCHECK_OK(gang_mesh_slice(m, rev, 2, &t));
    RCHECK(gang_mesh_shape(t)[0] == shape[1] &&
           gang_mesh_shape(t)[1] == shape[0]);
    RCHECK(gang_mesh_coordinate(t, coord) == 1 && coord[0] == want_c[1] &&
           coord[1] == want_c[0]);
    gang_t *tg;
    RCHECK_OK(gang_mesh_group_at(t, 0, &tg));
    gang_t *cp;
    RCHECK_OK(gang_mesh_group(m, k_names[1], &cp));
    RCHECK(tg == cp);
    /* Destroy the parent first: slices keep the gangs alive. */
    gang_mesh_destroy(m);
    m = NULL;
    int64_t one = 1;
    RCHECK_OK(gang_all_reduce(f, &one, 1, GANG_INT64, GANG_SUM));
    RCHECK(one == gang_size(f));
    gang_mesh_destroy(t);
    gang_mesh_destroy(s);
  }
  gang_mesh_destroy(m);
}

/* PyTorch's 3-D example: (2,2,2) named (dp,cp,tp); ["dp","cp"] is
 * [[0,2],[4,6]] on {0,2,4,6} and [[1,3],[5,7]] elsewhere; its flattening
 * is {0,2,4,6} {1,3,5,7}. (2,4) named (dp,tp): dp {0,4}.. tp {0..3}. */
static void check_documented_mesh_8(gang_t *world) {
  gang_mesh *m;
  int shape[3] = {2, 2, 2};
  RCHECK_OK(gang_mesh_create(world, shape, 3, k_names, &m));
  gang_mesh *s;
  RCHECK_OK(gang_mesh_slice(m, k_names, 2, &s));
  int r[4];
  RCHECK_OK(gang_mesh_ranks(s, r));
  int even[4] = {0, 2, 4, 6}, odd[4] = {1, 3, 5, 7};
  RCHECK(memcmp(r, g_wr % 2 ? odd : even, sizeof r) == 0);
  gang_t *f;
  RCHECK_OK(gang_mesh_flatten(s, NULL, &f));
  static const int flat[][MAXW + 1] = {{0, 2, 4, 6, -1}, {1, 3, 5, 7, -1}};
  check_table(f, flat, 2, "PyTorch example dp_cp");
  gang_mesh_destroy(s);
  gang_mesh_destroy(m);

  const char *dt[2] = {"dp", "tp"};
  int shape2[2] = {2, 4};
  RCHECK_OK(gang_mesh_create(world, shape2, 2, dt, &m));
  static const int dp[][MAXW + 1] = {
      {0, 4, -1}, {1, 5, -1}, {2, 6, -1}, {3, 7, -1}};
  static const int tp[][MAXW + 1] = {{0, 1, 2, 3, -1}, {4, 5, 6, 7, -1}};
  gang_t *g;
  RCHECK_OK(gang_mesh_group(m, "dp", &g));
  check_table(g, dp, 4, "PyTorch example dp");
  RCHECK_OK(gang_mesh_group(m, "tp", &g));
  check_table(g, tp, 2, "PyTorch example tp");
  RCHECK(gang_mesh_local_rank(m, "dp") == g_wr / 4);
  RCHECK(gang_mesh_local_rank(m, "tp") == g_wr % 4);
  gang_mesh_destroy(m);
}

static void check_meshes(gang_t *world) {
  int w = gang_size(world);
  static const mesh_case c1[] = {{1, {1}}, {2, {1, 1}}};
  static const mesh_case c2[] = {{1, {2}}, {2, {1, 2}}, {2, {2, 1}}};
  static const mesh_case c4[] = {
      {1, {4}}, {2, {2, 2}}, {2, {4, 1}}, {3, {1, 2, 2}}};
  static const mesh_case c8[] = {{1, {8}},       {2, {2, 4}}, {2, {4, 2}},
                                 {3, {2, 2, 2}}, {2, {8, 1}}, {3, {2, 4, 1}}};
  const mesh_case *cases = w == 1 ? c1 : w == 2 ? c2 : w == 4 ? c4 : c8;
  int n = w == 1 ? 2 : w == 2 ? 3 : w == 4 ? 4 : 6;
  int ident[MAXW];
  for (int i = 0; i < w; i++)
    ident[i] = i;
  for (int i = 0; i < n; i++)
    check_mesh(world, ident, ident, &cases[i], g_wr, world, "world");
  if (w == 8)
    check_documented_mesh_8(world);
  if (w < 4)
    return;

  /* A mesh over a sub-gang: the even ranks, (2, w/4). Odd ranks hold no
   * sub-gang and get a mesh they are not in. */
  int evens[MAXW / 2], map[MAXW / 2], gmap[MAXW / 2];
  for (int i = 0; i < w / 2; i++) {
    evens[i] = map[i] = 2 * i;
    gmap[i] = i;
  }
  gang_t *sub;
  RCHECK_OK(gang_create_subgang(world, evens, w / 2, &sub));
  mesh_case mc = {2, {2, w / 4, 0}};
  check_mesh(sub, map, gmap, &mc, g_wr % 2 ? -1 : g_wr / 2, sub, "sub-gang");
  gang_destroy(sub);

  /* A mesh smaller than the gang, over ranks listed backwards: positions
   * hold w-1, w-2, ..., 2; ranks 0 and 1 are outside. */
  int rmap[MAXW], shape[2] = {2, (w - 2) / 2};
  for (int i = 0; i < w - 2; i++)
    rmap[i] = w - 1 - i;
  gang_mesh *m;
  RCHECK_OK(gang_mesh_create_from_ranks(world, rmap, shape, 2, k_names, &m));
  int coord[2];
  if (g_wr < 2) {
    RCHECK(gang_mesh_coordinate(m, coord) == 0);
    gang_t *x = (gang_t *)1;
    RCHECK_OK(gang_mesh_group(m, "dp", &x));
    RCHECK(x == NULL);
  } else {
    int pos = w - 1 - g_wr, want[MAXW];
    RCHECK(gang_mesh_coordinate(m, coord) == 1);
    RCHECK(coord[0] == pos / shape[1] && coord[1] == pos % shape[1]);
    for (int d = 0; d < 2; d++) {
      gang_t *x;
      RCHECK_OK(gang_mesh_group_at(m, d, &x));
      int n2 = expect_group(rmap, shape, 2, pos, 1u << d, want);
      check_group(x, want, n2, d ? "from_ranks cp" : "from_ranks dp");
    }
  }
  gang_t *f;
  RCHECK_OK(gang_mesh_flatten(m, NULL, &f)); /* collective: all ranks */
  if (g_wr < 2) {
    RCHECK(f == NULL);
  } else {
    int want[MAXW];
    int n2 = expect_group(rmap, shape, 2, w - 1 - g_wr, 3u, want);
    check_group(f, want, n2, "from_ranks flattened");
  }
  gang_mesh_destroy(m);
}

/* ---- Helpers ------------------------------------------------------------- */

static void check_helpers(gang_t *world) {
  int w = gang_size(world);
  int flag = g_wr == w - 1;
  RCHECK_OK(gang_broadcast_flag(world, &flag, w - 1));
  RCHECK(flag == 1);
  flag = g_wr == 0 ? 0 : 7;
  RCHECK_OK(gang_broadcast_flag(world, &flag, 0));
  RCHECK(flag == 0);
  int64_t s = g_wr + 1;
  RCHECK_OK(gang_all_sum(world, &s));
  RCHECK(s == (int64_t)w * (w + 1) / 2);
  double d = 0.5 * g_wr;
  RCHECK_OK(gang_all_sum_f64(world, &d));
  RCHECK(d == 0.25 * w * (w - 1));

  const char *names[3] = {"loss", "tokens", "acc"};
  double v[3] = {g_wr, 1, 2.0 * g_wr};
  RCHECK_OK(gang_all_reduce_dict(world, names, v, 3, GANG_SUM));
  RCHECK(v[0] == w * (w - 1) / 2.0 && v[1] == w && v[2] == w * (w - 1.0));
  double mx[3] = {g_wr, -g_wr, 3};
  RCHECK_OK(gang_all_reduce_dict(world, names, mx, 3, GANG_MAX));
  RCHECK(mx[0] == w - 1 && mx[1] == 0 && mx[2] == 3);
  RCHECK_OK(gang_all_reduce_dict(world, NULL, NULL, 0, GANG_SUM));

  if (w >= 2) {
    /* The last rank misspells a name: every rank fails, naming both. */
    const char *bad[3] = {"loss", "tokns", "acc"};
    double b[3] = {1, 2, 3};
    gang_status st = gang_all_reduce_dict(world, g_wr == w - 1 ? bad : names, b,
                                          3, GANG_SUM);
    RCHECK(st == GANG_MISMATCH);
    const char *e = gang_last_error();
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d", w - 1);
    if (!strstr(e, "'tokens'") || !strstr(e, "'tokns'") || !strstr(e, rk) ||
        !strstr(e, "index 1")) {
      fprintf(stderr, "rank %d: mismatch detail: %s\n", g_wr, e);
      _exit(1);
    }
    RCHECK(b[0] == 1 && b[1] == 2 && b[2] == 3);
    /* A rank passing fewer names. */
    st = gang_all_reduce_dict(world, names, b, g_wr == 0 ? 2 : 3, GANG_SUM);
    RCHECK(st == GANG_MISMATCH);
    RCHECK(strstr(gang_last_error(), "(no more names)") != NULL);
    /* The gang is not broken by a mismatch. */
    RCHECK_OK(gang_all_reduce_dict(world, names, b, 3, GANG_SUM));
    RCHECK(b[0] == w && b[1] == 2 * w);
  }
}

static int rank_main(int rank, int size, void *arg) {
  (void)arg;
  g_wr = rank;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/topo%d", g_port, g_run);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 60000;
  gang_t *world = NULL;
  RCHECK_OK(gang_create_with_store(&o, addr, rank, size, &world));
  RCHECK_OK(gang_barrier(world));
  int fds = gt_count_fds();

  for (int tp = 1; tp <= size; tp *= 2)
    for (int pp = 1; tp * pp <= size; pp *= 2) {
      int dp = size / (tp * pp);
      /* Full sharding, then every hybrid k that divides dp. */
      check_parallel(world, tp, pp, 0);
      for (int k = 2; k < dp; k *= 2)
        check_parallel(world, tp, pp, k);
    }
  if (size == 8)
    check_documented_8(world);
  check_meshes(world);
  check_helpers(world);

  /* Sub-gangs share the world's connections: nothing was opened. */
  RCHECK(gt_count_fds() == fds);
  RCHECK_OK(gang_barrier(world));
  gang_destroy(world);
  return 0;
}

static void run_world(int size) {
  gt_store_proc srv = gt_store_proc_start(NULL);
  g_port = srv.port;
  g_run++;
  assert_int_equal(gt_run_ranks(size, rank_main, NULL, 240000), 0);
  gt_store_proc_stop(&srv);
}

static void test_world_1(void **state) {
  (void)state;
  run_world(1);
}
static void test_world_2(void **state) {
  (void)state;
  run_world(2);
}
static void test_world_4(void **state) {
  (void)state;
  run_world(4);
}
static void test_world_8(void **state) {
  (void)state;
  run_world(8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_world_1),
      GT_TEST(test_world_2),
      GT_TEST(test_world_4),
      GT_TEST(test_world_8),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
