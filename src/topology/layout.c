/* Row-major group layouts (see layout.h). The topology builders
 * (gangs.c) and the device mesh (mesh.c) both describe their groups as
 * "vary these grid dimensions, fix the others", which is PyTorch's
 * construction (mesh.swapdims(-1, d).reshape(-1, n)) and fairseq2's
 * (rows and columns of arange(W).view(W / tp, tp)). */
#include "topology/layout.h"

#include <stdlib.h>

#include "core/error.h"

int gang__topo_group_count(const int *shape, int ndim, unsigned vary) {
  int n = 1;
  for (int d = 0; d < ndim; d++)
    if (!(vary & (1u << d)))
      n *= shape[d];
  return n;
}

int gang__topo_group_size(const int *shape, int ndim, unsigned vary) {
  int n = 1;
  for (int d = 0; d < ndim; d++)
    if (vary & (1u << d))
      n *= shape[d];
  return n;
}

/* Decodes `index` as a row-major number over the dimensions selected by
 * `sel` (== want) and adds their contribution to the flat position. */
static int place(const int *shape, const int *stride, int ndim, unsigned vary,
                 bool want, int index) {
  int flat = 0;
  for (int d = ndim - 1; d >= 0; d--) {
    if (((vary >> d) & 1u) != (unsigned)want)
      continue;
    flat += (index % shape[d]) * stride[d];
    index /= shape[d];
  }
  return flat;
}

void gang__topo_group_members(const int *shape, int ndim, unsigned vary, int gi,
                              int *out) {
  int stride[TOPO_MAX_DIMS];
  int s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d];
  }
  int base = place(shape, stride, ndim, vary, false, gi);
  int n = gang__topo_group_size(shape, ndim, vary);
  for (int j = 0; j < n; j++)
    out[j] = base + place(shape, stride, ndim, vary, true, j);
}

gang_status gang__topo_create_groups(gang_t *parent, const int *map,
                                     const int *shape, int ndim, unsigned vary,
                                     gang_t **mine, bool *owned) {
  int me = gang_rank(parent), psize = gang_size(parent);
  int count = gang__topo_group_count(shape, ndim, vary);
  int n = gang__topo_group_size(shape, ndim, vary);
  int *pos = malloc(sizeof *pos * (size_t)n);
  int *ranks = malloc(sizeof *ranks * (size_t)n);
  if (pos == NULL || ranks == NULL) {
    free(pos);
    free(ranks);
    return gang__error(GANG_NO_MEMORY, "topology: out of memory");
  }
  gang_t *result = NULL;
  bool result_owned = false;
  gang_status st = GANG_OK;
  for (int gi = 0; gi < count; gi++) {
    gang__topo_group_members(shape, ndim, vary, gi, pos);
    bool member = false, whole = n == psize;
    for (int j = 0; j < n; j++) {
      ranks[j] = map ? map[pos[j]] : pos[j];
      member |= ranks[j] == me;
      whole &= ranks[j] == j;
    }
    if (whole) {
      /* The group is the parent, rank for rank: reuse it (fairseq2 for a
       * dimension of the world's size, PyTorch for a 1-D world mesh). */
      result = parent;
      result_owned = false;
    } else if (n == 1) {
      /* A group of one needs no peers; every rank decides this alike, so
       * skipping the sub-gang keeps the creation order identical. */
      if (member) {
        st = gang_create_fake(gang_get_device(parent), 0, 1, &result);
        if (st != GANG_OK)
          break;
        result_owned = true;
      }
    } else {
      gang_t *g = NULL;
      st = gang_create_subgang(parent, ranks, n, &g);
      if (st != GANG_OK)
        break;
      if (g != NULL) {
        result = g;
        result_owned = true;
      }
    }
  }
  free(pos);
  free(ranks);
  if (st != GANG_OK) {
    if (result_owned)
      gang_destroy(result);
    return st;
  }
  *mine = result;
  *owned = result_owned;
  return GANG_OK;
}
