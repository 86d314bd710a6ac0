// `probe_modes`: one small bug for each probe mode, so each mode is shown to catch its own kind.
//
// LIFEGUARD_FIXED=0 (buggy) / 1 (fixed):
// - Pool (fork-use): a worker thread runs the jobs run() hands it. Buggy: a forked child's run()
//   queues a job for a worker that does not exist there and waits for it forever (GNU OpenMP's team
//   in a forked child). Fixed: run() in another process first starts a pool of its own. Both builds'
//   destructors leave a parent's worker alone in a child: this type has no finalization bug.
// - Joiner (fork-finalize): a thread waiting to be stopped. Buggy: the destructor stops it and waits for
//   its word in any process, so a forked child that merely drops an inherited Joiner waits for a thread
//   that is not there and hangs. Fixed: a child leaves the parent's thread alone.
// - install_atfork() (fork-exit): a registry lock held by a thread of its own, and a pthread_atfork
//   child handler that resets the registry. Buggy: the handler locks the lock, held by a thread the
//   child does not have: the child hangs inside fork(). Fixed: the handler re-initialises the lock.
// - Node (gc-cycle): a GC type owning a buffer; tp_clear frees it. Buggy: the destructor scrubs the
//   buffer without looking, so a Node collected in a cycle (tp_clear first) writes through NULL.
// - Device (fork-finalize, a crash): state in a page mapped MADV_DONTFORK (as RDMA and GPU drivers map
//   theirs): a forked child does not have it. Buggy: the destructor writes its goodbye there in any
//   process, so a child dropping an inherited Device dies of SIGSEGV. Fixed: only in its own process.
// - keep_callback() (exit): native code keeps a Python callable. Buggy: a library destructor releases
//   it after Py_Finalize (the onnxruntime pool). Fixed: it leaves it once the interpreter is gone.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

// ---- Pool ------------------------------------------------------------------------------------------
typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int pending, done, stop;
    long value, result;
    pthread_t worker;
    pid_t owner;
} PoolObject;

static void *pool_worker(void *arg) {
    PoolObject *self = (PoolObject *)arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stop) {
        if (self->pending) {
            self->result = self->value * 2;
            self->pending = 0;
            self->done = 1;
            pthread_cond_broadcast(&self->wake);
        }
        pthread_cond_wait(&self->wake, &self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static int pool_start(PoolObject *self) {
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->pending = self->done = self->stop = 0;
    self->owner = getpid();
    return pthread_create(&self->worker, NULL, pool_worker, self);
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PoolObject *self = (PoolObject *)type->tp_alloc(type, 0);
    if (self != NULL && pool_start(self) != 0) {
        self->owner = 0;
        Py_DECREF(self);
        return PyErr_Format(PyExc_OSError, "cannot start the pool's worker");
    }
    return (PyObject *)self;
}

static PyObject *pool_run(PoolObject *self, PyObject *arg) {
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred()) return NULL;
    long result;
    Py_BEGIN_ALLOW_THREADS
#if LIFEGUARD_FIXED
    if (self->owner != getpid()) pool_start(self);  // a forked child: the parent's worker is not here
#endif
    pthread_mutex_lock(&self->lock);
    self->value = value;
    self->done = 0;
    self->pending = 1;
    pthread_cond_broadcast(&self->wake);
    while (!self->done) pthread_cond_wait(&self->wake, &self->lock);
    result = self->result;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(result);
}

static void pool_dealloc(PoolObject *self) {
    if (self->owner == getpid()) {  // both builds: never join a thread of another process
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);
        self->stop = 1;
        pthread_cond_broadcast(&self->wake);
        pthread_mutex_unlock(&self->lock);
        pthread_join(self->worker, NULL);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef pool_methods[] = {
    {"run", (PyCFunction)pool_run, METH_O, "run(n) -> 2 * n, computed on the pool's worker thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "probe_modes.Pool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = pool_new,
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_methods = pool_methods,
};

// ---- Joiner ----------------------------------------------------------------------------------------
typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop, stopped;
    pthread_t thread;
    pid_t owner;
} JoinerObject;

static void *joiner_thread(void *arg) {
    JoinerObject *self = (JoinerObject *)arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stop) pthread_cond_wait(&self->wake, &self->lock);
    self->stopped = 1;  // the handshake the destructor waits for
    pthread_cond_broadcast(&self->wake);
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static PyObject *joiner_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    JoinerObject *self = (JoinerObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->owner = getpid();
    if (pthread_create(&self->thread, NULL, joiner_thread, self) != 0) {
        self->owner = 0;
        Py_DECREF(self);
        return PyErr_Format(PyExc_OSError, "cannot start the joiner's thread");
    }
    return (PyObject *)self;
}

static void joiner_dealloc(JoinerObject *self) {
#if LIFEGUARD_FIXED
    int mine = self->owner == getpid();
#else
    int mine = self->owner != 0;  // the bug: a forked child joins the parent's thread
#endif
    if (mine) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);
        self->stop = 1;
        pthread_cond_broadcast(&self->wake);
        // Wait until the thread says it stopped (glibc's pthread_join alone returns at once in a forked
        // child: fork marks the other threads' descriptors as exited).
        while (!self->stopped) pthread_cond_wait(&self->wake, &self->lock);
        pthread_mutex_unlock(&self->lock);
        pthread_join(self->thread, NULL);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject JoinerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "probe_modes.Joiner",
    .tp_basicsize = sizeof(JoinerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = joiner_new,
    .tp_dealloc = (destructor)joiner_dealloc,
};

// ---- install_atfork --------------------------------------------------------------------------------
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t holder_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t holder_wake = PTHREAD_COND_INITIALIZER;
static int holder_holds = 0, atfork_installed = 0;
static long registry_resets = 0;

static void *registry_holder(void *arg) {
    pthread_mutex_lock(&registry_lock);  // held for the process's life: the registry's own thread
    pthread_mutex_lock(&holder_lock);
    holder_holds = 1;
    pthread_cond_broadcast(&holder_wake);
    for (;;) pthread_cond_wait(&holder_wake, &holder_lock);
    return NULL;
}

static void registry_after_fork_in_child(void) {
#if LIFEGUARD_FIXED
    pthread_mutex_init(&registry_lock, NULL);  // its holder is not in this process
#endif
    pthread_mutex_lock(&registry_lock);
    registry_resets++;
    pthread_mutex_unlock(&registry_lock);
}

static PyObject *install_atfork(PyObject *module, PyObject *unused) {
    if (!atfork_installed) {
        atfork_installed = 1;
        pthread_t holder;
        pthread_atfork(NULL, NULL, registry_after_fork_in_child);
        if (pthread_create(&holder, NULL, registry_holder, NULL) != 0)
            return PyErr_Format(PyExc_OSError, "cannot start the registry's thread");
        pthread_detach(holder);
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&holder_lock);
        while (!holder_holds) pthread_cond_wait(&holder_wake, &holder_lock);
        pthread_mutex_unlock(&holder_lock);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

// ---- Node ------------------------------------------------------------------------------------------
typedef struct {
    PyObject_HEAD
    PyObject *attached;
    char *buffer;
} NodeObject;

enum { NODE_BUFFER = 64 };

static PyObject *node_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    NodeObject *self = (NodeObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->buffer = PyMem_RawCalloc(1, NODE_BUFFER);
    return (PyObject *)self;
}

static int node_traverse(NodeObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->attached);
    return 0;
}

static int node_clear(NodeObject *self) {
    PyMem_RawFree(self->buffer);
    self->buffer = NULL;
    Py_CLEAR(self->attached);
    return 0;
}

static void node_dealloc(NodeObject *self) {
    PyObject_GC_UnTrack(self);
#if LIFEGUARD_FIXED
    if (self->buffer != NULL) memset(self->buffer, 0, NODE_BUFFER);
#else
    memset(self->buffer, 0, NODE_BUFFER);  // the bug: NULL once tp_clear ran (collected in a cycle)
#endif
    PyMem_RawFree(self->buffer);
    Py_CLEAR(self->attached);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *node_attach(NodeObject *self, PyObject *other) {
    Py_INCREF(other);
    Py_XSETREF(self->attached, other);
    Py_RETURN_NONE;
}

static PyMethodDef node_methods[] = {
    {"attach", (PyCFunction)node_attach, METH_O, "attach(obj): the node keeps obj (a cycle if obj leads back)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "probe_modes.Node",
    .tp_basicsize = sizeof(NodeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = node_new,
    .tp_dealloc = (destructor)node_dealloc,
    .tp_traverse = (traverseproc)node_traverse,
    .tp_clear = (inquiry)node_clear,
    .tp_methods = node_methods,
};

// ---- Device ----------------------------------------------------------------------------------------
typedef struct {
    PyObject_HEAD
    volatile long *page;
    long page_size;
    pid_t owner;
} DeviceObject;

static PyObject *device_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    DeviceObject *self = (DeviceObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->page_size = sysconf(_SC_PAGESIZE);
    void *page = mmap(NULL, self->page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED || madvise(page, self->page_size, MADV_DONTFORK) != 0) {
        Py_DECREF(self);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->page = page;
    self->page[0] = 1;  // "open"
    self->owner = getpid();
    return (PyObject *)self;
}

static void device_dealloc(DeviceObject *self) {
#if LIFEGUARD_FIXED
    int mine = self->owner == getpid();
#else
    int mine = self->page != NULL;  // the bug: a forked child has no such page
#endif
    if (mine) {
        self->page[0] = 0;  // "closed"
        munmap((void *)self->page, self->page_size);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject DeviceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "probe_modes.Device",
    .tp_basicsize = sizeof(DeviceObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = device_new,
    .tp_dealloc = (destructor)device_dealloc,
};

// ---- keep_callback ---------------------------------------------------------------------------------
enum { MAX_KEPT = 64 };
static PyObject *kept[MAX_KEPT];
static int kept_count = 0;

static PyObject *keep_callback(PyObject *module, PyObject *callback) {
    if (!PyCallable_Check(callback)) return PyErr_Format(PyExc_TypeError, "keep_callback() needs a callable");
    if (kept_count == MAX_KEPT) return PyErr_Format(PyExc_OverflowError, "at most %d callbacks", MAX_KEPT);
    PyObject *result = PyObject_CallNoArgs(callback);  // native code calls back into Python
    if (result == NULL) return NULL;
    Py_INCREF(callback);
    kept[kept_count++] = callback;
    return result;
}

__attribute__((destructor)) static void release_callbacks(void) {
#if LIFEGUARD_FIXED
    if (!Py_IsInitialized()) return;  // too late to touch Python objects: leave them to the OS
#endif
    while (kept_count > 0) Py_DECREF(kept[--kept_count]);
}

// ---- module ----------------------------------------------------------------------------------------
static PyMethodDef module_methods[] = {
    {"install_atfork", install_atfork, METH_NOARGS, "install the registry and its pthread_atfork child handler"},
    {"keep_callback", keep_callback, METH_O, "call the callable, keep it in native code for the process's life"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "probe_modes", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_probe_modes(void) {
    PyTypeObject *types[] = {&PoolType, &JoinerType, &NodeType, &DeviceType};
    const char *names[] = {"Pool", "Joiner", "Node", "Device"};
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    for (int i = 0; i < 4; i++) {
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(module, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    if (PyModule_AddIntConstant(module, "FIXED", LIFEGUARD_FIXED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
