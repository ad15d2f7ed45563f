/* The CPython extension gang._gang: what its files share.
 *
 * module.c   module init, world info, strerror, flight_dump, version
 * errors.c   the exception classes (one per gang_status under GangError)
 * buffer.c   turning a Python object (buffer protocol, __array_interface__,
 *            a torch CPU tensor) into a pointer, a count and a gang_dtype;
 *            devices to and from Python
 * gang_obj.c the _Gang type: a gang_t handle with every collective
 * work.c     the Work type: an async collective and the buffers it borrows
 * topo.c     the topologies (gangs_*) and the device mesh (gang_mesh_*)
 * ft.c       fault tolerance (gang/ft.h): the lighthouse, the manager, and
 *            the reconfigurable, error-swallowing and dummy gangs
 * mem.c      the Memory type: bytes from gang_mem_alloc
 *
 * Calls go one way (test_call_circles): module -> ft, topo -> gang_obj ->
 * work -> buffer -> errors; store, mem and every other file -> errors.
 *
 * The rule everywhere: validate and take every buffer with the GIL held,
 * then release the GIL for the whole C call, so other Python threads run
 * while a collective waits on its peers. */
#ifndef GANG_PY_GANGMODULE_H
#define GANG_PY_GANGMODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gang/env.h"
#include "gang/gang.h"
#include "gang/mesh.h"
#include "gang/status.h"
#include "gang/topology.h"

/* ---- errors (errors.c) -------------------------------------------------- */

/* Raises the class of `st` with gang_last_error()'s detail (or `what` when
 * the detail is empty) and returns NULL. */
PyObject *gpy_raise(gang_status st, const char *what);
/* Raises the class of `st` with a formatted message; returns NULL. */
PyObject *gpy_raise_fmt(gang_status st, const char *fmt, ...);
/* A new instance of the class of `st` (not raised) with .status,
 * .status_name and .detail = `detail` (gang_strerror(st) when empty). */
PyObject *gpy_error_new(gang_status st, const char *detail);
/* The exception class of a status (borrowed). */
PyObject *gpy_error_class(gang_status st);
/* Creates the classes and adds them to module m; -1 with an exception. */
int gpy_errors_init(PyObject *m);

/* How many gang_status codes there are (0 .. GPY_STATUS_COUNT - 1). */
#define GPY_STATUS_COUNT_ONE(name, value, msg) +1
#define GPY_STATUS_COUNT (0 GANG_STATUS_LIST(GPY_STATUS_COUNT_ONE))

/* ---- buffers (buffer.c) ------------------------------------------------- */

typedef struct gpy_buf {
  void *ptr;
  size_t count;  /* elements */
  size_t nbytes; /* count * element size */
  gang_dtype dtype;
  Py_buffer view; /* held while has_view: keeps the exporter's memory put */
  int has_view;
  PyObject *owner; /* strong reference to the object (tensor path) */
} gpy_buf;

#define GPY_BUF_READ 0
#define GPY_BUF_WRITE 1
/* Or'ed into the mode: any element type, taken as bytes (dtype UINT8,
 * count = nbytes) when gang does not reduce it. */
#define GPY_BUF_BYTES 2

/* Fills *b from obj: a C-contiguous buffer of a supported element type,
 * writable when `mode` has GPY_BUF_WRITE. On failure raises
 * InvalidArgumentError (or NotSupportedError for a non-CPU tensor) naming
 * `arg`, and returns -1 with nothing held. */
int gpy_buf_get(PyObject *obj, int mode, const char *arg, gpy_buf *b);
/* Releases what gpy_buf_get took. Needs the GIL. Safe on a zeroed buf. */
void gpy_buf_release(gpy_buf *b);
/* Parses a device (a str such as "cpu" / "cuda:1", or any object with
 * .type and .index such as torch.device) into *d. -1 with an exception. */
int gpy_device_parse(PyObject *obj, gang_device *d);
/* ("cpu" | "cuda", index) */
PyObject *gpy_device_tuple(gang_device d);
/* gang_dtype of a numpy/torch dtype name ("float32", "torch.float32"),
 * -1 if none. */
int gpy_dtype_from_name(const char *name);

/* ---- the gang type (gang_obj.c) ----------------------------------------- */

typedef struct gpy_gang {
  PyObject_HEAD gang_t *g;
  int owned;       /* gang_destroy at close/dealloc */
  PyObject *owner; /* keeps a borrowed handle's owner alive (topology) */
  PyObject *weaklist;
  PyObject *dict;
} gpy_gang;

extern PyTypeObject gpy_gang_type;
extern PyTypeObject gpy_work_type;
extern PyTypeObject gpy_topology_type;
extern PyTypeObject gpy_mesh_type;

/* ---- arguments of the collectives (args.c) ---- */

/* Matches positional args then keywords against `names` (NULL-terminated);
 * out[i] stays NULL when not given; the first `required` are mandatory.
 * -1 with a TypeError otherwise. */
int gpy_parse(const char *fn, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames, const char *const *names, int required,
              PyObject **out);
/* An int argument (dflt when absent or None). */
int gpy_as_int(PyObject *o, int dflt, const char *what, int *out);
/* Whether async_op was given true. */
int gpy_as_async(PyObject *o);
/* A reduce operation: a ReduceOperation, an int 1..5, its name, or
 * torch.distributed's ReduceOp (SUM when absent). */
int gpy_as_op(PyObject *o, gang_reduce_op *op);
/* `arg` (a rank) within the gang. */
int gpy_check_rank(gang_t *g, int src, const char *arg);
/* `out` holds `parts` blocks of `in`, of the same dtype. */
int gpy_check_parts(const gpy_buf *out, const gpy_buf *in, size_t parts,
                    const char *out_name, const char *in_name);
/* fairseq2's all_gather checks, for arrays that carry a shape. */
int gpy_check_gather_shape(const gpy_buf *out, const gpy_buf *in, int size);

/* A new object of `type` (a subclass of _Gang) for handle g. owned: the
 * object destroys g; otherwise `owner` (may be NULL) is kept alive. */
PyObject *gpy_gang_wrap(PyTypeObject *type, gang_t *g, int owned,
                        PyObject *owner);
/* The open handle of a _Gang, or NULL with InvalidUsageError set. */
gang_t *gpy_gang_handle(PyObject *self);

/* ---- works (work.c) ----------------------------------------------------- */

/* A Work for `w` that owns the n buffers in bufs (moved: the caller's
 * copies are zeroed) and keeps `gang` alive. On failure the buffers are
 * released and the work is waited for and freed. */
PyObject *gpy_work_new(PyObject *gang, gang_work *w, gpy_buf *bufs, int n,
                       void *extra);

/* ---- module-level functions of topo.c ------------------------------------ */

extern PyMethodDef gpy_topo_methods[];
int gpy_topo_init(PyObject *m);

/* ---- fault tolerance (ft.c) -----------------------------------------------
 */

int gpy_ft_init(PyObject *m);

/* Runs `call` with the GIL released, counted in `busy` (an int of the
 * object, so that close() can refuse while a call runs). */
#define GPY_NOGIL_COUNTED(busy, call)                                          \
  do {                                                                         \
    (busy)++;                                                                  \
    PyThreadState *nogil_ = PyEval_SaveThread();                               \
    call;                                                                      \
    PyEval_RestoreThread(nogil_);                                              \
    (busy)--;                                                                  \
  } while (0)

/* ---- store clients (store.c) ------------------------------------------------
 */

extern PyTypeObject gpy_store_type;

/* ---- gang_mem_alloc (mem.c) --------------------------------------------- */

/* Memory(nbytes): bytes from gang_mem_alloc as a writable buffer. */
extern PyTypeObject gpy_mem_type;
/* _store_connect(addr, timeout_s=0) -> Store */
PyObject *gpy_store_connect(PyObject *mod, PyObject *args);

#endif
