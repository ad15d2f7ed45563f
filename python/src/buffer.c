/* From a Python object to (pointer, count, dtype) without copying.
 *
 * Three kinds of object are accepted, tried in this order:
 *   1. the buffer protocol (numpy arrays, bytearray, memoryview, array);
 *   2. __array_interface__ (numpy's protocol, for objects that offer only
 *      that);
 *   3. a torch CPU tensor, read through its own methods (data_ptr, dtype,
 *      numel, is_contiguous, device), so the package never imports torch.
 * Collectives run in place on the object's memory, so the checks are
 * strict: C-contiguous, a dtype gang reduces natively, native byte order,
 * writable when the collective writes. Each failure names the argument.
 * State registered with a manager is moved as bytes (GPY_BUF_BYTES): there
 * any element type is taken. */
#include <string.h>

#include "gangmodule.h"

static const struct {
  const char *name;
  gang_dtype dtype;
} dtype_names[] = {
    {"float32", GANG_FLOAT32}, {"float64", GANG_FLOAT64},
    {"float16", GANG_FLOAT16}, {"bfloat16", GANG_BFLOAT16},
    {"int8", GANG_INT8},       {"uint8", GANG_UINT8},
    {"int16", GANG_INT16},     {"int32", GANG_INT32},
    {"int64", GANG_INT64},     {"uint32", GANG_UINT32},
    {"uint64", GANG_UINT64},   {"bool", GANG_BOOL},
    {"float", GANG_FLOAT32},   {"double", GANG_FLOAT64},
    {"half", GANG_FLOAT16},    {"int", GANG_INT32},
    {"long", GANG_INT64},      {"short", GANG_INT16},
};

int gpy_dtype_from_name(const char *name) {
  if (strncmp(name, "torch.", 6) == 0)
    name += 6;
  for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
    if (strcmp(name, dtype_names[i].name) == 0)
      return (int)dtype_names[i].dtype;
  return -1;
}

/* struct-module format (as PEP 3118 buffers give it) to a gang dtype. */
static int dtype_from_format(const char *fmt, Py_ssize_t itemsize) {
  if (fmt == NULL)
    return itemsize == 1 ? GANG_UINT8 : -1;
  if (*fmt == '@' || *fmt == '=' || *fmt == '<')
    fmt++;
  else if (*fmt == '>' || *fmt == '!')
    return -2; /* big-endian */
  if (fmt[0] == '\0' || fmt[1] != '\0')
    return -1;
  int isint = 0, issigned = 0;
  switch (fmt[0]) {
  case 'f':
    return itemsize == 4 ? GANG_FLOAT32 : -1;
  case 'd':
    return itemsize == 8 ? GANG_FLOAT64 : -1;
  case 'e':
    return itemsize == 2 ? GANG_FLOAT16 : -1;
  case '?':
    return itemsize == 1 ? GANG_BOOL : -1;
  case 'b':
  case 'h':
  case 'i':
  case 'l':
  case 'q':
  case 'n':
    isint = issigned = 1;
    break;
  case 'B':
  case 'c':
  case 'H':
  case 'I':
  case 'L':
  case 'Q':
  case 'N':
    isint = 1;
    break;
  default:
    return -1;
  }
  if (!isint)
    return -1;
  switch (itemsize) {
  case 1:
    return issigned ? GANG_INT8 : GANG_UINT8;
  case 2:
    return issigned ? GANG_INT16 : -1;
  case 4:
    return issigned ? GANG_INT32 : GANG_UINT32;
  case 8:
    return issigned ? GANG_INT64 : GANG_UINT64;
  default:
    return -1;
  }
}

static int bad(const char *arg, const char *fmt, PyObject *what) {
  PyObject *msg = PyUnicode_FromFormat(fmt, what);
  if (msg != NULL) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT, "`%s` %U", arg, msg);
    Py_DECREF(msg);
  }
  return -1;
}

static int from_view(PyObject *obj, int mode, const char *arg, gpy_buf *b) {
  (void)obj;
  Py_buffer *v = &b->view;
  if ((mode & GPY_BUF_WRITE) && v->readonly) {
    gpy_buf_release(b);
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` is read-only, but the collective writes into it "
                  "(pass a writable array)",
                  arg);
    return -1;
  }
  if (!PyBuffer_IsContiguous(v, 'C')) {
    gpy_buf_release(b);
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` must be contiguous (C order); make a contiguous "
                  "copy first",
                  arg);
    return -1;
  }
  int dt = dtype_from_format(v->format, v->itemsize);
  if (dt < 0 && (mode & GPY_BUF_BYTES)) {
    b->ptr = v->buf;
    b->dtype = GANG_UINT8;
    b->nbytes = b->count = (size_t)v->len;
    return 0;
  }
  if (dt < 0) {
    PyObject *f = PyUnicode_FromString(v->format ? v->format : "B");
    gpy_buf_release(b);
    if (f != NULL) {
      bad(arg,
          dt == -2 ? "has a big-endian element type ('%U'); gang moves "
                     "native little-endian data"
                   : "has an element type gang does not reduce (buffer "
                     "format '%U'); use float16/32/64, bfloat16, "
                     "int8/16/32/64, uint8/32/64 or bool",
          f);
      Py_DECREF(f);
    }
    return -1;
  }
  b->ptr = v->buf;
  b->dtype = (gang_dtype)dt;
  b->nbytes = (size_t)v->len;
  b->count = v->itemsize > 0 ? (size_t)(v->len / v->itemsize) : 0;
  return 0;
}

/* __array_interface__: version 3 dict with data, typestr, shape, strides. */
static int from_array_interface(PyObject *ai, int mode, const char *arg,
                                gpy_buf *b) {
  if (!PyDict_Check(ai))
    return bad(arg, "has an __array_interface__ that is not a dict (%R)", ai);
  PyObject *data = PyDict_GetItemString(ai, "data");
  PyObject *typestr = PyDict_GetItemString(ai, "typestr");
  PyObject *shape = PyDict_GetItemString(ai, "shape");
  PyObject *strides = PyDict_GetItemString(ai, "strides");
  if (data == NULL || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 ||
      typestr == NULL || !PyUnicode_Check(typestr) || shape == NULL ||
      !PyTuple_Check(shape))
    return bad(arg,
               "has an __array_interface__ without data/typestr/shape "
               "(%R)",
               ai);
  const char *ts = PyUnicode_AsUTF8(typestr);
  if (ts == NULL)
    return -1;
  if (ts[0] == '>')
    return bad(arg, "is big-endian (typestr %R)", typestr);
  char kind = ts[1];
  long size = strtol(ts + 2, NULL, 10);
  int dt = -1;
  if (kind == 'f')
    dt = size == 4   ? GANG_FLOAT32
         : size == 8 ? GANG_FLOAT64
         : size == 2 ? GANG_FLOAT16
                     : -1;
  else if (kind == 'i')
    dt = size == 1   ? GANG_INT8
         : size == 2 ? GANG_INT16
         : size == 4 ? GANG_INT32
         : size == 8 ? GANG_INT64
                     : -1;
  else if (kind == 'u')
    dt = size == 1   ? GANG_UINT8
         : size == 4 ? GANG_UINT32
         : size == 8 ? GANG_UINT64
                     : -1;
  else if (kind == 'b')
    dt = size == 1 ? GANG_BOOL : -1;
  size_t esize = dt >= 0 ? gang_dtype_size((gang_dtype)dt) : (size_t)size;
  if (dt < 0 && (mode & GPY_BUF_BYTES) && size > 0)
    dt = GANG_UINT8; /* counted in bytes below */
  if (dt < 0)
    return bad(arg, "has an element type gang does not reduce (typestr %R)",
               typestr);
  if ((mode & GPY_BUF_WRITE) && PyObject_IsTrue(PyTuple_GET_ITEM(data, 1))) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` is read-only, but the collective writes into it", arg);
    return -1;
  }
  size_t count = 1;
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  for (Py_ssize_t i = 0; i < nd; i++) {
    long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (d < 0)
      return PyErr_Occurred() ? -1 : bad(arg, "has a negative shape %R", shape);
    count *= (size_t)d;
  }
  if (strides != NULL && strides != Py_None && count > 1) {
    /* Contiguous C order means each stride is the product to its right. */
    size_t expect = esize;
    for (Py_ssize_t i = nd - 1; i >= 0; i--) {
      long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
      long long s = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
      if (d > 1 && (size_t)s != expect) {
        gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                      "`%s` must be contiguous (C order)", arg);
        return -1;
      }
      expect *= (size_t)d;
    }
  }
  void *ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
  if (ptr == NULL && PyErr_Occurred())
    return -1;
  b->ptr = ptr;
  b->dtype = (gang_dtype)dt;
  b->nbytes = count * esize;
  b->count = dt == GANG_UINT8 ? b->nbytes : count;
  return 0;
}

/* Interned method and attribute names of the tensor path. */
static PyObject *s_data_ptr, *s_dtype, *s_numel, *s_is_contiguous, *s_device,
    *s_type, *s_array_interface, *s_is_cpu;
/* Types already read as tensors (torch.Tensor, nn.Parameter, ...): the
 * next object of one of them skips the probing for __array_interface__,
 * whose AttributeError alone costs more than the whole tensor path. */
#define TENSOR_TYPES 8
static PyTypeObject *tensor_types[TENSOR_TYPES];
/* dtype object (torch.float32, ...) -> gang dtype, filled as seen. */
static PyObject *tensor_dtypes;

static int intern_names(void) {
  if (s_data_ptr != NULL)
    return 0;
  s_data_ptr = PyUnicode_InternFromString("data_ptr");
  s_dtype = PyUnicode_InternFromString("dtype");
  s_numel = PyUnicode_InternFromString("numel");
  s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
  s_device = PyUnicode_InternFromString("device");
  s_type = PyUnicode_InternFromString("type");
  s_array_interface = PyUnicode_InternFromString("__array_interface__");
  s_is_cpu = PyUnicode_InternFromString("is_cpu");
  tensor_dtypes = PyDict_New();
  return s_data_ptr && s_dtype && s_numel && s_is_contiguous && s_device &&
                 s_type && s_array_interface && s_is_cpu && tensor_dtypes
             ? 0
             : -1;
}

static int tensor_dtype(PyObject *t, const char *arg) {
  PyObject *dt = PyObject_GetAttr(t, s_dtype);
  if (dt == NULL)
    return -1;
  PyObject *known = PyDict_GetItemWithError(tensor_dtypes, dt);
  if (known != NULL) {
    Py_DECREF(dt);
    return (int)PyLong_AsLong(known);
  }
  if (PyErr_Occurred()) {
    Py_DECREF(dt);
    return -1;
  }
  PyObject *name = PyObject_Str(dt);
  int code = -1;
  if (name != NULL) {
    const char *s = PyUnicode_AsUTF8(name);
    code = s ? gpy_dtype_from_name(s) : -1;
    if (code < 0 && s)
      bad(arg,
          "has an element type gang does not reduce (%R); use float16/32/64, "
          "bfloat16, int8/16/32/64, uint8 or bool",
          dt);
    Py_DECREF(name);
  }
  if (code >= 0) {
    PyObject *v = PyLong_FromLong(code);
    if (v == NULL || PyDict_SetItem(tensor_dtypes, dt, v) < 0)
      code = -1;
    Py_XDECREF(v);
  }
  Py_DECREF(dt);
  return code;
}

static int from_tensor(PyObject *t, int mode, const char *arg, gpy_buf *b) {
  /* is_cpu is a cheap flag; device.type builds a device object. */
  PyObject *flag = PyObject_GetAttr(t, s_is_cpu);
  if (flag == Py_True) {
    Py_DECREF(flag);
    goto cpu;
  }
  Py_XDECREF(flag);
  PyErr_Clear();
  PyObject *dev = PyObject_GetAttr(t, s_device);
  if (dev == NULL)
    return -1;
  PyObject *type = PyObject_GetAttr(dev, s_type);
  Py_DECREF(dev);
  if (type == NULL)
    return -1;
  int cpu = PyUnicode_Check(type) &&
            PyUnicode_CompareWithASCIIString(type, "cpu") == 0;
  if (!cpu) {
    gpy_raise_fmt(GANG_NOT_SUPPORTED,
                  "`%s` is on device %R; gang moves CPU memory only", arg,
                  type);
    Py_DECREF(type);
    return -1;
  }
  Py_DECREF(type);
cpu:;
  /* A sparse tensor has no dense memory to move (and torch's
   * is_contiguous raises on one). */
  PyObject *sp = PyObject_GetAttrString(t, "is_sparse");
  int sparse = sp != NULL && PyObject_IsTrue(sp) == 1;
  Py_XDECREF(sp);
  PyErr_Clear();
  if (sparse) {
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`%s` is a sparse tensor; gang moves dense memory (call "
                  ".to_dense() first)",
                  arg);
    return -1;
  }
  PyObject *r = PyObject_CallMethodNoArgs(t, s_is_contiguous);
  if (r == NULL)
    return -1;
  int contig = PyObject_IsTrue(r);
  Py_DECREF(r);
  if (contig != 1) {
    if (contig == 0)
      gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                    "`%s` must be contiguous; call .contiguous() first", arg);
    return -1;
  }
  int dt = tensor_dtype(t, arg);
  size_t esize = 0;
  if (dt < 0 && (mode & GPY_BUF_BYTES) &&
      PyErr_ExceptionMatches(gpy_error_class(GANG_INVALID_ARGUMENT))) {
    /* Any element type, as bytes. */
    PyErr_Clear();
    PyObject *es = PyObject_CallMethod(t, "element_size", NULL);
    if (es == NULL)
      return -1;
    esize = PyLong_AsSize_t(es);
    Py_DECREF(es);
    if (esize == (size_t)-1 && PyErr_Occurred())
      return -1;
    dt = GANG_UINT8;
  } else if (dt < 0) {
    return -1;
  } else {
    esize = gang_dtype_size((gang_dtype)dt);
  }
  PyObject *p = PyObject_CallMethodNoArgs(t, s_data_ptr);
  if (p == NULL)
    return -1;
  void *ptr = PyLong_AsVoidPtr(p);
  Py_DECREF(p);
  if (ptr == NULL && PyErr_Occurred())
    return -1;
  PyObject *n = PyObject_CallMethodNoArgs(t, s_numel);
  if (n == NULL)
    return -1;
  long long count = PyLong_AsLongLong(n);
  Py_DECREF(n);
  if (count < 0)
    return -1;
  b->ptr = ptr;
  b->dtype = (gang_dtype)dt;
  b->nbytes = (size_t)count * esize;
  b->count = dt == GANG_UINT8 ? b->nbytes : (size_t)count;
  Py_INCREF(t);
  b->owner = t;
  return 0;
}

int gpy_buf_get(PyObject *obj, int mode, const char *arg, gpy_buf *b) {
  memset(b, 0, sizeof *b);
  if (PyObject_CheckBuffer(obj)) {
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_RECORDS_RO) < 0) {
      /* An exporter that refuses strided access (non-contiguous data) */
      PyErr_Clear();
      if (PyObject_GetBuffer(obj, &b->view, PyBUF_FULL_RO) < 0)
        return -1;
    }
    b->has_view = 1;
    return from_view(obj, mode, arg, b);
  }
  if (intern_names() < 0)
    return -1;
  for (int i = 0; i < TENSOR_TYPES && tensor_types[i] != NULL; i++)
    if (Py_TYPE(obj) == tensor_types[i])
      return from_tensor(obj, mode, arg, b);
  PyObject *ai = PyObject_GetAttr(obj, s_array_interface);
  if (ai != NULL) {
    int rc = from_array_interface(ai, mode, arg, b);
    Py_DECREF(ai);
    if (rc == 0) {
      Py_INCREF(obj);
      b->owner = obj;
    }
    return rc;
  }
  PyErr_Clear();
  if (PyObject_HasAttr(obj, s_data_ptr) && PyObject_HasAttr(obj, s_dtype)) {
    int rc = from_tensor(obj, mode, arg, b);
    if (rc == 0)
      for (int i = 0; i < TENSOR_TYPES; i++)
        if (tensor_types[i] == NULL || tensor_types[i] == Py_TYPE(obj)) {
          if (tensor_types[i] == NULL) {
            Py_INCREF(Py_TYPE(obj));
            tensor_types[i] = Py_TYPE(obj);
          }
          break;
        }
    return rc;
  }
  PyErr_Clear();
  gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                "`%s` must be an array (buffer protocol, "
                "__array_interface__) or a CPU tensor, not %s",
                arg, Py_TYPE(obj)->tp_name);
  return -1;
}

void gpy_buf_release(gpy_buf *b) {
  if (b->has_view) {
    PyBuffer_Release(&b->view);
    b->has_view = 0;
  }
  Py_CLEAR(b->owner);
}

/* ---- devices ------------------------------------------------------------ */

int gpy_device_parse(PyObject *obj, gang_device *d) {
  PyObject *type = NULL, *index = NULL;
  int rc = -1;
  if (PyUnicode_Check(obj)) {
    const char *s = PyUnicode_AsUTF8(obj);
    if (s == NULL)
      return -1;
    const char *colon = strchr(s, ':');
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    d->index = colon ? atoi(colon + 1) : -1;
    if (n == 3 && strncmp(s, "cpu", 3) == 0)
      d->type = GANG_DEVICE_CPU;
    else if (n == 4 && strncmp(s, "cuda", 4) == 0)
      d->type = GANG_DEVICE_CUDA;
    else {
      gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                    "`device` must be of type `cpu` or `cuda`, but is %R", obj);
      return -1;
    }
    if (d->type == GANG_DEVICE_CPU)
      d->index = d->index < 0 ? 0 : d->index;
    return 0;
  }
  type = PyObject_GetAttrString(obj, "type");
  index = type ? PyObject_GetAttrString(obj, "index") : NULL;
  if (type == NULL || index == NULL || !PyUnicode_Check(type)) {
    PyErr_Clear();
    gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                  "`device` must be a device string or have .type and .index, "
                  "not %R",
                  obj);
    goto out;
  }
  if (gpy_device_parse(type, d) < 0)
    goto out;
  if (index != Py_None) {
    d->index = (int)PyLong_AsLong(index);
    if (d->index == -1 && PyErr_Occurred())
      goto out;
  }
  rc = 0;
out:
  Py_XDECREF(type);
  Py_XDECREF(index);
  return rc;
}

PyObject *gpy_device_tuple(gang_device d) {
  return Py_BuildValue("(si)", d.type == GANG_DEVICE_CUDA ? "cuda" : "cpu",
                       d.index);
}
