/* The builder's depth passes (ingest/depths.py) in C. Same algorithms, same results; the numpy and
 * Python versions stay as the fallback when this module is not built.
 *
 * first_free(ts: bytes, dur: bytes) -> bytes: the greedy pass for the tracks whose slices overlap
 * without nesting, walked slice by slice: int64 arrays in (ts, dur DESC, id) order in, int32
 * depths out.
 *
 * sweep(track, ts, dur, sid, order) -> bytes: every slice's depth (depths_of): int64 arrays of n
 * slices and `order`, their positions sorted by (track, ts); int32 depths by position out. Within
 * a track, slices are taken in (ts, dur DESC, id) order (ties of a run of equal (track, ts) put
 * in that order here); a slice's depth is the number of slices of its track still open when it
 * starts (one ended at or before its start, an instant before its start), kept in a min-heap of
 * their ends. That is the count of the numpy sweep over start/end events, for durations >= 0
 * whose ends fit int64 (the caller checks). A track where two slices of one depth overlap gets
 * the greedy pass, as there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static PyObject *py_first_free(PyObject *self, PyObject *args) {
    Py_buffer tsb, durb;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*", &tsb, &durb)) return NULL;
    PyObject *out = NULL;
    size_t n = (size_t)tsb.len / sizeof(int64_t);
    if ((size_t)durb.len / sizeof(int64_t) != n) {
        PyErr_SetString(PyExc_ValueError, "ts and dur differ in length");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int32_t)));
    if (!out) goto done;
    {
        const int64_t *ts = tsb.buf, *dur = durb.buf;
        int32_t *depth = (int32_t *)PyBytes_AS_STRING(out);
        size_t cap = 64, used = 0;
        int64_t *open_end = malloc(cap * sizeof(int64_t));  /* end of the slice holding depth d */
        int failed = open_end == NULL;
        Py_BEGIN_ALLOW_THREADS
        for (size_t i = 0; i < n && !failed; i++) {
            int64_t t = ts[i], e = ts[i] + dur[i];
            /* a depth is free when its occupant ended at or before t (instants never block)
             * and no deeper depth is still needed by an enclosing slice */
            size_t lowest = 0;
            for (size_t d = 0; d < used; d++)
                if (open_end[d] > t && open_end[d] >= e) lowest = d + 1;
            size_t chosen = used;
            for (size_t d = lowest; d < used; d++)
                if (open_end[d] <= t) { chosen = d; break; }
            if (chosen == used) {
                if (used == cap) {
                    int64_t *q = realloc(open_end, 2 * cap * sizeof(int64_t));
                    if (!q) { failed = 1; break; }
                    open_end = q;
                    cap *= 2;
                }
                used++;
            }
            open_end[chosen] = e;
            depth[i] = (int32_t)chosen;
        }
        Py_END_ALLOW_THREADS
        free(open_end);
        if (failed) {
            Py_DECREF(out);
            out = PyErr_NoMemory();
        }
    }
done:
    PyBuffer_Release(&tsb);
    PyBuffer_Release(&durb);
    return out;
}


typedef struct { int64_t key; int inst; } Close;  /* an open slice's end; inst: an instant (closes after its start) */

static inline int close_lt(Close a, Close b) { return a.key < b.key || (a.key == b.key && a.inst < b.inst); }
static inline int is_closed(Close c, int64_t t) { return c.inst ? c.key < t : c.key <= t; }

static void heap_push(Close *h, size_t *n, Close c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!close_lt(c, h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

static void heap_pop(Close *h, size_t *n) {
    Close last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && close_lt(h[c + 1], h[c])) c++;
        if (!close_lt(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
}

/* a before b in a run of equal (track, ts): longer first, then the lower id */
static inline int tie_before(const int64_t *dur, const int64_t *sid, int64_t a, int64_t b) {
    return dur[a] > dur[b] || (dur[a] == dur[b] && sid[a] < sid[b]);
}

/* first_free over the positions idx[0..m) (already in (ts, dur DESC, id) order) into dep[0..m) */
static int first_free_at(const int64_t *ts, const int64_t *dur, const int64_t *idx, size_t m, int32_t *dep) {
    size_t cap = 64, used = 0;
    int64_t *open_end = malloc(cap * sizeof(int64_t));
    if (!open_end) return -1;
    for (size_t i = 0; i < m; i++) {
        int64_t t = ts[idx[i]], e = t + dur[idx[i]];
        size_t lowest = 0;
        for (size_t d = 0; d < used; d++)
            if (open_end[d] > t && open_end[d] >= e) lowest = d + 1;
        size_t chosen = used;
        for (size_t d = lowest; d < used; d++)
            if (open_end[d] <= t) { chosen = d; break; }
        if (chosen == used) {
            if (used == cap) {
                int64_t *q = realloc(open_end, 2 * cap * sizeof(int64_t));
                if (!q) { free(open_end); return -1; }
                open_end = q;
                cap *= 2;
            }
            used++;
        }
        open_end[chosen] = e;
        dep[i] = (int32_t)chosen;
    }
    free(open_end);
    return 0;
}

static int sweep_all(const int64_t *track, const int64_t *ts, const int64_t *dur, const int64_t *sid,
                     int64_t *idx, size_t n, int32_t *depth) {
    /* ties: each run of equal (track, ts) into (dur DESC, id) order (runs are short: insertion sort) */
    for (size_t a = 0; a < n;) {
        size_t b = a + 1;
        while (b < n && track[idx[b]] == track[idx[a]] && ts[idx[b]] == ts[idx[a]]) b++;
        for (size_t i = a + 1; i < b; i++) {
            int64_t v = idx[i];
            size_t j = i;
            while (j > a && tie_before(dur, sid, v, idx[j - 1])) { idx[j] = idx[j - 1]; j--; }
            idx[j] = v;
        }
        a = b;
    }
    int32_t *dep = malloc((n ? n : 1) * sizeof(int32_t));
    size_t hcap = 64, lcap = 64;
    Close *heap = malloc(hcap * sizeof(Close));
    int64_t *last_end = malloc(lcap * sizeof(int64_t));  /* per depth: the end of the track's latest slice there */
    int rc = 0;
    if (!dep || !heap || !last_end) { rc = -1; goto out; }
    for (size_t a = 0; a < n;) {
        size_t b = a, hn = 0, used = 0;
        int bad = 0;
        int64_t tr = track[idx[a]];
        for (; b < n && track[idx[b]] == tr; b++) {
            int64_t p = idx[b], t = ts[p], e = t + dur[p];
            while (hn && is_closed(heap[0], t)) heap_pop(heap, &hn);
            size_t d = hn;
            if (d < used && last_end[d] > t) bad = 1;  /* two slices of one depth overlap */
            if (d >= used) {
                if (d >= lcap) {
                    int64_t *q = realloc(last_end, 2 * lcap * sizeof(int64_t));
                    if (!q) { rc = -1; goto out; }
                    last_end = q;
                    lcap *= 2;
                }
                used = d + 1;
            }
            last_end[d] = e;
            dep[b] = (int32_t)d;
            if (hn == hcap) {
                Close *q = realloc(heap, 2 * hcap * sizeof(Close));
                if (!q) { rc = -1; goto out; }
                heap = q;
                hcap *= 2;
            }
            Close c = {dur[p] == 0 ? t : e, dur[p] == 0};
            heap_push(heap, &hn, c);
        }
        if (bad && first_free_at(ts, dur, idx + a, b - a, dep + a)) { rc = -1; goto out; }
        a = b;
    }
    for (size_t i = 0; i < n; i++) depth[idx[i]] = dep[i];
out:
    free(dep); free(heap); free(last_end);
    return rc;
}

static PyObject *py_sweep(PyObject *self, PyObject *args) {
    Py_buffer trb, tsb, durb, sidb, ob;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*", &trb, &tsb, &durb, &sidb, &ob)) return NULL;
    PyObject *out = NULL;
    size_t n = (size_t)tsb.len / sizeof(int64_t);
    if ((size_t)trb.len != n * sizeof(int64_t) || (size_t)durb.len != n * sizeof(int64_t)
        || (size_t)sidb.len != n * sizeof(int64_t) || (size_t)ob.len != n * sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "track, ts, dur, sid and order must be int64 arrays of one length");
        goto done;
    }
    {
        const int64_t *order = ob.buf;
        uint8_t *seen = calloc(n ? n : 1, 1);
        if (!seen) {
            PyErr_NoMemory();
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            if (order[i] < 0 || (size_t)order[i] >= n || seen[order[i]]) {
                free(seen);
                PyErr_SetString(PyExc_ValueError, "order must hold each position of the arrays once"
                                " (one outside them or a repeat)");
                goto done;
            }
            seen[order[i]] = 1;
        }
        free(seen);
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int32_t)));
    int64_t *idx = malloc((n ? n : 1) * sizeof(int64_t));
    if (!out || !idx) {
        free(idx);
        Py_XDECREF(out);
        out = PyErr_NoMemory();
        goto done;
    }
    memcpy(idx, ob.buf, n * sizeof(int64_t));
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sweep_all(trb.buf, tsb.buf, durb.buf, sidb.buf, idx, n, (int32_t *)PyBytes_AS_STRING(out));
    Py_END_ALLOW_THREADS
    free(idx);
    if (rc) {
        Py_DECREF(out);
        out = PyErr_NoMemory();
    }
done:
    PyBuffer_Release(&trb);
    PyBuffer_Release(&tsb);
    PyBuffer_Release(&durb);
    PyBuffer_Release(&sidb);
    PyBuffer_Release(&ob);
    return out;
}

static PyMethodDef METHODS[] = {
    {"first_free", py_first_free, METH_VARARGS, "Greedy first-free depths of one track's slices (see the header)."},
    {"sweep", py_sweep, METH_VARARGS, "Every slice's depth, by a sweep over each track (see the header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_depths", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__depths(void) { return PyModule_Create(&MODULE); }
