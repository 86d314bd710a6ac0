// `fork_lock`: a thread of the module's own holds a plain mutex most of the time (9 ms of every 10), as a
// library's background flusher or allocator thread does. use() takes the same mutex.
//
// LIFEGUARD_FIXED=0 (buggy): nothing happens at fork, so a child forked while the thread holds the mutex
// inherits it locked, with no thread left to unlock it: the child's use() waits forever.
// LIFEGUARD_FIXED=1 (fixed): pthread_atfork handlers take the mutex before fork and release it after, in
// the parent and in the child: a child's use() works.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t started_in = 0;
static long uses = 0;

static void pause_ms(long ms) {
    struct timespec wait = {0, ms * 1000000L};
    while (nanosleep(&wait, &wait) != 0) {
    }
}

static void *holder(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&lock);
        pause_ms(9);
        pthread_mutex_unlock(&lock);
        pause_ms(1);
    }
    return NULL;
}

#if LIFEGUARD_FIXED
static void take(void) { pthread_mutex_lock(&lock); }
static void give(void) { pthread_mutex_unlock(&lock); }
#endif

static PyObject *start_holder(PyObject *self, PyObject *unused) {
    if (started_in != getpid()) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, holder, NULL) != 0) {
            return PyErr_Format(PyExc_OSError, "pthread_create failed");
        }
        pthread_detach(thread);
        started_in = getpid();
    }
    Py_RETURN_NONE;
}

static PyObject *use(PyObject *self, PyObject *unused) {
    long now;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lock);
    now = ++uses;
    pthread_mutex_unlock(&lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(now);
}

static PyMethodDef methods[] = {
    {"start_holder", start_holder, METH_NOARGS, "start the thread that holds the lock 9 ms of every 10"},
    {"use", use, METH_NOARGS, "take the lock once; return how many times it was taken in this process"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fork_lock", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fork_lock(void) {
#if LIFEGUARD_FIXED
    pthread_atfork(take, give, give);
#endif
    return PyModule_Create(&module);
}
