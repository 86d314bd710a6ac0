#include "function_pool.h"

#include <algorithm>
#include <utility>

namespace lifeguard_fixture {

namespace {

// The incident's deleter: a bare Py_DECREF. It takes no GIL and cannot tell
// whether the interpreter is still alive, which is fine only as long as the
// pool is emptied before Py_Finalize.
void DecrefPythonObject(PyObject* object) { Py_DECREF(object); }

PythonObjectPtr OwnNewReference(PyObject* new_reference) {
  return PythonObjectPtr(new_reference, DecrefPythonObject);
}

// Moves the entry out of the map before its reference is released: the
// Py_DECREF may run arbitrary Python code (a __del__) that calls back into the
// pool, and must not find the map in the middle of an erase.
PythonObjectPtr TakeEntry(std::unordered_map<std::string, PythonObjectPtr>& pool,
                          const std::string& name) {
  auto found = pool.find(name);
  if (found == pool.end()) {
    return PythonObjectPtr(nullptr, DecrefPythonObject);
  }
  PythonObjectPtr taken = std::move(found->second);
  pool.erase(found);
  return taken;
}

PyObject* Lookup(const std::unordered_map<std::string, PythonObjectPtr>& pool,
                 const std::string& name) {
  auto found = pool.find(name);
  return found == pool.end() ? nullptr : found->second.get();
}

}  // namespace

bool FunctionPool::RegisterFunction(const std::string& name, PyObject* function_class) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (forward_pool_.count(name) != 0) {
    PyErr_Format(PyExc_ValueError, "a function is already registered as '%s'", name.c_str());
    return false;
  }
  // Like torch.autograd.Function: `apply` is a classmethod, so this lookup
  // creates a new bound method whose only owner is the pool from now on.
  lock.unlock();  // attribute lookups run Python code
  PyObject* forward = PyObject_GetAttrString(function_class, "apply");
  if (forward == nullptr) {
    return false;
  }
  PyObject* backward = PyObject_GetAttrString(function_class, "backward");
  if (backward == nullptr) {
    Py_DECREF(forward);
    return false;
  }
  if (!PyCallable_Check(forward) || !PyCallable_Check(backward)) {
    Py_DECREF(forward);
    Py_DECREF(backward);
    PyErr_Format(PyExc_TypeError, "'%s': apply and backward must be callable", name.c_str());
    return false;
  }
  PythonObjectPtr owned_forward = OwnNewReference(forward);
  PythonObjectPtr owned_backward = OwnNewReference(backward);
  lock.lock();
  if (forward_pool_.count(name) != 0) {  // registered by another thread meanwhile
    lock.unlock();
    PyErr_Format(PyExc_ValueError, "a function is already registered as '%s'", name.c_str());
    return false;
  }
  forward_pool_.emplace(name, std::move(owned_forward));
  backward_pool_.emplace(name, std::move(owned_backward));
  return true;
}

bool FunctionPool::UnregisterFunction(const std::string& name) {
  // Both references are released on return, with the GIL the caller holds.
  PythonObjectPtr forward(nullptr, DecrefPythonObject);
  PythonObjectPtr backward(nullptr, DecrefPythonObject);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    forward = TakeEntry(forward_pool_, name);
    backward = TakeEntry(backward_pool_, name);
  }
  return forward != nullptr;
}

std::size_t FunctionPool::UnregisterAll() {
  // The swapped-out maps die on return, releasing every reference while the
  // caller holds the GIL and the pool is already empty (see TakeEntry).
  std::unordered_map<std::string, PythonObjectPtr> forward;
  std::unordered_map<std::string, PythonObjectPtr> backward;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    forward.swap(forward_pool_);
    backward.swap(backward_pool_);
  }
  return forward.size();
}

PyObject* FunctionPool::GetForward(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Lookup(forward_pool_, name);
}

PyObject* FunctionPool::GetBackward(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Lookup(backward_pool_, name);
}

std::vector<std::string> FunctionPool::Names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  names.reserve(forward_pool_.size());
  for (const auto& entry : forward_pool_) {
    names.push_back(entry.first);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace lifeguard_fixture
