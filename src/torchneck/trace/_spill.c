/*
 * torchneck.trace._spill: file mappings for arrays larger than memory should hold, and a watcher
 * thread that lets go of their resident pages when the process's memory passes a ceiling.
 *
 * Why in C: the pages of a mapped file that the process reads count in its resident memory
 * (RSS). A watcher written in Python needs the GIL to run, and numpy holds it through many a
 * long operation (a gather over a column of 80 MB faults in all of it): by the time the watcher
 * ran, RSS was far past the ceiling. This thread needs no GIL. It reads /proc/self/statm every
 * `poll` microseconds and, past the ceiling, calls madvise(MADV_DONTNEED) on every live mapping.
 * Mappings are shared file mappings (MAP_SHARED): what was written to them is in the page cache,
 * so letting go loses nothing, also while another thread reads or writes the pages; the next
 * access maps the page again. A mapping is created and unmapped here, under the same mutex the
 * watcher holds while it lets go, so the watcher never touches an address that was unmapped
 * (and perhaps reused by another mapping).
 *
 * Region(fd, size)   a read-write shared mapping of `size` bytes of the open file `fd`
 *                    (the caller may close `fd` afterwards); exposes the buffer protocol;
 *                    unmapped when the object is freed
 * watch(ceiling, poll_us)   start the watcher (once), or change its ceiling and period
 * release()          let go of every mapping's pages now
 * releases()         how many times the pages were let go (by the watcher or release())
 * rss()              the process's resident memory in bytes
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct Region {
    PyObject_HEAD
    void *data;
    Py_ssize_t size;
    Py_ssize_t exports;
    struct Region *prev, *next; /* the live mappings, under `lock` */
} Region;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Region *live = NULL;
static int watching = 0;
static volatile int64_t ceiling = INT64_MAX;
static volatile long poll_us = 2000;
static volatile int64_t release_count = 0;
static long page_size = 4096;

static int64_t current_rss(int fd) {
    char buf[128];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strchr(buf, ' '); /* size, then resident (pages) */
    if (!p) return -1;
    return (int64_t)strtoll(p + 1, NULL, 10) * page_size;
}

/* Let go of every live mapping's pages. Called with `lock` held. */
static void release_locked(void) {
    for (Region *r = live; r; r = r->next) madvise(r->data, (size_t)r->size, MADV_DONTNEED);
    release_count++;
}

static void *watch_loop(void *arg) {
    (void)arg;
    /* Ahead of the process's other threads where it may be (a busy machine would otherwise
       delay its looks by whole time slices); without the privilege, at their priority. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), -10);
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return NULL; /* no /proc: the pages stay until the arrays go */
    for (;;) {
        int64_t rss = current_rss(fd);
        if (rss > ceiling) {
            pthread_mutex_lock(&lock);
            release_locked();
            pthread_mutex_unlock(&lock);
        }
        long wait = live ? poll_us : 50000; /* nothing mapped: look less often */
        struct timespec ts = {wait / 1000000, (wait % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static PyObject *Region_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    int fd;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "in", &fd, &size)) return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "a region needs a positive size");
        return NULL;
    }
    Region *self = (Region *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    pthread_mutex_lock(&lock);
    void *data = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
        int err = errno;
        pthread_mutex_unlock(&lock);
        Py_DECREF(self);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->data = data;
    self->size = size;
    self->prev = NULL;
    self->next = live;
    if (live) live->prev = self;
    live = self;
    pthread_mutex_unlock(&lock);
    return (PyObject *)self;
}

static void Region_dealloc(Region *self) {
    if (self->data) {
        pthread_mutex_lock(&lock);
        if (self->prev) self->prev->next = self->next;
        else live = self->next;
        if (self->next) self->next->prev = self->prev;
        munmap(self->data, (size_t)self->size);
        self->data = NULL;
        pthread_mutex_unlock(&lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Region_getbuffer(Region *self, Py_buffer *view, int flags) {
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 0, flags) < 0) return -1;
    self->exports++;
    return 0;
}

static void Region_releasebuffer(Region *self, Py_buffer *view) {
    (void)view;
    self->exports--;
}

static PyBufferProcs Region_as_buffer = {(getbufferproc)Region_getbuffer, (releasebufferproc)Region_releasebuffer};

static PyObject *Region_len(Region *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->size);
}

static PyGetSetDef Region_getset[] = {
    {"size", (getter)Region_len, NULL, "bytes mapped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RegionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchneck.trace._spill.Region",
    .tp_basicsize = sizeof(Region),
    .tp_dealloc = (destructor)Region_dealloc,
    .tp_as_buffer = &Region_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A shared mapping of a file, watched: see the module's documentation.",
    .tp_new = Region_new,
    .tp_getset = Region_getset,
};

static PyObject *py_watch(PyObject *self, PyObject *args) {
    long long new_ceiling;
    long new_poll;
    if (!PyArg_ParseTuple(args, "Ll", &new_ceiling, &new_poll)) return NULL;
    ceiling = new_ceiling;
    poll_us = new_poll > 0 ? new_poll : 1000;
    if (!watching) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        int err = pthread_create(&thread, &attr, watch_loop, NULL);
        pthread_attr_destroy(&attr);
        if (err) {
            errno = err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        watching = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *py_release(PyObject *self, PyObject *args) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lock);
    release_locked();
    pthread_mutex_unlock(&lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_releases(PyObject *self, PyObject *args) { return PyLong_FromLongLong(release_count); }

static PyObject *py_rss(PyObject *self, PyObject *args) {
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return PyErr_SetFromErrno(PyExc_OSError);
    int64_t rss = current_rss(fd);
    close(fd);
    return PyLong_FromLongLong(rss);
}

static PyMethodDef methods[] = {
    {"watch", py_watch, METH_VARARGS, "watch(ceiling, poll_us): start the watcher, or change its ceiling and period"},
    {"release", py_release, METH_NOARGS, "Let go of every mapping's resident pages now."},
    {"releases", py_releases, METH_NOARGS, "How many times the pages were let go."},
    {"rss", py_rss, METH_NOARGS, "The process's resident memory in bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spill", "Watched file mappings for spilled arrays (see trace/spill.py; optional).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spill(void) {
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) page_size = ps;
    if (PyType_Ready(&RegionType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RegionType);
    if (PyModule_AddObject(m, "Region", (PyObject *)&RegionType) < 0) {
        Py_DECREF(&RegionType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
