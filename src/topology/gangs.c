/* The gangs of a parallel run: fairseq2's create_fake_gangs,
 * create_parallel_gangs (plus a pipeline dimension) and create_fsdp_gangs.
 *
 * Ownership. fairseq2 closes only the root, because destroying torch's
 * WORLD tears down every child group. Our sub-gangs are independent
 * objects (each holds a reference on the world's fabric), so a gangs value
 * must destroy the sub-gangs it made, each once, whatever fields they fill
 * (rdp is dp; a dimension of the world's size is the root). A gangs_owner
 * records the gangs one create call made; an fsdp result's node holds a
 * reference on its input's node, because it shares root/dp/tp/pp with it.
 * The root handed to gangs_create_parallel is the caller's: we never
 * destroy a gang we did not create. */
#include "gang/topology.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "topology/layout.h"

#define NODE_MAX 6

struct gangs_owner {
  atomic_int refs;
  gangs_owner *parent; /* shares its gangs with us; we hold a reference */
  int n;
  gang_t *owned[NODE_MAX];
};

static gangs_owner *node_new(gangs_owner *parent) {
  gangs_owner *nd = calloc(1, sizeof *nd);
  if (nd == NULL)
    return NULL;
  atomic_init(&nd->refs, 1);
  if (parent != NULL) {
    atomic_fetch_add(&parent->refs, 1);
    nd->parent = parent;
  }
  return nd;
}

static void node_own(gangs_owner *nd, gang_t *g) {
  for (int i = 0; i < nd->n; i++)
    if (nd->owned[i] == g)
      return;
  nd->owned[nd->n++] = g;
}

static void node_release(gangs_owner *nd) {
  while (nd != NULL) {
    if (atomic_fetch_sub(&nd->refs, 1) != 1)
      return;
    /* Children before the root: they were made from it. */
    for (int i = nd->n - 1; i >= 0; i--)
      gang_destroy(nd->owned[i]);
    gangs_owner *parent = nd->parent;
    free(nd);
    nd = parent;
  }
}

static gang_status fake1(gang_device device, gangs_owner *nd, gang_t **out) {
  GANG_CHECK(gang_create_fake(device, 0, 1, out));
  node_own(nd, *out);
  return GANG_OK;
}

gang_status gangs_create_fake(gang_device device, gangs *out) {
  const char *fn = "gangs_create_fake";
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  gangs_owner *nd = node_new(NULL);
  if (nd == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  /* fairseq2 fills all six fields with one FakeGang; so do we. */
  gang_t *g = NULL;
  gang_status st = fake1(device, nd, &g);
  if (st != GANG_OK) {
    node_release(nd);
    return st;
  }
  *out = (gangs){g, g, g, g, g, g, nd};
  return GANG_OK;
}

/* One dimension of a grid: size 1 is a fresh fake gang (fairseq2), the
 * whole root is the root, otherwise every group is created. */
static gang_status make_dim(gang_t *root, const int *shape, int ndim, int dim,
                            gangs_owner *nd, gang_t **out) {
  if (shape[dim] == 1)
    return fake1(gang_get_device(root), nd, out);
  bool owned = false;
  GANG_CHECK(gang__topo_create_groups(root, NULL, shape, ndim, 1u << dim, out,
                                      &owned));
  if (owned)
    node_own(nd, *out);
  return GANG_OK;
}

gang_status gangs_create_parallel(gang_t *root, int tp_size, int pp_size,
                                  gangs *out) {
  const char *fn = "gangs_create_parallel";
  GANG_ARG_CHECK(root != NULL, fn, "root is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  int w = gang_size(root);
  GANG_ARG_CHECK(tp_size >= 1, fn,
                 "tp_size must be greater than or equal to 1, but is %d",
                 tp_size);
  GANG_ARG_CHECK(pp_size >= 1, fn,
                 "pp_size must be greater than or equal to 1, but is %d",
                 pp_size);
  GANG_ARG_CHECK(w % tp_size == 0, fn,
                 "tp_size must be a factor of the root gang's size (%d), but "
                 "is %d",
                 w, tp_size);
  GANG_ARG_CHECK((w / tp_size) % pp_size == 0, fn,
                 "tp_size (%d) * pp_size (%d) must be a factor of the root "
                 "gang's size (%d)",
                 tp_size, pp_size, w);
  gangs_owner *nd = node_new(NULL);
  if (nd == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  /* (dp, pp, tp) row-major: rank = d*pp*tp + p*tp + t. */
  int shape[3] = {w / (tp_size * pp_size), pp_size, tp_size};
  gang_t *dp = NULL, *tp = NULL, *pp = NULL, *sdp = NULL;
  gang_status st;
  /* fairseq2's order: the dp gangs, then the tp gangs; pp is ours, last. */
  GANG_CHECK_GOTO(make_dim(root, shape, 3, 0, nd, &dp), st, fail);
  GANG_CHECK_GOTO(make_dim(root, shape, 3, 2, nd, &tp), st, fail);
  GANG_CHECK_GOTO(make_dim(root, shape, 3, 1, nd, &pp), st, fail);
  GANG_CHECK_GOTO(fake1(gang_get_device(root), nd, &sdp), st, fail);
  *out = (gangs){root, dp, dp, sdp, tp, pp, nd};
  return GANG_OK;
fail:
  node_release(nd);
  return gang__error_wrap(st, "%s(tp_size %d, pp_size %d)", fn, tp_size,
                          pp_size);
}

gang_status gangs_create_fsdp(const gangs *in, int intra_node_size,
                              gangs *out) {
  const char *fn = "gangs_create_fsdp";
  GANG_ARG_CHECK(in != NULL, fn, "gangs is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(in->dp != NULL, fn, "gangs has no dp gang");
  int k = intra_node_size, n = gang_size(in->dp);
  GANG_ARG_CHECK(k >= 0, fn,
                 "intra_node_size must be 0 (full sharding) or greater than "
                 "1, but is %d",
                 k);
  GANG_ARG_CHECK(k != 1, fn,
                 "intra_node_size must be greater than 1, but is 1 (use the "
                 "input gangs for plain data parallelism)");
  GANG_ARG_CHECK(k == 0 || n % k == 0, fn,
                 "intra_node_size must be a factor of the dp gang's size "
                 "(%d), but is %d",
                 n, k);
  gangs_owner *nd = node_new(in->owner);
  if (nd == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  gang_t *sdp = NULL, *rdp = NULL;
  gang_status st;
  if (k == 0 || k == n) {
    sdp = in->dp;
    GANG_CHECK_GOTO(fake1(gang_get_device(in->dp), nd, &rdp), st, fail);
  } else {
    /* dp-local grid (n/k, k): sdp = rows, rdp = columns. The groups are
     * sub-gangs of dp itself (collective over dp), which works for any dp;
     * fairseq2 builds them from the root and refuses a dp gang that is
     * neither the root nor a fake one. fairseq2's order: inter, intra. */
    int shape[2] = {n / k, k};
    GANG_CHECK_GOTO(make_dim(in->dp, shape, 2, 0, nd, &rdp), st, fail);
    GANG_CHECK_GOTO(make_dim(in->dp, shape, 2, 1, nd, &sdp), st, fail);
  }
  *out = *in;
  out->sdp = sdp;
  out->rdp = rdp;
  out->owner = nd;
  return GANG_OK;
fail:
  node_release(nd);
  return gang__error_wrap(st, "%s(intra_node_size %d)", fn, k);
}

void gangs_close(gangs *gs) {
  if (gs == NULL)
    return;
  node_release(gs->owner);
  memset(gs, 0, sizeof *gs);
}

gang_device gangs_device(const gangs *gs) {
  if (gs == NULL || gs->root == NULL)
    return (gang_device){GANG_DEVICE_CPU, -1};
  return gang_get_device(gs->root);
}
