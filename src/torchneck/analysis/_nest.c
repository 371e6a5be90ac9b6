/*
 * torchneck.analysis._nest: the call-stack walk of `nesting._nest_by_stack`, in C, over a whole table.
 *
 * Why: host events nest per thread like a call stack, and the walk that finds each event's
 * parent and self time is one pass with a small stack -- in Python ~1 us an event, so
 * nesting.host_nesting does it vectorised with numpy instead (sorts and binary searches, ~0.2 us an
 * event and a few tens of MB of temporaries). Here it is the walk itself, writing straight into
 * the caller's output arrays: ~10 ns an event and no temporaries. Optional, like the scanner:
 * without a compiler host_nesting keeps its numpy path, whose results are the same (tests).
 *
 * walk(ts, dur, rows, bounds, parent, self_time) -> None
 *   ts: float64[n], dur: float32[n]        the table's columns
 *   rows: int32[m]                         host rows, grouped by thread, by start within one
 *   bounds: int64[k+1]                     where each thread's rows begin in `rows`, and m
 *   parent: int32[n], self_time: float32[n]   written for `rows` only
 * walk_table(ts, dur, cat, thread, host, op_cat, parent, ops, op_self) -> None
 *   the same walk over a table sorted by start (longer first on ties), as the loader leaves
 *   it: one pass in row order, one stack per thread, so no list of host rows grouped by thread
 *   is built (4 bytes a host event: 25 MB at 3 GB, the walk's only large temporary).
 *   cat: int8[n]; thread: int8, int16 or int32[n], >= 0 on host rows (a stack per id);
 *   host: uint8[256] (bool), indexed by a row's cat byte: which categories are host events;
 *   parent: int32[n], written for host rows; ops: int32[m], the rows whose cat is op_cat (the
 *   CPU ops, m of them), ascending; op_self: float32[m], their self times. Self time is kept
 *   for ops only: the analyses read no other, and a float per event is 28 MB at 3 GB.
 * Semantics are `_nest_by_stack`'s: an event's parent is the innermost earlier event of its
 * thread that has not ended by its start (end > start); self time is its duration less its
 * direct children's, at least 0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int32_t row;
    int32_t slot; /* where its self time is written (-1: nowhere) */
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

typedef struct {
    Frame *frames;
    Py_ssize_t top, cap;
} Stack;

/* Pops the frames that ended by `start`, writing their final self time to their slot. */
static inline void pop_ended(Stack *s, double start, float *self_time) {
    while (s->top > 0 && s->frames[s->top - 1].end <= start) {
        Frame *f = &s->frames[--s->top];
        double own = f->dur - f->children;
        if (f->slot >= 0) self_time[f->slot] = (float)(own > 0.0 ? own : 0.0);
    }
}

/* Event `r` starting at `start`: its parent is the stack's top; pushed. -1 when out of memory. */
static inline int push_event(Stack *s, int32_t r, int32_t slot, double start, double d, int32_t *parent) {
    if (s->top > 0) {
        parent[r] = s->frames[s->top - 1].row;
        s->frames[s->top - 1].children += d;
    } else {
        parent[r] = -1;
    }
    if (s->top == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        Frame *grown = realloc(s->frames, (size_t)cap * sizeof(Frame));
        if (!grown) return -1;
        s->frames = grown;
        s->cap = cap;
    }
    Frame *f = &s->frames[s->top++];
    f->row = r;
    f->slot = slot;
    f->end = start + d;
    f->dur = d;
    f->children = 0.0;
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
    Stack stack = {NULL, 0, 0};
    int no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b + 1 < nb && !no_memory; b++) {
        for (Py_ssize_t i = bounds[b]; i < bounds[b + 1]; i++) {
            int32_t r = rows[i];
            double start = ts[r];
            pop_ended(&stack, start, self_time);
            if (push_event(&stack, r, r, start, (double)dur[r], parent) < 0) {
                no_memory = 1;
                break;
            }
        }
        pop_ended(&stack, INFINITY, self_time); /* the thread's last open frames */
    }
    Py_END_ALLOW_THREADS
    free(stack.frames);
    if (no_memory) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyObject *walk_table(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[8];
    int op_cat;
    if (!PyArg_ParseTuple(args, "OOOOOiOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &op_cat, &objs[5],
                          &objs[6], &objs[7]))
        return NULL;
    /* ts, dur, cat, thread (1, 2 or 4 bytes: checked below), host, parent, ops, op_self */
    static const Py_ssize_t items[8] = {8, 4, 1, 0, 1, 4, 4, 4};
    static const int writable[8] = {0, 0, 0, 0, 0, 1, 1, 1};
    Py_buffer views[8];
    Py_ssize_t counts[8];
    int got = 0;
    PyObject *result = NULL;
    Stack *stacks = NULL;
    Py_ssize_t n_threads = 0;
    for (; got < 8; got++) {
        Py_ssize_t item = items[got];
        if (got == 3) { /* the thread column keeps the narrowest width its ids fit */
            if (PyObject_GetBuffer(objs[3], &views[3], PyBUF_C_CONTIGUOUS) < 0) goto done;
            item = views[3].itemsize;
            PyBuffer_Release(&views[3]);
            if (item != 1 && item != 2 && item != 4) {
                PyErr_Format(PyExc_TypeError, "walk_table(): thread ids of %zd bytes", item);
                goto done;
            }
        }
        if (buffer_of(objs[got], &views[got], writable[got], item, &counts[got]) < 0) goto done;
    }
    const double *ts = views[0].buf;
    const float *dur = views[1].buf;
    const uint8_t *cat = views[2].buf;
    const void *thread = views[3].buf;
    const Py_ssize_t thread_width = views[3].itemsize;
    const uint8_t *host = views[4].buf;
    int32_t *parent = views[5].buf;
    int32_t *ops = views[6].buf;
    float *op_self = views[7].buf;
    Py_ssize_t n = counts[0], m = counts[6];
    if (counts[1] != n || counts[2] != n || counts[3] != n || counts[5] != n || counts[7] != m
            || counts[4] != 256 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "walk_table(): inconsistent array lengths");
        goto done;
    }
#define THREAD_AT(i) (thread_width == 1 ? (Py_ssize_t)((const int8_t *)thread)[i] \
                      : thread_width == 2 ? (Py_ssize_t)((const int16_t *)thread)[i] \
                      : (Py_ssize_t)((const int32_t *)thread)[i])
    Py_ssize_t op_count = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* one stack per thread id that holds host events */
        if (cat[i] == (uint8_t)op_cat) op_count++;
        if (!host[cat[i]]) continue;
        Py_ssize_t th = THREAD_AT(i);
        if (th < 0) {
            PyErr_SetString(PyExc_ValueError, "walk_table(): negative thread id");
            goto done;
        }
        if (th >= n_threads) n_threads = th + 1;
    }
    if (op_count != m || !host[(uint8_t)op_cat]) {
        PyErr_SetString(PyExc_ValueError, "walk_table(): ops must hold one slot per op row, and ops be host events");
        goto done;
    }
    stacks = calloc((size_t)(n_threads ? n_threads : 1), sizeof(Stack));
    if (!stacks) {
        PyErr_NoMemory();
        goto done;
    }
    int no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    int32_t next_op = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!host[cat[i]]) continue;
        Stack *s = &stacks[THREAD_AT(i)];
        double start = ts[i];
        pop_ended(s, start, op_self);
        int32_t slot = -1;
        if (cat[i] == (uint8_t)op_cat) { /* ops are met in row order: their slots ascend with them */
            slot = next_op++;
            ops[slot] = (int32_t)i;
        }
        if (push_event(s, (int32_t)i, slot, start, (double)dur[i], parent) < 0) {
            no_memory = 1;
            break;
        }
    }
    for (Py_ssize_t th = 0; th < n_threads; th++) pop_ended(&stacks[th], INFINITY, op_self);
    Py_END_ALLOW_THREADS
#undef THREAD_AT
    if (no_memory) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    if (stacks) {
        for (Py_ssize_t th = 0; th < n_threads; th++) free(stacks[th].frames);
        free(stacks);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(ts, dur, rows, bounds, parent, self_time) -> None (see the source)"},
    {"walk_table", walk_table, METH_VARARGS,
     "walk_table(ts, dur, cat, thread, host, op_cat, parent, ops, op_self) -> None (see the source)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nest", "The host call-stack walk, natively (see nesting.host_nesting; optional).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nest(void) { return PyModule_Create(&module); }
