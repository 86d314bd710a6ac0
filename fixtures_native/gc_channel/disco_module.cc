// The `gc_channel` extension module: a miniature TVM Disco runtime as its FFI
// shows it to Python (the cross-thread-gc-write incident, apache/tvm#15996).
//
// - Session: a handle on a MessageChannel (a pipe plus a frame-checking
//   reader thread). Like any TVM object returned through the FFI, every
//   native call that returns a session builds a NEW Python wrapper of the
//   class registered for "runtime.disco.Session"; `dref_session` does that
//   each time, as `_ffi_api.DRefSession` did behind `DRef.session`.
// - DRef: a register on the workers. Its tp_dealloc sends a kill_reg frame on
//   the session's channel, like ~DRefObj -> Session::DeallocReg, from whichever
//   thread drops the last reference: with gc on another thread, that thread.
// - node_get_attr: reflection lookup of a native attribute. Sessions and DRefs
//   have none, so it always fails with an FFIError whose message starts with
//   "AttributeError:" and which carries a C++-style backtrace, like
//   ReflectionVTable::GetAttr. The Python side turns it into an AttributeError
//   with that backtrace appended to its traceback, as TVM's
//   raise_last_ffi_error did, which is what leaves the frame cycle behind.
//
// The Python half of TVM (DRef.session, _get_cached_method, the FFI error
// translation) lives in the scenario file, both as it was before the fix and
// after it; `FIXED` tells it which build this is. The native half of the fix
// is the whole-frame lock in MessageChannel::Send.
//
// The deterministic scenario drives the mid-frame handshake of
// message_channel.h: session_create(handshake_seconds=...) turns it on, the
// collector thread calls session_wait_mid_frame() before it collects and
// session_release_mid_frame() after, and a pause that times out makes
// session_call_packed raise TimeoutError instead of returning.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "message_channel.h"

namespace {

using lifeguard_fixture::FrameKind;
using lifeguard_fixture::FrameKindName;
using lifeguard_fixture::HandshakeReport;
using lifeguard_fixture::MessageChannel;
using lifeguard_fixture::ReaderReport;
using lifeguard_fixture::SendResult;

constexpr const char kSessionKey[] = "runtime.disco.Session";
constexpr const char kDRefKey[] = "runtime.disco.DRef";

PyObject* g_ffi_error = nullptr;  // gc_channel.FFIError
PyObject* g_registry = nullptr;   // type key -> class registered by register_object

struct SessionObject {
  PyObject_HEAD
  std::shared_ptr<MessageChannel> channel;
};


struct DRefObject {
  PyObject_HEAD
  std::shared_ptr<MessageChannel> channel;  // empty: no register (moved away, or never set)
  uint64_t register_id;
};

PyTypeObject SessionType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject DRefType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// The class registered for `key`, else `fallback` (borrowed).
PyTypeObject* RegisteredClass(const char* key, PyTypeObject* fallback) {
  PyObject* cls = PyDict_GetItemString(g_registry, key);
  return cls != nullptr ? reinterpret_cast<PyTypeObject*>(cls) : fallback;
}

PyObject* WrapSession(std::shared_ptr<MessageChannel> channel) {
  PyTypeObject* cls = RegisteredClass(kSessionKey, &SessionType);
  PyObject* self = cls->tp_alloc(cls, 0);
  if (self == nullptr) return nullptr;
  new (&reinterpret_cast<SessionObject*>(self)->channel)
      std::shared_ptr<MessageChannel>(std::move(channel));
  return self;
}

PyObject* WrapDRef(std::shared_ptr<MessageChannel> channel, uint64_t register_id) {
  PyTypeObject* cls = RegisteredClass(kDRefKey, &DRefType);
  PyObject* self = cls->tp_alloc(cls, 0);
  if (self == nullptr) return nullptr;
  auto* dref = reinterpret_cast<DRefObject*>(self);
  new (&dref->channel) std::shared_ptr<MessageChannel>(std::move(channel));
  dref->register_id = register_id;
  return self;
}

void SessionDealloc(PyObject* self) {
  // The last owner of the channel joins its reader, which never needs the GIL.
  reinterpret_cast<SessionObject*>(self)->channel.~shared_ptr();
  Py_TYPE(self)->tp_free(self);
}

void DRefDealloc(PyObject* self) {
  auto* dref = reinterpret_cast<DRefObject*>(self);
  std::shared_ptr<MessageChannel> channel = std::move(dref->channel);
  dref->channel.~shared_ptr();
  if (channel) {
    std::vector<uint8_t> payload(sizeof dref->register_id);
    std::memcpy(payload.data(), &dref->register_id, payload.size());
    // TVM freed objects through a ctypes call (TVMObjectFree), which drops the
    // GIL: the write below runs concurrently with the owner's own writes.
    Py_BEGIN_ALLOW_THREADS
    (void)channel->Send(FrameKind::kKillReg, payload);  // a destructor cannot report an error
    channel.reset();
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free(self);
}

PyObject* DRefNew(PyTypeObject* type, PyObject*, PyObject*) {
  // An empty handle, filled by _move_from (TVM: `self.handle = dref.handle`).
  PyObject* self = type->tp_alloc(type, 0);
  if (self == nullptr) return nullptr;
  auto* dref = reinterpret_cast<DRefObject*>(self);
  new (&dref->channel) std::shared_ptr<MessageChannel>();
  dref->register_id = 0;
  return self;
}

PyObject* DRefMoveFrom(PyObject* self, PyObject* other) {
  if (!PyObject_TypeCheck(other, &DRefType)) {
    PyErr_SetString(PyExc_TypeError, "_move_from() needs a DRef");
    return nullptr;
  }
  auto* target = reinterpret_cast<DRefObject*>(self);
  auto* source = reinterpret_cast<DRefObject*>(other);
  if (target->channel) {
    PyErr_SetString(PyExc_ValueError, "this DRef already owns a register");
    return nullptr;
  }
  target->channel = std::move(source->channel);
  source->channel.reset();
  target->register_id = source->register_id;
  source->register_id = 0;
  Py_RETURN_NONE;
}

PyObject* DRefGetRegister(PyObject* self, void*) {
  return PyLong_FromUnsignedLongLong(reinterpret_cast<DRefObject*>(self)->register_id);
}

PyMethodDef kDRefMethods[] = {
    {"_move_from", DRefMoveFrom, METH_O,
     "Take over another DRef's register, leaving it empty (TVM: move the handle)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef kDRefGetSet[] = {
    {"register_id", DRefGetRegister, nullptr, "The worker register this DRef owns (0: none).",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- helpers for the FFI functions ----

MessageChannel* ChannelOf(PyObject* session) {
  if (!PyObject_TypeCheck(session, &SessionType)) {
    PyErr_Format(PyExc_TypeError, "expected a Session, got %s", Py_TYPE(session)->tp_name);
    return nullptr;
  }
  MessageChannel* channel = reinterpret_cast<SessionObject*>(session)->channel.get();
  if (channel == nullptr) PyErr_SetString(PyExc_ValueError, "the session handle is empty");
  return channel;
}

// Writes one frame with the GIL released, as a ctypes call into TVM ran (a
// mid-frame pause waits here too, without the GIL: the collector thread that
// ends it runs Python).
bool SendFrame(MessageChannel* channel, FrameKind kind, const std::vector<uint8_t>& payload) {
  SendResult sent;
  int saved_errno = 0;
  Py_BEGIN_ALLOW_THREADS
  sent = channel->Send(kind, payload);
  saved_errno = errno;
  Py_END_ALLOW_THREADS
  switch (sent) {
    case SendResult::kSent:
      return true;
    case SendResult::kIoError:
      errno = saved_errno;
      PyErr_SetFromErrno(PyExc_OSError);
      return false;
    case SendResult::kPauseTimedOut: {
      // Not corruption: the frame went out whole. The deterministic test
      // did not happen, and saying so is the point of the deadline.
      char message[400];  // PyErr_Format has no %f
      snprintf(message, sizeof message,
               "mid-frame handshake broken: the %s frame paused %.1f s after its header, but no "
               "other thread wrote to the channel or ended the pause in that time: the collector "
               "thread never freed the DRef while the call was being written",
               FrameKindName(static_cast<uint32_t>(kind)), channel->handshake_seconds());
      PyErr_SetString(PyExc_TimeoutError, message);
      return false;
    }
  }
  PyErr_SetString(PyExc_SystemError, "unknown SendResult");
  return false;
}

void PutU64(std::vector<uint8_t>* out, uint64_t value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out->insert(out->end(), bytes, bytes + sizeof value);
}

void PutBlob(std::vector<uint8_t>* out, char tag, const void* data, std::size_t size) {
  out->push_back(static_cast<uint8_t>(tag));
  PutU64(out, size);
  const auto* bytes = static_cast<const uint8_t*>(data);
  out->insert(out->end(), bytes, bytes + size);
}

// Serialises one call_packed argument (TVM's RPCReference::ReturnPackedSeq, reduced).
bool PutArgument(std::vector<uint8_t>* out, PyObject* arg) {
  if (PyObject_TypeCheck(arg, &DRefType)) {
    out->push_back('r');
    PutU64(out, reinterpret_cast<DRefObject*>(arg)->register_id);
  } else if (arg == Py_None) {
    out->push_back('n');
  } else if (PyLong_Check(arg)) {
    long long value = PyLong_AsLongLong(arg);
    if (value == -1 && PyErr_Occurred()) return false;
    out->push_back('i');
    PutU64(out, static_cast<uint64_t>(value));
  } else if (PyUnicode_Check(arg)) {
    Py_ssize_t size;
    const char* text = PyUnicode_AsUTF8AndSize(arg, &size);
    if (text == nullptr) return false;
    PutBlob(out, 's', text, static_cast<std::size_t>(size));
  } else if (PyObject_CheckBuffer(arg)) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return false;
    PutBlob(out, 'b', view.buf, static_cast<std::size_t>(view.len));
    PyBuffer_Release(&view);
  } else {
    PyErr_Format(PyExc_TypeError, "call_packed cannot send a %s", Py_TYPE(arg)->tp_name);
    return false;
  }
  return true;
}

// ---- the FFI functions (TVM's _ffi_api.*) ----

PyObject* SessionCreate(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"write_window_us", "handshake_seconds", nullptr};
  unsigned int write_window_us = 0;
  double handshake_seconds = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Id:session_create", const_cast<char**>(keywords),
                                   &write_window_us, &handshake_seconds)) {
    return nullptr;
  }
  if (!(handshake_seconds >= 0 && handshake_seconds <= 3600)) {  // also refuses NaN
    PyErr_SetString(PyExc_ValueError, "handshake_seconds must be between 0 (off) and 3600");
    return nullptr;
  }
  std::string error;
  std::shared_ptr<MessageChannel> channel =
      MessageChannel::Open(write_window_us, handshake_seconds, &error);
  if (!channel) {
    PyErr_SetString(PyExc_OSError, error.c_str());
    return nullptr;
  }
  return WrapSession(std::move(channel));
}

PyObject* SessionGetGlobalFunc(PyObject*, PyObject* args) {
  PyObject* session;
  const char* name;
  Py_ssize_t name_size;
  if (!PyArg_ParseTuple(args, "Os#:session_get_global_func", &session, &name, &name_size)) {
    return nullptr;
  }
  MessageChannel* channel = ChannelOf(session);
  if (channel == nullptr) return nullptr;
  uint64_t result = channel->NewRegister();
  std::vector<uint8_t> payload;
  PutU64(&payload, result);
  payload.insert(payload.end(), name, name + name_size);
  if (!SendFrame(channel, FrameKind::kGetGlobalFunc, payload)) return nullptr;
  return WrapDRef(reinterpret_cast<SessionObject*>(session)->channel, result);
}

PyObject* SessionCallPacked(PyObject*, PyObject* args) {
  Py_ssize_t count = PyTuple_GET_SIZE(args);
  if (count < 2) {
    PyErr_SetString(PyExc_TypeError, "session_call_packed(session, func, *args)");
    return nullptr;
  }
  PyObject* session = PyTuple_GET_ITEM(args, 0);
  PyObject* func = PyTuple_GET_ITEM(args, 1);
  MessageChannel* channel = ChannelOf(session);
  if (channel == nullptr) return nullptr;
  if (!PyObject_TypeCheck(func, &DRefType)) {
    PyErr_SetString(PyExc_TypeError, "the function to call must be a DRef");
    return nullptr;
  }
  uint64_t result = channel->NewRegister();
  std::vector<uint8_t> payload;
  PutU64(&payload, reinterpret_cast<DRefObject*>(func)->register_id);
  PutU64(&payload, result);
  for (Py_ssize_t i = 2; i < count; ++i) {
    if (!PutArgument(&payload, PyTuple_GET_ITEM(args, i))) return nullptr;
  }
  if (!SendFrame(channel, FrameKind::kCallPacked, payload)) return nullptr;
  return WrapDRef(reinterpret_cast<SessionObject*>(session)->channel, result);
}

PyObject* SessionShutdown(PyObject*, PyObject* args) {
  PyObject* session;
  double timeout = 5.0;
  if (!PyArg_ParseTuple(args, "O|d:session_shutdown", &session, &timeout)) return nullptr;
  MessageChannel* channel = ChannelOf(session);
  if (channel == nullptr) return nullptr;
  ReaderReport report;
  bool finished;
  Py_BEGIN_ALLOW_THREADS
  finished = channel->Shutdown(timeout, &report);
  Py_END_ALLOW_THREADS
  if (!finished) {
    PyErr_Format(PyExc_TimeoutError, "the channel reader did not finish within %.1f s", timeout);
    return nullptr;
  }
  PyObject* evidence = report.corrupted
                           ? PyBytes_FromStringAndSize(
                                 reinterpret_cast<const char*>(report.evidence.data()),
                                 static_cast<Py_ssize_t>(report.evidence.size()))
                           : Py_NewRef(Py_None);
  if (evidence == nullptr) return nullptr;
  HandshakeReport handshake = channel->handshake_report();
  PyObject* pauses = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "pauses", handshake.pauses, "landed",
                                   handshake.landed, "held_back", handshake.held_back, "released",
                                   handshake.released, "timed_out", handshake.timed_out);
  if (pauses == nullptr) {
    Py_DECREF(evidence);
    return nullptr;
  }
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:O,s:s,s:N,s:N}", "frames", report.frames, "calls",
                       report.calls, "kills", report.kills, "bytes", report.bytes,
                       "dropped_after_shutdown", channel->dropped_after_shutdown(), "corrupted",
                       report.corrupted ? Py_True : Py_False, "message", report.message.c_str(),
                       "evidence", evidence, "handshake", pauses);
}

PyObject* SessionWaitMidFrame(PyObject*, PyObject* args) {
  PyObject* session;
  double timeout;
  if (!PyArg_ParseTuple(args, "Od:session_wait_mid_frame", &session, &timeout)) return nullptr;
  MessageChannel* channel = ChannelOf(session);
  if (channel == nullptr) return nullptr;
  bool paused;
  // Without the GIL: the writer this waits for holds none, but a thread
  // waiting here with it would stop every other Python thread.
  Py_BEGIN_ALLOW_THREADS
  paused = channel->WaitForPause(timeout);
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(paused);
}

PyObject* SessionReleaseMidFrame(PyObject*, PyObject* session) {
  MessageChannel* channel = ChannelOf(session);
  if (channel == nullptr) return nullptr;
  return PyBool_FromLong(channel->ReleasePause());
}

PyObject* DRefSession(PyObject*, PyObject* dref) {
  if (!PyObject_TypeCheck(dref, &DRefType)) {
    PyErr_SetString(PyExc_TypeError, "dref_session() needs a DRef");
    return nullptr;
  }
  std::shared_ptr<MessageChannel>& channel = reinterpret_cast<DRefObject*>(dref)->channel;
  if (!channel) {
    PyErr_SetString(g_ffi_error, "ValueError: the DRef handle is empty");
    return nullptr;
  }
  // A new wrapper on every call: nothing on the Python side is shared with
  // the previous one, including any attribute set on it.
  return WrapSession(channel);
}

PyObject* NodeGetAttr(PyObject*, PyObject* args) {
  PyObject* node;
  const char* name;
  if (!PyArg_ParseTuple(args, "Os:node_get_attr", &node, &name)) return nullptr;
  const char* type_key = PyObject_TypeCheck(node, &SessionType) ? kSessionKey
                         : PyObject_TypeCheck(node, &DRefType)  ? kDRefKey
                                                                : Py_TYPE(node)->tp_name;
  // No reflected attributes on these objects: the lookup always fails, as
  // ReflectionVTable::GetAttr does, with the error text and backtrace the
  // FFI hands back to Python.
  PyObject* error = PyObject_CallFunction(
      g_ffi_error, "s", (std::string("AttributeError: ") + type_key + " object has no attribute " +
                         name).c_str());
  if (error == nullptr) return nullptr;
  PyObject* backtrace = PyUnicode_FromFormat(
      "Stack trace:\n  0: gc_channel::NodeGetAttr(PyObject*, PyObject*)\n"
      "        at gc_channel/disco_module.cc:%d\n",
      __LINE__);
  if (backtrace == nullptr || PyObject_SetAttrString(error, "backtrace", backtrace) != 0) {
    Py_XDECREF(backtrace);
    Py_DECREF(error);
    return nullptr;
  }
  Py_DECREF(backtrace);
  PyErr_SetObject(g_ffi_error, error);
  Py_DECREF(error);
  return nullptr;
}

PyObject* RegisterObject(PyObject*, PyObject* args) {
  const char* key;
  PyObject* cls;
  if (!PyArg_ParseTuple(args, "sO!:register_object", &key, &PyType_Type, &cls)) return nullptr;
  PyTypeObject* base = std::strcmp(key, kSessionKey) == 0 ? &SessionType
                       : std::strcmp(key, kDRefKey) == 0  ? &DRefType
                                                          : nullptr;
  if (base == nullptr) {
    PyErr_Format(PyExc_KeyError, "unknown type key %s", key);
    return nullptr;
  }
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), base)) {
    PyErr_Format(PyExc_TypeError, "a class registered as %s must derive from %s", key,
                 base->tp_name);
    return nullptr;
  }
  if (PyDict_SetItemString(g_registry, key, cls) != 0) return nullptr;
  return Py_NewRef(cls);
}

PyMethodDef kModuleMethods[] = {
    {"register_object", RegisterObject, METH_VARARGS,
     "register_object(type_key, cls): the class the FFI wraps objects of that key in."},
    {"session_create", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(SessionCreate)),
     METH_VARARGS | METH_KEYWORDS,
     "session_create(write_window_us=0, handshake_seconds=0) -> Session with a fresh channel and "
     "reader; handshake_seconds > 0 pauses every streamed frame after its header until another "
     "thread writes, waits for the whole-frame lock, or releases the pause (that long at most)."},
    {"session_get_global_func", SessionGetGlobalFunc, METH_VARARGS,
     "session_get_global_func(session, name) -> DRef (sends a get_global_func frame)."},
    {"session_call_packed", SessionCallPacked, METH_VARARGS,
     "session_call_packed(session, func, *args) -> DRef (sends a call_packed frame)."},
    {"session_shutdown", SessionShutdown, METH_VARARGS,
     "session_shutdown(session, timeout=5.0) -> dict: close the channel, collect the reader's "
     "report (frames, calls, kills, corrupted, message, evidence, handshake)."},
    {"session_wait_mid_frame", SessionWaitMidFrame, METH_VARARGS,
     "session_wait_mid_frame(session, timeout) -> bool: wait (GIL released) until a frame is "
     "paused after its header; False on timeout."},
    {"session_release_mid_frame", SessionReleaseMidFrame, METH_O,
     "session_release_mid_frame(session) -> bool: end the open mid-frame pause, if any."},
    {"dref_session", DRefSession, METH_O,
     "dref_session(dref) -> a NEW Session wrapper on every call (TVM's DRefSession)."},
    {"node_get_attr", NodeGetAttr, METH_VARARGS,
     "node_get_attr(obj, name): reflection lookup; always raises FFIError (AttributeError)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "gc_channel",
    "A miniature TVM Disco runtime: sessions over a checked pipe channel, DRefs whose "
    "destructor writes to it.",
    -1, kModuleMethods,
};

bool ReadyTypes() {
  SessionType.tp_name = "gc_channel.Session";
  SessionType.tp_basicsize = sizeof(SessionObject);
  SessionType.tp_dealloc = SessionDealloc;
  SessionType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  SessionType.tp_doc = "A handle on a Disco session (create with session_create).";
  // No tp_new: sessions come from the FFI functions only.

  DRefType.tp_name = "gc_channel.DRef";
  DRefType.tp_basicsize = sizeof(DRefObject);
  DRefType.tp_dealloc = DRefDealloc;
  DRefType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  DRefType.tp_doc = "A register on the workers; freeing it sends kill_reg on the channel.";
  DRefType.tp_new = DRefNew;
  DRefType.tp_methods = kDRefMethods;
  DRefType.tp_getset = kDRefGetSet;
  return PyType_Ready(&SessionType) == 0 && PyType_Ready(&DRefType) == 0;
}

}  // namespace

PyMODINIT_FUNC PyInit_gc_channel(void) {
  if (!ReadyTypes()) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
#ifdef Py_GIL_DISABLED
  // A free-threaded build keeps the GIL off only for modules that say they need none.
  PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#endif
  g_registry = PyDict_New();
  g_ffi_error = PyErr_NewExceptionWithDoc(
      "gc_channel.FFIError",
      "A native call failed; the text starts with the Python error type to raise, and "
      "`backtrace` holds the native frames.",
      nullptr, nullptr);
  if (g_registry == nullptr || g_ffi_error == nullptr ||
      PyModule_AddObject(module, "FFIError", Py_NewRef(g_ffi_error)) != 0 ||
      PyModule_AddObject(module, "Session", Py_NewRef(&SessionType)) != 0 ||
      PyModule_AddObject(module, "DRef", Py_NewRef(&DRefType)) != 0 ||
      PyModule_AddObject(module, "FIXED", PyBool_FromLong(LIFEGUARD_FIXED)) != 0 ||
      PyModule_AddIntConstant(module, "ATOMIC_FRAME_LIMIT",
                              static_cast<long>(lifeguard_fixture::kAtomicFrameLimit)) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
