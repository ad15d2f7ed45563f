/* Work: an async collective, as torch's Work (wait, is_completed).
 *
 * The work owns the buffers of its collective until the collective is
 * complete, so the arrays cannot be freed or resized under the library.
 * wait() may be called from any thread and from several at once: a lock
 * serialises the calls into gang_work_wait (one waiter in the library at a
 * time), the GIL is released while waiting, and the outcome is kept so a
 * second waiter gets the same result. Dropping an unfinished Work waits
 * for it instead of freeing it early, which in the C library would abort
 * the gang. */
#include <math.h>

#include "gangmodule.h"
#include "pythread.h"

typedef struct gpy_work {
  PyObject_HEAD gang_work *w;
  PyObject *gang;
  gpy_buf *bufs;
  int nbufs;
  void *extra; /* PyMem block freed with the buffers (pointer arrays) */
  PyThread_type_lock lock;
  int done;
  gang_status status;
  PyObject *detail; /* str, set when done with an error */
  PyObject *weaklist;
} gpy_work;

PyObject *gpy_work_new(PyObject *gang, gang_work *w, gpy_buf *bufs, int n,
                       void *extra) {
  gpy_work *o = PyObject_New(gpy_work, &gpy_work_type);
  gpy_buf *owned = n ? PyMem_Calloc((size_t)n, sizeof *owned) : NULL;
  PyThread_type_lock lock = PyThread_allocate_lock();
  if (o == NULL || (n && owned == NULL) || lock == NULL) {
    {
      PyThreadState *nogil_ = PyEval_SaveThread();
      gang_work_wait(w, -1);
      gang_work_free(w);
      PyEval_RestoreThread(nogil_);
    }
    for (int i = 0; i < n; i++)
      gpy_buf_release(&bufs[i]);
    PyMem_Free(owned);
    PyMem_Free(extra);
    if (lock)
      PyThread_free_lock(lock);
    if (o)
      PyObject_Del(o);
    return PyErr_NoMemory();
  }
  for (int i = 0; i < n; i++) {
    owned[i] = bufs[i];
    memset(&bufs[i], 0, sizeof bufs[i]);
  }
  o->w = w;
  o->gang = Py_NewRef(gang);
  o->bufs = owned;
  o->nbufs = n;
  o->extra = extra;
  o->lock = lock;
  o->done = 0;
  o->status = GANG_OK;
  o->detail = NULL;
  o->weaklist = NULL;
  return (PyObject *)o;
}

/* Called with the GIL and the lock held, once the library says done. */
static void complete(gpy_work *o, gang_status st) {
  o->done = 1;
  o->status = st;
  if (st != GANG_OK) {
    const char *d = gang_last_error();
    o->detail = PyUnicode_FromString(d && *d ? d : gang_strerror(st));
  }
  gang_work_free(o->w);
  o->w = NULL;
  for (int i = 0; i < o->nbufs; i++)
    gpy_buf_release(&o->bufs[i]);
  PyMem_Free(o->bufs);
  o->bufs = NULL;
  o->nbufs = 0;
  PyMem_Free(o->extra);
  o->extra = NULL;
}

static PyObject *result(gpy_work *o) {
  if (o->status == GANG_OK)
    Py_RETURN_TRUE;
  PyErr_Clear();
  return gpy_raise_fmt(o->status, "%U", o->detail);
}

/* wait(timeout=None) -> True, or raises the collective's error. timeout
 * in seconds; None means the gang's default deadline. A timeout breaks
 * the gang (GangTimeoutError), as in the C library. */
static PyObject *m_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
  gpy_work *o = (gpy_work *)self;
  PyObject *t = nargs > 0 ? args[0] : NULL;
  if (kwnames && PyTuple_GET_SIZE(kwnames) == 1 && nargs == 0 &&
      PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                       "timeout") == 0)
    t = args[0];
  else if ((kwnames && PyTuple_GET_SIZE(kwnames) > 0) || nargs > 1)
    return PyErr_Format(PyExc_TypeError, "wait(timeout=None)");
  int64_t ms = -1;
  if (t != NULL && t != Py_None) {
    /* torch passes a timedelta */
    PyObject *secs = PyObject_HasAttrString(t, "total_seconds")
                         ? PyObject_CallMethod(t, "total_seconds", NULL)
                         : Py_NewRef(t);
    if (secs == NULL)
      return NULL;
    double s = PyFloat_AsDouble(secs);
    Py_DECREF(secs);
    if (s == -1.0 && PyErr_Occurred())
      return NULL;
    ms = s <= 0 ? 0 : (int64_t)ceil(s * 1000.0);
  }
  if (o->done)
    return result(o);
  /* Another thread may be inside gang_work_wait: wait for the lock as long
   * as this caller would wait for the work. */
  PyLockStatus got;
  {
    PyThreadState *nogil_ = PyEval_SaveThread();
    got = PyThread_acquire_lock_timed(o->lock,
                                      ms < 0 ? -1 : (PY_TIMEOUT_T)ms * 1000, 0);
    PyEval_RestoreThread(nogil_);
  }
  if (got != PY_LOCK_ACQUIRED) {
    if (o->done)
      return result(o);
    return gpy_raise_fmt(GANG_TIMEOUT,
                         "Work.wait: not complete after %lld ms (another "
                         "thread is waiting on it)",
                         (long long)ms);
  }
  if (!o->done && ms == 0) {
    /* A zero timeout is a poll: gang_work_wait(w, 0) would time out and
     * break the gang, gang_work_test does not. */
    int done = 0;
    gang_status st = gang_work_test(o->w, &done);
    if (done)
      complete(o, st);
    PyThread_release_lock(o->lock);
    if (!done)
      return gpy_raise_fmt(GANG_TIMEOUT,
                           "Work.wait(0): not complete yet (the gang is "
                           "unaffected; is_completed() polls without "
                           "raising)");
    return result(o);
  }
  if (!o->done) {
    gang_status st;
    int done = 0;
    gang_work *w = o->w;
    {
      PyThreadState *nogil_ = PyEval_SaveThread();
      st = gang_work_wait(w, ms);
      if (st != GANG_OK)
        gang_work_test(w, &done);
      else
        done = 1;
      PyEval_RestoreThread(nogil_);
    }
    if (done)
      complete(o, st);
    else {
      PyThread_release_lock(o->lock);
      return gpy_raise(st, "gang_work_wait");
    }
  }
  PyThread_release_lock(o->lock);
  return result(o);
}

/* is_completed() -> bool: never blocks (gang_work_test). */
static PyObject *m_is_completed(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_work *o = (gpy_work *)self;
  if (o->done)
    Py_RETURN_TRUE;
  if (PyThread_acquire_lock(o->lock, NOWAIT_LOCK) != PY_LOCK_ACQUIRED)
    Py_RETURN_FALSE; /* a waiter holds it: not known to be done yet */
  if (!o->done) {
    int done = 0;
    gang_status st = gang_work_test(o->w, &done);
    if (done)
      complete(o, st);
  }
  PyThread_release_lock(o->lock);
  return PyBool_FromLong(o->done);
}

/* exception() -> the error of a completed work, or None. */
static PyObject *m_exception(PyObject *self, PyObject *noargs) {
  gpy_work *o = (gpy_work *)self;
  PyObject *r = m_is_completed(self, noargs);
  if (r == NULL)
    return NULL;
  Py_DECREF(r);
  if (!o->done || o->status == GANG_OK)
    Py_RETURN_NONE;
  result(o);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return value;
}

static void work_dealloc(gpy_work *o) {
  if (o->weaklist != NULL)
    PyObject_ClearWeakRefs((PyObject *)o);
  if (o->lock != NULL) {
    /* a waiter in another thread holds a reference, so no one holds the
     * lock here */
    if (!o->done && o->w != NULL) {
      gang_status st;
      gang_work *w = o->w;
      {
        PyThreadState *nogil_ = PyEval_SaveThread();
        st = gang_work_wait(w, -1);
        PyEval_RestoreThread(nogil_);
      }
      complete(o, st);
    }
    PyThread_free_lock(o->lock);
  }
  Py_CLEAR(o->detail);
  Py_CLEAR(o->gang);
  PyObject_Del(o);
}

static PyMethodDef work_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))m_wait, METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout=None) -> True: blocks (GIL released) until the collective "
     "completes; raises its error. Any thread. A timeout that passes breaks "
     "the gang (as in the C library), except 0, which only polls."},
    {"is_completed", m_is_completed, METH_NOARGS,
     "is_completed() -> bool, without blocking."},
    {"exception", m_exception, METH_NOARGS,
     "exception() -> the error of a failed, completed work, else None."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject gpy_work_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang.Work",
    .tp_basicsize = sizeof(gpy_work),
    .tp_dealloc = (destructor)work_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An async collective (async_op=True); see wait().",
    .tp_weaklistoffset = offsetof(gpy_work, weaklist),
    .tp_methods = work_methods,
};
