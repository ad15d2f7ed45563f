/* Topologies (gangs_*) and device meshes (gang_mesh_*) for the Python
 * layer (gang/_topology.py, gang/device_mesh.py).
 *
 * _Topology owns one `gangs` struct (gangs_close at dealloc) and keeps the
 * Python objects whose handles it borrows alive: the root gang it was built
 * over, and for an FSDP topology the topology it was split from. _Mesh owns
 * a gang_mesh handle and keeps the gang it is over alive. Gang objects for
 * their members borrow the handles and keep the _Topology or _Mesh alive,
 * so a member gang stays usable for as long as Python can reach it. */
#include <string.h>

#include "gangmodule.h"

/* ---- _Topology --------------------------------------------------------- */

typedef struct gpy_topology {
  PyObject_HEAD gangs gs;
  PyObject *keep; /* root gang or parent topology */
} gpy_topology;

static void topology_dealloc(gpy_topology *o) {
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    gangs_close(&o->gs);
    PyEval_RestoreThread(nogil_);
  }
  Py_CLEAR(o->keep);
  PyObject_Del(o);
}

static PyObject *topology_new(const gangs *gs, PyObject *keep) {
  gpy_topology *o = PyObject_New(gpy_topology, &gpy_topology_type);
  if (o == NULL) {
    gangs tmp = *gs;
    gangs_close(&tmp);
    return NULL;
  }
  o->gs = *gs;
  o->keep = Py_XNewRef(keep);
  return (PyObject *)o;
}

static gang_t *field(gpy_topology *o, int i) {
  gang_t *f[6] = {o->gs.root, o->gs.dp, o->gs.rdp,
                  o->gs.sdp,  o->gs.tp, o->gs.pp};
  return i >= 0 && i < 6 ? f[i] : NULL;
}

/* handles() -> (root, dp, rdp, sdp, tp, pp) as ints, to match identities */
static PyObject *t_handles(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_topology *o = (gpy_topology *)self;
  PyObject *t = PyTuple_New(6);
  for (int i = 0; t != NULL && i < 6; i++) {
    PyObject *v = PyLong_FromVoidPtr(field(o, i));
    if (v == NULL)
      Py_CLEAR(t);
    else
      PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

/* wrap(index, type) -> a gang of `type` borrowing field `index` */
static PyObject *t_wrap(PyObject *self, PyObject *args) {
  int i;
  PyTypeObject *type;
  if (!PyArg_ParseTuple(args, "iO!", &i, &PyType_Type, &type))
    return NULL;
  if (!PyType_IsSubtype(type, &gpy_gang_type))
    return PyErr_Format(PyExc_TypeError, "not a gang type");
  gang_t *g = field((gpy_topology *)self, i);
  if (g == NULL)
    Py_RETURN_NONE;
  return gpy_gang_wrap(type, g, 0, self);
}

static PyMethodDef topology_methods[] = {
    {"handles", t_handles, METH_NOARGS, NULL},
    {"wrap", t_wrap, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject gpy_topology_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang._Topology",
    .tp_basicsize = sizeof(gpy_topology),
    .tp_dealloc = (destructor)topology_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The gangs struct of a topology (gangs_close at the end).",
    .tp_methods = topology_methods,
};

static PyObject *f_create_fake_gangs(PyObject *mod, PyObject *dev) {
  (void)mod;
  gang_device d = {GANG_DEVICE_CPU, 0};
  if (dev != Py_None && gpy_device_parse(dev, &d) < 0)
    return NULL;
  gangs gs;
  gang_status st = gangs_create_fake(d, &gs);
  if (st != GANG_OK)
    return gpy_raise(st, "gangs_create_fake");
  return topology_new(&gs, NULL);
}

static PyObject *f_create_parallel_gangs(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *root;
  int tp, pp;
  if (!PyArg_ParseTuple(args, "O!ii", &gpy_gang_type, &root, &tp, &pp))
    return NULL;
  gang_t *g = gpy_gang_handle(root);
  if (g == NULL)
    return NULL;
  gangs gs;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gangs_create_parallel(g, tp, pp, &gs);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gangs_create_parallel");
  return topology_new(&gs, root);
}

/* create_fsdp_gangs(handles, keep, k): `handles` are the six gang objects
 * of the input Gangs (which need not come from a _Topology). */
static PyObject *f_create_fsdp_gangs(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *fields, *keep;
  int k;
  if (!PyArg_ParseTuple(args, "O!Oi", &PyTuple_Type, &fields, &keep, &k))
    return NULL;
  if (PyTuple_GET_SIZE(fields) != 6)
    return PyErr_Format(PyExc_TypeError, "six gangs expected");
  gang_t *h[6];
  for (int i = 0; i < 6; i++) {
    PyObject *f = PyTuple_GET_ITEM(fields, i);
    if (!PyObject_TypeCheck(f, &gpy_gang_type))
      return PyErr_Format(PyExc_TypeError, "field %d is not a gang", i);
    if ((h[i] = gpy_gang_handle(f)) == NULL)
      return NULL;
  }
  gangs in = {h[0], h[1], h[2], h[3], h[4], h[5], NULL}, out;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gangs_create_fsdp(&in, k, &out);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gangs_create_fsdp");
  return topology_new(&out, keep);
}

static PyObject *f_push_current(PyObject *mod, PyObject *fields) {
  (void)mod;
  if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 6)
    return PyErr_Format(PyExc_TypeError, "six gangs expected");
  gang_t *h[6];
  for (int i = 0; i < 6; i++) {
    PyObject *f = PyTuple_GET_ITEM(fields, i);
    h[i] = PyObject_TypeCheck(f, &gpy_gang_type) ? ((gpy_gang *)f)->g : NULL;
  }
  gangs gs = {h[0], h[1], h[2], h[3], h[4], h[5], NULL};
  gang_status st = gangs_push_current(&gs);
  if (st != GANG_OK)
    return gpy_raise(st, "gangs_push_current");
  Py_RETURN_NONE;
}

static PyObject *f_pop_current(PyObject *mod, PyObject *noargs) {
  (void)mod;
  (void)noargs;
  gang_status st = gangs_pop_current();
  if (st != GANG_OK)
    return gpy_raise(st, "gangs_pop_current");
  Py_RETURN_NONE;
}

/* ---- helpers that have a C form ------------------------------------------ */

static PyObject *f_broadcast_flag(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *gobj, *flag;
  int src;
  if (!PyArg_ParseTuple(args, "O!Oi", &gpy_gang_type, &gobj, &flag, &src))
    return NULL;
  gang_t *g = gpy_gang_handle(gobj);
  int v = PyObject_IsTrue(flag);
  if (g == NULL || v < 0)
    return NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_broadcast_flag(g, &v, src);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_broadcast_flag");
  return PyBool_FromLong(v);
}

static PyObject *f_all_sum(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *gobj, *value;
  if (!PyArg_ParseTuple(args, "O!O", &gpy_gang_type, &gobj, &value))
    return NULL;
  gang_t *g = gpy_gang_handle(gobj);
  if (g == NULL)
    return NULL;
  gang_status st;
  if (PyFloat_Check(value)) {
    double d = PyFloat_AS_DOUBLE(value);
    {
      PyThreadState *nogil_ = PyEval_SaveThread();
      st = gang_all_sum_f64(g, &d);
      PyEval_RestoreThread(nogil_);
    }
    if (st != GANG_OK)
      return gpy_raise(st, "gang_all_sum");
    return PyFloat_FromDouble(d);
  }
  long long v = PyLong_AsLongLong(value);
  if (v == -1 && PyErr_Occurred())
    return NULL;
  int64_t i = v;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_all_sum(g, &i);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_all_sum");
  return PyLong_FromLongLong(i);
}

/* ---- _Mesh --------------------------------------------------------------- */

typedef struct gpy_mesh {
  PyObject_HEAD gang_mesh *m;
  PyObject *gang; /* the gang the mesh is over (or None) */
} gpy_mesh;

static void mesh_dealloc(gpy_mesh *o) {
  gang_mesh_destroy(o->m);
  Py_CLEAR(o->gang);
  PyObject_Del(o);
}

static PyObject *mesh_wrap(gang_mesh *m, PyObject *gang) {
  gpy_mesh *o = PyObject_New(gpy_mesh, &gpy_mesh_type);
  if (o == NULL) {
    gang_mesh_destroy(m);
    return NULL;
  }
  o->m = m;
  o->gang = Py_NewRef(gang);
  return (PyObject *)o;
}

/* Fills a NULL-terminated array of UTF-8 names from a sequence; the
 * strings are borrowed from the sequence's items (kept alive by *keep). */
static int names_of(PyObject *names, int n, const char **out, PyObject **keep) {
  *keep = PySequence_Fast(names, "names must be a sequence of str");
  if (*keep == NULL)
    return -1;
  if (PySequence_Fast_GET_SIZE(*keep) != n) {
    PyErr_Format(PyExc_ValueError, "%d names expected", n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    out[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(*keep, i));
    if (out[i] == NULL)
      return -1;
  }
  return 0;
}

/* mesh_create(gang|None, shape, names|None, ranks|None) -> _Mesh */
static PyObject *f_mesh_create(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *gobj, *shape_o, *names_o, *ranks_o;
  if (!PyArg_ParseTuple(args, "OOOO", &gobj, &shape_o, &names_o, &ranks_o))
    return NULL;
  gang_t *g = NULL;
  if (gobj != Py_None) {
    if (!PyObject_TypeCheck(gobj, &gpy_gang_type))
      return PyErr_Format(PyExc_TypeError, "not a gang");
    if ((g = gpy_gang_handle(gobj)) == NULL)
      return NULL;
  }
  int shape[GANG_MESH_MAX_DIMS];
  PyObject *sh = PySequence_Fast(shape_o, "mesh_shape must be a sequence");
  if (sh == NULL)
    return NULL;
  Py_ssize_t nd = PySequence_Fast_GET_SIZE(sh);
  if (nd < 1 || nd > GANG_MESH_MAX_DIMS) {
    Py_DECREF(sh);
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                         "mesh_shape must have 1 to %d dimensions, not %zd",
                         GANG_MESH_MAX_DIMS, nd);
  }
  for (Py_ssize_t i = 0; i < nd; i++) {
    shape[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(sh, i));
    if (shape[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(sh);
      return NULL;
    }
  }
  Py_DECREF(sh);
  const char *names[GANG_MESH_MAX_DIMS];
  PyObject *keep = NULL;
  if (names_o != Py_None && names_of(names_o, (int)nd, names, &keep) < 0) {
    Py_XDECREF(keep);
    return NULL;
  }
  int *ranks = NULL;
  PyObject *rk = NULL;
  if (ranks_o != Py_None) {
    rk = PySequence_Fast(ranks_o, "ranks must be a sequence");
    Py_ssize_t n = rk ? PySequence_Fast_GET_SIZE(rk) : 0;
    ranks = rk ? PyMem_Calloc(n ? (size_t)n : 1, sizeof *ranks) : NULL;
    for (Py_ssize_t i = 0; ranks && i < n; i++)
      ranks[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(rk, i));
    if (ranks == NULL || PyErr_Occurred()) {
      PyMem_Free(ranks);
      Py_XDECREF(rk);
      Py_XDECREF(keep);
      return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
  }
  gang_mesh *m = NULL;
  gang_status st;
  const char *const *np = names_o != Py_None ? names : NULL;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = ranks ? gang_mesh_create_from_ranks(g, ranks, shape, (int)nd, np, &m)
               : gang_mesh_create(g, shape, (int)nd, np, &m);
    PyEval_RestoreThread(nogil_);
  }
  PyMem_Free(ranks);
  Py_XDECREF(rk);
  Py_XDECREF(keep);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_mesh_create");
  return mesh_wrap(m, gobj);
}

static PyObject *ms_info(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gang_mesh *m = ((gpy_mesh *)self)->m;
  int nd = gang_mesh_ndim(m);
  const int *shape = gang_mesh_shape(m);
  const char *const *names = gang_mesh_names(m);
  PyObject *sh = PyTuple_New(nd),
           *nm = names ? PyTuple_New(nd) : Py_NewRef(Py_None);
  for (int i = 0; sh && nm && i < nd; i++) {
    PyTuple_SET_ITEM(sh, i, PyLong_FromLong(shape[i]));
    if (names)
      PyTuple_SET_ITEM(nm, i, PyUnicode_FromString(names[i]));
  }
  int coord[GANG_MESH_MAX_DIMS];
  PyObject *co;
  if (gang_mesh_coordinate(m, coord)) {
    co = PyList_New(nd);
    for (int i = 0; co && i < nd; i++)
      PyList_SET_ITEM(co, i, PyLong_FromLong(coord[i]));
  } else {
    co = Py_NewRef(Py_None);
  }
  PyObject *ranks = Py_NewRef(Py_None);
  int n = gang_mesh_size(m);
  int *rk = PyMem_Calloc(n ? (size_t)n : 1, sizeof *rk);
  if (rk && gang_mesh_ranks(m, rk) == GANG_OK) {
    Py_DECREF(ranks);
    ranks = PyList_New(n);
    for (int i = 0; ranks && i < n; i++)
      PyList_SET_ITEM(ranks, i, PyLong_FromLong(rk[i]));
  }
  gang_clear_error();
  PyMem_Free(rk);
  if (!sh || !nm || !co || !ranks) {
    Py_XDECREF(sh);
    Py_XDECREF(nm);
    Py_XDECREF(co);
    Py_XDECREF(ranks);
    return NULL;
  }
  return Py_BuildValue("{s:N,s:N,s:N,s:N}", "shape", sh, "names", nm,
                       "coordinate", co, "ranks", ranks);
}

/* group(dim: int | str | None, type) -> gang of `type` or None outside */
static PyObject *ms_group(PyObject *self, PyObject *args) {
  PyObject *dim;
  PyTypeObject *type;
  if (!PyArg_ParseTuple(args, "OO!", &dim, &PyType_Type, &type))
    return NULL;
  gang_mesh *m = ((gpy_mesh *)self)->m;
  gang_t *g = NULL;
  gang_status st;
  if (PyLong_Check(dim))
    st = gang_mesh_group_at(m, (int)PyLong_AsLong(dim), &g);
  else if (dim == Py_None)
    st = gang_mesh_group(m, NULL, &g);
  else {
    const char *s = PyUnicode_AsUTF8(dim);
    if (s == NULL)
      return NULL;
    st = gang_mesh_group(m, s, &g);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_mesh_group");
  if (g == NULL)
    Py_RETURN_NONE;
  return gpy_gang_wrap(type, g, 0, self);
}

static PyObject *ms_local_rank(PyObject *self, PyObject *dim) {
  gang_mesh *m = ((gpy_mesh *)self)->m;
  const char *s = NULL;
  if (dim != Py_None && (s = PyUnicode_AsUTF8(dim)) == NULL)
    return NULL;
  gang_clear_error();
  int r = gang_mesh_local_rank(m, s);
  if (r < 0 && gang_last_status() != GANG_OK)
    return gpy_raise(gang_last_status(), "gang_mesh_local_rank");
  return PyLong_FromLong(r);
}

static PyObject *ms_slice(PyObject *self, PyObject *names_o) {
  gang_mesh *m = ((gpy_mesh *)self)->m;
  PyObject *seq = PySequence_Fast(names_o, "names must be a sequence");
  if (seq == NULL)
    return NULL;
  int n = (int)PySequence_Fast_GET_SIZE(seq);
  Py_DECREF(seq);
  if (n < 1 || n > GANG_MESH_MAX_DIMS)
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT, "cannot slice %d names", n);
  const char *names[GANG_MESH_MAX_DIMS];
  PyObject *keep = NULL;
  if (names_of(names_o, n, names, &keep) < 0) {
    Py_XDECREF(keep);
    return NULL;
  }
  gang_mesh *out = NULL;
  gang_status st = gang_mesh_slice(m, names, n, &out);
  Py_DECREF(keep);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_mesh_slice");
  return mesh_wrap(out, ((gpy_mesh *)self)->gang);
}

static PyObject *ms_flatten(PyObject *self, PyObject *args) {
  PyObject *name_o;
  PyTypeObject *type;
  if (!PyArg_ParseTuple(args, "OO!", &name_o, &PyType_Type, &type))
    return NULL;
  const char *name = NULL;
  if (name_o != Py_None && (name = PyUnicode_AsUTF8(name_o)) == NULL)
    return NULL;
  gang_t *g = NULL;
  gang_status st;
  gang_mesh *m = ((gpy_mesh *)self)->m;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_mesh_flatten(m, name, &g);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_mesh_flatten");
  if (g == NULL)
    Py_RETURN_NONE;
  return gpy_gang_wrap(type, g, 0, self);
}

static PyMethodDef mesh_methods[] = {
    {"info", ms_info, METH_NOARGS, NULL},
    {"group", ms_group, METH_VARARGS, NULL},
    {"local_rank", ms_local_rank, METH_O, NULL},
    {"slice", ms_slice, METH_O, NULL},
    {"flatten", ms_flatten, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject gpy_mesh_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang._Mesh",
    .tp_basicsize = sizeof(gpy_mesh),
    .tp_dealloc = (destructor)mesh_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A gang_mesh handle; see gang.DeviceMesh.",
    .tp_methods = mesh_methods,
};

PyMethodDef gpy_topo_methods[] = {
    {"create_fake_gangs", f_create_fake_gangs, METH_O, "gangs_create_fake"},
    {"create_parallel_gangs", f_create_parallel_gangs, METH_VARARGS,
     "gangs_create_parallel"},
    {"create_fsdp_gangs", f_create_fsdp_gangs, METH_VARARGS,
     "gangs_create_fsdp"},
    {"push_current", f_push_current, METH_O, "gangs_push_current"},
    {"pop_current", f_pop_current, METH_NOARGS, "gangs_pop_current"},
    {"broadcast_flag", f_broadcast_flag, METH_VARARGS, "gang_broadcast_flag"},
    {"all_sum", f_all_sum, METH_VARARGS, "gang_all_sum / gang_all_sum_f64"},
    {"mesh_create", f_mesh_create, METH_VARARGS,
     "gang_mesh_create / gang_mesh_create_from_ranks"},
    {NULL, NULL, 0, NULL},
};

int gpy_topo_init(PyObject *m) {
  if (PyType_Ready(&gpy_topology_type) < 0 || PyType_Ready(&gpy_mesh_type) < 0)
    return -1;
  return PyModule_AddFunctions(m, gpy_topo_methods);
}
