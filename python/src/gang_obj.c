/* The _Gang type: one gang_t handle and every collective on it.
 *
 * Python's Gang, FakeGang and ProcessGroupGang (gang/_gang_api.py) derive
 * from this type, so a collective goes from the Python call straight to
 * this file: no Python frame in between. Each collective takes its buffers
 * (buffer.c), checks sizes and dtypes against each other with the GIL held,
 * then runs the C call with the GIL released. With async_op=True the _post
 * form runs instead and a Work (work.c) holds the buffers until it is
 * complete. A bad argument is refused here, before the C library sees it,
 * so it never breaks the gang. */
#include <string.h>

#include "gangmodule.h"

/* ---- lifecycle ----------------------------------------------------------- */

gang_t *gpy_gang_handle(PyObject *self) {
  gpy_gang *o = (gpy_gang *)self;
  if (o->g == NULL)
    gpy_raise_fmt(GANG_INVALID_USAGE, "the gang is closed");
  return o->g;
}

PyObject *gpy_gang_wrap(PyTypeObject *type, gang_t *g, int owned,
                        PyObject *owner) {
  gpy_gang *o = (gpy_gang *)type->tp_alloc(type, 0);
  if (o == NULL) {
    if (owned)
      gang_destroy(g);
    return NULL;
  }
  o->g = g;
  o->owned = owned;
  Py_XINCREF(owner);
  o->owner = owner;
  return (PyObject *)o;
}

static void close_handle(gpy_gang *o) {
  gang_t *g = o->g;
  o->g = NULL;
  if (g != NULL && o->owned) {
    {
      PyThreadState *nogil_ = PyEval_SaveThread();
      gang_destroy(g);
      PyEval_RestoreThread(nogil_);
    }
  }
  Py_CLEAR(o->owner);
}

static int gang_traverse(gpy_gang *o, visitproc visit, void *arg) {
  Py_VISIT(o->owner);
  Py_VISIT(o->dict);
  return 0;
}

static int gang_clear(gpy_gang *o) {
  Py_CLEAR(o->dict);
  return 0;
}

static void gang_dealloc(gpy_gang *o) {
  PyObject_GC_UnTrack(o);
  if (o->weaklist != NULL)
    PyObject_ClearWeakRefs((PyObject *)o);
  close_handle(o);
  gang_clear(o);
  /* Python subclasses are heap types whose subtype_dealloc drops the
   * type's reference after this returns. */
  Py_TYPE(o)->tp_free((PyObject *)o);
}

/* _Gang(handle) is not constructed from Python directly: subclasses call
 * the module's constructors (create_default, create_fake, ...), which
 * wrap a handle. A plain call makes a closed gang. */
static PyObject *gang_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  return type->tp_alloc(type, 0);
}

static PyObject *m_close(PyObject *self, PyObject *noargs) {
  (void)noargs;
  close_handle((gpy_gang *)self);
  Py_RETURN_NONE;
}

/* _release() -> the handle as an int; this object no longer owns or uses
 * it (for a new owner such as the torch process group). */
static PyObject *m_release(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_gang *o = (gpy_gang *)self;
  if (gpy_gang_handle(self) == NULL)
    return NULL;
  if (!o->owned)
    return gpy_raise_fmt(GANG_INVALID_USAGE,
                         "this gang's handle is borrowed; it cannot be "
                         "released");
  PyObject *h = PyLong_FromVoidPtr(o->g);
  if (h != NULL)
    o->g = NULL;
  return h;
}

static PyObject *m_abort(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_gang *o = (gpy_gang *)self;
  if (o->g != NULL)
    gang_abort(o->g);
  Py_RETURN_NONE;
}

static PyObject *get_rank(PyObject *self, void *c) {
  (void)c;
  gang_t *g = gpy_gang_handle(self);
  return g ? PyLong_FromLong(gang_rank(g)) : NULL;
}

static PyObject *get_size(PyObject *self, void *c) {
  (void)c;
  gang_t *g = gpy_gang_handle(self);
  return g ? PyLong_FromLong(gang_size(g)) : NULL;
}

static PyObject *get_device_tuple(PyObject *self, void *c) {
  (void)c;
  gang_t *g = gpy_gang_handle(self);
  return g ? gpy_device_tuple(gang_get_device(g)) : NULL;
}

static PyObject *get_closed(PyObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(((gpy_gang *)self)->g == NULL);
}

static PyObject *get_last_error(PyObject *self, void *c) {
  (void)c;
  gpy_gang *o = (gpy_gang *)self;
  return PyUnicode_FromString(o->g ? gang_get_last_error(o->g) : "");
}

static PyObject *get_handle(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromVoidPtr(((gpy_gang *)self)->g);
}

/* ---- running a call ------------------------------------------------------ */

/* One collective's arguments, as the gang_* calls take them. */
typedef enum call_kind {
  C_BARRIER,
  C_ALL_REDUCE,
  C_BROADCAST,
  C_ALL_GATHER,
  C_REDUCE_SCATTER,
  C_ALL_TO_ALL,
  C_SEND,
  C_RECV,
} call_kind;

typedef struct call {
  call_kind kind;
  void *out;      /* all_reduce, broadcast, recv: the buffer */
  const void *in; /* all_gather, reduce_scatter, all_to_all, send */
  size_t count;   /* elements as the call takes them (bytes for p2p) */
  gang_dtype dtype;
  gang_reduce_op op;
  int peer; /* broadcast's root, p2p's peer */
  int tag;
} call;

static const char *const call_names[] = {
    "gang_barrier",        "gang_all_reduce",
    "gang_broadcast",      "gang_all_gather",
    "gang_reduce_scatter", "gang_all_to_all",
    "gang_send",           "gang_recv"};

/* The C call of c: its _post form (into *w) for async_op. */
static gang_status run(gang_t *g, const call *c, int async, gang_work **w) {
  switch (c->kind) {
  case C_BARRIER:
    return async ? gang_barrier_post(g, w) : gang_barrier(g);
  case C_ALL_REDUCE:
    return async ? gang_all_reduce_post(g, c->out, c->count, c->dtype, c->op, w)
                 : gang_all_reduce(g, c->out, c->count, c->dtype, c->op);
  case C_BROADCAST:
    return async
               ? gang_broadcast_post(g, c->out, c->count, c->dtype, c->peer, w)
               : gang_broadcast(g, c->out, c->count, c->dtype, c->peer);
  case C_ALL_GATHER:
    return async ? gang_all_gather_post(g, c->out, c->in, c->count, c->dtype, w)
                 : gang_all_gather(g, c->out, c->in, c->count, c->dtype);
  case C_REDUCE_SCATTER:
    return async ? gang_reduce_scatter_post(g, c->out, c->in, c->count,
                                            c->dtype, c->op, w)
                 : gang_reduce_scatter(g, c->out, c->in, c->count, c->dtype,
                                       c->op);
  case C_ALL_TO_ALL:
    return async ? gang_all_to_all_post(g, c->out, c->in, c->count, c->dtype, w)
                 : gang_all_to_all(g, c->out, c->in, c->count, c->dtype);
  case C_SEND:
    return async ? gang_send_post(g, c->in, c->count, c->peer, c->tag, w)
                 : gang_send(g, c->in, c->count, c->peer, c->tag);
  case C_RECV:
    return async ? gang_recv_post(g, c->out, c->count, c->peer, c->tag, w)
                 : gang_recv(g, c->out, c->count, c->peer, c->tag);
  }
  return GANG_INTERNAL;
}

/* Finishes a collective: for async_op, wraps the work (which takes the
 * buffers); otherwise releases the buffers and returns None or raises. */
static PyObject *finish(PyObject *self, gang_status st, gang_work *w, int async,
                        gpy_buf *bufs, int n, const char *fn) {
  if (st != GANG_OK) {
    for (int i = 0; i < n; i++)
      gpy_buf_release(&bufs[i]);
    return gpy_raise(st, fn);
  }
  if (async)
    return gpy_work_new(self, w, bufs, n, NULL);
  for (int i = 0; i < n; i++)
    gpy_buf_release(&bufs[i]);
  Py_RETURN_NONE;
}

/* Runs c with the GIL released, then finishes it (the buffers bufs[0..n)
 * go to the work, or are released). */
static PyObject *go(PyObject *self, gang_t *g, const call *c, int async,
                    gpy_buf *bufs, int n) {
  gang_work *w = NULL;
  PyThreadState *nogil = PyEval_SaveThread();
  gang_status st = run(g, c, async, &w);
  PyEval_RestoreThread(nogil);
  return finish(self, st, w, async, bufs, n, call_names[c->kind]);
}

static PyObject *m_barrier(PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"async_op", NULL};
  PyObject *a[1];
  if (gpy_parse("barrier", args, nargs, kwnames, names, 0, a) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL)
    return NULL;
  return go(self, g, &(call){.kind = C_BARRIER}, gpy_as_async(a[0]), NULL, 0);
}

static PyObject *m_all_reduce(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"tensor", "op", "async_op", NULL};
  PyObject *a[3];
  gang_reduce_op op;
  if (gpy_parse("all_reduce", args, nargs, kwnames, names, 1, a) < 0 ||
      gpy_as_op(a[1], &op) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  gpy_buf b;
  if (g == NULL || gpy_buf_get(a[0], GPY_BUF_WRITE, "tensor", &b) < 0)
    return NULL;
  call c = {C_ALL_REDUCE, b.ptr, NULL, b.count, b.dtype, op};
  return go(self, g, &c, gpy_as_async(a[2]), &b, 1);
}

static PyObject *m_broadcast(PyObject *self, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"tensor", "source_rank", "async_op",
                                      NULL};
  PyObject *a[3];
  int src;
  if (gpy_parse("broadcast", args, nargs, kwnames, names, 1, a) < 0 ||
      gpy_as_int(a[1], 0, "source_rank", &src) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL || gpy_check_rank(g, src, "source_rank") < 0)
    return NULL;
  gpy_buf b;
  /* The source only reads its buffer: a read-only one will do there. */
  if (gpy_buf_get(a[0], gang_rank(g) == src ? 0 : GPY_BUF_WRITE, "tensor", &b) <
      0)
    return NULL;
  call c = {C_BROADCAST, b.ptr, NULL, b.count, b.dtype, 0, src};
  return go(self, g, &c, gpy_as_async(a[2]), &b, 1);
}

/* The gang, and b[0] = output_tensor (written), b[1] = input_tensor
 * (read) from a[0] and a[1]; NULL with an exception set and nothing held. */
static gang_t *out_in(PyObject *self, PyObject *const *a, gpy_buf b[2]) {
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL)
    return NULL;
  if (gpy_buf_get(a[0], GPY_BUF_WRITE, "output_tensor", &b[0]) < 0)
    return NULL;
  if (gpy_buf_get(a[1], GPY_BUF_READ, "input_tensor", &b[1]) < 0) {
    gpy_buf_release(&b[0]);
    return NULL;
  }
  return g;
}

static PyObject *m_all_gather(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"output_tensor", "input_tensor",
                                      "async_op", NULL};
  PyObject *a[3];
  if (gpy_parse("all_gather", args, nargs, kwnames, names, 2, a) < 0)
    return NULL;
  gpy_buf b[2];
  gang_t *g = out_in(self, a, b);
  if (g == NULL)
    return NULL;
  if (gpy_check_gather_shape(&b[0], &b[1], gang_size(g)) < 0 ||
      gpy_check_parts(&b[0], &b[1], (size_t)gang_size(g), "output_tensor",
                      "input_tensor") < 0) {
    gpy_buf_release(&b[0]);
    gpy_buf_release(&b[1]);
    return NULL;
  }
  call c = {C_ALL_GATHER, b[0].ptr, b[1].ptr, b[1].count, b[1].dtype};
  return go(self, g, &c, gpy_as_async(a[2]), b, 2);
}

static PyObject *m_all_gather_to_list(PyObject *self, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"output_tensors", "input_tensor",
                                      "async_op", NULL};
  PyObject *a[3];
  if (gpy_parse("all_gather_to_list", args, nargs, kwnames, names, 2, a) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL)
    return NULL;
  int size = gang_size(g);
  PyObject *seq = PySequence_Fast(a[0], "`output_tensors` must be a list");
  if (seq == NULL)
    return NULL;
  if (PySequence_Fast_GET_SIZE(seq) != size) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "Length of `output_tensors` must match the number of "
                  "processes in the gang (%d), but is %zd instead.",
                  size, PySequence_Fast_GET_SIZE(seq));
    Py_DECREF(seq);
    return NULL;
  }
  gpy_buf *b = PyMem_Calloc((size_t)size + 1, sizeof *b);
  void **outs = PyMem_Calloc((size_t)size, sizeof *outs);
  int got = 0;
  PyObject *res = NULL;
  if (b == NULL || outs == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  if (gpy_buf_get(a[1], GPY_BUF_READ, "input_tensor", &b[size]) < 0)
    goto out;
  for (; got < size; got++) {
    char arg[48];
    snprintf(arg, sizeof arg, "output_tensors[%d]", got);
    if (gpy_buf_get(PySequence_Fast_GET_ITEM(seq, got), GPY_BUF_WRITE, arg,
                    &b[got]) < 0 ||
        gpy_check_parts(&b[got], &b[size], 1, arg, "input_tensor") < 0) {
      if (!PyErr_Occurred())
        PyErr_NoMemory();
      got++;
      goto out;
    }
    outs[got] = b[got].ptr;
  }
  gang_status st;
  gang_work *w = NULL;
  int async = gpy_as_async(a[2]);
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = async ? gang_all_gather_to_list_post(g, outs, b[size].ptr,
                                              b[size].count, b[size].dtype, &w)
               : gang_all_gather_to_list(g, outs, b[size].ptr, b[size].count,
                                         b[size].dtype);
    PyEval_RestoreThread(nogil_);
  }
  if (st == GANG_OK && async) {
    /* the work owns the buffers and the pointer array from here */
    res = gpy_work_new(self, w, b, size + 1, outs);
    PyMem_Free(b);
    Py_DECREF(seq);
    return res;
  }
  if (st != GANG_OK)
    gpy_raise(st, "gang_all_gather_to_list");
  else
    res = Py_NewRef(Py_None);
out:
  for (int i = 0; b != NULL && i < got; i++)
    gpy_buf_release(&b[i]);
  if (b != NULL)
    gpy_buf_release(&b[size]);
  PyMem_Free(b);
  PyMem_Free(outs);
  Py_DECREF(seq);
  return res;
}

static PyObject *m_reduce_scatter(PyObject *self, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"output_tensor", "input_tensor", "op",
                                      "async_op", NULL};
  PyObject *a[4];
  gang_reduce_op op;
  if (gpy_parse("reduce_scatter", args, nargs, kwnames, names, 2, a) < 0 ||
      gpy_as_op(a[2], &op) < 0)
    return NULL;
  gpy_buf b[2];
  gang_t *g = out_in(self, a, b);
  if (g == NULL)
    return NULL;
  if (gpy_check_parts(&b[1], &b[0], (size_t)gang_size(g), "input_tensor",
                      "output_tensor") < 0) {
    gpy_buf_release(&b[0]);
    gpy_buf_release(&b[1]);
    return NULL;
  }
  call c = {C_REDUCE_SCATTER, b[0].ptr, b[1].ptr, b[0].count, b[0].dtype, op};
  return go(self, g, &c, gpy_as_async(a[3]), b, 2);
}

static PyObject *m_all_to_all(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"output_tensor", "input_tensor",
                                      "async_op", NULL};
  PyObject *a[3];
  if (gpy_parse("all_to_all", args, nargs, kwnames, names, 2, a) < 0)
    return NULL;
  gpy_buf b[2];
  gang_t *g = out_in(self, a, b);
  if (g == NULL)
    return NULL;
  size_t size = (size_t)gang_size(g);
  int bad = gpy_check_parts(&b[0], &b[1], 1, "output_tensor", "input_tensor");
  if (bad == 0 && b[1].count % size != 0) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`input_tensor` holds %zu elements, not a multiple of the "
                  "gang's size (%zu)",
                  b[1].count, size);
    bad = -1;
  }
  if (bad < 0) {
    gpy_buf_release(&b[0]);
    gpy_buf_release(&b[1]);
    return NULL;
  }
  call c = {C_ALL_TO_ALL, b[0].ptr, b[1].ptr, b[1].count / size, b[1].dtype};
  return go(self, g, &c, gpy_as_async(a[2]), b, 2);
}

static PyObject *p2p(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, int send) {
  static const char *const names[] = {"tensor", "peer", "tag", "async_op",
                                      NULL};
  const char *fn = send ? "send" : "recv";
  PyObject *a[4];
  int peer, tag;
  if (gpy_parse(fn, args, nargs, kwnames, names, 2, a) < 0 ||
      gpy_as_int(a[1], 0, "peer", &peer) < 0 ||
      gpy_as_int(a[2], 0, "tag", &tag) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL || gpy_check_rank(g, peer, "peer") < 0)
    return NULL;
  gpy_buf b;
  if (gpy_buf_get(a[0], send ? GPY_BUF_READ : GPY_BUF_WRITE, "tensor", &b) < 0)
    return NULL;
  call c = {send ? C_SEND : C_RECV, b.ptr, b.ptr, b.nbytes, 0, 0, peer, tag};
  return go(self, g, &c, gpy_as_async(a[3]), &b, 1);
}

static PyObject *m_send(PyObject *self, PyObject *const *args, Py_ssize_t n,
                        PyObject *kw) {
  return p2p(self, args, n, kw, 1);
}

static PyObject *m_recv(PyObject *self, PyObject *const *args, Py_ssize_t n,
                        PyObject *kw) {
  return p2p(self, args, n, kw, 0);
}

/* broadcast_bytes(data, source_rank) -> bytes: the source passes its bytes
 * (anything with the buffer protocol), the others None. */
static PyObject *m_broadcast_bytes(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"data", "source_rank", NULL};
  PyObject *a[2];
  int src;
  if (gpy_parse("broadcast_bytes", args, nargs, kwnames, names, 1, a) < 0 ||
      gpy_as_int(a[1], 0, "source_rank", &src) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL || gpy_check_rank(g, src, "source_rank") < 0)
    return NULL;
  Py_buffer view = {0};
  int is_src = gang_rank(g) == src;
  if (is_src && PyObject_GetBuffer(a[0], &view, PyBUF_SIMPLE) < 0)
    return NULL;
  void *data = is_src ? view.buf : NULL;
  size_t len = is_src ? (size_t)view.len : 0;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_broadcast_bytes(g, &data, &len, src);
    PyEval_RestoreThread(nogil_);
  }
  PyObject *res = NULL;
  if (st != GANG_OK)
    gpy_raise(st, "gang_broadcast_bytes");
  else if (is_src)
    res = PyBytes_FromStringAndSize(view.buf, view.len);
  else
    res = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
  if (is_src)
    PyBuffer_Release(&view);
  else if (st == GANG_OK)
    free(data);
  return res;
}

/* all_gather_bytes(data) -> list of bytes, one per rank. */
static PyObject *m_all_gather_bytes(PyObject *self, PyObject *arg) {
  gang_t *g = gpy_gang_handle(self);
  Py_buffer view;
  if (g == NULL || PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
    return NULL;
  void **outs = NULL;
  size_t *lens = NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_all_gather_bytes(g, view.buf, (size_t)view.len, &outs, &lens);
    PyEval_RestoreThread(nogil_);
  }
  PyBuffer_Release(&view);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_all_gather_bytes");
  int n = gang_size(g);
  PyObject *list = PyList_New(n);
  for (int i = 0; list != NULL && i < n; i++) {
    PyObject *b = PyBytes_FromStringAndSize(outs[i], (Py_ssize_t)lens[i]);
    if (b == NULL)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, i, b);
  }
  gang_bytes_free(g, outs, lens);
  return list;
}

/* ---- sub-gangs ----------------------------------------------------------- */

/* create_gang(ranks) -> same type, or None for a non-member. */
static PyObject *m_create_gang(PyObject *self, PyObject *ranks_obj) {
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL)
    return NULL;
  PyObject *seq = PySequence_Fast(ranks_obj, "`ranks` must be a sequence");
  if (seq == NULL)
    return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int *ranks = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ranks);
  if (ranks == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (gpy_as_int(PySequence_Fast_GET_ITEM(seq, i), 0, "ranks", &ranks[i]) <
        0) {
      PyMem_Free(ranks);
      Py_DECREF(seq);
      return NULL;
    }
  Py_DECREF(seq);
  gang_t *sub = NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_create_subgang(g, ranks, (int)n, &sub);
    PyEval_RestoreThread(nogil_);
  }
  PyMem_Free(ranks);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_create_subgang");
  if (sub == NULL)
    Py_RETURN_NONE;
  return gpy_gang_wrap(Py_TYPE(self), sub, 1, NULL);
}

static PyObject *m_split(PyObject *self, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"color", "key", NULL};
  PyObject *a[2];
  int color, key;
  if (gpy_parse("split", args, nargs, kwnames, names, 1, a) < 0 ||
      gpy_as_int(a[0], GANG_SPLIT_NOCOLOR, "color", &color) < 0 ||
      gpy_as_int(a[1], 0, "key", &key) < 0)
    return NULL;
  gang_t *g = gpy_gang_handle(self);
  if (g == NULL)
    return NULL;
  gang_t *sub = NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_split(g, color, key, &sub);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_split");
  if (sub == NULL)
    Py_RETURN_NONE;
  return gpy_gang_wrap(Py_TYPE(self), sub, 1, NULL);
}

/* ---- constructors (class methods) ---------------------------------------- */

static PyObject *c_create_default(PyObject *cls, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"device", "timeout", "store_addr", NULL};
  PyObject *a[3];
  if (gpy_parse("_create_default", args, nargs, kwnames, names, 0, a) < 0)
    return NULL;
  gang_options o = GANG_OPTIONS_INIT;
  if (a[0] != NULL && a[0] != Py_None && gpy_device_parse(a[0], &o.device) < 0)
    return NULL;
  if (a[1] != NULL && a[1] != Py_None) {
    double s = PyFloat_AsDouble(a[1]);
    if (s == -1.0 && PyErr_Occurred())
      return NULL;
    o.timeout_ms = s <= 0 ? -1 : (int64_t)(s * 1000.0);
  }
  if (a[2] != NULL && a[2] != Py_None) {
    o.store_addr = PyUnicode_AsUTF8(a[2]);
    if (o.store_addr == NULL)
      return NULL;
  }
  gang_t *g = NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_create_default(&o, &g);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_create_default");
  return gpy_gang_wrap((PyTypeObject *)cls, g, 1, NULL);
}

static PyObject *c_create_with_store(PyObject *cls, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"store_addr", "rank",    "size",
                                      "device",     "timeout", NULL};
  PyObject *a[5];
  int rank, size;
  if (gpy_parse("_create_with_store", args, nargs, kwnames, names, 3, a) < 0 ||
      gpy_as_int(a[1], 0, "rank", &rank) < 0 ||
      gpy_as_int(a[2], 1, "size", &size) < 0)
    return NULL;
  const char *addr = PyUnicode_AsUTF8(a[0]);
  if (addr == NULL)
    return NULL;
  gang_options o = GANG_OPTIONS_INIT;
  if (a[3] != NULL && a[3] != Py_None && gpy_device_parse(a[3], &o.device) < 0)
    return NULL;
  if (a[4] != NULL && a[4] != Py_None) {
    double s = PyFloat_AsDouble(a[4]);
    if (s == -1.0 && PyErr_Occurred())
      return NULL;
    o.timeout_ms = s <= 0 ? -1 : (int64_t)(s * 1000.0);
  }
  gang_t *g = NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_create_with_store(&o, addr, rank, size, &g);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_create_with_store");
  return gpy_gang_wrap((PyTypeObject *)cls, g, 1, NULL);
}

static PyObject *c_create_fake(PyObject *cls, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"device", "rank", "size", NULL};
  PyObject *a[3];
  int rank, size;
  gang_device d = {GANG_DEVICE_CPU, 0};
  if (gpy_parse("_create_fake", args, nargs, kwnames, names, 0, a) < 0 ||
      gpy_as_int(a[1], 0, "rank", &rank) < 0 ||
      gpy_as_int(a[2], 1, "size", &size) < 0)
    return NULL;
  if (a[0] != NULL && a[0] != Py_None && gpy_device_parse(a[0], &d) < 0)
    return NULL;
  gang_t *g = NULL;
  gang_status st = gang_create_fake(d, rank, size, &g);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_create_fake");
  return gpy_gang_wrap((PyTypeObject *)cls, g, 1, NULL);
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define CALL(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef gang_methods[] = {
    {"close", m_close, METH_NOARGS,
     "close(): gang_destroy. Idempotent; sub-gangs keep working."},
    {"_release", m_release, METH_NOARGS,
     "_release() -> handle: hands the gang_t to a new owner."},
    {"abort", m_abort, METH_NOARGS,
     "abort(): gang_abort: in-flight and later operations fail."},
    {"barrier", CALL(m_barrier), FAST, "barrier(async_op=False)"},
    {"all_reduce", CALL(m_all_reduce), FAST,
     "all_reduce(tensor, op=ReduceOperation.SUM, async_op=False): in place."},
    {"broadcast", CALL(m_broadcast), FAST,
     "broadcast(tensor, source_rank=0, async_op=False): in place; "
     "source_rank is a rank of this gang."},
    {"all_gather", CALL(m_all_gather), FAST,
     "all_gather(output_tensor, input_tensor, async_op=False): output is "
     "[size, *input.shape], rank order."},
    {"all_gather_to_list", CALL(m_all_gather_to_list), FAST,
     "all_gather_to_list(output_tensors, input_tensor, async_op=False)"},
    {"reduce_scatter", CALL(m_reduce_scatter), FAST,
     "reduce_scatter(output_tensor, input_tensor, op=SUM, async_op=False)"},
    {"all_to_all", CALL(m_all_to_all), FAST,
     "all_to_all(output_tensor, input_tensor, async_op=False)"},
    {"send", CALL(m_send), FAST, "send(tensor, peer, tag=0, async_op=False)"},
    {"recv", CALL(m_recv), FAST, "recv(tensor, peer, tag=0, async_op=False)"},
    {"broadcast_bytes", CALL(m_broadcast_bytes), FAST,
     "broadcast_bytes(data, source_rank=0) -> bytes"},
    {"all_gather_bytes", m_all_gather_bytes, METH_O,
     "all_gather_bytes(data) -> list of bytes in rank order"},
    {"create_gang", m_create_gang, METH_O,
     "create_gang(ranks) -> gang of those ranks (list order), None for "
     "non-members. Collective."},
    {"split", CALL(m_split), FAST,
     "split(color, key=0) -> gang (MPI_Comm_split), None for color None."},
    {"_create_default", CALL(c_create_default), FAST | METH_CLASS,
     "gang_create_default"},
    {"_create_with_store", CALL(c_create_with_store), FAST | METH_CLASS,
     "gang_create_with_store"},
    {"_create_fake", CALL(c_create_fake), FAST | METH_CLASS,
     "gang_create_fake"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef gang_getset[] = {
    {"rank", get_rank, NULL, "This process's rank in the gang.", NULL},
    {"size", get_size, NULL, "Number of processes in the gang.", NULL},
    {"_device", get_device_tuple, NULL, "(type, index)", NULL},
    {"closed", get_closed, NULL, "Whether close() was called.", NULL},
    {"last_error", get_last_error, NULL,
     "What broke the gang (gang_get_last_error), '' if nothing.", NULL},
    {"_handle", get_handle, NULL, "The gang_t pointer as an int.", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject gpy_gang_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang._Gang",
    .tp_basicsize = sizeof(gpy_gang),
    .tp_dealloc = (destructor)gang_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A gang_t handle; see gang.Gang.",
    .tp_traverse = (traverseproc)gang_traverse,
    .tp_clear = (inquiry)gang_clear,
    .tp_weaklistoffset = offsetof(gpy_gang, weaklist),
    .tp_dictoffset = offsetof(gpy_gang, dict),
    .tp_methods = gang_methods,
    .tp_getset = gang_getset,
    .tp_new = gang_new,
};
