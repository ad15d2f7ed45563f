/* gang/gang.h: a gang is a group of processes that run collective
 * operations together (fairseq2's Gang).
 *
 * A gang_t is an opaque handle behind a table of operations, so the
 * process-group gang (shared memory + TCP), the fake gang (one process
 * simulating rank r of n) and wrappers (error-swallowing, reconfigurable,
 * subprocess) are interchangeable to callers.
 *
 * Conventions of every collective:
 * - Collective calls must be made by every rank of the gang in the same
 *   order with matching arguments (GANG_CHECK=1 verifies this and fails with
 *   GANG_MISMATCH naming the ranks that disagree).
 * - Ranks named in arguments (source_rank, peer) are ranks of this gang.
 * - Counts are element counts; 0 is valid (nothing moves, but the call is
 *   still a collective: every rank must make it).
 * - The blocking call is the _post call followed by gang_work_wait with the
 *   gang's default deadline (GANG_TIMEOUT, 15 minutes by default).
 * - After the first failure the gang is broken: every later operation fails
 *   fast with the same status until the gang is destroyed (sticky errors).
 *   gang_get_last_error(g) says what happened.
 * - Buffers are borrowed until the operation completes; for a _post call,
 *   until gang_work_wait/test reports completion.
 * - Collectives on one gang run in the order they are posted, which must
 *   be the same on every rank: post to one gang from one thread at a time
 *   (the library does not serialise concurrent posts to the same gang).
 *   Different gangs, including sub-gangs of one world, may be used from
 *   different threads at the same time.
 * - Failures are shared by a world: the world gang and every sub-gang made
 *   from it use one set of connections, so a lost peer, a timed-out wait
 *   (including gang_work_wait(w, 0): poll with gang_work_test instead),
 *   gang_abort and gang_work_free of an unfinished work fail every gang of
 *   the world on this rank and are passed on to the other ranks. */
#ifndef GANG_GANG_H
#define GANG_GANG_H

#include <stddef.h>
#include <stdint.h>

#include "gang/export.h"
#include "gang/status.h"
#include "gang/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gang gang_t;
typedef struct gang_work gang_work;

#define GANG_SPLIT_NOCOLOR (-1)

typedef struct gang_options {
  size_t size;            /* sizeof(gang_options) */
  gang_device device;     /* only GANG_DEVICE_CPU moves data today */
  int64_t timeout_ms;     /* 0 = GANG_TIMEOUT (15 min); < 0 = none */
  const char *store_addr; /* NULL = from the environment (see below) */
  const char *host;       /* address peers reach this rank at; NULL = auto */
  int check;              /* signature check of every collective: 1 on, -1 off,
                             0 = GANG_CHECK */
} gang_options;

#define GANG_OPTIONS_INIT                                                      \
  { sizeof(gang_options), {GANG_DEVICE_CPU, 0}, 0, NULL, NULL, 0 }

/* ---- Creation and lifecycle -------------------------------------------- */

/* Creates the gang of the whole world from the environment
 * (gang_world_info_from_env): the store at opts->store_addr, else
 * GANG_STORE_ADDR (set by gangrun), else MASTER_ADDR:MASTER_PORT, where
 * rank 0 hosts the store itself when no launcher does; then a connection to
 * every peer. Collective over the world. opts may be NULL. */
GANG_API gang_status gang_create_default(const gang_options *opts,
                                         gang_t **out);

/* Creates a gang of `size` ranks that rendezvous through the store at
 * `store_addr` ("host:port[/prefix]", as gang_store_connect takes it); this
 * process is `rank`. Collective over the `size` processes (torchft's
 * configure(store_addr, rank, world_size)). opts may be NULL. */
GANG_API gang_status gang_create_with_store(const gang_options *opts,
                                            const char *store_addr, int rank,
                                            int size, gang_t **out);

/* A single process simulating rank `rank` of `size` ranks that all hold the
 * same data as this one (fairseq2's FakeGang, see docs/gang.md for where it
 * differs). */
GANG_API gang_status gang_create_fake(gang_device device, int rank, int size,
                                      gang_t **out);

/* Aborts the gang: in-flight and later operations fail with GANG_ABORTED.
 * Any thread; returns promptly. */
GANG_API void gang_abort(gang_t *g);

/* Destroys the gang and everything it owns. Always safe (after errors, on a
 * half-built gang, NULL). Not collective. With the world's last gang this
 * rank leaves its world: its peers are told (a collective that needs it
 * then fails at once on them with GANG_PEER_LEFT; the others go on), and
 * a rank that hosts the store keeps serving it on a thread of its own
 * while peers still use it (docs/gang.md, "Lifecycle"). A process that
 * exits (returns from main, calls exit()) with gangs open leaves the same
 * way, through an exit handler; one that crashes is lost to its peers. */
GANG_API void gang_destroy(gang_t *g);

/* Writes the flight recorder's record of every gang of this process (the
 * last GANG_FLIGHT calls of each, docs/flight-recorder.md) to
 * GANG_FLIGHT_DUMP<world rank> or the log, with `reason` (NULL: none).
 * GANG_INVALID_USAGE when no gang records (GANG_FLIGHT is 0). Any thread;
 * not collective: each rank dumps its own. */
GANG_API gang_status gang_flight_dump(const char *reason);

/* Memory that the other ranks of this host read and write directly:
 * collectives whose buffers come from here move them with plain copies
 * where they would otherwise use process_vm_readv (the single-copy
 * algorithms: large all_gather, reduce_scatter, all_to_all, broadcast
 * and all_reduce; docs/shm.md, "Buffers from gang_mem_alloc"). Any
 * buffer works with every collective; these are only faster. `bytes`
 * (at least 1) are zeroed and page-aligned, in a memfd of their own that
 * the process's file table holds (one descriptor each) until
 * gang_mem_free. GANG_INVALID_ARGUMENT for 0 bytes or a NULL out,
 * GANG_NO_MEMORY when the kernel has no room. Any thread. */
GANG_API gang_status gang_mem_alloc(size_t bytes, void **out);
/* Frees a pointer gang_mem_alloc returned (NULL: nothing);
 * GANG_INVALID_ARGUMENT for any other pointer. Peers that mapped it let it
 * go at their next copy. No collective may be using it. */
GANG_API gang_status gang_mem_free(void *p);

GANG_API int gang_rank(const gang_t *g);
GANG_API int gang_size(const gang_t *g);
GANG_API gang_device gang_get_device(const gang_t *g);

/* The detail of the failure that broke this gang, "" if none. */
GANG_API const char *gang_get_last_error(const gang_t *g);

/* The algorithm the latest collective call of g ran, as gang-info names
 * them ("recursive_doubling", "single_copy", "hierarchical", ...;
 * docs/algorithms.md), or NULL before the first, for a gang that does not
 * choose (a fake gang, a fault-tolerant wrapper) and for NULL. What the
 * selection table or GANG_ALGO picked, for logs and benchmarks: NCCL's
 * INFO lines say the same. Calls from other threads may change it at any
 * time. */
GANG_API const char *gang_last_algorithm(const gang_t *g);

/* ---- Sub-gangs ---------------------------------------------------------- */

/* MPI_Comm_split: ranks with the same color form a gang, ordered by (key,
 * parent rank). GANG_SPLIT_NOCOLOR gives *out = NULL. Collective. */
GANG_API gang_status gang_split(gang_t *g, int color, int key, gang_t **out);

/* fairseq2 create_gang: a gang of the listed parent ranks (in list order);
 * collective over g; non-members get NULL. Duplicate or out-of-range ranks
 * are GANG_INVALID_ARGUMENT. */
GANG_API gang_status gang_create_subgang(gang_t *g, const int *ranks, int n,
                                         gang_t **out);

/* ---- Collectives (blocking) --------------------------------------------- */

GANG_API gang_status gang_barrier(gang_t *g);
GANG_API gang_status gang_all_reduce(gang_t *g, void *buf, size_t count,
                                     gang_dtype dtype, gang_reduce_op op);
GANG_API gang_status gang_broadcast(gang_t *g, void *buf, size_t count,
                                    gang_dtype dtype, int source_rank);
/* out holds size * count elements, rank order. in may equal the own slot of
 * out (in place). */
GANG_API gang_status gang_all_gather(gang_t *g, void *out, const void *in,
                                     size_t count, gang_dtype dtype);
GANG_API gang_status gang_all_gather_to_list(gang_t *g, void *const *outs,
                                             const void *in, size_t count,
                                             gang_dtype dtype);
/* in holds size * count_per_rank elements; out receives this rank's reduced
 * block. */
GANG_API gang_status gang_reduce_scatter(gang_t *g, void *out, const void *in,
                                         size_t count_per_rank,
                                         gang_dtype dtype, gang_reduce_op op);
GANG_API gang_status gang_all_to_all(gang_t *g, void *out, const void *in,
                                     size_t count_per_rank, gang_dtype dtype);
/* all_to_all with variable splits (torch's all_to_all_single with split
 * sizes): in_counts[i] elements of `in` (packed in rank order) go to rank i;
 * out_counts[j] elements arrive from rank j into `out` (packed in rank
 * order). A sender's in_counts[i] must equal rank i's out_counts[sender],
 * else GANG_MISMATCH. Both arrays have gang_size(g) entries. */
GANG_API gang_status gang_all_to_all_v(gang_t *g, void *out,
                                       const size_t *out_counts, const void *in,
                                       const size_t *in_counts,
                                       gang_dtype dtype);
/* Point-to-point, matched by (peer, tag) in posting order. A receive's
 * buffer is the library's until the receive completes: it must not be read
 * or written meanwhile (nor sent from). Its contents are the message once
 * the receive succeeds, and unspecified before that or if it fails (other
 * bytes may pass through it). */
GANG_API gang_status gang_send(gang_t *g, const void *buf, size_t bytes,
                               int peer, int tag);
GANG_API gang_status gang_recv(gang_t *g, void *buf, size_t bytes, int peer,
                               int tag);

/* Variable-size payloads. broadcast_bytes: on the source, data and len are
 * read; elsewhere *data receives a malloc'd copy (free with free()).
 * all_gather_bytes: *outs is a malloc'd array of size malloc'd blobs and
 * *lens their lengths; free with gang_bytes_free. */
GANG_API gang_status gang_broadcast_bytes(gang_t *g, void **data, size_t *len,
                                          int source_rank);
GANG_API gang_status gang_all_gather_bytes(gang_t *g, const void *data,
                                           size_t len, void ***outs,
                                           size_t **lens);
GANG_API void gang_bytes_free(gang_t *g, void **outs, size_t *lens);

/* ---- Async ------------------------------------------------------------- */

/* Non-blocking forms: same arguments as the blocking call, plus *w, which
 * receives a work handle to wait on, test and free. The operation makes
 * progress without the caller (a posted collective advances while the
 * caller computes). On an error at post time *w is not set. */
GANG_API gang_status gang_barrier_post(gang_t *g, gang_work **w);
GANG_API gang_status gang_all_reduce_post(gang_t *g, void *buf, size_t count,
                                          gang_dtype dtype, gang_reduce_op op,
                                          gang_work **w);
GANG_API gang_status gang_broadcast_post(gang_t *g, void *buf, size_t count,
                                         gang_dtype dtype, int source_rank,
                                         gang_work **w);
GANG_API gang_status gang_all_gather_post(gang_t *g, void *out, const void *in,
                                          size_t count, gang_dtype dtype,
                                          gang_work **w);
GANG_API gang_status gang_all_gather_to_list_post(gang_t *g, void *const *outs,
                                                  const void *in, size_t count,
                                                  gang_dtype dtype,
                                                  gang_work **w);
GANG_API gang_status gang_reduce_scatter_post(gang_t *g, void *out,
                                              const void *in,
                                              size_t count_per_rank,
                                              gang_dtype dtype,
                                              gang_reduce_op op, gang_work **w);
GANG_API gang_status gang_all_to_all_post(gang_t *g, void *out, const void *in,
                                          size_t count_per_rank,
                                          gang_dtype dtype, gang_work **w);
GANG_API gang_status gang_all_to_all_v_post(gang_t *g, void *out,
                                            const size_t *out_counts,
                                            const void *in,
                                            const size_t *in_counts,
                                            gang_dtype dtype, gang_work **w);
GANG_API gang_status gang_send_post(gang_t *g, const void *buf, size_t bytes,
                                    int peer, int tag, gang_work **w);
GANG_API gang_status gang_recv_post(gang_t *g, void *buf, size_t bytes,
                                    int peer, int tag, gang_work **w);

/* Waits until the work completes or timeout_ms passes (< 0: the gang's
 * default). GANG_TIMEOUT breaks the gang (its buffers can no longer be
 * trusted). Returns the operation's status. */
GANG_API gang_status gang_work_wait(gang_work *w, int64_t timeout_ms);
/* Sets *done; returns the operation's status once done. Never blocks. */
GANG_API gang_status gang_work_test(gang_work *w, int *done);
/* Frees a completed work; freeing an incomplete one aborts the gang. */
GANG_API void gang_work_free(gang_work *w);

#ifdef __cplusplus
}
#endif
#endif
