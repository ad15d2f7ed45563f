/* gang._gang: module initialisation and the module's own functions (world
 * info, strerror, flight_dump, the store client's constructor). The
 * exception classes are errors.c's; every type is its own file's. */
#include "gang/version.h"
#include "gangmodule.h"

/* ---- module functions ---------------------------------------------------- */

static PyObject *py_world_info(PyObject *mod, PyObject *noargs) {
  (void)mod;
  (void)noargs;
  gang_world_info info = GANG_WORLD_INFO_INIT;
  gang_status st = gang_world_info_from_env(&info);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_world_info_from_env");
  return Py_BuildValue(
      "{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:i,s:s,s:s,s:s,s:i}", "source",
      gang_world_source_name(info.source), "rank", info.rank, "world_size",
      info.world_size, "local_rank", info.local_rank, "local_world_size",
      info.local_world_size, "node_rank", info.node_rank, "num_nodes",
      info.num_nodes, "master_addr", info.master_addr, "master_port",
      info.master_port, "store_addr", info.store_addr, "init_method",
      info.init_method, "run_id", info.run_id, "restart_count",
      info.restart_count);
}

static PyObject *py_strerror(PyObject *mod, PyObject *arg) {
  (void)mod;
  long st = PyLong_AsLong(arg);
  if (st == -1 && PyErr_Occurred())
    return NULL;
  return PyUnicode_FromString(gang_strerror((gang_status)st));
}

static PyObject *py_last_error(PyObject *mod, PyObject *noargs) {
  (void)mod;
  (void)noargs;
  return PyUnicode_FromString(gang_last_error());
}

/* flight_dump(reason=None): gang_flight_dump. */
static PyObject *py_flight_dump(PyObject *mod, PyObject *args) {
  (void)mod;
  const char *reason = NULL;
  if (!PyArg_ParseTuple(args, "|z:flight_dump", &reason))
    return NULL;
  PyThreadState *nogil = PyEval_SaveThread();
  gang_status st = gang_flight_dump(reason);
  PyEval_RestoreThread(nogil);
  if (st != GANG_OK)
    return gpy_raise(st, "gang_flight_dump");
  Py_RETURN_NONE;
}

/* _error(status, detail) -> the exception instance (not raised). */
static PyObject *py_error(PyObject *mod, PyObject *args) {
  (void)mod;
  int st;
  const char *detail = NULL;
  if (!PyArg_ParseTuple(args, "i|z:_error", &st, &detail))
    return NULL;
  return gpy_error_new((gang_status)st, detail);
}

static PyMethodDef module_methods[] = {
    {"_error", py_error, METH_VARARGS,
     "_error(status, detail=None) -> the exception of that status."},
    {"world_info", py_world_info, METH_NOARGS,
     "world_info() -> dict: gang_world_info_from_env()."},
    {"strerror", py_strerror, METH_O, "strerror(status) -> str."},
    {"flight_dump", py_flight_dump, METH_VARARGS,
     "flight_dump(reason=None): writes every gang's flight record "
     "(GANG_FLIGHT) to GANG_FLIGHT_DUMP<rank> or the log; InvalidUsageError "
     "when no gang records."},
    {"last_error", py_last_error, METH_NOARGS,
     "last_error() -> str: gang_last_error() of this thread."},
    {"_store_connect", gpy_store_connect, METH_VARARGS,
     "_store_connect(addr, timeout_s=0) -> Store: gang_store_connect."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "gang._gang",
    "The C extension under the gang package; use the package instead.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* The version of the header this extension was compiled with; __version__
 * is the one of the library it loaded (python3 -m gang.info shows both). */
#define GANG_STR_(x) #x
#define GANG_STR(x) GANG_STR_(x)
#define GANG_BUILT_WITH                                                        \
  GANG_STR(GANG_VERSION_MAJOR)                                                 \
  "." GANG_STR(GANG_VERSION_MINOR) "." GANG_STR(GANG_VERSION_PATCH)

PyMODINIT_FUNC PyInit__gang(void) {
  PyObject *m = PyModule_Create(&module_def);
  if (m == NULL)
    return NULL;
  if (gpy_errors_init(m) < 0 || PyType_Ready(&gpy_gang_type) < 0 ||
      PyType_Ready(&gpy_work_type) < 0 || PyType_Ready(&gpy_store_type) < 0 ||
      PyType_Ready(&gpy_mem_type) < 0 ||
      PyModule_AddObjectRef(m, "Memory", (PyObject *)&gpy_mem_type) < 0 ||
      PyModule_AddObjectRef(m, "_Gang", (PyObject *)&gpy_gang_type) < 0 ||
      PyModule_AddObjectRef(m, "Work", (PyObject *)&gpy_work_type) < 0 ||
      PyModule_AddObjectRef(m, "Store", (PyObject *)&gpy_store_type) < 0 ||
      gpy_topo_init(m) < 0 || gpy_ft_init(m) < 0 ||
      PyModule_AddStringConstant(m, "__version__", gang_version_string()) < 0 ||
      PyModule_AddStringConstant(m, "_built_with", GANG_BUILT_WITH) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
