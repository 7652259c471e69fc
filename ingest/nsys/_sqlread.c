/* The Nsight SQLite reader's compiled path (ingest/nsys/read.py, docs/nsys.md "Reading speed").
 *
 * One query over an Nsight export, stepped with sqlite3_step straight into column buffers: int64
 * values with a validity byte per row, float64 likewise, text as int64 offsets + bytes. The caller
 * (copy_table) makes Arrow arrays of the buffers. The GIL is released while SQLite runs.
 *
 *   q = Query(uri, sql, kinds)   kinds: one letter per result column:
 *                                'i' integer, 't' integer time (NULL past +-2^62), 'f' float, 's' text
 *   q.fetch(max_rows) -> None at the end, else (rows, columns); a column is (values, valid) for
 *                        'i'/'t'/'f' and (offsets, data, valid) for 's', each a bytes object
 *   q.close()
 *
 * Values are what the Python path reads (read.py): an integer equal to INT64_MIN is NULL, a time
 * outside +-2^62 is NULL. Anything the Python path would treat otherwise (text or a blob in a number
 * column, a float in an integer column, an integer past 2^53 in a float column, a number or a blob
 * or invalid UTF-8 in a text column) raises Mismatch(row, column) and the caller reads the table on
 * the Python path, so its message (or its value) is the Python path's. An SQLite error raises Error
 * with SQLite's message. Every buffer write is bounds-checked; no input can make this write past a
 * buffer, and one Query is used by one thread at a time (a second caller gets RuntimeError). So each
 * Query's own connection is opened in SQLite's multi-thread mode (SQLITE_OPEN_NOMUTEX): the serialized
 * mode's mutex, taken and released by every sqlite3_column_* call, was a fifth of the read (750 k rows of
 * 8 columns: 0.296 -> 0.231 s).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

#include "_btree.h"

#define TIME_LIMIT ((int64_t)1 << 62)
#define MAX_ROWS_PER_FETCH (1 << 22)
#define MAX_COLUMNS 64
#define MAX_POSITIONS 2000 /* SQLite's default limit on a table's columns */
#define EXACT_DOUBLE ((int64_t)1 << 53)

static PyObject *ReadError;    /* SQLite failed: (message, rows before this fetch) */
static PyObject *MismatchError; /* a value the Python path reads differently: (row, column) */
static PyObject *UnsupportedError; /* the file read directly holds what _btree.c does not take: (rows before) */

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *stmt;
    int ncols;
    char kinds[MAX_COLUMNS];
    int64_t rows_done;  /* rows returned by earlier fetches */
    int done;
    int busy;
    /* table=: the rows read from the file's b-tree (_btree.c), not by SQLite */
    int direct;
    BtCursor cursor;
    int slot_of[MAX_POSITIONS]; /* record position -> result column, or -1 */
    int npos, alias;
} Query;

/* per fetch: one column's buffers */
typedef struct {
    char *values;      /* int64 / float64 values, or int64 offsets (rows + 1) for text */
    unsigned char *valid;
    char *data;        /* text bytes (malloc'd, grown) */
    size_t data_len, data_cap;
} Col;

enum { OK = 0, END = 1, SQL_ERR = 2, MISMATCH = 3, NOMEM = 4, UNSUPPORTED = 5 };

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return 0;
        if (len > n - i) return 0;
        for (size_t k = 1; k < len; k++) {
            unsigned char cc = s[i + k];
            if ((cc & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)
            || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

static int text_append(Col *c, const void *p, size_t n) {
    if (n > SIZE_MAX / 2 - c->data_len) return 0;
    if (c->data_len + n > c->data_cap) {
        size_t cap = c->data_cap ? c->data_cap : 65536;
        while (cap < c->data_len + n) cap *= 2;
        char *grown = PyMem_RawRealloc(c->data, cap);
        if (!grown) return 0;
        c->data = grown;
        c->data_cap = cap;
    }
    if (n) memcpy(c->data + c->data_len, p, n);
    c->data_len += n;
    return 1;
}

/* One value into its column at row r, as its kind reads it; MISMATCH where the Python path reads it otherwise. */
static int put_value(Col *c, char kind, const BtValue *v, Py_ssize_t r) {
    if (kind == 's') {
        int64_t *off = (int64_t *)c->values;
        if (v->type == BT_NULL) {
            c->valid[r] = 0;
        } else if (v->type == BT_TEXT) {
            if (v->n < 0 || (v->n > 0 && v->s == NULL)) return NOMEM;
            if (!utf8_valid(v->s, (size_t)v->n)) return MISMATCH;
            if (!text_append(c, v->s, (size_t)v->n)) return NOMEM;
            c->valid[r] = 1;
        } else {
            return MISMATCH;
        }
        off[r + 1] = (int64_t)c->data_len;
        return OK;
    }
    if (v->type == BT_NULL) {
        c->valid[r] = 0;
        ((int64_t *)c->values)[r] = 0;
        return OK;
    }
    if (kind == 'f') {
        double d;
        if (v->type == BT_FLOAT) {
            d = v->f;
        } else if (v->type == BT_INTEGER) {
            if (v->i > EXACT_DOUBLE || v->i < -EXACT_DOUBLE) return MISMATCH;
            d = (double)v->i;
        } else {
            return MISMATCH;
        }
        ((double *)c->values)[r] = d;
        c->valid[r] = 1;
        return OK;
    }
    if (v->type != BT_INTEGER) return MISMATCH;
    int ok = v->i != INT64_MIN && (kind != 't' || (v->i >= -TIME_LIMIT && v->i <= TIME_LIMIT));
    ((int64_t *)c->values)[r] = ok ? v->i : 0;
    c->valid[r] = (unsigned char)ok;
    return OK;
}

/* The current SQLite row's values, typed as sqlite3_column_type gives them. */
static void sqlite_row(Query *q, BtValue *vals) {
    for (int j = 0; j < q->ncols; j++) {
        BtValue *v = &vals[j];
        switch (sqlite3_column_type(q->stmt, j)) {
        case SQLITE_INTEGER: v->type = BT_INTEGER; v->i = sqlite3_column_int64(q->stmt, j); break;
        case SQLITE_FLOAT: v->type = BT_FLOAT; v->f = sqlite3_column_double(q->stmt, j); break;
        case SQLITE_TEXT:
            v->type = BT_TEXT;
            v->s = sqlite3_column_text(q->stmt, j);
            v->n = sqlite3_column_bytes(q->stmt, j);
            break;
        case SQLITE_BLOB: v->type = BT_BLOB; break;
        default: v->type = BT_NULL;
        }
    }
}

/* Steps up to max_rows rows into cols (capacity max_rows each), from SQLite or the b-tree. Runs without the GIL. */
static int step_rows(Query *q, Col *cols, Py_ssize_t max_rows, Py_ssize_t *got, int *bad_col) {
    BtValue vals[MAX_COLUMNS];
    Py_ssize_t r = 0;
    int status = OK;
    while (r < max_rows) {
        if (q->direct) {
            int64_t rowid, len;
            const unsigned char *payload;
            int rc = bt_next(&q->cursor, &rowid, &payload, &len);
            if (rc == BT_END) { status = END; break; }
            if (rc == BT_ROW)
                rc = bt_record(payload, len, q->slot_of, q->npos, q->alias, rowid, vals, q->ncols);
            if (rc != BT_ROW) { status = rc == BT_NOMEM ? NOMEM : UNSUPPORTED; break; }
        } else {
            int rc = sqlite3_step(q->stmt);
            if (rc == SQLITE_DONE) { status = END; break; }
            if (rc != SQLITE_ROW) { status = SQL_ERR; break; }
            if (sqlite3_column_count(q->stmt) != q->ncols) { *bad_col = 0; status = MISMATCH; break; }
            sqlite_row(q, vals);
        }
        for (int j = 0; j < q->ncols && status == OK; j++) {
            status = put_value(&cols[j], q->kinds[j], &vals[j], r);
            if (status == MISMATCH) *bad_col = j;
        }
        if (status != OK) break;
        r++;
    }
    *got = r;
    return status;
}

static void cols_free(Col *cols, int n) {
    for (int j = 0; j < n; j++) {
        PyMem_RawFree(cols[j].values);
        PyMem_RawFree(cols[j].valid);
        PyMem_RawFree(cols[j].data);
    }
}

static PyObject *Query_fetch(Query *q, PyObject *args) {
    Py_ssize_t max_rows;
    if (!PyArg_ParseTuple(args, "n", &max_rows)) return NULL;
    if (max_rows < 1 || max_rows > MAX_ROWS_PER_FETCH) {
        PyErr_Format(PyExc_ValueError, "max_rows must be 1..%d", MAX_ROWS_PER_FETCH);
        return NULL;
    }
    if (q->stmt == NULL && !q->direct) { PyErr_SetString(PyExc_ValueError, "query is closed"); return NULL; }
    if (q->done) Py_RETURN_NONE;
    if (q->busy) { PyErr_SetString(PyExc_RuntimeError, "query in use by another thread"); return NULL; }
    Col cols[MAX_COLUMNS];
    memset(cols, 0, sizeof(cols));
    for (int j = 0; j < q->ncols; j++) {
        size_t n = (size_t)max_rows + 1;
        cols[j].values = PyMem_RawCalloc(n, 8);
        cols[j].valid = PyMem_RawCalloc(n, 1);
        if (!cols[j].values || !cols[j].valid) { cols_free(cols, q->ncols); return PyErr_NoMemory(); }
    }
    Py_ssize_t got = 0;
    int bad_col = -1, status;
    q->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    status = step_rows(q, cols, max_rows, &got, &bad_col);
    Py_END_ALLOW_THREADS
    q->busy = 0;
    if (status == SQL_ERR) {
        PyObject *e = Py_BuildValue("(sL)", sqlite3_errmsg(q->db), (long long)q->rows_done);
        cols_free(cols, q->ncols);
        if (e) { PyErr_SetObject(ReadError, e); Py_DECREF(e); }
        q->done = 1;
        return NULL;
    }
    if (status == MISMATCH) {
        PyObject *e = Py_BuildValue("(Li)", (long long)(q->rows_done + got), bad_col);
        cols_free(cols, q->ncols);
        if (e) { PyErr_SetObject(MismatchError, e); Py_DECREF(e); }
        q->done = 1;
        return NULL;
    }
    if (status == UNSUPPORTED) {
        PyObject *e = Py_BuildValue("(L)", (long long)q->rows_done);
        cols_free(cols, q->ncols);
        if (e) { PyErr_SetObject(UnsupportedError, e); Py_DECREF(e); }
        q->done = 1;
        return NULL;
    }
    if (status == NOMEM) { cols_free(cols, q->ncols); q->done = 1; return PyErr_NoMemory(); }
    if (status == END) q->done = 1;
    if (got == 0) { cols_free(cols, q->ncols); Py_RETURN_NONE; }
    PyObject *out = PyList_New(q->ncols);
    if (!out) { cols_free(cols, q->ncols); return NULL; }
    for (int j = 0; j < q->ncols; j++) {
        PyObject *item;
        if (q->kinds[j] == 's') {
            item = Py_BuildValue("(y#y#y#)", cols[j].values, (Py_ssize_t)((got + 1) * 8),
                                 cols[j].data ? cols[j].data : "", (Py_ssize_t)cols[j].data_len,
                                 (const char *)cols[j].valid, got);
        } else {
            item = Py_BuildValue("(y#y#)", cols[j].values, (Py_ssize_t)(got * 8), (const char *)cols[j].valid, got);
        }
        if (!item) { Py_DECREF(out); cols_free(cols, q->ncols); return NULL; }
        PyList_SET_ITEM(out, j, item);
    }
    cols_free(cols, q->ncols);
    q->rows_done += got;
    PyObject *res = Py_BuildValue("(nN)", got, out);
    return res;
}

static void query_close(Query *q) {
    if (q->direct) { bt_close(&q->cursor); q->direct = 0; }
    if (q->stmt) { sqlite3_finalize(q->stmt); q->stmt = NULL; }
    if (q->db) { sqlite3_close_v2(q->db); q->db = NULL; }
}

static PyObject *Query_close(Query *q, PyObject *unused) {
    if (q->busy) { PyErr_SetString(PyExc_RuntimeError, "query in use by another thread"); return NULL; }
    query_close(q);
    Py_RETURN_NONE;
}

/* table=(path, root page, positions, alias): the rows are read from the file's table b-tree (_btree.c), one
 * record position per result column, in rowid order, not by running `sql` (which says what they are) */
static int open_direct(Query *q, PyObject *table) {
    const char *path;
    unsigned int root;
    PyObject *positions;
    int alias;
    if (!PyArg_ParseTuple(table, "sIO!i", &path, &root, &PyTuple_Type, &positions, &alias)) return -1;
    if (PyTuple_GET_SIZE(positions) != q->ncols) {
        PyErr_SetString(PyExc_ValueError, "table: one record position per result column");
        return -1;
    }
    q->npos = 0;
    for (int k = 0; k < MAX_POSITIONS; k++) q->slot_of[k] = -1;
    for (int j = 0; j < q->ncols; j++) {
        long k = PyLong_AsLong(PyTuple_GET_ITEM(positions, j));
        if (k == -1 && PyErr_Occurred()) return -1;
        if (k < 0 || k >= MAX_POSITIONS || q->slot_of[k] >= 0) {
            PyErr_Format(PyExc_ValueError, "table: positions are distinct, 0..%d", MAX_POSITIONS - 1);
            return -1;
        }
        q->slot_of[k] = j;
        if (k + 1 > q->npos) q->npos = (int)k + 1;
    }
    if (alias >= MAX_POSITIONS) { PyErr_SetString(PyExc_ValueError, "table: alias past the positions"); return -1; }
    q->alias = alias;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = bt_open(&q->cursor, path, root);
    Py_END_ALLOW_THREADS
    if (rc != BT_ROW) {
        bt_close(&q->cursor);
        if (rc == BT_NOMEM) { PyErr_NoMemory(); return -1; }
        PyObject *e = Py_BuildValue("(L)", 0LL);
        if (e) { PyErr_SetObject(UnsupportedError, e); Py_DECREF(e); }
        return -1;
    }
    q->direct = 1;
    return 0;
}

static int Query_init(Query *q, PyObject *args, PyObject *kw) {
    static char *names[] = {"uri", "sql", "kinds", "table", NULL};
    const char *uri, *sql, *kinds;
    Py_ssize_t sql_len, nk;
    PyObject *table = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss#s#|$O", names, &uri, &sql, &sql_len, &kinds, &nk, &table))
        return -1;
    if (q->db || q->stmt || q->direct) { PyErr_SetString(PyExc_RuntimeError, "Query already open"); return -1; }
    if (nk < 1 || nk > MAX_COLUMNS) { PyErr_Format(PyExc_ValueError, "1..%d columns", MAX_COLUMNS); return -1; }
    for (Py_ssize_t j = 0; j < nk; j++) {
        if (!strchr("itfs", kinds[j]) || kinds[j] == 0) {
            PyErr_SetString(PyExc_ValueError, "kinds: one of i, t, f, s per column");
            return -1;
        }
        q->kinds[j] = kinds[j];
    }
    q->ncols = (int)nk;
    q->rows_done = 0;
    q->done = 0;
    q->busy = 0;
    if (table != Py_None) return open_direct(q, table);
    int rc;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, sql, (int)sql_len, &stmt, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK || stmt == NULL) {
        PyObject *e = Py_BuildValue("(sL)", db ? sqlite3_errmsg(db) : "cannot open the database", 0LL);
        if (stmt) sqlite3_finalize(stmt);
        if (db) sqlite3_close_v2(db);
        if (e) { PyErr_SetObject(ReadError, e); Py_DECREF(e); }
        return -1;
    }
    if (sqlite3_column_count(stmt) != q->ncols) {
        sqlite3_finalize(stmt);
        sqlite3_close_v2(db);
        PyErr_SetString(PyExc_ValueError, "kinds: one letter per result column");
        return -1;
    }
    q->db = db;
    q->stmt = stmt;
    return 0;
}

static void Query_dealloc(Query *q) {
    query_close(q);
    Py_TYPE(q)->tp_free((PyObject *)q);
}

static PyMethodDef Query_methods[] = {
    {"fetch", (PyCFunction)Query_fetch, METH_VARARGS, "fetch(max_rows) -> None or (rows, columns)"},
    {"close", (PyCFunction)Query_close, METH_NOARGS, "finalize the statement and close the database"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject QueryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "acceltrace.ingest.nsys._sqlread.Query",
    .tp_basicsize = sizeof(Query),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One SQLite query read into column buffers (see the module's comment).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Query_init,
    .tp_dealloc = (destructor)Query_dealloc,
    .tp_methods = Query_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sqlread", "Nsight SQLite tables read into column buffers.", -1, NULL,
};

PyMODINIT_FUNC PyInit__sqlread(void) {
    if (PyType_Ready(&QueryType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    ReadError = PyErr_NewException("acceltrace.ingest.nsys._sqlread.Error", NULL, NULL);
    MismatchError = PyErr_NewException("acceltrace.ingest.nsys._sqlread.Mismatch", NULL, NULL);
    UnsupportedError = PyErr_NewException("acceltrace.ingest.nsys._sqlread.Unsupported", NULL, NULL);
    if (!ReadError || !MismatchError || !UnsupportedError || PyModule_AddObjectRef(m, "Error", ReadError) < 0
        || PyModule_AddObjectRef(m, "Mismatch", MismatchError) < 0
        || PyModule_AddObjectRef(m, "Unsupported", UnsupportedError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&QueryType);
    if (PyModule_AddObject(m, "Query", (PyObject *)&QueryType) < 0) {
        Py_DECREF(&QueryType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
