/* Arguments of the collectives (gang_obj.c): vectorcall parsing with no
 * tuple or dict built, the conversions and the checks of buffers against
 * each other, each raising gang's error naming the argument. */
#include <string.h>
#include <strings.h>

#include "gangmodule.h"

/* Matches positional args then keywords against `names` (NULL-terminated);
 * out[i] stays NULL when not given. The first `required` are mandatory. */
int gpy_parse(const char *fn, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames, const char *const *names, int required,
              PyObject **out) {
  int n = 0;
  while (names[n] != NULL)
    n++;
  if (nargs > n) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)",
                 fn, n, nargs);
    return -1;
  }
  for (int i = 0; i < n; i++)
    out[i] = i < nargs ? args[i] : NULL;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; k++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, k);
    int found = -1;
    for (int i = 0; i < n && found < 0; i++)
      if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
        found = i;
    if (found < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword '%U'", fn,
                   key);
      return -1;
    }
    if (out[found] != NULL) {
      PyErr_Format(PyExc_TypeError, "%s() got '%s' twice", fn, names[found]);
      return -1;
    }
    out[found] = args[nargs + k];
  }
  for (int i = 0; i < required; i++)
    if (out[i] == NULL) {
      PyErr_Format(PyExc_TypeError, "%s() missing argument '%s'", fn, names[i]);
      return -1;
    }
  return 0;
}

int gpy_as_int(PyObject *o, int dflt, const char *what, int *out) {
  if (o == NULL || o == Py_None) {
    *out = dflt;
    return 0;
  }
  long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    gpy_raise_fmt(GANG_INVALID_ARGUMENT, "`%s` must be an integer, not %s",
                  what, Py_TYPE(o)->tp_name);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int gpy_as_async(PyObject *o) { return o != NULL && PyObject_IsTrue(o); }

/* The reduce operation: a ReduceOperation (an IntEnum), an int 1..5, its
 * name ("sum", "MEAN"), or torch.distributed's ReduceOp (AVG = MEAN). */
int gpy_as_op(PyObject *o, gang_reduce_op *op) {
  if (o == NULL || o == Py_None) {
    *op = GANG_SUM;
    return 0;
  }
  long v = -1;
  if (PyLong_Check(o)) {
    v = PyLong_AsLong(o);
  } else if (PyUnicode_Check(o)) {
    static const char *const nm[] = {"",        "sum", "mean",
                                     "product", "min", "max"};
    const char *s = PyUnicode_AsUTF8(o);
    for (int i = 1; s && i <= 5; i++)
      if (strcasecmp(s, nm[i]) == 0)
        v = i;
  } else if (strncmp(Py_TYPE(o)->tp_name, "torch.", 6) == 0) {
    /* torch.distributed.ReduceOp (its .op) or ReduceOp.RedOpType: SUM 0,
     * AVG 1, PRODUCT 2, MIN 3, MAX 4 -- gang's order, from 0. */
    PyObject *e = PyObject_HasAttrString(o, "op")
                      ? PyObject_GetAttrString(o, "op")
                      : Py_NewRef(o);
    PyObject *val = e != NULL ? PyObject_GetAttrString(e, "value") : NULL;
    if (val != NULL && PyLong_Check(val)) {
      long t = PyLong_AsLong(val);
      v = t >= 0 && t <= 4 ? t + 1 : -1;
    }
    Py_XDECREF(val);
    Py_XDECREF(e);
    PyErr_Clear();
  } else {
    PyObject *val = PyObject_GetAttrString(o, "value");
    if (val != NULL && PyLong_Check(val))
      v = PyLong_AsLong(val);
    Py_XDECREF(val);
    PyErr_Clear();
  }
  if (v < 1 || v > 5) {
    PyErr_Clear();
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`op` must be a ReduceOperation (SUM, MEAN, PRODUCT, MIN, "
                  "MAX), not %R",
                  o);
    return -1;
  }
  *op = (gang_reduce_op)v;
  return 0;
}

int gpy_check_rank(gang_t *g, int src, const char *arg) {
  if (src < 0 || src >= gang_size(g)) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` must be in [0, %d) (a rank of this gang), but is %d",
                  arg, gang_size(g), src);
    return -1;
  }
  return 0;
}

int gpy_check_parts(const gpy_buf *out, const gpy_buf *in, size_t parts,
                    const char *out_name, const char *in_name) {
  if (out->dtype != in->dtype) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` (%s) and `%s` (%s) must have the same dtype", out_name,
                  gang_dtype_name(out->dtype), in_name,
                  gang_dtype_name(in->dtype));
    return -1;
  }
  if (out->count != in->count * parts) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` must hold %zu elements (%zu ranks x %zu of `%s`), "
                  "but holds %zu",
                  out_name, in->count * parts, parts, in->count, in_name,
                  out->count);
    return -1;
  }
  return 0;
}

int gpy_check_gather_shape(const gpy_buf *out, const gpy_buf *in, int size) {
  if (!out->has_view || !in->has_view || out->view.shape == NULL ||
      in->view.shape == NULL)
    return 0;
  if (out->view.ndim != in->view.ndim + 1) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`output_tensor` must have a shape that is compatible with "
                  "all-gather.");
    return -1;
  }
  if (out->view.shape[0] != size) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "Size of the first dimension of `output_tensor` must match "
                  "the number of processes in the gang (%d), but is %zd "
                  "instead.",
                  size, out->view.shape[0]);
    return -1;
  }
  return 0;
}
