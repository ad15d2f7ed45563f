/* gang._gang.Store: a client of a gang store (gang/store.h), for Python
 * code that needs the rendezvous store itself (gang.ft's
 * create_store_client, torchft's). Every call releases the GIL. Keys are
 * str, values bytes (str is encoded as UTF-8). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <string.h>

#include "gang/store.h"
#include "gangmodule.h"

typedef struct {
  PyObject_HEAD gang_store *st;
  int busy; /* calls running with the GIL released */
} gpy_store;

static gang_store *handle(PyObject *self) {
  gpy_store *o = (gpy_store *)self;
  if (o->st == NULL)
    gpy_raise_fmt(GANG_INVALID_USAGE, "the store client is closed");
  return o->st;
}

#define NOGIL(o, call) GPY_NOGIL_COUNTED((o)->busy, call)

/* Bytes of a value argument: bytes-like or str. */
static int value_of(PyObject *v, Py_buffer *view, PyObject **tmp) {
  *tmp = NULL;
  if (PyUnicode_Check(v)) {
    *tmp = PyUnicode_AsUTF8String(v);
    if (*tmp == NULL)
      return -1;
    v = *tmp;
  }
  if (PyObject_GetBuffer(v, view, PyBUF_SIMPLE) < 0) {
    Py_XDECREF(*tmp);
    PyErr_Clear();
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "a store value is bytes, a bytes-like object or str, not "
                  "%s",
                  Py_TYPE(v)->tp_name);
    return -1;
  }
  return 0;
}

static void store_dealloc(gpy_store *o) {
  gang_store_close(o->st);
  o->st = NULL;
  Py_TYPE(o)->tp_free((PyObject *)o);
}

/* _store_connect(addr, timeout_s) -> Store */
PyObject *gpy_store_connect(PyObject *mod, PyObject *args) {
  (void)mod;
  const char *addr;
  double timeout = 0;
  if (!PyArg_ParseTuple(args, "s|d:_store_connect", &addr, &timeout))
    return NULL;
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  if (timeout > 0)
    o.timeout_ms = (int64_t)(timeout * 1000.0);
  gang_store *st = NULL;
  gang_status s;
  PyThreadState *nogil = PyEval_SaveThread();
  s = gang_store_connect(addr, &o, &st);
  PyEval_RestoreThread(nogil);
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_connect");
  gpy_store *obj = PyObject_New(gpy_store, &gpy_store_type);
  if (obj == NULL) {
    gang_store_close(st);
    return NULL;
  }
  obj->st = st;
  obj->busy = 0;
  return (PyObject *)obj;
}

static PyObject *st_set(PyObject *self, PyObject *args) {
  const char *key;
  PyObject *v, *tmp;
  if (!PyArg_ParseTuple(args, "sO:set", &key, &v))
    return NULL;
  gang_store *st = handle(self);
  Py_buffer b;
  if (st == NULL || value_of(v, &b, &tmp) < 0)
    return NULL;
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_set(st, key, b.buf, (size_t)b.len));
  PyBuffer_Release(&b);
  Py_XDECREF(tmp);
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_set");
  Py_RETURN_NONE;
}

static PyObject *st_get(PyObject *self, PyObject *args) {
  const char *key;
  if (!PyArg_ParseTuple(args, "s:get", &key))
    return NULL;
  gang_store *st = handle(self);
  if (st == NULL)
    return NULL;
  void *v = NULL;
  size_t n = 0;
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_get(st, key, &v, &n));
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_get");
  PyObject *r = PyBytes_FromStringAndSize(v, (Py_ssize_t)n);
  gang_store_free(v);
  return r;
}

static PyObject *st_add(PyObject *self, PyObject *args) {
  const char *key;
  long long delta;
  if (!PyArg_ParseTuple(args, "sL:add", &key, &delta))
    return NULL;
  gang_store *st = handle(self);
  if (st == NULL)
    return NULL;
  int64_t out = 0;
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_add(st, key, delta, &out));
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_add");
  return PyLong_FromLongLong(out);
}

static PyObject *st_compare_set(PyObject *self, PyObject *args) {
  const char *key;
  PyObject *e, *d, *te, *td;
  if (!PyArg_ParseTuple(args, "sOO:compare_set", &key, &e, &d))
    return NULL;
  gang_store *st = handle(self);
  Py_buffer be, bd;
  if (st == NULL || value_of(e, &be, &te) < 0)
    return NULL;
  if (value_of(d, &bd, &td) < 0) {
    PyBuffer_Release(&be);
    Py_XDECREF(te);
    return NULL;
  }
  void *cur = NULL;
  size_t n = 0;
  gang_status s;
  NOGIL((gpy_store *)self,
        s = gang_store_compare_set(st, key, be.buf, (size_t)be.len, bd.buf,
                                   (size_t)bd.len, &cur, &n));
  PyBuffer_Release(&be);
  PyBuffer_Release(&bd);
  Py_XDECREF(te);
  Py_XDECREF(td);
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_compare_set");
  PyObject *r = PyBytes_FromStringAndSize(cur, (Py_ssize_t)n);
  gang_store_free(cur);
  return r;
}

/* The keys of a list or tuple of str, as a C array borrowed from them. */
static const char **keys_of(PyObject *seq, Py_ssize_t *n) {
  PyObject *fast = PySequence_Fast(seq, "keys must be a list of str");
  if (fast == NULL)
    return NULL;
  *n = PySequence_Fast_GET_SIZE(fast);
  const char **keys = PyMem_Calloc((size_t)(*n > 0 ? *n : 1), sizeof *keys);
  for (Py_ssize_t i = 0; keys != NULL && i < *n; i++) {
    PyObject *k = PySequence_Fast_GET_ITEM(fast, i);
    keys[i] = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    if (keys[i] == NULL) {
      PyMem_Free(keys);
      keys = NULL;
      PyErr_Clear();
      gpy_raise_fmt(GANG_INVALID_ARGUMENT, "keys must be a list of str");
    }
  }
  Py_DECREF(fast); /* the str objects stay alive in the caller's list */
  return keys;
}

static PyObject *st_check(PyObject *self, PyObject *args) {
  PyObject *seq;
  if (!PyArg_ParseTuple(args, "O:check", &seq))
    return NULL;
  gang_store *st = handle(self);
  Py_ssize_t n = 0;
  const char **keys = st ? keys_of(seq, &n) : NULL;
  if (keys == NULL)
    return NULL;
  bool all = false;
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_check(st, keys, (size_t)n, &all));
  PyMem_Free(keys);
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_check");
  return PyBool_FromLong(all);
}

static PyObject *st_wait(PyObject *self, PyObject *args) {
  PyObject *seq;
  double timeout = -1;
  if (!PyArg_ParseTuple(args, "O|d:wait", &seq, &timeout))
    return NULL;
  gang_store *st = handle(self);
  Py_ssize_t n = 0;
  const char **keys = st ? keys_of(seq, &n) : NULL;
  if (keys == NULL)
    return NULL;
  int64_t ms = timeout < 0 ? -1 : (int64_t)(timeout * 1000.0);
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_wait(st, keys, (size_t)n, ms));
  PyMem_Free(keys);
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_wait");
  Py_RETURN_NONE;
}

static PyObject *st_delete(PyObject *self, PyObject *args) {
  const char *key;
  if (!PyArg_ParseTuple(args, "s:delete_key", &key))
    return NULL;
  gang_store *st = handle(self);
  if (st == NULL)
    return NULL;
  bool deleted = false;
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_delete(st, key, &deleted));
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_delete");
  return PyBool_FromLong(deleted);
}

static PyObject *st_num_keys(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gang_store *st = handle(self);
  if (st == NULL)
    return NULL;
  int64_t n = 0;
  gang_status s;
  NOGIL((gpy_store *)self, s = gang_store_num_keys(st, &n));
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_num_keys");
  return PyLong_FromLongLong(n);
}

static PyObject *st_set_timeout(PyObject *self, PyObject *args) {
  double timeout;
  if (!PyArg_ParseTuple(args, "d:set_timeout", &timeout))
    return NULL;
  gang_store *st = handle(self);
  if (st == NULL)
    return NULL;
  gang_status s = gang_store_set_timeout(
      st, timeout < 0 ? -1 : (int64_t)(timeout * 1000.0));
  if (s != GANG_OK)
    return gpy_raise(s, "gang_store_set_timeout");
  Py_RETURN_NONE;
}

static PyObject *st_close(PyObject *self, PyObject *noargs) {
  (void)noargs;
  gpy_store *o = (gpy_store *)self;
  if (o->busy > 0)
    return gpy_raise_fmt(GANG_INVALID_USAGE,
                         "the store client is in use by another thread");
  gang_store_close(o->st);
  o->st = NULL;
  Py_RETURN_NONE;
}

static PyMethodDef st_methods[] = {
    {"set", st_set, METH_VARARGS, "set(key, value): gang_store_set"},
    {"get", st_get, METH_VARARGS,
     "get(key) -> bytes: gang_store_get (waits for the key)"},
    {"add", st_add, METH_VARARGS, "add(key, delta) -> int: gang_store_add"},
    {"compare_set", st_compare_set, METH_VARARGS,
     "compare_set(key, expected, desired) -> bytes now stored"},
    {"check", st_check, METH_VARARGS, "check(keys) -> bool: all exist"},
    {"wait", st_wait, METH_VARARGS,
     "wait(keys, timeout_s=-1): gang_store_wait (< 0: the handle's)"},
    {"delete_key", st_delete, METH_VARARGS,
     "delete_key(key) -> bool: gang_store_delete"},
    {"num_keys", st_num_keys, METH_NOARGS, "num_keys() -> int"},
    {"set_timeout", st_set_timeout, METH_VARARGS,
     "set_timeout(seconds): gang_store_set_timeout (< 0: forever)"},
    {"close", st_close, METH_NOARGS, "close(): gang_store_close"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject gpy_store_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang.Store",
    .tp_basicsize = sizeof(gpy_store),
    .tp_dealloc = (destructor)store_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A client of a gang store (gang_store_connect).",
    .tp_methods = st_methods,
};
