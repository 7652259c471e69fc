/* The write's gather of a chunked string column (ingest/gather.py) in C: one copy of the rows' bytes,
 * where the Python path takes each chunk's rows, joins them and takes them back into order (three).
 *
 * strings(offsets, firsts, lengths, data, wide, which, local, valid, out_wide) -> (offsets, data)
 *   offsets, data: a tuple of buffers per chunk, its value offsets (int32, or int64 where `wide`) and
 *     its string bytes, as Arrow holds them; firsts, lengths: int64 arrays, each chunk's first
 *     offset entry (the array's slice offset) and its row count;
 *   which (int32) and local (int64): for each row asked for, its chunk and its position there;
 *   valid: one byte a row asked for, 0 for a null (its string is not copied);
 *   answers the rows' Arrow offsets (int64 where out_wide, else int32) and their bytes.
 *
 * The buffers are the caller's Arrow arrays, but nothing is taken on trust: every chunk and row index,
 * every offset pair (in order, inside its data buffer) and the output's size are checked before a
 * byte is copied, and anything out of place is a ValueError. The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer off, data;
    int got_off, got_data;
} Chunk;

static void release_chunks(Chunk *c, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++) {
        if (c[k].got_off) PyBuffer_Release(&c[k].off);
        if (c[k].got_data) PyBuffer_Release(&c[k].data);
    }
    PyMem_Free(c);
}

/* The [begin, end) byte range of row i of chunk c; 0 if its offsets are out of place. */
static int span(const Chunk *c, int wide, int64_t first, int64_t i, int64_t *begin, int64_t *end) {
    int64_t a, b;
    if (wide) {
        const int64_t *o = (const int64_t *)c->off.buf;
        a = o[first + i];
        b = o[first + i + 1];
    } else {
        const int32_t *o = (const int32_t *)c->off.buf;
        a = o[first + i];
        b = o[first + i + 1];
    }
    if (a < 0 || b < a || b > (int64_t)c->data.len) return 0;
    *begin = a;
    *end = b;
    return 1;
}

static PyObject *py_strings(PyObject *self, PyObject *args) {
    PyObject *offs, *datas;
    Py_buffer firstsb, lengthsb, whichb, localb, validb;
    int wide, out_wide;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*y*O!py*y*y*p", &PyTuple_Type, &offs, &firstsb, &lengthsb, &PyTuple_Type,
                          &datas, &wide, &whichb, &localb, &validb, &out_wide))
        return NULL;
    PyObject *result = NULL, *out_off = NULL, *out_data = NULL;
    Chunk *chunks = NULL;
    Py_ssize_t nchunks = PyTuple_GET_SIZE(offs), opened = 0;
    size_t rows = (size_t)localb.len / sizeof(int64_t);
    const char *fail = NULL;
    if (PyTuple_GET_SIZE(datas) != nchunks || (size_t)firstsb.len != (size_t)nchunks * sizeof(int64_t)
        || (size_t)lengthsb.len != (size_t)nchunks * sizeof(int64_t)) {
        fail = "one offsets buffer, data buffer, first and length a chunk";
        goto done;
    }
    if ((size_t)whichb.len != rows * sizeof(int32_t) || (size_t)validb.len != rows
        || (size_t)localb.len != rows * sizeof(int64_t)) {
        fail = "which, local and valid differ in length";
        goto done;
    }
    chunks = PyMem_Calloc(nchunks ? (size_t)nchunks : 1, sizeof(Chunk));
    if (!chunks) { PyErr_NoMemory(); goto done; }
    const int64_t *firsts = firstsb.buf, *lengths = lengthsb.buf;
    size_t width = wide ? sizeof(int64_t) : sizeof(int32_t);
    for (; opened < nchunks; opened++) {
        Chunk *c = &chunks[opened];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(offs, opened), &c->off, PyBUF_SIMPLE) < 0) goto done;
        c->got_off = 1;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(datas, opened), &c->data, PyBUF_SIMPLE) < 0) goto done;
        c->got_data = 1;
        int64_t first = firsts[opened], len = lengths[opened];
        /* entries first .. first + len must lie in the offsets buffer */
        if (first < 0 || len < 0 || (uint64_t)first + (uint64_t)len + 1 > (size_t)c->off.len / width) {
            fail = "a chunk's offsets lie outside its buffer";
            goto done;
        }
    }
    const int32_t *which = whichb.buf;
    const int64_t *local = localb.buf;
    const unsigned char *valid = validb.buf;
    /* pass 1: check every row and size the output */
    uint64_t total = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t r = 0; r < rows; r++) {
        if (!valid[r]) continue;
        int32_t k = which[r];
        int64_t i = local[r], a, b;
        if (k < 0 || k >= nchunks || i < 0 || i >= lengths[k] || !span(&chunks[k], wide, firsts[k], i, &a, &b)) {
            bad = 1;
            break;
        }
        total += (uint64_t)(b - a);
    }
    Py_END_ALLOW_THREADS
    if (bad) { fail = "a row or its offsets out of place"; goto done; }
    if (total > (out_wide ? (uint64_t)PY_SSIZE_T_MAX / 2 : (uint64_t)INT32_MAX)) {
        fail = "the rows' strings exceed the output's offsets";
        goto done;
    }
    size_t out_width = out_wide ? sizeof(int64_t) : sizeof(int32_t);
    out_off = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((rows + 1) * out_width));
    out_data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out_off || !out_data) goto done;
    {
        char *dst = PyBytes_AS_STRING(out_data), *o = PyBytes_AS_STRING(out_off);
        Py_BEGIN_ALLOW_THREADS
        uint64_t at = 0;
        for (size_t r = 0; r <= rows; r++) {
            if (out_wide) ((int64_t *)o)[r] = (int64_t)at;
            else ((int32_t *)o)[r] = (int32_t)at;
            if (r == rows || !valid[r]) continue;
            int32_t k = which[r];
            int64_t a, b;
            span(&chunks[k], wide, firsts[k], local[r], &a, &b); /* checked in pass 1 */
            memcpy(dst + at, (const char *)chunks[k].data.buf + a, (size_t)(b - a));
            at += (uint64_t)(b - a);
        }
        Py_END_ALLOW_THREADS
    }
    result = PyTuple_Pack(2, out_off, out_data);
done:
    if (fail) PyErr_SetString(PyExc_ValueError, fail);
    if (chunks) release_chunks(chunks, nchunks);
    Py_XDECREF(out_off);
    Py_XDECREF(out_data);
    PyBuffer_Release(&firstsb); PyBuffer_Release(&lengthsb);
    PyBuffer_Release(&whichb); PyBuffer_Release(&localb); PyBuffer_Release(&validb);
    return result;
}

static PyMethodDef METHODS[] = {
    {"strings", py_strings, METH_VARARGS,
     "strings(offsets, firsts, lengths, data, wide, which, local, valid, out_wide) -> (offsets, data)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_gather", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__gather(void) { return PyModule_Create(&MODULE); }
