/* gang/topology.h: the gangs of a parallel training run (fairseq2's Gangs,
 * create_parallel_gangs, create_fsdp_gangs), the thread-local "current
 * gangs", and the helpers training loops call (broadcast_flag, all_sum,
 * all_reduce_dict).
 *
 * A `gangs` value names six gangs of one process:
 *   root  the world (or whatever gang the topology was built from)
 *   dp    data parallel: ranks that hold the same model shard, different data
 *   rdp   replicated data parallel (DDP, HSDP's inter-node gang)
 *   sdp   sharded data parallel (FSDP, HSDP's intra-node gang)
 *   tp    tensor parallel: ranks that split one layer's weights
 *   pp    pipeline parallel: ranks that hold different stages
 * docs/topology.md shows every layout with an 8-rank example.
 *
 * Ownership: each gangs_create_* result owns the gangs it created and is
 * released with one gangs_close. A gangs_create_fsdp result also keeps its
 * input's gangs alive (they are shared, not copied), so the two may be
 * closed in either order. The root passed to gangs_create_parallel is
 * borrowed: it must outlive the result and the caller destroys it after
 * gangs_close (gangs_create_fake makes its own root and closes it). A struct
 * copy of a `gangs` is not a new reference: close exactly one copy. */
#ifndef GANG_TOPOLOGY_H
#define GANG_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "gang/export.h"
#include "gang/gang.h"
#include "gang/status.h"
#include "gang/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Who closes which gangs: opaque, managed by gangs_create_* and
 * gangs_close. */
typedef struct gangs_owner gangs_owner;

typedef struct gangs {
  gang_t *root, *dp, *rdp, *sdp, *tp, *pp;
  gangs_owner *owner; /* NULL: owns nothing (closed, or filled by hand) */
} gangs;

/* ---- Construction -------------------------------------------------------- */

/* Six size-1 fake gangs on `device` (fairseq2's create_fake_gangs): the
 * shape of a single-process run. Not collective. */
GANG_API gang_status gangs_create_fake(gang_device device, gangs *out);

/* The data × pipeline × tensor parallel gangs over `root`. Ranks are laid
 * out (dp, pp, tp) row-major: rank = d*pp_size*tp_size + p*tp_size + t, so
 * tensor-parallel gangs are runs of tp_size consecutive ranks and
 * data-parallel gangs stride by pp_size*tp_size. With pp_size 1 this is
 * fairseq2's create_parallel_gangs exactly (pp_size is our extension;
 * fairseq2's pp is always a size-1 fake). A dimension of size 1 is a fresh
 * fake gang, one of the root's size is the root itself. rdp = dp and sdp =
 * a size-1 fake gang (the DDP default; see gangs_create_fsdp).
 *
 * Collective over root: every rank calls it with the same sizes; every rank
 * creates every sub-gang in the same order (dp, then tp, then pp gangs).
 * Borrows root. Errors: GANG_INVALID_ARGUMENT when a size is < 1 or
 * tp_size*pp_size does not divide the root's size (the message names the
 * numbers); a failure of the root gang as gang_create_subgang reports it.
 * On failure nothing is left allocated and *out is untouched. */
GANG_API gang_status gangs_create_parallel(gang_t *root, int tp_size,
                                           int pp_size, gangs *out);

/* Splits the data-parallel gang for FSDP/HSDP (fairseq2's
 * create_fsdp_gangs) and returns a new gangs in *out with the other fields
 * shared with *in.
 *   intra_node_size 0: full sharding: sdp = dp, rdp = a size-1 fake gang.
 *   intra_node_size k > 1 dividing dp's size: hybrid sharding: sdp gangs are
 *     k consecutive dp ranks, rdp gangs stride by k (dp of 8, k 4: sdp
 *     {0-3} {4-7}, rdp {0,4} {1,5} {2,6} {3,7}); k equal to dp's size is
 *     full sharding.
 * Collective over in->dp (the sub-gangs are made from dp, so any dp works,
 * not only the root or a fake one as in fairseq2). `in` stays valid and is
 * closed separately. Errors: GANG_INVALID_ARGUMENT for k < 0, k == 1 or k
 * not dividing dp's size (named in the message), or an `in` without dp. */
GANG_API gang_status gangs_create_fsdp(const gangs *in, int intra_node_size,
                                       gangs *out);

/* Releases what `gs` owns (each distinct gang once; the root only when this
 * gangs created it) and zeroes *gs, so a second call does nothing. Gangs
 * shared with another open gangs (gangs_create_fsdp) live until that one is
 * closed too. Not collective. NULL is allowed. */
GANG_API void gangs_close(gangs *gs);

/* The device of gs->root ({CPU, -1} without a root). */
GANG_API gang_device gangs_device(const gangs *gs);

/* ---- Current gangs ------------------------------------------------------- */

/* Makes *gs the current gangs of this thread for its root's device until
 * the matching gangs_pop_current (fairseq2's `with gangs:` / set_gangs).
 * Pushes nest (LIFO). The struct is copied; the gangs it names are borrowed
 * and must stay open while pushed. Errors: GANG_INVALID_ARGUMENT for a NULL
 * gs or a gs without a root; GANG_NO_MEMORY. Thread-local: other threads
 * are unaffected. */
GANG_API gang_status gangs_push_current(const gangs *gs);

/* Undoes this thread's most recent gangs_push_current. GANG_INVALID_USAGE
 * if this thread has nothing pushed. */
GANG_API gang_status gangs_pop_current(void);

/* Sets the process-wide default gangs for gs->root's device (fairseq2's
 * set_default_gangs); NULL gs clears the defaults of every device. The
 * struct is copied under a lock; the gangs are borrowed and must stay open
 * while they are the default. Any thread. */
GANG_API gang_status gangs_set_default(const gangs *gs);

/* The gangs code on this thread should use for `device`: the top of this
 * thread's pushes for that device, else the process default for it, else
 * six size-1 fake gangs cached per device (created once, thread-safe, the
 * same gang objects on every call and in every thread; never freed). Never
 * NULL. The returned struct is thread-local storage, valid until this
 * thread's next gangs_current, gangs_push_current or gangs_pop_current.
 * Devices match by type, and by index for CUDA (CPU indices are ignored).
 * If the cached fake gangs cannot be allocated (out of memory) the result
 * has NULL gang pointers and gang_last_error() says so. */
GANG_API const gangs *gangs_current(gang_device device);

/* ---- Helpers ------------------------------------------------------------- */

/* Broadcasts a boolean from source_rank (fairseq2's broadcast_flag): on
 * return *flag is 0 or 1 on every rank, the source's value (any non-zero
 * on the source counts as 1). Collective. */
GANG_API gang_status gang_broadcast_flag(gang_t *g, int *flag, int source_rank);

/* Sums *value over the gang in place (fairseq2's all_sum, which returns a
 * 0-d int64 or float32 tensor; here the number is replaced by the sum, and
 * the floating form is double). On a fake gang of size n the result is
 * value*n, as in fairseq2. Collective. */
GANG_API gang_status gang_all_sum(gang_t *g, int64_t *value);
GANG_API gang_status gang_all_sum_f64(gang_t *g, double *value);

/* Reduces n named numbers across the gang with `op` (fairseq's
 * all_reduce_dict: values are float64, reduced in one collective, order
 * kept). Every rank must pass the same names in the same order: a hash of
 * the names is all-gathered first, and on a difference every rank returns
 * GANG_MISMATCH with a detail naming a rank, the index and the differing
 * names; values are then unchanged. names[i] must be non-NULL strings; n may
 * be 0. Collective. */
GANG_API gang_status gang_all_reduce_dict(gang_t *g, const char *const *names,
                                          double *values, size_t n,
                                          gang_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif
