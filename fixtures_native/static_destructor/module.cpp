// The `static_destructor` extension module: Python's view of FunctionPool.
//
// LIFEGUARD_FIXED=0 (buggy): like onnxruntime before the fix, nothing empties
// the pool; the static FunctionPool's destructor Py_DECREFs the registered
// callables from exit(), after Py_Finalize, and the process dies at exit.
// LIFEGUARD_FIXED=1 (fixed): the incident's approach 1. Module init registers
// unregister_all with Python's atexit module, so every reference is released
// during Py_Finalize while the interpreter still works, and the static
// destructor finds the pool empty. Py_AtExit would not do: its callbacks run
// after finalization, when it is already too late to Py_DECREF.
#include "function_pool.h"

#include <string>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

namespace {

using lifeguard_fixture::FunctionPool;

// Reads args[0] as the function name; the rest are the call's own arguments.
bool SplitNameAndArguments(PyObject* args, const char* caller, std::string* name,
                           PyObject** call_args) {
  if (PyTuple_GET_SIZE(args) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0))) {
    PyErr_Format(PyExc_TypeError, "%s() needs the registered name (a str) first", caller);
    return false;
  }
  const char* text = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
  if (text == nullptr) {
    return false;
  }
  *name = text;
  *call_args = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
  return *call_args != nullptr;
}

PyObject* CallRegistered(PyObject* args, PyObject* kwargs, bool backward) {
  const char* caller = backward ? "call_backward" : "call_forward";
  std::string name;
  PyObject* call_args = nullptr;
  if (!SplitNameAndArguments(args, caller, &name, &call_args)) {
    return nullptr;
  }
  FunctionPool& pool = FunctionPool::GetInstance();
  PyObject* callable = backward ? pool.GetBackward(name) : pool.GetForward(name);
  if (callable == nullptr) {
    Py_DECREF(call_args);
    PyErr_Format(PyExc_KeyError, "no function registered as '%s'", name.c_str());
    return nullptr;
  }
  // The call may unregister the very function it runs: hold it meanwhile.
  Py_INCREF(callable);
  PyObject* result = PyObject_Call(callable, call_args, kwargs);
  Py_DECREF(callable);
  Py_DECREF(call_args);
  return result;
}

PyObject* register_function(PyObject*, PyObject* args) {
  const char* name = nullptr;
  PyObject* function_class = nullptr;
  if (!PyArg_ParseTuple(args, "sO:register_function", &name, &function_class)) {
    return nullptr;
  }
  if (!FunctionPool::GetInstance().RegisterFunction(name, function_class)) {
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* unregister_function(PyObject*, PyObject* args) {
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "s:unregister_function", &name)) {
    return nullptr;
  }
  if (!FunctionPool::GetInstance().UnregisterFunction(name)) {
    PyErr_Format(PyExc_KeyError, "no function registered as '%s'", name);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* unregister_all(PyObject*, PyObject*) {
  return PyLong_FromSize_t(FunctionPool::GetInstance().UnregisterAll());
}

PyObject* call_forward(PyObject*, PyObject* args, PyObject* kwargs) {
  return CallRegistered(args, kwargs, /*backward=*/false);
}

PyObject* call_backward(PyObject*, PyObject* args, PyObject* kwargs) {
  return CallRegistered(args, kwargs, /*backward=*/true);
}

PyObject* size(PyObject*, PyObject*) {
  return PyLong_FromSize_t(FunctionPool::GetInstance().Size());
}

PyObject* names(PyObject*, PyObject*) {
  PyObject* result = PyList_New(0);
  if (result == nullptr) {
    return nullptr;
  }
  for (const std::string& name : FunctionPool::GetInstance().Names()) {
    PyObject* item = PyUnicode_FromStringAndSize(name.data(), static_cast<Py_ssize_t>(name.size()));
    if (item == nullptr || PyList_Append(result, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(result);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return result;
}

// Lets a scenario check that the pool will hold the last reference at exit, so
// that the release there really deallocates (a refcount of 1 means "only the
// pool").
PyObject* reference_counts(PyObject*, PyObject* args) {
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "s:reference_counts", &name)) {
    return nullptr;
  }
  FunctionPool& pool = FunctionPool::GetInstance();
  PyObject* forward = pool.GetForward(name);
  PyObject* backward = pool.GetBackward(name);
  if (forward == nullptr || backward == nullptr) {
    PyErr_Format(PyExc_KeyError, "no function registered as '%s'", name);
    return nullptr;
  }
  return Py_BuildValue("(nn)", Py_REFCNT(forward), Py_REFCNT(backward));
}

PyMethodDef module_methods[] = {
    {"register_function", register_function, METH_VARARGS,
     "register_function(name, function_class): keep new references to its apply and backward."},
    {"unregister_function", unregister_function, METH_VARARGS,
     "unregister_function(name): release the references registered under name."},
    {"unregister_all", unregister_all, METH_NOARGS,
     "unregister_all() -> int: release every registered reference; returns how many names."},
    {"call_forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_forward)),
     METH_VARARGS | METH_KEYWORDS, "call_forward(name, *args, **kwargs): call name's apply."},
    {"call_backward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_backward)),
     METH_VARARGS | METH_KEYWORDS, "call_backward(name, *args, **kwargs): call name's backward."},
    {"size", size, METH_NOARGS, "size() -> int: how many functions are registered."},
    {"names", names, METH_NOARGS, "names() -> list[str]: registered names, sorted."},
    {"reference_counts", reference_counts, METH_VARARGS,
     "reference_counts(name) -> (int, int): refcounts of name's apply and backward."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    "static_destructor",
    "A static C++ pool that owns Python callables (onnxruntime OrtTorchFunctionPool incident).",
    -1,
    module_methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

#if LIFEGUARD_FIXED
// The fix: release the pool's references from an atexit callback. Python runs
// atexit callbacks at the start of Py_Finalize, with the GIL held and every
// object still valid, before it tears modules and the interpreter down.
int ReleasePoolAtExit(PyObject* module) {
  PyObject* atexit_module = PyImport_ImportModule("atexit");
  if (atexit_module == nullptr) {
    return -1;
  }
  PyObject* release = PyObject_GetAttrString(module, "unregister_all");
  PyObject* registered =
      release == nullptr ? nullptr : PyObject_CallMethod(atexit_module, "register", "O", release);
  Py_XDECREF(release);
  Py_DECREF(atexit_module);
  if (registered == nullptr) {
    return -1;
  }
  Py_DECREF(registered);
  return 0;
}
#endif

}  // namespace

PyMODINIT_FUNC PyInit_static_destructor(void) {
  PyObject* module = PyModule_Create(&module_definition);
  if (module == nullptr) {
    return nullptr;
  }
#ifdef Py_GIL_DISABLED
  // A free-threaded build keeps the GIL off only for modules that say they need none.
  PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#endif
  if (PyModule_AddIntConstant(module, "RELEASES_AT_EXIT", LIFEGUARD_FIXED) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
#if LIFEGUARD_FIXED
  if (ReleasePoolAtExit(module) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
#endif
  return module;
}
