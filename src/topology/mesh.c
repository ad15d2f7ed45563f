/* The device mesh (PyTorch's DeviceMesh): a row-major grid of a gang's
 * ranks with one sub-gang per dimension, slices that reuse those gangs,
 * and flattened gangs over several dimensions.
 *
 * A mesh_core holds what the mesh created (the grid, this rank's gang of
 * every dimension, the flattened gangs) and is shared, reference counted,
 * by the handle gang_mesh_create returns and by every slice of it; a
 * gang_mesh handle is a view: which of the core's dimensions, in which
 * order. So a slice costs no collective and no gang, as in PyTorch, and the
 * handles can be destroyed in any order. */
#include "gang/mesh.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "topology/layout.h"

_Static_assert(GANG_MESH_MAX_DIMS <= TOPO_MAX_DIMS, "mesh dims fit a mask");

typedef struct flat_entry {
  char *name;
  unsigned mask; /* the core dimensions flattened */
  gang_t *g;     /* this rank's gang (NULL outside the mesh) */
  bool owned;
} flat_entry;

typedef struct mesh_core {
  atomic_int refs;
  gang_t *gang; /* borrowed; NULL: this process is outside the gang */
  int ndim, size;
  int shape[GANG_MESH_MAX_DIMS];
  char *names[GANG_MESH_MAX_DIMS]; /* all NULL for an unnamed mesh */
  int *map;                        /* grid position -> gang rank */
  bool member;
  int coord[GANG_MESH_MAX_DIMS];
  gang_t *groups[GANG_MESH_MAX_DIMS];
  bool owned[GANG_MESH_MAX_DIMS];
  pthread_mutex_t mu; /* guards flats */
  flat_entry *flats;
  int nflat;
} mesh_core;

struct gang_mesh {
  mesh_core *c;
  int ndim;
  bool named;
  int dims[GANG_MESH_MAX_DIMS]; /* core dimension of each of ours */
  int shape[GANG_MESH_MAX_DIMS];
  const char *names[GANG_MESH_MAX_DIMS];
};

static void core_release(mesh_core *c) {
  if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
    return;
  for (int i = c->nflat - 1; i >= 0; i--) {
    if (c->flats[i].owned)
      gang_destroy(c->flats[i].g);
    free(c->flats[i].name);
  }
  free(c->flats);
  for (int d = c->ndim - 1; d >= 0; d--) {
    if (c->owned[d])
      gang_destroy(c->groups[d]);
    free(c->names[d]);
  }
  free(c->map);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static gang_mesh *view_new(mesh_core *c, const int *dims, int n) {
  gang_mesh *m = calloc(1, sizeof *m);
  if (m == NULL)
    return NULL;
  atomic_fetch_add(&c->refs, 1);
  m->c = c;
  m->ndim = n;
  m->named = c->names[0] != NULL;
  for (int i = 0; i < n; i++) {
    m->dims[i] = dims[i];
    m->shape[i] = c->shape[dims[i]];
    m->names[i] = c->names[dims[i]];
  }
  return m;
}

/* "(2, 4)" for messages. */
static void shape_str(char *buf, size_t cap, const int *shape, int ndim) {
  size_t off = (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < ndim && off < cap; d++)
    off +=
        (size_t)snprintf(buf + off, cap - off, "%s%d", d ? ", " : "", shape[d]);
  if (off < cap)
    snprintf(buf + off, cap - off, ")");
}

/* "dp, tp" (and flattened names) for messages about unknown names. */
static void names_str(char *buf, size_t cap, const gang_mesh *m) {
  size_t off = 0;
  buf[0] = '\0';
  for (int d = 0; d < m->ndim && m->named && off < cap; d++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? ", " : "",
                            m->names[d]);
  pthread_mutex_lock(&m->c->mu);
  for (int i = 0; i < m->c->nflat && off < cap; i++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%s (flattened)",
                            off ? ", " : "", m->c->flats[i].name);
  pthread_mutex_unlock(&m->c->mu);
  if (off == 0)
    snprintf(buf, cap, "none: the mesh has no dimension names");
}

static gang_status create(const char *fn, gang_t *g, const int *ranks,
                          const int *shape, int ndim, const char *const *names,
                          gang_mesh **out) {
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(shape != NULL, fn, "shape is NULL");
  GANG_ARG_CHECK(ndim >= 1 && ndim <= GANG_MESH_MAX_DIMS, fn,
                 "ndim must be in [1, %d], but is %d", GANG_MESH_MAX_DIMS,
                 ndim);
  long long product = 1;
  for (int d = 0; d < ndim; d++) {
    GANG_ARG_CHECK(shape[d] >= 1, fn, "shape[%d] must be at least 1, but is %d",
                   d, shape[d]);
    product *= shape[d];
    GANG_ARG_CHECK(product <= (1 << 30), fn,
                   "the shape has more than 2^30 positions");
  }
  char sh[160];
  shape_str(sh, sizeof sh, shape, ndim);
  if (names != NULL) {
    for (int d = 0; d < ndim; d++) {
      GANG_ARG_CHECK(names[d] != NULL && names[d][0] != '\0', fn,
                     "names[%d] is %s", d, names[d] ? "empty" : "NULL");
      for (int e = 0; e < d; e++)
        GANG_ARG_CHECK(strcmp(names[d], names[e]) != 0, fn,
                       "dimension name '%s' is used twice (dimensions %d and "
                       "%d); each must be unique",
                       names[d], e, d);
    }
  }
  int size = g ? gang_size(g) : 0;
  if (g != NULL && ranks == NULL)
    GANG_ARG_CHECK(product == size, fn,
                   "the shape %s has %lld positions but the gang has %d ranks",
                   sh, product, size);
  if (g != NULL && ranks != NULL) {
    GANG_ARG_CHECK(product <= size, fn,
                   "the shape %s has %lld positions but the gang has only %d "
                   "ranks",
                   sh, product, size);
    for (long long i = 0; i < product; i++) {
      GANG_ARG_CHECK(ranks[i] >= 0 && ranks[i] < size, fn,
                     "ranks[%lld] = %d is not a rank of the gang [0, %d)", i,
                     ranks[i], size);
      for (long long j = 0; j < i; j++)
        GANG_ARG_CHECK(ranks[j] != ranks[i], fn,
                       "rank %d is listed twice (ranks[%lld] and ranks[%lld])",
                       ranks[i], j, i);
    }
  }

  mesh_core *c = calloc(1, sizeof *c);
  if (c == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  atomic_init(&c->refs, 1);
  pthread_mutex_init(&c->mu, NULL);
  c->gang = g;
  c->ndim = ndim;
  c->size = (int)product;
  gang_status st = GANG_OK;
  c->map = malloc(sizeof *c->map * (size_t)product);
  if (c->map == NULL) {
    st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
    goto fail;
  }
  for (int d = 0; d < ndim; d++) {
    c->shape[d] = shape[d];
    if (names != NULL && (c->names[d] = strdup(names[d])) == NULL) {
      st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
      goto fail;
    }
  }
  int me = g ? gang_rank(g) : -1;
  for (int i = 0; i < c->size; i++) {
    c->map[i] = ranks ? ranks[i] : i;
    if (c->map[i] == me) {
      c->member = true;
      for (int d = ndim - 1, p = i; d >= 0; d--) {
        c->coord[d] = p % shape[d];
        p /= shape[d];
      }
    }
  }
  if (g != NULL) {
    /* PyTorch's order: every group of dimension 0, then of 1, ... */
    for (int d = 0; d < ndim; d++)
      GANG_CHECK_GOTO(gang__topo_create_groups(g, c->map, c->shape, ndim,
                                               1u << d, &c->groups[d],
                                               &c->owned[d]),
                      st, fail);
  }
  int dims[GANG_MESH_MAX_DIMS];
  for (int d = 0; d < ndim; d++)
    dims[d] = d;
  gang_mesh *m = view_new(c, dims, ndim);
  if (m == NULL) {
    st = gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
    goto fail;
  }
  core_release(c); /* the view holds it now */
  *out = m;
  return GANG_OK;
fail:
  core_release(c);
  return st == GANG_NO_MEMORY ? st
                              : gang__error_wrap(st, "%s(shape %s)", fn, sh);
}

gang_status gang_mesh_create(gang_t *g, const int *shape, int ndim,
                             const char *const *names, gang_mesh **out) {
  return create("gang_mesh_create", g, NULL, shape, ndim, names, out);
}

gang_status gang_mesh_create_from_ranks(gang_t *g, const int *ranks,
                                        const int *shape, int ndim,
                                        const char *const *names,
                                        gang_mesh **out) {
  const char *fn = "gang_mesh_create_from_ranks";
  GANG_ARG_CHECK(ranks != NULL, fn, "ranks is NULL");
  return create(fn, g, ranks, shape, ndim, names, out);
}

void gang_mesh_destroy(gang_mesh *m) {
  if (m == NULL)
    return;
  core_release(m->c);
  free(m);
}

int gang_mesh_ndim(const gang_mesh *m) { return m ? m->ndim : 0; }

int gang_mesh_size(const gang_mesh *m) {
  int n = m ? 1 : 0;
  for (int d = 0; m && d < m->ndim; d++)
    n *= m->shape[d];
  return n;
}

const int *gang_mesh_shape(const gang_mesh *m) { return m ? m->shape : NULL; }

const char *const *gang_mesh_names(const gang_mesh *m) {
  return m && m->named ? m->names : NULL;
}

/* Our dimension called `name` (NULL: the only one), or -1 with a flattened
 * gang in *flat when the name is a flattening, or -2 (error recorded). */
static int lookup(const gang_mesh *m, const char *name, const char *fn,
                  gang_t **flat) {
  *flat = NULL;
  bool found = false;
  if (name == NULL) {
    if (m->ndim == 1)
      return 0;
    gang__error(GANG_INVALID_ARGUMENT,
                "%s: the mesh has %d dimensions; name one of them", fn,
                m->ndim);
    return -2;
  }
  for (int d = 0; m->named && d < m->ndim; d++)
    if (strcmp(m->names[d], name) == 0)
      return d;
  pthread_mutex_lock(&m->c->mu);
  for (int i = 0; i < m->c->nflat; i++)
    if (strcmp(m->c->flats[i].name, name) == 0) {
      *flat = m->c->flats[i].g; /* copied: flats may move */
      found = true;
    }
  pthread_mutex_unlock(&m->c->mu);
  if (found)
    return -1;
  char known[256];
  names_str(known, sizeof known, m);
  gang__error(GANG_INVALID_ARGUMENT,
              "%s: mesh dimension '%s' does not exist; valid names: %s", fn,
              name, known);
  return -2;
}

gang_status gang_mesh_group(const gang_mesh *m, const char *name,
                            gang_t **out) {
  const char *fn = "gang_mesh_group";
  GANG_ARG_CHECK(m != NULL, fn, "mesh is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  gang_t *flat;
  int d = lookup(m, name, fn, &flat);
  if (d == -2)
    return GANG_INVALID_ARGUMENT;
  *out = d == -1 ? flat : m->c->groups[m->dims[d]];
  return GANG_OK;
}

gang_status gang_mesh_group_at(const gang_mesh *m, int dim, gang_t **out) {
  const char *fn = "gang_mesh_group_at";
  GANG_ARG_CHECK(m != NULL, fn, "mesh is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(dim >= 0 && dim < m->ndim, fn,
                 "dim must be in [0, %d), but is %d", m->ndim, dim);
  *out = m->c->groups[m->dims[dim]];
  return GANG_OK;
}

int gang_mesh_local_rank(const gang_mesh *m, const char *name) {
  const char *fn = "gang_mesh_local_rank";
  if (m == NULL) {
    gang__error(GANG_INVALID_ARGUMENT, "%s: mesh is NULL", fn);
    return -1;
  }
  gang_t *flat;
  int d = lookup(m, name, fn, &flat);
  if (d == -2)
    return -1;
  if (!m->c->member) {
    gang__error(GANG_INVALID_USAGE, "%s: this rank is outside the mesh", fn);
    return -1;
  }
  return d == -1 ? gang_rank(flat) : m->c->coord[m->dims[d]];
}

int gang_mesh_coordinate(const gang_mesh *m, int *coord) {
  if (m == NULL || coord == NULL || !m->c->member)
    return 0;
  for (int d = 0; d < m->ndim; d++)
    coord[d] = m->c->coord[m->dims[d]];
  return 1;
}

gang_status gang_mesh_ranks(const gang_mesh *m, int *ranks) {
  const char *fn = "gang_mesh_ranks";
  GANG_ARG_CHECK(m != NULL, fn, "mesh is NULL");
  GANG_ARG_CHECK(ranks != NULL, fn, "ranks is NULL");
  const mesh_core *c = m->c;
  if (m->ndim < c->ndim && !c->member)
    return gang__error(GANG_INVALID_USAGE,
                       "%s: this rank is outside the mesh, so no slice "
                       "contains it",
                       fn);
  int coord[GANG_MESH_MAX_DIMS];
  memcpy(coord, c->coord, sizeof coord);
  int n = gang_mesh_size(m);
  for (int j = 0; j < n; j++) {
    for (int d = m->ndim - 1, p = j; d >= 0; d--) {
      coord[m->dims[d]] = p % m->shape[d];
      p /= m->shape[d];
    }
    int flat = 0;
    for (int d = 0; d < c->ndim; d++)
      flat = flat * c->shape[d] + coord[d];
    ranks[j] = c->map[flat];
  }
  return GANG_OK;
}

gang_status gang_mesh_slice(const gang_mesh *m, const char *const *names, int n,
                            gang_mesh **out) {
  const char *fn = "gang_mesh_slice";
  GANG_ARG_CHECK(m != NULL, fn, "mesh is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(m->named, fn, "cannot slice a mesh without dimension names");
  GANG_ARG_CHECK(names != NULL && n >= 1 && n <= m->ndim, fn,
                 "slice needs 1 to %d names, but got %d", m->ndim, n);
  int dims[GANG_MESH_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    GANG_ARG_CHECK(names[i] != NULL, fn, "names[%d] is NULL", i);
    int d = 0;
    while (d < m->ndim && strcmp(m->names[d], names[i]) != 0)
      d++;
    if (d == m->ndim) {
      char known[256];
      names_str(known, sizeof known, m);
      return gang__error(GANG_INVALID_ARGUMENT,
                         "%s: invalid dimension name '%s'; valid names: %s "
                         "(a flattened name is not a slice: use "
                         "gang_mesh_group)",
                         fn, names[i], known);
    }
    for (int j = 0; j < i; j++)
      GANG_ARG_CHECK(dims[j] != m->dims[d], fn,
                     "dimension '%s' is named twice in the slice", names[i]);
    dims[i] = m->dims[d];
  }
  gang_mesh *s = view_new(m->c, dims, n);
  if (s == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  *out = s;
  return GANG_OK;
}

gang_status gang_mesh_flatten(gang_mesh *m, const char *name, gang_t **out) {
  const char *fn = "gang_mesh_flatten";
  GANG_ARG_CHECK(m != NULL, fn, "mesh is NULL");
  GANG_ARG_CHECK(out != NULL, fn, "out is NULL");
  GANG_ARG_CHECK(name != NULL || m->named, fn,
                 "cannot flatten a mesh without dimension names unless given "
                 "a name");
  GANG_ARG_CHECK(name == NULL || name[0] != '\0', fn, "name is empty");
  mesh_core *c = m->c;
  char joined[512];
  if (name == NULL) {
    size_t off = 0;
    for (int d = 0; d < m->ndim && off < sizeof joined; d++)
      off += (size_t)snprintf(joined + off, sizeof joined - off, "%s%s",
                              d ? "_" : "", m->names[d]);
    name = joined;
  }
  /* A 1-D mesh flattened under its own name is itself. */
  if (m->ndim == 1 && m->named && strcmp(m->names[0], name) == 0) {
    *out = c->groups[m->dims[0]];
    return GANG_OK;
  }
  for (int d = 0; d < c->ndim && c->names[0]; d++)
    GANG_ARG_CHECK(strcmp(c->names[d], name) != 0, fn,
                   "flattened name '%s' is already a dimension of the mesh",
                   name);
  unsigned mask = 0;
  for (int d = 0; d < m->ndim; d++)
    mask |= 1u << m->dims[d];
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nflat; i++) {
    if (strcmp(c->flats[i].name, name) != 0)
      continue;
    unsigned had = c->flats[i].mask;
    gang_t *g = c->flats[i].g;
    pthread_mutex_unlock(&c->mu);
    GANG_ARG_CHECK(had == mask, fn,
                   "flattened name '%s' already names a flattening of other "
                   "dimensions",
                   name);
    *out = g; /* cached, as PyTorch caches by name and dimensions */
    return GANG_OK;
  }
  pthread_mutex_unlock(&c->mu);

  flat_entry e = {strdup(name), mask, NULL, false};
  if (e.name == NULL)
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  if (c->gang != NULL) {
    gang_status st = gang__topo_create_groups(c->gang, c->map, c->shape,
                                              c->ndim, mask, &e.g, &e.owned);
    if (st != GANG_OK) {
      free(e.name);
      return gang__error_wrap(st, "%s('%s')", fn, name);
    }
  }
  pthread_mutex_lock(&c->mu);
  flat_entry *grown = realloc(c->flats, sizeof *grown * (size_t)(c->nflat + 1));
  if (grown != NULL) {
    c->flats = grown;
    c->flats[c->nflat++] = e;
  }
  pthread_mutex_unlock(&c->mu);
  if (grown == NULL) {
    if (e.owned)
      gang_destroy(e.g);
    free(e.name);
    return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
  }
  *out = e.g;
  return GANG_OK;
}
