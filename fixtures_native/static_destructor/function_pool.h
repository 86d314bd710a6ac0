// A process-wide pool of Python autograd-Function-like objects, modelled on
// onnxruntime's OrtTorchFunctionPool (the static-destructor-after-finalize
// incident): a function-local static singleton that owns NEW references to each
// registered object's `apply` (forward) and `backward` callables, held in
// std::unique_ptr<PyObject, std::function<void(PyObject*)>> whose deleter calls
// Py_DECREF.
//
// Whoever still owns references when exit() runs the C++ static destructors
// releases them after Py_Finalize: the interpreter they belong to is gone.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace lifeguard_fixture {

// Exactly the incident's holder: the deleter is a std::function calling
// Py_DECREF, and it runs whenever the unique_ptr dies, with or without a live
// interpreter or the GIL.
using PythonObjectPtr = std::unique_ptr<PyObject, std::function<void(PyObject*)>>;

class FunctionPool final {
 public:
  // Constructed on first use, so its destructor is queued with __cxa_atexit
  // while Python already runs, and exit() runs it after Py_Finalize returned.
  static FunctionPool& GetInstance() {
    static FunctionPool instance_;
    return instance_;
  }

  // Takes new references to function_class.apply and function_class.backward.
  // Returns false with a Python exception set on failure.
  bool RegisterFunction(const std::string& name, PyObject* function_class);
  // Releases both references. Returns false (nothing set) if name is unknown.
  bool UnregisterFunction(const std::string& name);
  // Releases every reference while the caller holds the GIL; returns how many
  // functions were registered.
  std::size_t UnregisterAll();

  // Borrowed references, nullptr if name is unknown.
  PyObject* GetForward(const std::string& name) const;
  PyObject* GetBackward(const std::string& name) const;

  std::size_t Size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return forward_pool_.size();
  }
  std::vector<std::string> Names() const;

 private:
  FunctionPool() = default;
  // Implicit member destruction is the bug: destroying the maps destroys the
  // unique_ptrs, whose deleters Py_DECREF whatever is still registered.
  ~FunctionPool() = default;
  FunctionPool(const FunctionPool&) = delete;
  FunctionPool& operator=(const FunctionPool&) = delete;

  // With the GIL the module's functions are serialised; a free-threaded build
  // runs them at once (the module declares Py_MOD_GIL_NOT_USED), so every method
  // holds this lock, and none releases a Python object under it (a __del__ may
  // call back into the pool).
  mutable std::mutex mutex_;
  std::unordered_map<std::string, PythonObjectPtr> forward_pool_;
  std::unordered_map<std::string, PythonObjectPtr> backward_pool_;
};

}  // namespace lifeguard_fixture
