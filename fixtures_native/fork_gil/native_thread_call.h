// Case (iii) of the fork-with-held-gil incident: a callback arriving on a
// native thread that Python has never seen. The incident's review pointed at
// the "Non-Python created threads" rules of the C API: such a thread must
// register a thread state (PyGILState_Ensure) before it may call into Python.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

namespace lifeguard_fixture {

// Calls callable(*args) on a new std::thread and returns its result (a new
// reference), or nullptr with the callback's exception set. The calling
// thread must hold the GIL; it releases it while it joins, as a blocking call
// into a native library would.
// buggy: the thread calls PyObject_Call with no thread state of its own.
// fixed: it brackets the call with PyGILState_Ensure / PyGILState_Release.
PyObject* CallInNativeThread(PyObject* callable, PyObject* args);

}  // namespace lifeguard_fixture
