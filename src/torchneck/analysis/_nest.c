/*
 * torchneck.analysis._nest: the call-stack walk of `ops._nest_by_stack`, in C, over a whole table.
 *
 * Why: host events nest per thread like a call stack, and the walk that finds each event's
 * parent and self time is one pass with a small stack -- in Python ~1 us an event, so
 * ops.host_nesting does it vectorised with numpy instead (sorts and binary searches, ~0.2 us an
 * event and a few tens of MB of temporaries). Here it is the walk itself, writing straight into
 * the caller's output arrays: ~10 ns an event and no temporaries. Optional, like the scanner:
 * without a compiler host_nesting keeps its numpy path, whose results are the same (tests).
 *
 * walk(ts, dur, rows, bounds, parent, self_time) -> None
 *   ts: float64[n], dur: float32[n]        the table's columns
 *   rows: int32[m]                         host rows, grouped by thread, by start within one
 *   bounds: int64[k+1]                     where each thread's rows begin in `rows`, and m
 *   parent: int32[n], self_time: float32[n]   written for `rows` only
 * Semantics are `_nest_by_stack`'s: an event's parent is the innermost earlier event of its
 * thread that has not ended by its start (end > start); self time is its duration less its
 * direct children's, at least 0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int32_t row;
    double end;
    double dur;
    double children; /* direct children's total duration */
} Frame;

static int buffer_of(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t item, Py_ssize_t *count) {
    if (PyObject_GetBuffer(obj, view, writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != item) {
        PyErr_Format(PyExc_TypeError, "expected items of %zd bytes, got %zd", item, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    *count = view->len / item;
    return 0;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    static const Py_ssize_t items[6] = {8, 4, 4, 8, 4, 4};
    static const int writable[6] = {0, 0, 0, 0, 1, 1};
    Py_buffer views[6];
    Py_ssize_t counts[6];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 6; got++) {
        if (buffer_of(objs[got], &views[got], writable[got], items[got], &counts[got]) < 0) goto done;
    }
    const double *ts = views[0].buf;
    const float *dur = views[1].buf;
    const int32_t *rows = views[2].buf;
    const int64_t *bounds = views[3].buf;
    int32_t *parent = views[4].buf;
    float *self_time = views[5].buf;
    Py_ssize_t n = counts[0], m = counts[2], nb = counts[3];
    if (counts[1] != n || counts[4] != n || counts[5] != n || nb < 1 || bounds[nb - 1] != m) {
        PyErr_SetString(PyExc_ValueError, "walk(): inconsistent array lengths");
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        if (rows[i] < 0 || rows[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "walk(): row out of range");
            goto done;
        }
    }
    for (Py_ssize_t b = 0; b + 1 < nb; b++) {
        if (bounds[b] < 0 || bounds[b] > bounds[b + 1]) {
            PyErr_SetString(PyExc_ValueError, "walk(): bounds out of order");
            goto done;
        }
    }
    Py_ssize_t cap = 64;
    Frame *stack = malloc((size_t)cap * sizeof(Frame));
    if (!stack) {
        PyErr_NoMemory();
        goto done;
    }
    int no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b + 1 < nb && !no_memory; b++) {
        Py_ssize_t top = 0; /* frames on the stack */
        for (Py_ssize_t i = bounds[b]; i < bounds[b + 1]; i++) {
            int32_t r = rows[i];
            double start = ts[r], d = (double)dur[r];
            while (top > 0 && stack[top - 1].end <= start) { /* ended by now: its self time is final */
                Frame *f = &stack[--top];
                double own = f->dur - f->children;
                self_time[f->row] = (float)(own > 0.0 ? own : 0.0);
            }
            if (top > 0) {
                parent[r] = stack[top - 1].row;
                stack[top - 1].children += d;
            } else {
                parent[r] = -1;
            }
            if (top == cap) {
                Frame *grown = realloc(stack, (size_t)cap * 2 * sizeof(Frame));
                if (!grown) {
                    no_memory = 1;
                    break;
                }
                stack = grown;
                cap *= 2;
            }
            stack[top].row = r;
            stack[top].end = start + (double)dur[r];
            stack[top].dur = d;
            stack[top].children = 0.0;
            top++;
        }
        while (top > 0) {
            Frame *f = &stack[--top];
            double own = f->dur - f->children;
            self_time[f->row] = (float)(own > 0.0 ? own : 0.0);
        }
    }
    Py_END_ALLOW_THREADS
    free(stack);
    if (no_memory) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(ts, dur, rows, bounds, parent, self_time) -> None (see the source)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nest", "The host call-stack walk, natively (see ops.host_nesting; optional).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nest(void) { return PyModule_Create(&module); }
