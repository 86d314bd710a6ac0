// `suite_bugs`: a small library with its own test suite (suite/), and one lifetime bug per test-suite probe.
// Each bug sits in an object that needs arguments to be made or used in the buggy state, so the survey's
// generic hook (no-argument calls only) never reaches it, and its tests pass in a plain pytest run: only a
// probe applied to what a test made (its locals when it returned) shows it (tests/integration/test_suite_probes.py).
//
// LIFEGUARD_FIXED=0 (buggy) / 1 (fixed):
// - get_pool(workers) / Pool.square_all(ints) (fork-rerun): a process-wide pool of worker threads, one per
//   worker count, as GNU OpenMP's thread team or OpenBLAS's server. Buggy: a forked child that uses the pool
//   it inherited queues jobs for workers that do not exist there and waits forever (OpenBLAS #294, GCC
//   PR 60035). Fixed: a pool used in another process than its creator's first starts workers of its own.
// - Stream(capacity) (fork-finalize): a background thread checksums what write() queues; the destructor
//   stops the thread and waits for its word. Buggy: it does so in any process, so a forked child that drops
//   an inherited Stream waits for a thread it does not have. Fixed: only the creating process stops it
//   (pyzmq's Context/Socket dealloc checks the pid: zeromq/pyzmq#222, #268).
// - Context(name) (gc-thread): a handle in a registry, owned by the creating thread. Buggy: a destructor
//   run on another thread hands the release to the owner thread and waits until it is done; the owner
//   serves such requests only when it next calls into the library. When the garbage collector runs on
//   another thread while the owner waits for that thread, neither moves: a hang inside gc.collect()
//   (delmic/odemis#1952: "don't wait for the other thread in __del__()"). Fixed: any thread releases
//   the handle itself, under the registry's lock.
// - Graph(nodes) (gc-cycle): a GC type with a __dict__, its adjacency matrix in storage shared by copies;
//   tp_clear releases the storage. Buggy: tp_dealloc releases it again without looking, assuming it is
//   still there: after tp_clear (an object collected in a reference cycle) it reads through NULL, SIGSEGV
//   (pythonnet#1565: tp_dealloc after tp_clear nulled a handle; CPython gh-91636). Fixed: it looks first.
//   A cycle is collected the same on any thread: gc-thread crashes on the graph tests too.
// Every other probe x test pair is clean, given that fork-rerun's child has nothing left of the parent's run
// to finalize: a Stream of the parent's still alive in the child is fork-finalize's bug again.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

// ---- Pool (fork-rerun) -----------------------------------------------------------------------------
enum { MAX_WORKERS = 64 };
#define SQUARE_LIMIT 3037000499L  // the largest long whose square is a long

typedef struct {
    PyObject_HEAD
    int workers;
    pthread_mutex_t lock;
    pthread_cond_t work, finished;
    const long *input;  // the batch being squared: input[next..count) still to claim
    long *output;
    Py_ssize_t count, next, done;
    pid_t owner;  // the process whose workers these are
} PoolObject;

static void *pool_worker(void *arg) {
    PoolObject *pool = (PoolObject *)arg;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->next < pool->count) {
            Py_ssize_t job = pool->next++;
            long value = pool->input[job];
            pthread_mutex_unlock(&pool->lock);
            long square = value * value;
            pthread_mutex_lock(&pool->lock);
            pool->output[job] = square;
            if (++pool->done == pool->count) pthread_cond_broadcast(&pool->finished);
        }
        pthread_cond_wait(&pool->work, &pool->lock);
    }
    return NULL;
}

// Fresh synchronisation and workers for this process (called with the GIL held: one caller at a time).
static int pool_start(PoolObject *pool) {
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->finished, NULL);
    pool->input = NULL;
    pool->output = NULL;
    pool->count = pool->next = pool->done = 0;
    pool->owner = getpid();
    for (int i = 0; i < pool->workers; i++) {
        pthread_t worker;
        if (pthread_create(&worker, NULL, pool_worker, pool) != 0) return -1;
        pthread_detach(worker);
    }
    return 0;
}

static PyObject *pool_square_all(PoolObject *self, PyObject *values) {
    PyObject *seq = PySequence_Fast(values, "square_all() needs a sequence of ints");
    if (seq == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    long *input = PyMem_RawMalloc(sizeof(long) * (count + 1));
    long *output = PyMem_RawMalloc(sizeof(long) * (count + 1));
    PyObject *result = NULL;
    if (input == NULL || output == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "square_all() squares ints, not %.100s", Py_TYPE(item)->tp_name);
            goto done;
        }
        input[i] = PyLong_AsLong(item);
        if (input[i] == -1 && PyErr_Occurred()) goto done;
        if (input[i] > SQUARE_LIMIT || input[i] < -SQUARE_LIMIT) {
            PyErr_Format(PyExc_OverflowError, "%ld is too large to square", input[i]);
            goto done;
        }
    }
#if LIFEGUARD_FIXED
    // A forked child has the pool's memory but not its threads: start workers of its own first.
    if (self->owner != getpid() && pool_start(self) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the pool's workers");
        goto done;
    }
#endif
    if (count > 0) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);
        while (self->count != 0) pthread_cond_wait(&self->finished, &self->lock);  // another batch first
        self->input = input;
        self->output = output;
        self->next = self->done = 0;
        self->count = count;
        pthread_cond_broadcast(&self->work);
        while (self->done < count) pthread_cond_wait(&self->finished, &self->lock);  // the bug's wait
        self->count = 0;
        self->input = NULL;
        self->output = NULL;
        pthread_cond_broadcast(&self->finished);
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS
    }
    result = PyList_New(count);
    for (Py_ssize_t i = 0; result != NULL && i < count; i++) {
        PyObject *square = PyLong_FromLong(output[i]);
        if (square == NULL) Py_CLEAR(result);
        else PyList_SET_ITEM(result, i, square);
    }
done:
    PyMem_RawFree(input);
    PyMem_RawFree(output);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef pool_methods[] = {
    {"square_all", (PyCFunction)pool_square_all, METH_O,
     "square_all($self, values, /)\n--\n\nThe squares of a sequence of ints, computed by the pool's workers."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pool_members[] = {
    {"workers", T_INT, offsetof(PoolObject, workers), READONLY, "the number of worker threads"},
    {NULL, 0, 0, 0, NULL},
};

// No tp_new and no destructor: pools are made by get_pool() only and live as long as the process.
static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "suite_bugs.Pool",
    .tp_doc = "A process-wide pool of worker threads; get one with get_pool(workers).",
    .tp_basicsize = sizeof(PoolObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = pool_methods,
    .tp_members = pool_members,
};

static PyObject *pools = NULL;  // {workers: Pool}, never emptied

static PyObject *get_pool(PyObject *Py_UNUSED(module), PyObject *arg) {
    long workers = PyLong_AsLong(arg);
    if (workers == -1 && PyErr_Occurred()) return NULL;
    if (workers < 1 || workers > MAX_WORKERS)
        return PyErr_Format(PyExc_ValueError, "a pool has 1 to %d workers, not %ld", MAX_WORKERS, workers);
    if (pools == NULL && (pools = PyDict_New()) == NULL) return NULL;
    PyObject *key = PyLong_FromLong(workers);
    if (key == NULL) return NULL;
    PyObject *pool = PyDict_GetItemWithError(pools, key);
    if (pool != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(pool);
    }
    PoolObject *made = PyObject_New(PoolObject, &PoolType);
    if (made == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    made->workers = (int)workers;
    if (pool_start(made) != 0) {  // the workers that did start use the pool: it is never freed
        Py_DECREF(key);
        return PyErr_Format(PyExc_OSError, "cannot start %ld worker threads", workers);
    }
    int stored = PyDict_SetItem(pools, key, (PyObject *)made);
    Py_DECREF(key);
    if (stored < 0) return NULL;
    return (PyObject *)made;
}

// ---- Stream (fork-finalize) ------------------------------------------------------------------------
enum { MAX_CAPACITY = 1024, ADLER_MOD = 65521 };

typedef struct {
    char *data;
    Py_ssize_t size;
} Chunk;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t changed;
    Chunk *ring;  // capacity slots: queued chunks from head on
    Py_ssize_t capacity, head, queued;
    int busy, stop, stopped;
    unsigned long adler_a, adler_b;  // Adler-32 of what the thread has consumed
    long long bytes_sent;
    pthread_t thread;
    pid_t owner;  // 0 until the thread runs
} StreamObject;

static void *stream_thread(void *arg) {
    StreamObject *self = (StreamObject *)arg;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        if (self->queued > 0) {
            Chunk chunk = self->ring[self->head];
            self->head = (self->head + 1) % self->capacity;
            self->queued--;
            self->busy = 1;
            unsigned long a = self->adler_a, b = self->adler_b;
            pthread_cond_broadcast(&self->changed);  // a slot is free
            pthread_mutex_unlock(&self->lock);
            for (Py_ssize_t i = 0; i < chunk.size; i++) {
                a = (a + (unsigned char)chunk.data[i]) % ADLER_MOD;
                b = (b + a) % ADLER_MOD;
            }
            PyMem_RawFree(chunk.data);
            pthread_mutex_lock(&self->lock);
            self->adler_a = a;
            self->adler_b = b;
            self->bytes_sent += chunk.size;
            self->busy = 0;
            pthread_cond_broadcast(&self->changed);
            continue;
        }
        if (self->stop) break;  // only once everything queued is consumed
        pthread_cond_wait(&self->changed, &self->lock);
    }
    self->stopped = 1;  // the word the destructor waits for
    pthread_cond_broadcast(&self->changed);
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static PyObject *stream_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"capacity", NULL};
    Py_ssize_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:Stream", keywords, &capacity)) return NULL;
    if (capacity < 1 || capacity > MAX_CAPACITY)
        return PyErr_Format(PyExc_ValueError, "a stream queues 1 to %d chunks, not %zd", MAX_CAPACITY, capacity);
    StreamObject *self = (StreamObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ring = PyMem_RawCalloc(capacity, sizeof(Chunk));
    if (self->ring == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->capacity = capacity;
    self->adler_a = 1;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->changed, NULL);
    if (pthread_create(&self->thread, NULL, stream_thread, self) != 0) {
        Py_DECREF(self);
        return PyErr_Format(PyExc_OSError, "cannot start the stream's thread");
    }
    self->owner = getpid();
    return (PyObject *)self;
}

static void stream_dealloc(StreamObject *self) {
#if LIFEGUARD_FIXED
    int mine = self->owner == getpid();  // a forked child has the object but not the thread: leave it
#else
    int mine = self->owner != 0;  // the bug: a forked child stops and waits for the parent's thread
#endif
    if (mine) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);
        self->stop = 1;
        pthread_cond_broadcast(&self->changed);
        // Wait for the thread's word, not for pthread_join alone: in a forked child, glibc's pthread_join
        // returns at once for a thread that fork did not copy.
        while (!self->stopped) pthread_cond_wait(&self->changed, &self->lock);
        pthread_mutex_unlock(&self->lock);
        pthread_join(self->thread, NULL);
        Py_END_ALLOW_THREADS
        pthread_cond_destroy(&self->changed);
        pthread_mutex_destroy(&self->lock);
    }
    PyMem_RawFree(self->ring);  // the thread consumed and freed every chunk before it stopped
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *stream_write(StreamObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Chunk chunk = {PyMem_RawMalloc(view.len + 1), view.len};
    if (chunk.data != NULL) memcpy(chunk.data, view.buf, view.len);
    PyBuffer_Release(&view);
    if (chunk.data == NULL) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    while (self->queued == self->capacity) pthread_cond_wait(&self->changed, &self->lock);
    self->ring[(self->head + self->queued) % self->capacity] = chunk;
    self->queued++;
    pthread_cond_broadcast(&self->changed);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(chunk.size);
}

static PyObject *stream_flush(StreamObject *self, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    while (self->queued > 0 || self->busy) pthread_cond_wait(&self->changed, &self->lock);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *stream_checksum(StreamObject *self, void *Py_UNUSED(closure)) {
    pthread_mutex_lock(&self->lock);  // held by the thread for a few instructions at a time
    unsigned long checksum = (self->adler_b << 16) | self->adler_a;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromUnsignedLong(checksum);
}

static PyObject *stream_bytes_sent(StreamObject *self, void *Py_UNUSED(closure)) {
    pthread_mutex_lock(&self->lock);
    long long sent = self->bytes_sent;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLongLong(sent);
}

static PyMethodDef stream_methods[] = {
    {"write", (PyCFunction)stream_write, METH_O,
     "write($self, data, /)\n--\n\nQueue a copy of data for the stream's thread (waits while the queue is full)."},
    {"flush", (PyCFunction)stream_flush, METH_NOARGS,
     "flush($self, /)\n--\n\nWait until the stream's thread has consumed everything queued."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef stream_getset[] = {
    {"checksum", (getter)stream_checksum, NULL, "Adler-32 of the bytes consumed so far", NULL},
    {"bytes_sent", (getter)stream_bytes_sent, NULL, "the number of bytes consumed so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "suite_bugs.Stream",
    .tp_doc = "Stream(capacity)\n--\n\nA byte stream consumed by a background thread, with capacity chunks "
              "queued at most.",
    .tp_basicsize = sizeof(StreamObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = stream_new,
    .tp_dealloc = (destructor)stream_dealloc,
    .tp_methods = stream_methods,
    .tp_getset = stream_getset,
};

// ---- Context (gc-thread) ---------------------------------------------------------------------------
typedef struct Handle {
    struct Handle *next;
    long submitted;
} Handle;

typedef struct ReleaseRequest {
    struct ReleaseRequest *next;
    Handle *handle;
    unsigned long owner;
    int done;
} ReleaseRequest;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t registry_released = PTHREAD_COND_INITIALIZER;
static Handle *open_handles = NULL;
static ReleaseRequest *pending_releases = NULL;  // handed to their owner threads

typedef struct {
    PyObject_HEAD
    PyObject *name;
    Handle *handle;
    unsigned long owner;  // the creating thread's identifier
} ContextObject;

static void release_locked(Handle *handle) {
    for (Handle **link = &open_handles; *link != NULL; link = &(*link)->next) {
        if (*link == handle) {
            *link = handle->next;
            break;
        }
    }
    PyMem_RawFree(handle);
}

// The releases other threads handed to this one: served whenever the owner calls into the library.
static void serve_releases(void) {
    unsigned long me = PyThread_get_thread_ident();
    pthread_mutex_lock(&registry_lock);
    for (ReleaseRequest **link = &pending_releases; *link != NULL;) {
        ReleaseRequest *request = *link;
        if (request->owner == me) {
            release_locked(request->handle);
            request->done = 1;
            *link = request->next;
        } else {
            link = &request->next;
        }
    }
    pthread_cond_broadcast(&registry_released);
    pthread_mutex_unlock(&registry_lock);
}

static PyObject *context_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"name", NULL};
    PyObject *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U:Context", keywords, &name)) return NULL;
    if (PyUnicode_GetLength(name) == 0) return PyErr_Format(PyExc_ValueError, "a context needs a name");
    serve_releases();
    ContextObject *self = (ContextObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->handle = PyMem_RawCalloc(1, sizeof(Handle));
    if (self->handle == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->name = Py_NewRef(name);
    self->owner = PyThread_get_thread_ident();
    pthread_mutex_lock(&registry_lock);
    self->handle->next = open_handles;
    open_handles = self->handle;
    pthread_mutex_unlock(&registry_lock);
    return (PyObject *)self;
}

static void context_dealloc(ContextObject *self) {
    if (self->handle != NULL) {
#if LIFEGUARD_FIXED
        pthread_mutex_lock(&registry_lock);  // the registry's lock makes a release safe on any thread
        release_locked(self->handle);
        pthread_mutex_unlock(&registry_lock);
#else
        if (self->owner == PyThread_get_thread_ident()) {
            pthread_mutex_lock(&registry_lock);
            release_locked(self->handle);
            pthread_mutex_unlock(&registry_lock);
        } else {
            // The bug: hand the release to the owner thread and wait until it is done. The owner serves it
            // only when it next calls into the library: not while it waits for this thread.
            ReleaseRequest request = {NULL, self->handle, self->owner, 0};
            Py_BEGIN_ALLOW_THREADS
            pthread_mutex_lock(&registry_lock);
            request.next = pending_releases;
            pending_releases = &request;
            while (!request.done) pthread_cond_wait(&registry_released, &registry_lock);
            pthread_mutex_unlock(&registry_lock);
            Py_END_ALLOW_THREADS
        }
#endif
    }
    Py_XDECREF(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *context_submit(ContextObject *self, PyObject *arg) {
    long operations = PyLong_AsLong(arg);
    if (operations == -1 && PyErr_Occurred()) return NULL;
    if (operations < 0) return PyErr_Format(PyExc_ValueError, "cannot submit %ld operations", operations);
    serve_releases();
    pthread_mutex_lock(&registry_lock);
    long total = self->handle->submitted += operations;
    pthread_mutex_unlock(&registry_lock);
    return PyLong_FromLong(total);
}

static PyObject *live_contexts(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    long count = 0;
    pthread_mutex_lock(&registry_lock);
    for (Handle *handle = open_handles; handle != NULL; handle = handle->next) count++;
    pthread_mutex_unlock(&registry_lock);
    return PyLong_FromLong(count);
}

static PyMethodDef context_methods[] = {
    {"submit", (PyCFunction)context_submit, METH_O,
     "submit($self, operations, /)\n--\n\nSubmit operations; returns how many this context has submitted."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef context_members[] = {
    {"name", T_OBJECT, offsetof(ContextObject, name), READONLY, "the context's name"},
    {"thread", T_ULONG, offsetof(ContextObject, owner), READONLY, "the identifier of the thread that owns it"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "suite_bugs.Context",
    .tp_doc = "Context(name)\n--\n\nA named context in the library's registry, owned by the thread that made it.",
    .tp_basicsize = sizeof(ContextObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = context_new,
    .tp_dealloc = (destructor)context_dealloc,
    .tp_methods = context_methods,
    .tp_members = context_members,
};

// ---- Graph (gc-cycle) ------------------------------------------------------------------------------
enum { MAX_NODES = 2048 };

typedef struct {
    Py_ssize_t owners;  // graphs sharing it: copies share until one of them changes
    Py_ssize_t nodes;
    unsigned char cells[];  // nodes x nodes adjacency matrix
} Storage;

typedef struct {
    PyObject_HEAD
    PyObject *dict;  // users label their graphs
    Storage *storage;
} GraphObject;

static void storage_release(Storage **storage) {
    if (*storage != NULL && --(*storage)->owners == 0) PyMem_Free(*storage);
    *storage = NULL;
}

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"nodes", NULL};
    Py_ssize_t nodes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:Graph", keywords, &nodes)) return NULL;
    if (nodes < 1 || nodes > MAX_NODES)
        return PyErr_Format(PyExc_ValueError, "a graph has 1 to %d nodes, not %zd", MAX_NODES, nodes);
    GraphObject *self = (GraphObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->storage = PyMem_Calloc(1, sizeof(Storage) + nodes * nodes);
    if (self->storage == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->storage->owners = 1;
    self->storage->nodes = nodes;
    return (PyObject *)self;
}

static int graph_traverse(GraphObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict);
    return 0;
}

static int graph_clear(GraphObject *self) {
    Py_CLEAR(self->dict);
    storage_release(&self->storage);
    return 0;
}

static void graph_dealloc(GraphObject *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->dict);
#if LIFEGUARD_FIXED
    storage_release(&self->storage);
#else
    // The bug: "a live graph always has storage", but tp_clear already released it when the graph was
    // collected in a reference cycle: this reads through NULL.
    if (--self->storage->owners == 0) PyMem_Free(self->storage);
#endif
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int graph_node(GraphObject *self, Py_ssize_t node) {
    if (self->storage == NULL) {
        PyErr_SetString(PyExc_ValueError, "the graph was cleared");
        return -1;
    }
    if (node < 0 || node >= self->storage->nodes) {
        PyErr_Format(PyExc_IndexError, "no node %zd in a graph of %zd nodes", node, self->storage->nodes);
        return -1;
    }
    return 0;
}

static PyObject *graph_add_edge(GraphObject *self, PyObject *args) {
    Py_ssize_t a, b;
    if (!PyArg_ParseTuple(args, "nn:add_edge", &a, &b) || graph_node(self, a) < 0 || graph_node(self, b) < 0)
        return NULL;
    Storage *storage = self->storage;
    Py_ssize_t nodes = storage->nodes;
    if (storage->owners > 1) {  // shared with a copy: this graph gets its own before it changes
        Storage *own = PyMem_Malloc(sizeof(Storage) + nodes * nodes);
        if (own == NULL) return PyErr_NoMemory();
        memcpy(own, storage, sizeof(Storage) + nodes * nodes);
        own->owners = 1;
        storage->owners--;
        self->storage = storage = own;
    }
    storage->cells[a * nodes + b] = storage->cells[b * nodes + a] = 1;
    Py_RETURN_NONE;
}

static PyObject *graph_degree(GraphObject *self, PyObject *arg) {
    Py_ssize_t node = PyLong_AsSsize_t(arg);
    if ((node == -1 && PyErr_Occurred()) || graph_node(self, node) < 0) return NULL;
    Py_ssize_t nodes = self->storage->nodes, degree = 0;
    for (Py_ssize_t other = 0; other < nodes; other++) degree += self->storage->cells[node * nodes + other];
    return PyLong_FromSsize_t(degree);
}

static PyObject *graph_copy(GraphObject *self, PyObject *Py_UNUSED(ignored)) {
    if (graph_node(self, 0) < 0) return NULL;
    GraphObject *copy = (GraphObject *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (copy == NULL) return NULL;
    copy->storage = self->storage;
    copy->storage->owners++;
    return (PyObject *)copy;
}

static PyObject *graph_nodes(GraphObject *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->storage == NULL ? 0 : self->storage->nodes);
}

static PyMethodDef graph_methods[] = {
    {"add_edge", (PyCFunction)graph_add_edge, METH_VARARGS,
     "add_edge($self, a, b, /)\n--\n\nJoin nodes a and b (an undirected edge)."},
    {"degree", (PyCFunction)graph_degree, METH_O, "degree($self, node, /)\n--\n\nThe number of node's neighbours."},
    {"copy", (PyCFunction)graph_copy, METH_NOARGS,
     "copy($self, /)\n--\n\nA copy sharing this graph's storage until either changes (no attributes copied)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"nodes", (getter)graph_nodes, NULL, "the number of nodes", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GraphType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "suite_bugs.Graph",
    .tp_doc = "Graph(nodes)\n--\n\nAn undirected graph of nodes numbered from 0, as an adjacency matrix.",
    .tp_basicsize = sizeof(GraphObject),
    .tp_dictoffset = offsetof(GraphObject, dict),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = graph_new,
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_traverse = (traverseproc)graph_traverse,
    .tp_clear = (inquiry)graph_clear,
    .tp_methods = graph_methods,
    .tp_getset = graph_getset,
};

// ---- module ----------------------------------------------------------------------------------------
static PyObject *build_info(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{s:s,s:i,s:i}", "threads", "pthread", "max_workers", MAX_WORKERS,
                         "fixed", LIFEGUARD_FIXED);
}

static PyMethodDef module_methods[] = {
    {"get_pool", get_pool, METH_O,
     "get_pool($module, workers, /)\n--\n\nThe process-wide pool of that many worker threads (made once)."},
    {"live_contexts", live_contexts, METH_NOARGS,
     "live_contexts($module, /)\n--\n\nThe number of contexts not yet released."},
    {"build_info", build_info, METH_NOARGS, "build_info($module, /)\n--\n\nHow this build was configured."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "suite_bugs", "A library with a test suite.", -1,
                                        module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_suite_bugs(void) {
    PyTypeObject *types[] = {&PoolType, &StreamType, &ContextType, &GraphType};
    const char *names[] = {"Pool", "Stream", "Context", "Graph"};
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    for (int i = 0; i < 4; i++) {
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(module, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    if (PyModule_AddStringConstant(module, "__version__", "1.0") < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
