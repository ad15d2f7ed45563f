/* gang._gang.Memory: bytes from gang_mem_alloc, which the other ranks of
 * this host read directly in collectives (docs/python.md, "Buffers from
 * gang_mem_alloc"). A writable 1-D buffer of unsigned bytes: numpy's
 * frombuffer and torch's frombuffer view it without a copy, and each view
 * holds the Memory until it goes, so the bytes are freed (gang_mem_free)
 * only when nothing refers to them. */
#include "gangmodule.h"

typedef struct gpy_mem {
  PyObject_HEAD void *ptr;
  Py_ssize_t nbytes;
} gpy_mem;

static PyObject *mem_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"nbytes", NULL};
  Py_ssize_t nbytes = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "n:Memory", kwlist, &nbytes))
    return NULL;
  if (nbytes < 1)
    return gpy_raise_fmt(GANG_INVALID_ARGUMENT,
                         "Memory: nbytes must be at least 1, not %zd", nbytes);
  gpy_mem *m = (gpy_mem *)type->tp_alloc(type, 0);
  if (m == NULL)
    return NULL;
  gang_status st = gang_mem_alloc((size_t)nbytes, &m->ptr);
  if (st != GANG_OK) {
    Py_DECREF(m);
    return gpy_raise(st, "gang_mem_alloc");
  }
  m->nbytes = nbytes;
  return (PyObject *)m;
}

static void mem_dealloc(PyObject *self) {
  gpy_mem *m = (gpy_mem *)self;
  if (m->ptr != NULL)
    gang_mem_free(m->ptr);
  Py_TYPE(self)->tp_free(self);
}

/* A view holds a reference to the Memory (view->obj), so the bytes stay
 * until the last view goes. */
static int mem_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  gpy_mem *m = (gpy_mem *)self;
  return PyBuffer_FillInfo(view, self, m->ptr, m->nbytes, 0, flags);
}

static PyBufferProcs mem_as_buffer = {mem_getbuffer, NULL};

static PyObject *mem_nbytes(PyObject *self, void *closure) {
  (void)closure;
  return PyLong_FromSsize_t(((gpy_mem *)self)->nbytes);
}

static PyObject *mem_address(PyObject *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(((gpy_mem *)self)->ptr);
}

static PyGetSetDef mem_getset[] = {
    {"nbytes", mem_nbytes, NULL, "bytes asked for", NULL},
    {"address", mem_address, NULL, "where the bytes start (page-aligned)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static Py_ssize_t mem_len(PyObject *self) { return ((gpy_mem *)self)->nbytes; }

static PySequenceMethods mem_as_sequence = {.sq_length = mem_len};

PyTypeObject gpy_mem_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gang._gang.Memory",
    .tp_basicsize = sizeof(gpy_mem),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory(nbytes): zeroed bytes from gang_mem_alloc, which "
              "the other ranks of this host read directly in collectives "
              "(shared-memory single copy without process_vm_readv). A "
              "writable buffer: view it with numpy.frombuffer or "
              "torch.frombuffer; freed when no view is left.",
    .tp_new = mem_new,
    .tp_dealloc = mem_dealloc,
    .tp_as_buffer = &mem_as_buffer,
    .tp_as_sequence = &mem_as_sequence,
    .tp_getset = mem_getset,
};
