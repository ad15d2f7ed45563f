/* Fault tolerance (gang/ft.h) for the Python layer (gang/ft.py).
 *
 * _Lighthouse owns a gang_lighthouse (gang_lighthouse_stop at close or
 * dealloc). _Manager owns a gang_manager and everything it borrows: the
 * group gang object it was created over, the buffers registered as state
 * (held as gpy_bufs, so numpy cannot free or move them while the manager
 * may write into them), and the Python object of its managed gang, whose
 * handle the manager owns and which close() therefore closes too.
 *
 * The gang implementations (reconfigurable, error-swallowing, dummy) are
 * ordinary gang_t handles, so they are _Gang objects of the classes the
 * Python layer passes in; the module functions here create and configure
 * them. Every call that can block releases the GIL. */
#include <string.h>

#include "gang/ft.h"
#include "gangmodule.h"

static int64_t ms_of(double s) { return s <= 0 ? -1 : (int64_t)(s * 1000.0); }

/* ---- _Lighthouse ------------------------------------------------------------
 */

typedef struct gpy_lighthouse {
  PyObject_HEAD gang_lighthouse *lh;
} gpy_lighthouse;

static PyTypeObject gpy_lighthouse_type;

static void lh_stop(gpy_lighthouse *o) {
  gang_lighthouse *lh = o->lh;
  o->lh = NULL;
  if (lh != NULL) {
    PyThreadState *nogil_ = PyEval_SaveThread();
    gang_lighthouse_stop(lh);
    PyEval_RestoreThread(nogil_);
  }
}

static void lh_dealloc(gpy_lighthouse *o) {
  lh_stop(o);
  PyObject_Del(o);
}

static PyObject *lh_m_stop(PyObject *self, PyObject *noargs) {
  (void)noargs;
  lh_stop((gpy_lighthouse *)self);
  Py_RETURN_NONE;
}

static gang_lighthouse *lh_handle(PyObject *self) {
  gpy_lighthouse *o = (gpy_lighthouse *)self;
  if (o->lh == NULL)
    gpy_raise_fmt(GANG_INVALID_USAGE, "the lighthouse is shut down");
  return o->lh;
}

static PyObject *lh_get_port(PyObject *self, void *c) {
  (void)c;
  gang_lighthouse *lh = lh_handle(self);
  return lh ? PyLong_FromLong(gang_lighthouse_port(lh)) : NULL;
}

static PyObject *lh_get_http_port(PyObject *self, void *c) {
  (void)c;
  gang_lighthouse *lh = lh_handle(self);
  return lh ? PyLong_FromLong(gang_lighthouse_http_port(lh)) : NULL;
}

static PyObject *lh_get_closed(PyObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(((gpy_lighthouse *)self)->lh == NULL);
}

static PyMethodDef lh_methods[] = {
    {"stop", lh_m_stop, METH_NOARGS, "stop(): gang_lighthouse_stop."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lh_getset[] = {
    {"port", lh_get_port, NULL, "gang_lighthouse_port", NULL},
    {"http_port", lh_get_http_port, NULL,
     "gang_lighthouse_http_port (-1: no status page)", NULL},
    {"closed", lh_get_closed, NULL, "Whether stop() ran.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject gpy_lighthouse_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang._Lighthouse",
    .tp_basicsize = sizeof(gpy_lighthouse),
    .tp_dealloc = (destructor)lh_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A gang_lighthouse; see gang.ft.LighthouseServer.",
    .tp_methods = lh_methods,
    .tp_getset = lh_getset,
};

/* _lighthouse_start(host, port, min_replicas, join_timeout_ms,
 *                   quorum_tick_ms, heartbeat_timeout_ms, http_port,
 *                   secret, allow_kill) -> _Lighthouse */
static PyObject *py_lighthouse_start(PyObject *mod, PyObject *args,
                                     PyObject *kw) {
  (void)mod;
  static char *names[] = {"host",           "port",
                          "min_replicas",   "join_timeout_ms",
                          "quorum_tick_ms", "heartbeat_timeout_ms",
                          "http_port",      "secret",
                          "allow_kill",     NULL};
  gang_lighthouse_options o = GANG_LIGHTHOUSE_OPTIONS_INIT;
  long long join = 0, tick = 0, hb = 0;
  int allow_kill = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "zi|iLLLizp:_lighthouse_start",
                                   names, &o.host, &o.port, &o.min_replicas,
                                   &join, &tick, &hb, &o.http_port, &o.secret,
                                   &allow_kill))
    return NULL;
  o.allow_kill = allow_kill != 0;
  o.join_timeout_ms = join;
  o.quorum_tick_ms = tick;
  o.heartbeat_timeout_ms = hb;
  gpy_lighthouse *obj = PyObject_New(gpy_lighthouse, &gpy_lighthouse_type);
  if (obj == NULL)
    return NULL;
  obj->lh = NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_lighthouse_start(&o, &obj->lh);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK) {
    Py_DECREF(obj);
    return gpy_raise(st, "gang_lighthouse_start");
  }
  return (PyObject *)obj;
}

/* ---- _Manager ---------------------------------------------------------------
 */

typedef struct gpy_manager {
  PyObject_HEAD gang_manager *m;
  PyObject *group;   /* the group's gang object (borrowed by m), or NULL */
  PyObject *managed; /* the managed gang's object, once asked for */
  gpy_buf *states;   /* registered buffers, held for m's life */
  int nstates;
  int busy; /* calls running with the GIL released */
} gpy_manager;

static PyTypeObject gpy_manager_type;

static gang_manager *mgr_handle(PyObject *self) {
  gpy_manager *o = (gpy_manager *)self;
  if (o->m == NULL)
    gpy_raise_fmt(GANG_INVALID_USAGE, "the manager is shut down");
  return o->m;
}

/* Closes the managed gang's object: its handle is the manager's. */
static void mgr_drop_managed(gpy_manager *o) {
  if (o->managed != NULL) {
    gpy_gang *gg = (gpy_gang *)o->managed;
    gg->g = NULL;
    Py_CLEAR(gg->owner);
    Py_CLEAR(o->managed);
  }
}

static void mgr_close(gpy_manager *o) {
  gang_manager *m = o->m;
  o->m = NULL;
  mgr_drop_managed(o);
  if (m != NULL) {
    PyThreadState *nogil_ = PyEval_SaveThread();
    gang_manager_destroy(m);
    PyEval_RestoreThread(nogil_);
  }
  for (int i = 0; i < o->nstates; i++)
    gpy_buf_release(&o->states[i]);
  PyMem_Free(o->states);
  o->states = NULL;
  o->nstates = 0;
  Py_CLEAR(o->group);
}

static int mgr_traverse(gpy_manager *o, visitproc visit, void *arg) {
  Py_VISIT(o->group);
  Py_VISIT(o->managed);
  for (int i = 0; i < o->nstates; i++)
    Py_VISIT(o->states[i].owner);
  return 0;
}

static int mgr_clear(gpy_manager *o) {
  mgr_drop_managed(o);
  return 0;
}

static void mgr_dealloc(gpy_manager *o) {
  PyObject_GC_UnTrack(o);
  mgr_close(o);
  PyObject_GC_Del(o);
}

static PyObject *mgr_m_close(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_manager *o = (gpy_manager *)self;
  if (o->busy > 0)
    return gpy_raise_fmt(GANG_INVALID_USAGE,
                         "the manager is in use by another thread (%d calls "
                         "running); close it when they have returned",
                         o->busy);
  mgr_close(o);
  Py_RETURN_NONE;
}

/* Runs `call` on m with the GIL released, counted in o->busy. */
#define MGR_NOGIL(o, call) GPY_NOGIL_COUNTED((o)->busy, call)

/* register_state(name, buffer): the buffer is held until close. */
static PyObject *mgr_register_state(PyObject *self, PyObject *args) {
  gpy_manager *o = (gpy_manager *)self;
  const char *name;
  PyObject *obj;
  if (!PyArg_ParseTuple(args, "sO:register_state", &name, &obj))
    return NULL;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  gpy_buf b;
  if (gpy_buf_get(obj, GPY_BUF_WRITE | GPY_BUF_BYTES, "buffer", &b) < 0)
    return NULL;
  gpy_buf *grown =
      PyMem_Realloc(o->states, sizeof *grown * (size_t)(o->nstates + 1));
  if (grown == NULL) {
    gpy_buf_release(&b);
    return PyErr_NoMemory();
  }
  o->states = grown;
  gang_status st = gang_manager_register_state(m, name, b.ptr, b.nbytes);
  if (st != GANG_OK) {
    gpy_buf_release(&b);
    return gpy_raise(st, "gang_manager_register_state");
  }
  o->states[o->nstates++] = b;
  Py_RETURN_NONE;
}

static PyObject *mgr_start_quorum(PyObject *self, PyObject *args) {
  gpy_manager *o = (gpy_manager *)self;
  int allow_heal = 1, shrink_only = 0;
  if (!PyArg_ParseTuple(args, "|pp:start_quorum", &allow_heal, &shrink_only))
    return NULL;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  gang_status st;
  MGR_NOGIL(o, st = gang_manager_start_quorum(m, allow_heal, shrink_only));
  if (st != GANG_OK)
    return gpy_raise(st, "gang_manager_start_quorum");
  Py_RETURN_NONE;
}

static PyObject *mgr_wait_quorum(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_manager *o = (gpy_manager *)self;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  gang_status st;
  MGR_NOGIL(o, st = gang_manager_wait_quorum(m));
  if (st != GANG_OK)
    return gpy_raise(st, "gang_manager_wait_quorum");
  Py_RETURN_NONE;
}

/* all_reduce(tensor, op): in place; op an int 1..5 (gang_reduce_op). */
static PyObject *mgr_all_reduce(PyObject *self, PyObject *args) {
  gpy_manager *o = (gpy_manager *)self;
  PyObject *obj;
  int op = GANG_MEAN;
  if (!PyArg_ParseTuple(args, "O|i:all_reduce", &obj, &op))
    return NULL;
  if (op < GANG_SUM || op > GANG_MAX)
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                         "`reduce_op` must be a ReduceOperation (SUM, MEAN, "
                         "PRODUCT, MIN, MAX), not %d",
                         op);
  gang_manager *m = mgr_handle(self);
  gpy_buf b;
  if (m == NULL || gpy_buf_get(obj, GPY_BUF_WRITE, "tensor", &b) < 0)
    return NULL;
  gang_status st;
  MGR_NOGIL(o, st = gang_manager_all_reduce(m, b.ptr, b.count, b.dtype,
                                            (gang_reduce_op)op));
  gpy_buf_release(&b);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_manager_all_reduce");
  Py_RETURN_NONE;
}

static PyObject *mgr_should_commit(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_manager *o = (gpy_manager *)self;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  bool commit = false;
  gang_status st;
  MGR_NOGIL(o, st = gang_manager_should_commit(m, &commit));
  if (st != GANG_OK)
    return gpy_raise(st, "gang_manager_should_commit");
  return PyBool_FromLong(commit);
}

/* report_error(status, detail) */
static PyObject *mgr_report_error(PyObject *self, PyObject *args) {
  int st;
  const char *detail = NULL;
  if (!PyArg_ParseTuple(args, "iz:report_error", &st, &detail))
    return NULL;
  if (st <= GANG_OK || st >= GPY_STATUS_COUNT)
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                         "`status` must be an error status (1..%d), not %d",
                         GPY_STATUS_COUNT - 1, st);
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  gang_manager_report_error(m, (gang_status)st, detail);
  Py_RETURN_NONE;
}

/* errored() -> None or (status, detail) */
static PyObject *mgr_errored(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  char detail[1024] = "";
  gang_status st = gang_manager_errored(m, detail, sizeof detail);
  if (st == GANG_OK)
    Py_RETURN_NONE;
  return Py_BuildValue("(is)", (int)st, detail);
}

/* participants(wait) -> int: with wait, after the current quorum (as
 * torchft's num_participants). */
static PyObject *mgr_participants(PyObject *self, PyObject *args) {
  gpy_manager *o = (gpy_manager *)self;
  int wait = 0;
  if (!PyArg_ParseTuple(args, "|p:participants", &wait))
    return NULL;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  if (wait)
    MGR_NOGIL(o, (void)gang_manager_wait_quorum(m));
  return PyLong_FromLong(gang_manager_participants(m));
}

static PyObject *mgr_last_timings(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  gang_manager_timings t;
  gang_manager_last_timings(m, &t);
  return Py_BuildValue("{s:d,s:d,s:d,s:L,s:L}", "quorum_ms", t.quorum_ms,
                       "configure_ms", t.configure_ms, "heal_ms", t.heal_ms,
                       "heal_bytes", (long long)t.heal_bytes, "error_ns",
                       (long long)t.error_ns);
}

/* gang(cls) -> the managed gang as an object of cls (a _Gang subclass),
 * the same object every time. */
static PyObject *mgr_gang(PyObject *self, PyObject *cls) {
  gpy_manager *o = (gpy_manager *)self;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return NULL;
  if (o->managed != NULL)
    return Py_NewRef(o->managed);
  if (!PyType_Check(cls) ||
      !PyType_IsSubtype((PyTypeObject *)cls, &gpy_gang_type)) {
    PyErr_SetString(PyExc_TypeError, "gang(cls): cls must be a Gang class");
    return NULL;
  }
  o->managed =
      gpy_gang_wrap((PyTypeObject *)cls, gang_manager_gang(m), 0, self);
  return Py_XNewRef(o->managed);
}

static PyObject *mgr_get_step(PyObject *self, void *c) {
  (void)c;
  gang_manager *m = mgr_handle(self);
  return m ? PyLong_FromLongLong(gang_manager_step(m)) : NULL;
}

static int mgr_set_step(PyObject *self, PyObject *value, void *c) {
  (void)c;
  gang_manager *m = mgr_handle(self);
  if (m == NULL)
    return -1;
  if (value == NULL || !PyLong_Check(value)) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT, "step must be an int");
    return -1;
  }
  long long step = PyLong_AsLongLong(value);
  if (step == -1 && PyErr_Occurred())
    return -1;
  gang_status st = gang_manager_set_step(m, step);
  if (st != GANG_OK) {
    gpy_raise(st, "gang_manager_set_step");
    return -1;
  }
  return 0;
}

static PyObject *mgr_get_quorum_id(PyObject *self, void *c) {
  (void)c;
  gang_manager *m = mgr_handle(self);
  return m ? PyLong_FromLongLong(gang_manager_quorum_id(m)) : NULL;
}

static PyObject *mgr_get_replica_rank(PyObject *self, void *c) {
  (void)c;
  gang_manager *m = mgr_handle(self);
  return m ? PyLong_FromLong(gang_manager_replica_rank(m)) : NULL;
}

static PyObject *mgr_get_replica_id(PyObject *self, void *c) {
  (void)c;
  gang_manager *m = mgr_handle(self);
  return m ? PyUnicode_FromString(gang_manager_replica_id(m)) : NULL;
}

static PyObject *mgr_get_closed(PyObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(((gpy_manager *)self)->m == NULL);
}

static PyMethodDef mgr_methods[] = {
    {"close", mgr_m_close, METH_NOARGS, "close(): gang_manager_destroy."},
    {"register_state", mgr_register_state, METH_VARARGS,
     "register_state(name, buffer): gang_manager_register_state."},
    {"start_quorum", mgr_start_quorum, METH_VARARGS,
     "start_quorum(allow_heal=True, shrink_only=False)"},
    {"wait_quorum", mgr_wait_quorum, METH_NOARGS, "wait_quorum()"},
    {"all_reduce", mgr_all_reduce, METH_VARARGS,
     "all_reduce(tensor, op=MEAN): gang_manager_all_reduce, in place."},
    {"should_commit", mgr_should_commit, METH_NOARGS,
     "should_commit() -> bool"},
    {"report_error", mgr_report_error, METH_VARARGS,
     "report_error(status, detail)"},
    {"errored", mgr_errored, METH_NOARGS,
     "errored() -> None or (status, detail)"},
    {"participants", mgr_participants, METH_VARARGS,
     "participants(wait=False) -> int"},
    {"last_timings", mgr_last_timings, METH_NOARGS,
     "last_timings() -> dict: gang_manager_last_timings"},
    {"gang", mgr_gang, METH_O, "gang(cls) -> the managed gang"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mgr_getset[] = {
    {"step", mgr_get_step, mgr_set_step,
     "gang_manager_step (set: gang_manager_set_step)", NULL},
    {"quorum_id", mgr_get_quorum_id, NULL, "gang_manager_quorum_id", NULL},
    {"replica_rank", mgr_get_replica_rank, NULL, "gang_manager_replica_rank",
     NULL},
    {"replica_id", mgr_get_replica_id, NULL, "gang_manager_replica_id", NULL},
    {"closed", mgr_get_closed, NULL, "Whether close() ran.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject gpy_manager_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang._Manager",
    .tp_basicsize = sizeof(gpy_manager),
    .tp_dealloc = (destructor)mgr_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A gang_manager; see gang.ft.Manager.",
    .tp_traverse = (traverseproc)mgr_traverse,
    .tp_clear = (inquiry)mgr_clear,
    .tp_methods = mgr_methods,
    .tp_getset = mgr_getset,
};

/* _manager_create(lighthouse, name, group, min_replica_size, timeout_ms,
 *                 quorum_timeout_ms, heartbeat_ms, max_retries, init_sync)
 * -> _Manager. Collective over group. */
static PyObject *py_manager_create(PyObject *mod, PyObject *args,
                                   PyObject *kw) {
  (void)mod;
  static char *names[] = {"lighthouse",   "name",
                          "group",        "min_replica_size",
                          "timeout_ms",   "quorum_timeout_ms",
                          "heartbeat_ms", "max_retries",
                          "init_sync",    NULL};
  gang_manager_options o = GANG_MANAGER_OPTIONS_INIT;
  PyObject *group = Py_None;
  long long timeout = 0, qtimeout = 0, hb = 0;
  int init_sync = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "zz|OiLLLip:_manager_create",
                                   names, &o.lighthouse, &o.name, &group,
                                   &o.min_replica_size, &timeout, &qtimeout,
                                   &hb, &o.max_retries, &init_sync))
    return NULL;
  if (timeout > 0)
    o.timeout_ms = timeout;
  if (qtimeout > 0)
    o.quorum_timeout_ms = qtimeout;
  if (hb > 0)
    o.heartbeat_ms = hb;
  o.init_sync = init_sync != 0;
  if (o.min_replica_size < 1)
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                         "`min_replica_size` must be at least 1, not %d",
                         o.min_replica_size);
  if (group != Py_None) {
    if (!PyObject_TypeCheck(group, &gpy_gang_type))
      return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                           "`group` must be a Gang (this replica group's "
                           "ranks) or None, not %s",
                           Py_TYPE(group)->tp_name);
    o.group = gpy_gang_handle(group);
    if (o.group == NULL)
      return NULL;
  }
  gpy_manager *obj = PyObject_GC_New(gpy_manager, &gpy_manager_type);
  if (obj == NULL)
    return NULL;
  obj->m = NULL;
  obj->group = NULL;
  obj->managed = NULL;
  obj->states = NULL;
  obj->nstates = 0;
  obj->busy = 0;
  PyObject_GC_Track(obj);
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_manager_create(&o, &obj->m);
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK) {
    Py_DECREF(obj);
    return gpy_raise(st, "gang_manager_create");
  }
  if (group != Py_None)
    obj->group = Py_NewRef(group);
  return (PyObject *)obj;
}

/* ---- The gang implementations -----------------------------------------------
 */

static int gang_class(PyObject *cls) {
  if (!PyType_Check(cls) ||
      !PyType_IsSubtype((PyTypeObject *)cls, &gpy_gang_type)) {
    PyErr_SetString(PyExc_TypeError, "cls must be a Gang class");
    return -1;
  }
  return 0;
}

/* _ft_create(cls, timeout_s, baby) -> an unconfigured reconfigurable gang
 * (its communicator in a child process when baby). */
static PyObject *py_ft_create(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *cls;
  double timeout = 0;
  int baby = 0;
  if (!PyArg_ParseTuple(args, "O|dp:_ft_create", &cls, &timeout, &baby) ||
      gang_class(cls) < 0)
    return NULL;
  gang_options o = GANG_OPTIONS_INIT;
  if (timeout > 0)
    o.timeout_ms = ms_of(timeout);
  gang_t *g = NULL;
  gang_status st = baby ? gang_baby_create(&o, &g) : gang_ft_create(&o, &g);
  if (st != GANG_OK)
    return gpy_raise(st, baby ? "gang_baby_create" : "gang_ft_create");
  return gpy_gang_wrap((PyTypeObject *)cls, g, 1, NULL);
}

/* _ft_configure(gang, store_addr, rank, size, timeout_s) */
static PyObject *py_ft_configure(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *gobj;
  const char *addr;
  int rank, size;
  double timeout = 0;
  if (!PyArg_ParseTuple(args, "O!sii|d:_ft_configure", &gpy_gang_type, &gobj,
                        &addr, &rank, &size, &timeout))
    return NULL;
  gang_t *g = gpy_gang_handle(gobj);
  if (g == NULL)
    return NULL;
  gang_status st;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    st = gang_ft_configure(g, addr, rank, size, ms_of(timeout));
    PyEval_RestoreThread(nogil_);
  }
  if (st != GANG_OK)
    return gpy_raise(st, "gang_ft_configure");
  Py_RETURN_NONE;
}

static PyObject *py_ft_configured(PyObject *mod, PyObject *gobj) {
  (void)mod;
  if (!PyObject_TypeCheck(gobj, &gpy_gang_type)) {
    PyErr_SetString(PyExc_TypeError, "_ft_configured(gang)");
    return NULL;
  }
  gang_t *g = ((gpy_gang *)gobj)->g;
  return PyBool_FromLong(g != NULL && gang_ft_configured(g));
}

/* _dummy_create(cls, rank, size) */
static PyObject *py_dummy_create(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *cls;
  int rank, size;
  if (!PyArg_ParseTuple(args, "Oii:_dummy_create", &cls, &rank, &size) ||
      gang_class(cls) < 0)
    return NULL;
  gang_t *g = NULL;
  gang_status st = gang_create_dummy(rank, size, &g);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_create_dummy");
  return gpy_gang_wrap((PyTypeObject *)cls, g, 1, NULL);
}

/* _swallow_wrap(cls, inner) -> the wrapper, which takes inner's handle:
 * inner is closed afterwards. */
static PyObject *py_swallow_wrap(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *cls, *iobj;
  if (!PyArg_ParseTuple(args, "OO:_swallow_wrap", &cls, &iobj) ||
      gang_class(cls) < 0)
    return NULL;
  if (!PyObject_TypeCheck(iobj, &gpy_gang_type))
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT, "`pg` must be a Gang, not %s",
                         Py_TYPE(iobj)->tp_name);
  gpy_gang *inner = (gpy_gang *)iobj;
  if (gpy_gang_handle(iobj) == NULL)
    return NULL;
  if (!inner->owned)
    return gpy_raise_fmt(GANG_INVALID_USAGE,
                         "`pg` borrows its handle (a member of a topology or "
                         "a manager's gang); wrap a gang that owns its "
                         "handle");
  gang_t *g = NULL;
  gang_status st = gang_error_swallowing_wrap(inner->g, &g);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_error_swallowing_wrap");
  /* The handle is the wrapper's now (gpy_gang_wrap destroys it, and the
   * inner handle with it, if it fails). */
  inner->g = NULL;
  inner->owned = 0;
  return gpy_gang_wrap((PyTypeObject *)cls, g, 1, NULL);
}

/* _swallow_error(gang) -> None or (status, detail) */
static PyObject *py_swallow_error(PyObject *mod, PyObject *gobj) {
  (void)mod;
  if (!PyObject_TypeCheck(gobj, &gpy_gang_type)) {
    PyErr_SetString(PyExc_TypeError, "_swallow_error(gang)");
    return NULL;
  }
  gang_t *g = gpy_gang_handle(gobj);
  if (g == NULL)
    return NULL;
  char detail[1024] = "";
  gang_status st = gang_error_swallowing_error(g, detail, sizeof detail);
  if (st == GANG_OK)
    Py_RETURN_NONE;
  return Py_BuildValue("(is)", (int)st, detail);
}

/* _swallow_report(gang, status, detail) */
static PyObject *py_swallow_report(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *gobj;
  int st;
  const char *detail = NULL;
  if (!PyArg_ParseTuple(args, "O!iz:_swallow_report", &gpy_gang_type, &gobj,
                        &st, &detail))
    return NULL;
  if (st <= GANG_OK || st >= GPY_STATUS_COUNT)
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                         "`status` must be an error status (1..%d), not %d",
                         GPY_STATUS_COUNT - 1, st);
  gang_t *g = gpy_gang_handle(gobj);
  if (g == NULL)
    return NULL;
  gang_error_swallowing_report(g, (gang_status)st, detail);
  Py_RETURN_NONE;
}

static PyMethodDef ft_methods[] = {
    {"_lighthouse_start", (PyCFunction)(void (*)(void))py_lighthouse_start,
     METH_VARARGS | METH_KEYWORDS, "gang_lighthouse_start"},
    {"_manager_create", (PyCFunction)(void (*)(void))py_manager_create,
     METH_VARARGS | METH_KEYWORDS, "gang_manager_create"},
    {"_ft_create", py_ft_create, METH_VARARGS,
     "gang_ft_create (gang_baby_create when baby)"},
    {"_ft_configure", py_ft_configure, METH_VARARGS, "gang_ft_configure"},
    {"_ft_configured", py_ft_configured, METH_O, "gang_ft_configured"},
    {"_dummy_create", py_dummy_create, METH_VARARGS, "gang_create_dummy"},
    {"_swallow_wrap", py_swallow_wrap, METH_VARARGS,
     "gang_error_swallowing_wrap"},
    {"_swallow_error", py_swallow_error, METH_O, "gang_error_swallowing_error"},
    {"_swallow_report", py_swallow_report, METH_VARARGS,
     "gang_error_swallowing_report"},
    {NULL, NULL, 0, NULL},
};

int gpy_ft_init(PyObject *m) {
  if (PyType_Ready(&gpy_lighthouse_type) < 0 ||
      PyType_Ready(&gpy_manager_type) < 0 ||
      PyModule_AddObjectRef(m, "_Lighthouse",
                            (PyObject *)&gpy_lighthouse_type) < 0 ||
      PyModule_AddObjectRef(m, "_Manager", (PyObject *)&gpy_manager_type) < 0)
    return -1;
  return PyModule_AddFunctions(m, ft_methods);
}
