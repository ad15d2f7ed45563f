/* Row-major rank layouts shared by the topology builders and the device
 * mesh: which positions of an n-dimensional grid form one group when some
 * dimensions vary and the others stay fixed, and the collective creation
 * of those groups as sub-gangs. */
#ifndef GANG_TOPOLOGY_LAYOUT_H
#define GANG_TOPOLOGY_LAYOUT_H

#include <stdbool.h>

#include "gang/gang.h"

#define TOPO_MAX_DIMS 16

/* Number of groups, and members per group, when the dimensions in the
 * bitmask `vary` vary and the others are fixed. */
int gang__topo_group_count(const int *shape, int ndim, unsigned vary);
int gang__topo_group_size(const int *shape, int ndim, unsigned vary);

/* Flat (row-major) grid positions of group `gi`: groups are numbered in
 * row-major order of the fixed dimensions, members in row-major order of
 * the varying ones (so a one-dimension group is ordered by that
 * coordinate). out holds gang__topo_group_size entries. */
void gang__topo_group_members(const int *shape, int ndim, unsigned vary, int gi,
                              int *out);

/* Creates, as sub-gangs of `parent`, every group of the grid whose position
 * i holds parent rank map[i] (map NULL: rank i), and returns this rank's
 * group in *mine (NULL when this rank is in none). A group of one rank is a
 * fake gang; a group that is the whole parent in rank order is the parent
 * itself (*owned = false). Collective over parent: every rank must call it
 * with the same grid, and creates every group in the same order. On error
 * nothing is left allocated. */
gang_status gang__topo_create_groups(gang_t *parent, const int *map,
                                     const int *shape, int ndim, unsigned vary,
                                     gang_t **mine, bool *owned);

#endif
