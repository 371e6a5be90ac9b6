/*
 * torchneck.trace._order: the loader's sort of the event table by start time, without copies.
 *
 * Why: the table is built in file order and must end up sorted by start (longer first on equal
 * starts, so parents precede their children). With numpy that is an argsort (an 8-byte order a
 * row, plus timsort's scratch) and then one gathered copy per column beside the old one: at
 * 3 GB of trace (7.3 M events) ~120 MB above the table itself, the loader's peak. Here the
 * order is 4 bytes a row, sorted by a natural merge sort whose scratch is the smaller run of
 * each merge (a trace is sorted runs: CPU events, then each GPU stream's), and the columns
 * are permuted in place, all together along each cycle of the permutation (one bit a row to
 * mark the positions filled). Optional, like the scanner: without a compiler the loader keeps its numpy path,
 * with the same result (tests).
 *
 * start_order(ts, dur, rows) -> None
 *   ts: float64[n], dur: float32[n]   the columns, in load order
 *   rows: int32[m]                    row numbers (ascending), sorted in place by (ts ascending,
 *                                     dur descending, row ascending)
 * permute(columns, order) -> None
 *   columns: a tuple of contiguous arrays of n items of 1, 2, 4 or 8 bytes, each rewritten in
 *   place so that column[i] becomes the old column[order[i]]; order: int32[n], a permutation
 *   of 0..n-1 (ValueError, and nothing moved, otherwise)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const double *ts;
    const float *dur;
} Keys;

/* a before b: earlier start, or the same start and longer, or (all equal) earlier row */
static inline int before(const Keys *k, int32_t a, int32_t b) {
    double ta = k->ts[a], tb = k->ts[b];
    if (ta != tb) return ta < tb;
    float da = k->dur[a], db = k->dur[b];
    if (da != db) return da > db;
    return a < b;
}

/* Merge the sorted runs x[0:mid] and x[mid:len] in place, copying the smaller one to scratch. */
static void merge(const Keys *k, int32_t *x, Py_ssize_t mid, Py_ssize_t len, int32_t *scratch) {
    if (mid == 0 || mid == len || !before(k, x[mid], x[mid - 1])) return; /* already in order */
    Py_ssize_t nl = mid, nr = len - mid;
    if (nl <= nr) { /* left run to scratch, merge forwards */
        memcpy(scratch, x, (size_t)nl * sizeof(int32_t));
        Py_ssize_t i = 0, j = mid, o = 0;
        while (i < nl && j < len) x[o++] = before(k, x[j], scratch[i]) ? x[j++] : scratch[i++];
        while (i < nl) x[o++] = scratch[i++];
    } else { /* right run to scratch, merge backwards */
        memcpy(scratch, x + mid, (size_t)nr * sizeof(int32_t));
        Py_ssize_t i = mid - 1, j = nr - 1, o = len - 1;
        while (i >= 0 && j >= 0) x[o--] = before(k, scratch[j], x[i]) ? x[i--] : scratch[j--];
        while (j >= 0) x[o--] = scratch[j--];
    }
}

#define MIN_RUN 32

/* Sort x[0:n] stably: runs found as they lie (short ones extended by insertion to MIN_RUN),
 * then merged pairwise, pass after pass. Returns -1 when scratch memory is not to be had. */
static int natural_merge_sort(const Keys *k, int32_t *x, Py_ssize_t n) {
    if (n < 2) return 0;
    Py_ssize_t cap = 64, count = 0;
    Py_ssize_t *starts = malloc((size_t)cap * sizeof(Py_ssize_t));
    if (!starts) return -1;
    Py_ssize_t i = 0, largest_half = 0;
    while (i < n) {
        Py_ssize_t end = i + 1;
        while (end < n && !before(k, x[end], x[end - 1])) end++;
        if (end - i < MIN_RUN && end < n) { /* extend by insertion */
            Py_ssize_t stop = i + MIN_RUN < n ? i + MIN_RUN : n;
            for (; end < stop; end++) {
                int32_t v = x[end];
                Py_ssize_t j = end;
                while (j > i && before(k, v, x[j - 1])) { x[j] = x[j - 1]; j--; }
                x[j] = v;
            }
        }
        if (count + 2 > cap) {
            cap *= 2;
            Py_ssize_t *grown = realloc(starts, (size_t)cap * sizeof(Py_ssize_t));
            if (!grown) { free(starts); return -1; }
            starts = grown;
        }
        starts[count++] = i;
        i = end;
    }
    starts[count] = n;
    /* scratch for the smaller side of any merge: at most half of the largest pair of runs */
    for (Py_ssize_t width = 1; width < count; width *= 2) {
        for (Py_ssize_t r = 0; r + width < count; r += 2 * width) {
            Py_ssize_t lo = starts[r], mid = starts[r + width];
            Py_ssize_t hi = starts[r + 2 * width < count ? r + 2 * width : count];
            Py_ssize_t smaller = (mid - lo) < (hi - mid) ? (mid - lo) : (hi - mid);
            if (smaller > largest_half) largest_half = smaller;
        }
    }
    int32_t *scratch = largest_half ? malloc((size_t)largest_half * sizeof(int32_t)) : NULL;
    if (largest_half && !scratch) { free(starts); return -1; }
    for (Py_ssize_t width = 1; width < count; width *= 2) {
        for (Py_ssize_t r = 0; r + width < count; r += 2 * width) {
            Py_ssize_t lo = starts[r], mid = starts[r + width];
            Py_ssize_t hi = starts[r + 2 * width < count ? r + 2 * width : count];
            merge(k, x + lo, mid - lo, hi - lo, scratch);
        }
    }
    free(scratch);
    free(starts);
    return 0;
}

static int buffer_of(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t item) {
    if (PyObject_GetBuffer(obj, view, writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (item && view->itemsize != item) {
        PyErr_Format(PyExc_TypeError, "expected items of %zd bytes, got %zd", item, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *start_order(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts_obj, *dur_obj, *rows_obj;
    if (!PyArg_ParseTuple(args, "OOO", &ts_obj, &dur_obj, &rows_obj)) return NULL;
    Py_buffer ts, dur, rows;
    if (buffer_of(ts_obj, &ts, 0, 8) < 0) return NULL;
    if (buffer_of(dur_obj, &dur, 0, 4) < 0) { PyBuffer_Release(&ts); return NULL; }
    if (buffer_of(rows_obj, &rows, 1, 4) < 0) { PyBuffer_Release(&ts); PyBuffer_Release(&dur); return NULL; }
    PyObject *result = NULL;
    Py_ssize_t n = ts.len / 8, m = rows.len / 4;
    int32_t *x = rows.buf;
    int bad = dur.len / 4 != n;
    for (Py_ssize_t i = 0; i < m && !bad; i++) bad = x[i] < 0 || x[i] >= n;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "rows out of range, or ts and dur of different lengths");
        goto done;
    }
    Keys k = {ts.buf, dur.buf};
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = natural_merge_sort(&k, x, m);
    Py_END_ALLOW_THREADS
    if (failed) { PyErr_NoMemory(); goto done; }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&ts);
    PyBuffer_Release(&dur);
    PyBuffer_Release(&rows);
    return result;
}

#define MAX_COLUMNS 32

typedef struct {
    char *base;
    Py_ssize_t item;
} Column;

static inline void move_item(const Column *c, Py_ssize_t to, Py_ssize_t from) {
    switch (c->item) {
    case 1: ((uint8_t *)c->base)[to] = ((uint8_t *)c->base)[from]; break;
    case 2: ((uint16_t *)c->base)[to] = ((uint16_t *)c->base)[from]; break;
    case 4: ((uint32_t *)c->base)[to] = ((uint32_t *)c->base)[from]; break;
    default: ((uint64_t *)c->base)[to] = ((uint64_t *)c->base)[from]; break;
    }
}

/* 1 when `order` holds each of 0..n-1 once; a walk along a non-permutation could lose rows. */
static int is_permutation(const int32_t *order, Py_ssize_t n, uint8_t *seen) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t v = order[i];
        if (v < 0 || v >= n || (seen[v >> 3] & (1u << (v & 7)))) return 0;
        seen[v >> 3] |= (uint8_t)(1u << (v & 7));
    }
    return 1;
}

/* Rewrite every column so that item i becomes the old item order[i]: one walk along each cycle
 * of the permutation moves the item of all columns at once (the walk waits on each load of
 * `order`; the columns' loads at one step go together). `done` marks the positions filled. */
static void permute_columns(const Column *cols, int ncols, const int32_t *order, Py_ssize_t n, uint8_t *done) {
    uint64_t first[MAX_COLUMNS];
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((done[i >> 3] & (1u << (i & 7))) || order[i] == i) continue;
        for (int c = 0; c < ncols; c++) memcpy(&first[c], cols[c].base + i * cols[c].item, (size_t)cols[c].item);
        Py_ssize_t j = i;
        for (;;) {
            Py_ssize_t from = order[j];
            done[j >> 3] |= (uint8_t)(1u << (j & 7));
            if (from == i) break;
            for (int c = 0; c < ncols; c++) move_item(&cols[c], j, from);
            j = from;
        }
        for (int c = 0; c < ncols; c++) memcpy(cols[c].base + j * cols[c].item, &first[c], (size_t)cols[c].item);
    }
}

static PyObject *permute(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cols_obj, *order_obj;
    if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &cols_obj, &order_obj)) return NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(cols_obj);
    if (ncols > MAX_COLUMNS) {
        PyErr_Format(PyExc_ValueError, "at most %d columns at once", MAX_COLUMNS);
        return NULL;
    }
    Py_buffer views[MAX_COLUMNS], orderv;
    Column cols[MAX_COLUMNS];
    int got = 0;
    PyObject *result = NULL;
    uint8_t *done = NULL;
    if (buffer_of(order_obj, &orderv, 0, 4) < 0) return NULL;
    Py_ssize_t n = orderv.len / 4;
    for (; got < ncols; got++) {
        if (buffer_of(PyTuple_GET_ITEM(cols_obj, got), &views[got], 1, 0) < 0) goto out;
        Py_ssize_t item = views[got].itemsize;
        if ((item != 1 && item != 2 && item != 4 && item != 8) || views[got].len != n * item) {
            PyErr_SetString(PyExc_ValueError, "a column is not of n items of 1, 2, 4 or 8 bytes");
            got++;
            goto out;
        }
        cols[got].base = views[got].buf;
        cols[got].item = item;
    }
    done = calloc((size_t)(n / 8 + 1), 1);
    if (!done) { PyErr_NoMemory(); goto out; }
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = is_permutation(orderv.buf, n, done);
    if (ok) {
        memset(done, 0, (size_t)(n / 8 + 1));
        permute_columns(cols, (int)ncols, orderv.buf, n, done);
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "order is not a permutation of the columns' rows");
        goto out;
    }
    result = Py_None;
    Py_INCREF(result);
out:
    free(done);
    for (int c = 0; c < got; c++) PyBuffer_Release(&views[c]);
    PyBuffer_Release(&orderv);
    return result;
}

static PyMethodDef methods[] = {
    {"start_order", start_order, METH_VARARGS, "Sort row numbers in place by (start, longer first, row)."},
    {"permute", permute, METH_VARARGS, "Put columns in the order given, in place."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_order",
    "The loader's start-time sort and in-place column permutation (see merge.py; optional).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__order(void) { return PyModule_Create(&module); }
