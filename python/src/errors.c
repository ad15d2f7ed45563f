/* gang._gang's exception classes.
 *
 * Every gang_status but OK has its own class, all under GangError, so a
 * caller can catch what it can act on (a lost peer, a timeout) without
 * parsing text. Each class also derives from the builtin exception that
 * Python code already catches for that kind of failure (ValueError for a
 * bad argument, TimeoutError, ConnectionError, MemoryError, OSError), which
 * keeps fairseq2's contracts (ValueError on bad ranks) without a second
 * hierarchy. The message is the library's detail text (gang_last_error),
 * which names the operation, the peer and the numbers.
 *
 * Every file of the extension raises through here; it calls none of them. */
#include <stdarg.h>

#include "gangmodule.h"

typedef struct err_def {
  gang_status status;
  const char *name;
  const char *doc;
  PyObject **builtin; /* second base, or NULL */
  gang_status parent; /* or a class listed before it as the only base */
} err_def;

static PyObject *gang_error; /* GangError */
static PyObject *classes[GPY_STATUS_COUNT];

static const err_def err_defs[] = {
    {GANG_IN_PROGRESS, "InProgressError", "The operation has not finished.",
     NULL},
    {GANG_INVALID_ARGUMENT, "InvalidArgumentError",
     "An argument is wrong (also a ValueError).", &PyExc_ValueError},
    {GANG_INVALID_USAGE, "InvalidUsageError",
     "The call is wrong in this state, or this process is not a member.",
     &PyExc_RuntimeError},
    {GANG_NOT_SUPPORTED, "NotSupportedError", "Not supported.",
     &PyExc_NotImplementedError},
    {GANG_TIMEOUT, "GangTimeoutError",
     "A deadline passed (also a TimeoutError); the gang is broken.",
     &PyExc_TimeoutError},
    {GANG_PEER_LOST, "PeerLostError",
     "A peer closed or reset its connection (also a ConnectionError).",
     &PyExc_ConnectionError},
    {GANG_ABORTED, "AbortedError", "The gang was aborted.", NULL},
    {GANG_MISMATCH, "MismatchError",
     "Ranks disagree on the operation or its arguments.", NULL},
    {GANG_PROTOCOL, "ProtocolError", "Malformed or unexpected bytes.", NULL},
    {GANG_AUTH, "AuthError", "Store authentication failed.", NULL},
    {GANG_NO_MEMORY, "NoMemoryError",
     "Out of memory or over a configured cap (also a MemoryError).",
     &PyExc_MemoryError},
    {GANG_SYSTEM, "GangSystemError", "A system call failed (also an OSError).",
     &PyExc_OSError},
    {GANG_INTERNAL, "InternalError", "An internal error.", NULL},
    {GANG_NOT_FOUND, "NotFoundError", "Not found (also a LookupError).",
     &PyExc_LookupError},
    {GANG_PEER_LEFT, "PeerLeftError",
     "A peer ended normally (its process exited, or it destroyed its gang) "
     "before an operation that needed it (also a PeerLostError).",
     NULL, GANG_PEER_LOST},
};

PyObject *gpy_error_class(gang_status st) {
  if ((int)st > 0 && (size_t)st < sizeof classes / sizeof classes[0] &&
      classes[st] != NULL)
    return classes[st];
  return gang_error;
}

/* An instance of the class of `st` with .status, .status_name and .detail;
 * steals `msg`. NULL with an exception set on failure. */
static PyObject *error_new(gang_status st, PyObject *msg) {
  if (msg == NULL)
    return NULL;
  PyObject *exc = PyObject_CallOneArg(gpy_error_class(st), msg);
  if (exc != NULL) {
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *name = PyUnicode_FromString(gang_status_name(st));
    if (code == NULL || name == NULL ||
        PyObject_SetAttrString(exc, "status", code) < 0 ||
        PyObject_SetAttrString(exc, "status_name", name) < 0 ||
        PyObject_SetAttrString(exc, "detail", msg) < 0)
      Py_CLEAR(exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
  }
  Py_DECREF(msg);
  return exc;
}

PyObject *gpy_error_new(gang_status st, const char *detail) {
  if (detail == NULL || detail[0] == '\0')
    detail = gang_strerror(st);
  return error_new(st, PyUnicode_FromString(detail));
}

static PyObject *raise_msg(gang_status st, PyObject *msg) {
  PyObject *exc = error_new(st, msg);
  if (exc != NULL) {
    PyErr_SetObject(gpy_error_class(st), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

PyObject *gpy_raise(gang_status st, const char *what) {
  const char *detail = gang_last_error();
  if (detail == NULL || detail[0] == '\0')
    detail = what ? what : gang_strerror(st);
  return raise_msg(st, PyUnicode_FromString(detail));
}

PyObject *gpy_raise_fmt(gang_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  return raise_msg(st, msg);
}

int gpy_errors_init(PyObject *m) {
  gang_error = PyErr_NewExceptionWithDoc(
      "gang.GangError",
      "Base of every error the gang library reports; .status, .status_name "
      "and .detail say which and why.",
      NULL, NULL);
  if (gang_error == NULL || PyModule_AddObjectRef(m, "GangError", gang_error))
    return -1;
  for (size_t i = 0; i < sizeof err_defs / sizeof err_defs[0]; i++) {
    const err_def *d = &err_defs[i];
    char qual[96];
    snprintf(qual, sizeof qual, "gang.%s", d->name);
    PyObject *bases = d->parent    ? PyTuple_Pack(1, classes[d->parent])
                      : d->builtin ? PyTuple_Pack(2, gang_error, *d->builtin)
                                   : PyTuple_Pack(1, gang_error);
    if (bases == NULL)
      return -1;
    PyObject *cls = PyErr_NewExceptionWithDoc(qual, d->doc, bases, NULL);
    Py_DECREF(bases);
    if (cls == NULL || PyModule_AddObjectRef(m, d->name, cls) < 0)
      return -1;
    classes[d->status] = cls;
  }
  return 0;
}
