/* gang/mesh.h: an n-dimensional named grid of ranks with one gang per
 * dimension (PyTorch's DeviceMesh / init_device_mesh).
 *
 * A mesh of shape (s0, ..., s{n-1}) lays out ranks row-major: rank r of the
 * gang the mesh is over sits at the coordinate whose row-major index is r.
 * The gang of dimension d for a rank holds the ranks whose coordinates equal
 * its own except at d, ordered by that coordinate, so a rank's position in
 * that gang is its coordinate d (PyTorch builds the same groups from
 * mesh.swapdims(-1, d).reshape(-1, s_d)). Example, shape (2, 4) named
 * ("dp", "tp") on 8 ranks: dp gangs {0,4} {1,5} {2,6} {3,7}; tp gangs
 * {0,1,2,3} {4,5,6,7}; rank 6 has coordinate (1, 2).
 *
 * Creation and flattening are collective over the gang the mesh is over;
 * every other call is local. A mesh handle is used by one thread at a time.
 * Ranks outside the mesh (gang_mesh_create_from_ranks with fewer ranks than
 * the gang, or a NULL gang: this process is not in the sub-gang the mesh is
 * over) get a handle with no coordinate and NULL groups. */
#ifndef GANG_MESH_H
#define GANG_MESH_H

#include "gang/export.h"
#include "gang/gang.h"
#include "gang/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gang_mesh gang_mesh;

#define GANG_MESH_MAX_DIMS 16

/* init_device_mesh(shape, names) over `g`: the product of shape[0..ndim)
 * must equal gang_size(g). names may be NULL (dimensions then go by index
 * only); otherwise ndim distinct non-empty strings (copied). g is borrowed
 * and must outlive the mesh and every slice of it. A dimension whose gang
 * is all of g in order (a 1-D mesh) reuses g; a dimension of size 1 is a
 * fake gang. g NULL: a mesh of which this process is not a member (shape
 * and names are still validated). Collective over g. Errors:
 * GANG_INVALID_ARGUMENT naming the bad shape, size, dimension or name. */
GANG_API gang_status gang_mesh_create(gang_t *g, const int *shape, int ndim,
                                      const char *const *names,
                                      gang_mesh **out);

/* PyTorch's DeviceMesh(device, mesh): like gang_mesh_create, but position i
 * (row-major) of the grid holds rank ranks[i] of g, for the product of the
 * shape positions, which may be fewer than the gang's ranks; ranks must be
 * distinct and in [0, gang_size(g)). Ranks of g not listed are outside the
 * mesh. Collective over g. */
GANG_API gang_status gang_mesh_create_from_ranks(gang_t *g, const int *ranks,
                                                 const int *shape, int ndim,
                                                 const char *const *names,
                                                 gang_mesh **out);

/* Releases the handle. The gangs are freed with the last handle (the mesh
 * and its slices share them). NULL is allowed. Not collective. */
GANG_API void gang_mesh_destroy(gang_mesh *m);

GANG_API int gang_mesh_ndim(const gang_mesh *m);
/* Product of the shape. */
GANG_API int gang_mesh_size(const gang_mesh *m);
/* ndim entries; valid while m lives. */
GANG_API const int *gang_mesh_shape(const gang_mesh *m);
/* ndim names, or NULL for an unnamed mesh; valid while m lives. */
GANG_API const char *const *gang_mesh_names(const gang_mesh *m);

/* This rank's gang of the dimension called `name` (get_group(name)); name
 * may also be a name given to gang_mesh_flatten on any mesh sharing this
 * one's gangs; NULL means the only dimension of a 1-D mesh. *out is
 * borrowed from the mesh, NULL outside the mesh. Errors:
 * GANG_INVALID_ARGUMENT for an unknown name (listing the known ones) or a
 * NULL name on a mesh of several dimensions. */
GANG_API gang_status gang_mesh_group(const gang_mesh *m, const char *name,
                                     gang_t **out);
/* The same by dimension index, 0 <= dim < ndim. */
GANG_API gang_status gang_mesh_group_at(const gang_mesh *m, int dim,
                                        gang_t **out);

/* This rank's coordinate along `name` (= its rank in that dimension's
 * gang); NULL on a 1-D mesh means its only dimension. -1 outside the mesh
 * or for an unknown name (gang_last_error says which). */
GANG_API int gang_mesh_local_rank(const gang_mesh *m, const char *name);

/* Writes this rank's ndim coordinates into coord and returns 1; returns 0
 * (coord untouched) outside the mesh. */
GANG_API int gang_mesh_coordinate(const gang_mesh *m, int *coord);

/* The mesh as PyTorch's `mesh` tensor: gang_mesh_size ranks of the gang
 * the mesh was created over, row-major. For a slice, the sub-grid that
 * contains this rank (GANG_INVALID_USAGE outside the mesh). */
GANG_API gang_status gang_mesh_ranks(const gang_mesh *m, int *ranks);

/* mesh[names]: a mesh of the n named dimensions, in the order given, whose
 * gangs are the parent's (no gang is created; not collective). Slicing
 * with every name in order gives an equivalent handle. Destroy it with
 * gang_mesh_destroy, in any order relative to the parent. Errors:
 * GANG_INVALID_ARGUMENT for an unnamed mesh, n < 1, or an unknown or
 * repeated name. */
GANG_API gang_status gang_mesh_slice(const gang_mesh *m,
                                     const char *const *names, int n,
                                     gang_mesh **out);

/* One gang over all dimensions of m (PyTorch's mesh._flatten(name)): the
 * ranks of the sub-grid of m's dimensions that contains this rank, in
 * row-major order of the original mesh's dimensions. name NULL means m's names
 * joined by "_". The gang is registered under the name with the mesh m was
 * created from, so gang_mesh_group(any related mesh, name) finds it, and
 * flattening the same dimensions under the same name again returns it. On a 1-D
 * mesh under its own name it is that dimension's gang. *out is borrowed (NULL
 * outside the mesh). Collective over the mesh's gang. Errors:
 * GANG_INVALID_ARGUMENT for a name that is a dimension name of the original
 * mesh, or already names a flattening of other dimensions, or no name on an
 * unnamed mesh. */
GANG_API gang_status gang_mesh_flatten(gang_mesh *m, const char *name,
                                       gang_t **out);

#ifdef __cplusplus
}
#endif
#endif
