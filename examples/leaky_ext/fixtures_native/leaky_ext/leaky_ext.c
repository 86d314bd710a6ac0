/* leaky_ext: Python callbacks a native subsystem runs when it shuts down.
 *
 * The registry is a C static. In the buggy build it is emptied by a library
 * destructor, which exit() runs after Py_Finalize: the last Py_DECREF of each
 * callback then deallocates into an interpreter that no longer exists, and
 * the process crashes after the program (and its test suite) finished
 * (the onnxruntime OrtTorchFunctionPool incident, in C).
 *
 * The fix (LIFEGUARD_FIXED=1): module init registers release_listeners with
 * Python's atexit, so the registry is empty while the interpreter still works
 * and the destructor finds nothing to release.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef LIFEGUARD_FIXED
#define LIFEGUARD_FIXED 1
#endif

#define MAX_LISTENERS 64

static PyObject *listeners[MAX_LISTENERS];
static int listener_count;

static void release_listeners(void) {
    for (int i = 0; i < listener_count; i++) {
        Py_CLEAR(listeners[i]);
    }
    listener_count = 0;
}

/* Runs when the library is unloaded: from exit(), after the interpreter finalized. */
__attribute__((destructor)) static void release_at_unload(void) {
    release_listeners();
}

static PyObject *on_shutdown(PyObject *self, PyObject *callback) {
    if (!PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "on_shutdown() needs a callable");
        return NULL;
    }
    if (listener_count == MAX_LISTENERS) {
        PyErr_SetString(PyExc_OverflowError, "too many shutdown listeners");
        return NULL;
    }
    Py_INCREF(callback);
    listeners[listener_count++] = callback;
    Py_RETURN_NONE;
}

static PyObject *run_listeners(PyObject *self, PyObject *unused) {
    for (int i = 0; i < listener_count; i++) {
        PyObject *result = PyObject_CallNoArgs(listeners[i]);
        if (result == NULL) {
            return NULL;
        }
        Py_DECREF(result);
    }
    Py_RETURN_NONE;
}

static PyObject *count_listeners(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(listener_count);
}

static PyObject *release_now(PyObject *self, PyObject *unused) {
    release_listeners();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"on_shutdown", on_shutdown, METH_O, "on_shutdown(callback): run callback when the subsystem shuts down."},
    {"run_listeners", run_listeners, METH_NOARGS, "run_listeners(): call every registered callback."},
    {"listener_count", count_listeners, METH_NOARGS, "listener_count() -> int"},
    {"release_listeners", release_now, METH_NOARGS, "release_listeners(): forget every callback."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "leaky_ext", "Shutdown listeners kept in a native registry.", -1, methods,
};

PyMODINIT_FUNC PyInit_leaky_ext(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
#if LIFEGUARD_FIXED
    /* Empty the registry while Python can still free what it holds. */
    PyObject *atexit_module = PyImport_ImportModule("atexit");
    PyObject *release = atexit_module ? PyObject_GetAttrString(module, "release_listeners") : NULL;
    PyObject *result = release ? PyObject_CallMethod(atexit_module, "register", "O", release) : NULL;
    Py_XDECREF(release);
    Py_XDECREF(atexit_module);
    if (result == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(result);
#endif
    return module;
}
