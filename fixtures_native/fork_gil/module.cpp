// The `fork_gil` extension module: Python's view of CallbackPool (MXNet's
// CustomOperator) and of a bare native callback thread.
//
// LIFEGUARD_FIXED=0 (buggy): the pool stops only from its pthread_atfork
// prepare handler (with the forking thread holding the GIL) and from its C++
// static destructor (after Py_Finalize); call_in_native_thread calls Python
// without a thread state.
// LIFEGUARD_FIXED=1 (fixed): module init registers the pool's stop with
// os.register_at_fork(before=...) and with atexit, so it stops with the GIL
// released while Python still works; the prepare handler releases the GIL
// around its join; call_in_native_thread uses PyGILState_Ensure/Release.
//
// Functions meant to be called from Python release the GIL while they wait on
// the pool, like the ctypes calls into libmxnet did (a CDLL call drops the
// GIL): that is why a plain stop() or wait() never shows the bug.
#include "callback_pool.h"
#include "native_thread_call.h"

namespace {

using lifeguard_fixture::CallbackPool;
using lifeguard_fixture::PythonTask;

PyObject* start(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"workers", nullptr};
  int workers = 2;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:start", const_cast<char**>(keywords),
                                   &workers)) {
    return nullptr;
  }
  if (workers < 1) {
    PyErr_SetString(PyExc_ValueError, "start() needs at least one worker");
    return nullptr;
  }
  if (!CallbackPool::Get().Start(workers)) {
    PyErr_SetString(PyExc_RuntimeError, "the pool was shut down at interpreter exit");
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* push(PyObject*, PyObject* args) {
  if (PyTuple_GET_SIZE(args) < 1 || !PyCallable_Check(PyTuple_GET_ITEM(args, 0))) {
    PyErr_SetString(PyExc_TypeError, "push() needs a callable first");
    return nullptr;
  }
  PyObject* call_args = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
  if (call_args == nullptr) {
    return nullptr;
  }
  PyObject* callable = PyTuple_GET_ITEM(args, 0);
  Py_INCREF(callable);
  if (!CallbackPool::Get().Push(PythonTask{callable, call_args})) {
    Py_DECREF(callable);
    Py_DECREF(call_args);
    PyErr_SetString(PyExc_RuntimeError, "no worker runs: call start() first");
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* hold(PyObject*, PyObject*) {
  CallbackPool::Get().Hold();
  Py_RETURN_NONE;
}

PyObject* wait(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"timeout", nullptr};
  PyObject* timeout_object = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", const_cast<char**>(keywords),
                                   &timeout_object)) {
    return nullptr;
  }
  double timeout = -1.0;
  if (timeout_object != Py_None) {
    timeout = PyFloat_AsDouble(timeout_object);
    if (timeout == -1.0 && PyErr_Occurred()) {
      return nullptr;
    }
    if (timeout < 0) {
      PyErr_SetString(PyExc_ValueError, "wait() timeout must be >= 0 or None");
      return nullptr;
    }
  }
  CallbackPool& pool = CallbackPool::Get();
  if (pool.IsHeld()) {
    PyErr_SetString(PyExc_RuntimeError, "the pool holds its queue: wait() would never return");
    return nullptr;
  }
  bool idle = false;
  Py_BEGIN_ALLOW_THREADS
  idle = pool.WaitIdle(timeout);
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(idle);
}

PyObject* stop(PyObject*, PyObject*) {
  Py_BEGIN_ALLOW_THREADS
  CallbackPool::Get().Stop();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject* worker_count(PyObject*, PyObject*) {
  return PyLong_FromLong(CallbackPool::Get().WorkerCount());
}

PyObject* queued(PyObject*, PyObject*) {
  return PyLong_FromSize_t(CallbackPool::Get().QueuedCount());
}

PyObject* call_in_native_thread(PyObject*, PyObject* args) {
  if (PyTuple_GET_SIZE(args) < 1 || !PyCallable_Check(PyTuple_GET_ITEM(args, 0))) {
    PyErr_SetString(PyExc_TypeError, "call_in_native_thread() needs a callable first");
    return nullptr;
  }
  PyObject* call_args = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
  if (call_args == nullptr) {
    return nullptr;
  }
  PyObject* result = lifeguard_fixture::CallInNativeThread(PyTuple_GET_ITEM(args, 0), call_args);
  Py_DECREF(call_args);
  return result;
}

#if LIFEGUARD_FIXED
// atexit runs this early in Py_Finalize, while callbacks can still run: the
// incident's move of CustomOperator's Stop into MXNotifyShutdown.
PyObject* shutdown_at_exit(PyObject*, PyObject*) {
  Py_BEGIN_ALLOW_THREADS
  CallbackPool::Get().Shutdown();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// os.fork() runs this first, before PyOS_BeforeFork takes the import lock and
// (3.13) the runtime's thread-state list lock: draining here cannot block on
// either. Releasing the GIL in the prepare handler alone (the incident's fix)
// is enough up to 3.12, but on 3.13 the worker then blocks in
// PyGILState_Ensure anyway: creating its thread state needs that list lock.
PyObject* stop_before_fork(PyObject*, PyObject*) {
  Py_BEGIN_ALLOW_THREADS
  CallbackPool::Get().StopBeforeFork();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}
#endif

template <typename Function>
PyCFunction WithKeywords(Function function) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(function));
}

PyMethodDef module_methods[] = {
    {"start", WithKeywords(start), METH_VARARGS | METH_KEYWORDS,
     "start(workers=2): start the worker threads (no-op if they run)."},
    {"push", push, METH_VARARGS, "push(callable, *args): queue callable(*args) for a worker."},
    {"hold", hold, METH_NOARGS,
     "hold(): keep queued callbacks queued until the pool stops (an unfinished async op)."},
    {"wait", WithKeywords(wait), METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool: wait, GIL released, until no callback is queued or running."},
    {"stop", stop, METH_NOARGS, "stop(): run what is queued, then join the workers (GIL released)."},
    {"worker_count", worker_count, METH_NOARGS, "worker_count() -> int: running workers."},
    {"queued", queued, METH_NOARGS, "queued() -> int: callbacks waiting for a worker."},
    {"call_in_native_thread", call_in_native_thread, METH_VARARGS,
     "call_in_native_thread(callable, *args): call it on a new native thread, return its result."},
#if LIFEGUARD_FIXED
    {"_shutdown_at_exit", shutdown_at_exit, METH_NOARGS, "Stop the pool for good (atexit)."},
    {"_stop_before_fork", stop_before_fork, METH_NOARGS, "Stop the pool before os.fork()."},
#endif
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    "fork_gil",
    "A native callback pool stopped at fork and at exit (MXNet CustomOperator incident).",
    -1,
    module_methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

#if LIFEGUARD_FIXED
// Calls module_name.function_name(**{keyword: module.hook_name}), or
// module_name.function_name(module.hook_name) when keyword is null.
int RegisterHook(PyObject* module, const char* module_name, const char* function_name,
                 const char* keyword, const char* hook_name) {
  PyObject* target = PyImport_ImportModule(module_name);
  PyObject* function = target == nullptr ? nullptr : PyObject_GetAttrString(target, function_name);
  PyObject* hook = function == nullptr ? nullptr : PyObject_GetAttrString(module, hook_name);
  PyObject* result = nullptr;
  if (hook != nullptr) {
    if (keyword == nullptr) {
      result = PyObject_CallOneArg(function, hook);
    } else {
      PyObject* empty = PyTuple_New(0);
      PyObject* kwargs = Py_BuildValue("{sO}", keyword, hook);
      if (empty != nullptr && kwargs != nullptr) {
        result = PyObject_Call(function, empty, kwargs);
      }
      Py_XDECREF(empty);
      Py_XDECREF(kwargs);
    }
  }
  Py_XDECREF(hook);
  Py_XDECREF(function);
  Py_XDECREF(target);
  if (result == nullptr) {
    return -1;
  }
  Py_DECREF(result);
  return 0;
}
#endif

}  // namespace

PyMODINIT_FUNC PyInit_fork_gil(void) {
  PyObject* module = PyModule_Create(&module_definition);
  if (module == nullptr) {
    return nullptr;
  }
#ifdef Py_GIL_DISABLED
  // A free-threaded build keeps the GIL off only for modules that say they need none.
  PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#endif
  if (PyModule_AddIntConstant(module, "FIXED", LIFEGUARD_FIXED) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  // Construct the singleton now: its fork handlers are registered and its
  // destructor is queued for exit() at import, as with MXNet's static objects.
  CallbackPool::Get();
#if LIFEGUARD_FIXED
  if (RegisterHook(module, "atexit", "register", nullptr, "_shutdown_at_exit") < 0 ||
      RegisterHook(module, "os", "register_at_fork", "before", "_stop_before_fork") < 0) {
    Py_DECREF(module);
    return nullptr;
  }
#endif
  return module;
}
