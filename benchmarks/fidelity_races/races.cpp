// The native halves of benchmarks/fidelity.py's race programs: one extension module, ``races``, built at run
// time by the benchmark (never committed). Each race is a real one, of one of lifeguard's bug classes, whose
// rate depends on timing only: nothing here decides to fail.
//
// - ticker (static-destructor-after-finalize): a C++ static object owns a thread that calls into Python
//   every period; the object's destructor (run by exit(), after Py_FinalizeEx) stops and joins it. A tick
//   that enters Python while the interpreter finalizes crashes the process.
// - locker (fork-with-held-gil's lock half): a native thread holds a plain mutex part of the time; a child
//   forked while it is held deadlocks on its first use_lock().
// - channel (cross-thread-gc-write): a Ref's destructor writes a record to a channel that the owner thread
//   writes to without the GIL; when gc frees a Ref on another thread during an owner write, records interleave.
//
// Hook points read LIFEGUARD_JITTER_US as lifeguard's jitter perturbation sets it: a random sleep of up to
// that many microseconds, where the interleaving matters.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <time.h>
#include <unistd.h>

namespace {

long jitter_limit_us() {
    static const long limit = [] {
        const char *text = std::getenv("LIFEGUARD_JITTER_US");
        return text ? std::atol(text) : 0L;
    }();
    return limit;
}

void hook_point() {
    long limit = jitter_limit_us();
    if (limit <= 0) return;
    thread_local std::minstd_rand rng(std::random_device{}());
    usleep(static_cast<useconds_t>(rng() % static_cast<unsigned long>(limit + 1)));
}

void spin_for_us(long micros) {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
    while (std::chrono::steady_clock::now() < until) {
    }
}

// ---- ticker ---------------------------------------------------------------------------------------------

struct Ticker {
    std::atomic<bool> stop{false};
    std::thread worker;
    PyObject *callback = nullptr;  // owned, never released: the static destructor touches no Python object

    void start(PyObject *cb, long period_us) {
        Py_INCREF(cb);
        callback = cb;
        worker = std::thread([this, period_us] {
            while (!stop.load()) {
                usleep(static_cast<useconds_t>(period_us));
                PyGILState_STATE state = PyGILState_Ensure();
                PyObject *result = PyObject_CallObject(callback, nullptr);
                Py_XDECREF(result);
                if (!result) PyErr_Clear();
                PyGILState_Release(state);
            }
        });
    }

    ~Ticker() {
        stop.store(true);
        if (worker.joinable()) worker.join();
    }
};

Ticker ticker;

PyObject *start_ticker(PyObject *, PyObject *args) {
    PyObject *cb;
    long period_us = 1000;
    if (!PyArg_ParseTuple(args, "O|l", &cb, &period_us)) return nullptr;
    if (ticker.worker.joinable()) {
        PyErr_SetString(PyExc_RuntimeError, "the ticker runs already");
        return nullptr;
    }
    ticker.start(cb, period_us);
    Py_RETURN_NONE;
}

// ---- locker ---------------------------------------------------------------------------------------------

std::mutex lock_at_fork;
std::atomic<bool> locker_started{false};

PyObject *start_locker(PyObject *, PyObject *args) {
    long hold_us, period_us;
    if (!PyArg_ParseTuple(args, "ll", &hold_us, &period_us)) return nullptr;
    if (locker_started.exchange(true)) Py_RETURN_NONE;
    std::thread([hold_us, period_us] {
        for (;;) {
            {
                std::lock_guard<std::mutex> held(lock_at_fork);
                spin_for_us(hold_us);
                hook_point();
            }
            usleep(static_cast<useconds_t>(period_us - hold_us));
        }
    }).detach();
    Py_RETURN_NONE;
}

PyObject *use_lock(PyObject *, PyObject *) {
    Py_BEGIN_ALLOW_THREADS
    lock_at_fork.lock();
    lock_at_fork.unlock();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

// ---- channel --------------------------------------------------------------------------------------------

std::string channel;                  // the records, one a line; written without any lock (the bug)
std::atomic<size_t> channel_end{0};

void channel_put(const char *record, size_t length) {
    // A byte at a time, a microsecond each, as a slow stream writer without a lock would interleave them
    // (a write that ends before another thread can even take the released GIL never races).
    for (size_t i = 0; i < length; ++i) {
        size_t at = channel_end.fetch_add(1);
        if (at < channel.size()) channel[at] = record[i];
        spin_for_us(1);
    }
}

PyObject *channel_open(PyObject *, PyObject *args) {
    Py_ssize_t capacity;
    if (!PyArg_ParseTuple(args, "n", &capacity)) return nullptr;
    channel.assign(static_cast<size_t>(capacity), '\0');
    channel_end.store(0);
    Py_RETURN_NONE;
}

PyObject *channel_write(PyObject *, PyObject *args) {
    const char *data;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "y#", &data, &length)) return nullptr;
    std::string record(data, static_cast<size_t>(length));
    Py_BEGIN_ALLOW_THREADS
    channel_put(record.data(), record.size());
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyObject *channel_read(PyObject *, PyObject *) {
    size_t end = std::min(channel_end.load(), channel.size());
    return PyBytes_FromStringAndSize(channel.data(), static_cast<Py_ssize_t>(end));
}

struct RefObject {
    PyObject_HEAD
    PyObject *dict;  // a cycle goes through it
};

void ref_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    static const char record[] = "FREEFREEFREEFREEFREEFREEFREEFREE\n";
    hook_point();
    channel_put(record, sizeof record - 1);
    Py_CLEAR(reinterpret_cast<RefObject *>(self)->dict);
    Py_TYPE(self)->tp_free(self);
}

int ref_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(reinterpret_cast<RefObject *>(self)->dict);
    return 0;
}

int ref_clear(PyObject *self) {
    Py_CLEAR(reinterpret_cast<RefObject *>(self)->dict);
    return 0;
}

PyTypeObject RefType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyMethodDef methods[] = {
    {"start_ticker", start_ticker, METH_VARARGS, "start_ticker(callback, period_us=1000)"},
    {"start_locker", start_locker, METH_VARARGS, "start_locker(hold_us, period_us)"},
    {"use_lock", use_lock, METH_NOARGS, "take and release the locker's mutex"},
    {"channel_open", channel_open, METH_VARARGS, "channel_open(capacity)"},
    {"channel_write", channel_write, METH_VARARGS, "channel_write(record): written without the GIL"},
    {"channel_read", channel_read, METH_NOARGS, "the channel's bytes"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "races", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_races() {
    RefType.tp_name = "races.Ref";
    RefType.tp_basicsize = sizeof(RefObject);
    RefType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    RefType.tp_dealloc = ref_dealloc;
    RefType.tp_traverse = ref_traverse;
    RefType.tp_clear = ref_clear;
    RefType.tp_dictoffset = offsetof(RefObject, dict);
    RefType.tp_new = PyType_GenericNew;
    if (PyType_Ready(&RefType) < 0) return nullptr;
    PyObject *m = PyModule_Create(&module);
    if (!m) return nullptr;
    Py_INCREF(&RefType);
    if (PyModule_AddObject(m, "Ref", reinterpret_cast<PyObject *>(&RefType)) < 0) return nullptr;
    return m;
}
