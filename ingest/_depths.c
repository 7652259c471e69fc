/* The builder's greedy depth pass (ingest/depths.py `_first_free`) in C: for the tracks whose
 * slices overlap without nesting, which are walked slice by slice. Same algorithm, same
 * result; the Python version stays as the fallback when this module is not built.
 *
 * first_free(ts: bytes, dur: bytes) -> bytes: int64 arrays in (ts, dur DESC, id) order in,
 * int32 depths out.
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

static PyMethodDef METHODS[] = {
    {"first_free", py_first_free, METH_VARARGS, "Greedy first-free depths of one track's slices (see the header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_depths", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__depths(void) { return PyModule_Create(&MODULE); }
