#include "native_thread_call.h"

#include <thread>

namespace lifeguard_fixture {

namespace {

struct NativeCall {
  PyObject* callable;
  PyObject* args;
  PyObject* result = nullptr;
  PyObject* exception = nullptr;  // set when the call raised (3.12+ form)
  PyObject* exception_type = nullptr;  // set when the call raised (up to 3.11)
  PyObject* exception_traceback = nullptr;
};

// Takes the pending exception out of this thread, to re-raise it in the caller.
void MoveExceptionOut(NativeCall* call) {
#if PY_VERSION_HEX >= 0x030C0000
  call->exception = PyErr_GetRaisedException();
#else
  PyErr_Fetch(&call->exception_type, &call->exception, &call->exception_traceback);
#endif
}

void RestoreException(NativeCall* call) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(call->exception);
#else
  PyErr_Restore(call->exception_type, call->exception, call->exception_traceback);
#endif
}

void RunOnNativeThread(NativeCall* call) {
#if LIFEGUARD_FIXED
  // Register this thread with the interpreter and take the GIL first, as the
  // C API requires of threads Python did not create.
  PyGILState_STATE gil = PyGILState_Ensure();
#endif
  // buggy: no thread state. The interpreter finds none for this thread (NULL
  // on 3.12+, where it is thread-local; on 3.10/3.11 it reads the GIL holder's,
  // which is NULL too because the caller released the GIL) and dereferences it.
  call->result = PyObject_Call(call->callable, call->args, nullptr);
  if (call->result == nullptr) {
    MoveExceptionOut(call);
  }
#if LIFEGUARD_FIXED
  PyGILState_Release(gil);
#endif
}

}  // namespace

PyObject* CallInNativeThread(PyObject* callable, PyObject* args) {
  NativeCall call{callable, args};
  Py_BEGIN_ALLOW_THREADS
  std::thread native_thread(RunOnNativeThread, &call);
  native_thread.join();
  Py_END_ALLOW_THREADS
  if (call.result == nullptr) {
    RestoreException(&call);
  }
  return call.result;
}

}  // namespace lifeguard_fixture
