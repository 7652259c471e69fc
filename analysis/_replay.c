/* The what-if replay (analysis/replay.py `replay` and `critical_path`) in C: the same list
 * scheduling, in the same order, so the compiled and the Python versions give the same
 * schedule (start, end, and the node that set each) and the same critical path. The Python
 * versions stay as the fallback when this module is not built.
 *
 * Every input is checked before the work starts (lengths, node ids in range, edge kinds), the
 * work runs without the GIL, sums that would overflow int64 stop it with an error, and a graph
 * with a cycle is reported (how many nodes never finished), never looped on.
 *
 * replay(src, dst, ekind, weight, ts, own, slack, start, end, why, why_end) -> finished nodes
 *   src, dst, weight: int64 per edge; ekind: int8 per edge (0 AFTER_END, 1 AFTER_START, 2 WAIT: end >= end(src) + w);
 *   ts, own, slack: int64 per node; start, end, why, why_end: writable int64 per node (out).
 * critical_path(start, end, why, why_end, slack, own, kind, lane) -> (a, b, type, node) as bytes
 *   kind, lane: int8 per node (lane: its code, ON_THREAD added for a thread's host work, its driver
 *   calls among them: analysis/threads.py); the segments earliest first, types as SEGMENT codes below.
 * scatter_max(out, idx, val), order_by(key, n, out): the graph build's two hot loops (analysis/graph.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { AFTER_END = 0, AFTER_START = 1, WAIT = 2 };
enum { HOST = 0, DEVICE = 1 };
enum { LANE_CPU = 0, LANE_DRIVER = 1, LANE_EU = 2, LANE_PCIE = 3, LANE_MASK = 0x3f, ON_THREAD = 0x40 };
/* segment types, in replay.py's SEGMENT_TYPES order */
enum { SEG_HOST = 0, SEG_LAUNCH = 1, SEG_LINK = 2, SEG_COMPUTE = 3, SEG_SYNC = 4, SEG_IDLE = 5 };

static int lane_type(int8_t lane) {
    switch (lane & LANE_MASK) {
    case LANE_CPU: return SEG_HOST;
    case LANE_DRIVER: return SEG_LAUNCH;
    case LANE_PCIE: return SEG_LINK;
    case LANE_EU: return SEG_COMPUTE;
    default: return SEG_IDLE;
    }
}

static int get_buf(PyObject *obj, Py_buffer *b, Py_ssize_t itemsize, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (b->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, b->len, itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

#define ADD(a, b, out) __builtin_add_overflow((a), (b), (out))

static PyObject *py_replay(PyObject *self, PyObject *args) {
    (void)self;
    enum { NB = 11 };
    static const char *names[NB] = {"src", "dst", "ekind", "weight", "ts", "own", "slack",
                                    "start", "end", "why", "why_end"};
    static const Py_ssize_t sizes[NB] = {8, 8, 1, 8, 8, 8, 8, 8, 8, 8, 8};
    PyObject *objs[NB];
    Py_buffer b[NB];
    int got = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6], &objs[7], &objs[8], &objs[9], &objs[10]))
        return NULL;
    for (; got < NB; got++)
        if (get_buf(objs[got], &b[got], sizes[got], got >= 7, names[got]) < 0) goto fail;
    Py_ssize_t m = b[0].len / 8, n = b[4].len / 8;
    for (int i = 1; i < 4; i++)
        if (b[i].len / sizes[i] != m) {
            PyErr_Format(PyExc_ValueError, "%s has %zd edges, src %zd", names[i], b[i].len / sizes[i], m);
            goto fail;
        }
    for (int i = 5; i < NB; i++)
        if (b[i].len / 8 != n) {
            PyErr_Format(PyExc_ValueError, "%s has %zd nodes, ts %zd", names[i], b[i].len / 8, n);
            goto fail;
        }
    const int64_t *src = b[0].buf, *dst = b[1].buf, *w = b[3].buf, *ts = b[4].buf, *own = b[5].buf,
                  *slack = b[6].buf;
    const int8_t *ek = b[2].buf;
    int64_t *start = b[7].buf, *end = b[8].buf, *why = b[9].buf, *why_end = b[10].buf;
    int sorted = 1;  /* edges already by source (analysis/graph.py sorts them): no index to build */
    for (Py_ssize_t k = 0; k < m; k++) {
        if (k && src[k] < src[k - 1]) sorted = 0;
        if (src[k] < 0 || src[k] >= n || dst[k] < 0 || dst[k] >= n) {
            PyErr_Format(PyExc_ValueError, "edge %zd (%lld -> %lld) names a node outside 0..%zd", k,
                         (long long)src[k], (long long)dst[k], n - 1);
            goto fail;
        }
        if (ek[k] < AFTER_END || ek[k] > WAIT) {
            PyErr_Format(PyExc_ValueError, "edge %zd has kind %d (expected 0, 1 or 2)", k, (int)ek[k]);
            goto fail;
        }
    }
    /* CSR by source, stable (the edges of a node in their given order, as numpy's stable argsort) */
    int64_t *ptr = calloc((size_t)n + 1, sizeof(int64_t));
    int64_t *eidx = sorted ? NULL : malloc(((size_t)m + 1) * sizeof(int64_t));
    int64_t *need_start = calloc((size_t)n + 1, sizeof(int64_t));
    int64_t *need_wait = calloc((size_t)n + 1, sizeof(int64_t));
    int64_t *wait = malloc(((size_t)n + 1) * sizeof(int64_t));
    int64_t *starts = malloc(((size_t)n + 1) * sizeof(int64_t));
    int64_t *ends = malloc(((size_t)n + 1) * sizeof(int64_t));
    char *started = calloc((size_t)n + 1, 1);
    int64_t done = 0;
    int overflow = 0;
    if (!ptr || (!sorted && !eidx) || !need_start || !need_wait || !wait || !starts || !ends || !started) {
        PyErr_NoMemory();
        goto free_all;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < m; k++) {
        ptr[src[k] + 1]++;
        if (ek[k] == WAIT) need_wait[dst[k]]++;
        else need_start[dst[k]]++;
    }
    for (Py_ssize_t v = 0; v < n; v++) ptr[v + 1] += ptr[v];
    if (!sorted) {
        int64_t *fill = malloc(((size_t)n + 1) * sizeof(int64_t));
        if (fill) {
            memcpy(fill, ptr, (size_t)n * sizeof(int64_t));
            for (Py_ssize_t k = 0; k < m; k++) eidx[fill[src[k]]++] = k;
            free(fill);
        } else {
            overflow = -1;
        }
    }
    const int64_t LOW = INT64_MIN;
    Py_ssize_t ns = 0, ne = 0;
    for (Py_ssize_t v = 0; v < n && overflow == 0; v++) {
        start[v] = need_start[v] > 0 ? LOW : ts[v];
        wait[v] = LOW;
        end[v] = 0;
        why[v] = -1;
        why_end[v] = -1;
        if (need_start[v] == 0) starts[ns++] = v;
    }
    while (overflow == 0 && (ns || ne)) {
        if (ns) {
            int64_t v = starts[--ns], s;
            if (ADD(start[v], slack[v], &s)) { overflow = 1; break; }
            start[v] = s;
            started[v] = 1;
            for (int64_t j = ptr[v]; j < ptr[v + 1]; j++) {
                int64_t k = sorted ? j : eidx[j];
                if (ek[k] != AFTER_START) continue;
                int64_t u = dst[k], t;
                if (ADD(s, w[k], &t)) { overflow = 1; break; }
                if (t > start[u]) { start[u] = t; why[u] = v; }
                if (--need_start[u] == 0) starts[ns++] = u;
            }
            if (need_wait[v] == 0) ends[ne++] = v;
            continue;
        }
        int64_t v = ends[--ne], e;
        done++;
        int64_t s = start[v];
        if (ADD(wait[v] > s ? wait[v] : s, own[v], &e)) { overflow = 1; break; }
        end[v] = e;
        for (int64_t j = ptr[v]; j < ptr[v + 1]; j++) {
            int64_t k = sorted ? j : eidx[j], u = dst[k];
            if (ek[k] == WAIT) {
                int64_t t;
                if (ADD(e, w[k], &t)) { overflow = 1; break; }
                if (t > wait[u]) { wait[u] = t; why_end[u] = v; }
                if (--need_wait[u] == 0 && started[u]) ends[ne++] = u;
            } else if (ek[k] == AFTER_END) {
                int64_t t;
                if (ADD(e, w[k], &t)) { overflow = 1; break; }
                if (t > start[u]) { start[u] = t; why[u] = v; }
                if (--need_start[u] == 0) starts[ns++] = u;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (overflow < 0) PyErr_NoMemory();
    else if (overflow) PyErr_SetString(PyExc_OverflowError, "replay: a node's time overflows int64 (bad durations or weights)");
free_all:
    free(ptr); free(eidx); free(need_start); free(need_wait); free(wait); free(starts); free(ends); free(started);
    if (PyErr_Occurred()) goto fail;
    for (int i = 0; i < NB; i++) PyBuffer_Release(&b[i]);
    return PyLong_FromLongLong((long long)done);
fail:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return NULL;
}

typedef struct {
    int64_t *a, *b, *node;
    int8_t *type;
    size_t len, cap;
} Segs;

static int seg_push(Segs *s, int64_t a, int64_t b, int type, int64_t node) {
    if (s->len == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        int64_t *na = realloc(s->a, cap * 8);
        if (na) s->a = na;
        int64_t *nb = realloc(s->b, cap * 8);
        if (nb) s->b = nb;
        int64_t *nn = realloc(s->node, cap * 8);
        if (nn) s->node = nn;
        int8_t *nt = realloc(s->type, cap);
        if (nt) s->type = nt;
        if (!na || !nb || !nn || !nt) return -1;
        s->cap = cap;
    }
    s->a[s->len] = a;
    s->b[s->len] = b;
    s->type[s->len] = (int8_t)type;
    s->node[s->len] = node;
    s->len++;
    return 0;
}

static PyObject *py_critical_path(PyObject *self, PyObject *args) {
    (void)self;
    enum { NB = 8 };
    static const char *names[NB] = {"start", "end", "why", "why_end", "slack", "own", "kind", "lane"};
    static const Py_ssize_t sizes[NB] = {8, 8, 8, 8, 8, 8, 1, 1};
    PyObject *objs[NB];
    Py_buffer b[NB];
    int got = 0;
    PyObject *out = NULL;
    Segs s = {0};
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7]))
        return NULL;
    for (; got < NB; got++)
        if (get_buf(objs[got], &b[got], sizes[got], 0, names[got]) < 0) goto done;
    Py_ssize_t n = b[0].len / 8;
    for (int i = 1; i < NB; i++)
        if (b[i].len / sizes[i] != n) {
            PyErr_Format(PyExc_ValueError, "%s has %zd nodes, start %zd", names[i], b[i].len / sizes[i], n);
            goto done;
        }
    const int64_t *start = b[0].buf, *end = b[1].buf, *why = b[2].buf, *why_end = b[3].buf, *slack = b[4].buf,
                  *own = b[5].buf;
    const int8_t *kind = b[6].buf, *lane = b[7].buf;
    for (Py_ssize_t v = 0; v < n; v++)
        if (why[v] < -1 || why[v] >= n || why_end[v] < -1 || why_end[v] >= n) {
            PyErr_Format(PyExc_ValueError, "node %zd points at a node outside 0..%zd", v, n - 1);
            goto done;
        }
    int failed = 0;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        int64_t v = 0;
        for (Py_ssize_t i = 1; i < n; i++)
            if (end[i] > end[v]) v = i;
        int64_t cursor = end[v], steps = 0;
        while (v >= 0 && steps <= 2 * (int64_t)n && !failed) {
            steps++;
            int64_t sv = start[v], ev = end[v] < cursor ? end[v] : cursor, wv = why_end[v];
            /* its end was set by the work it waited for: its own time after the wait, then that work */
            if (wv >= 0 && end[wv] > sv && end[v] - own[v] >= end[wv] && ev > end[wv]) {
                failed |= seg_push(&s, end[wv], ev, kind[v] == HOST ? SEG_SYNC : lane_type(lane[v]), v);
                v = wv;
                cursor = end[wv];
                continue;
            }
            if (ev > sv) failed |= seg_push(&s, sv, ev, lane_type(lane[v]), v);
            int64_t p = why[v];
            if (slack[v] > 0) failed |= seg_push(&s, sv - slack[v], sv, SEG_IDLE, -1);
            int64_t edge_t = sv - slack[v];
            if (p < 0) break;
            int64_t p_end = end[p] < edge_t ? end[p] : edge_t;
            if (edge_t > p_end) {
                int gap = (kind[p] == HOST && kind[v] == DEVICE) ? SEG_LAUNCH
                          : ((lane[p] & ON_THREAD) && (lane[v] & ON_THREAD)) ? SEG_HOST : SEG_IDLE;
                failed |= seg_push(&s, p_end, edge_t, gap, -1);
            }
            v = p;
            cursor = p_end;
        }
        Py_END_ALLOW_THREADS
    }
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    {   /* earliest first, empty segments dropped */
        Py_ssize_t k = 0;
        for (size_t i = 0; i < s.len; i++) k += s.b[i] > s.a[i];
        PyObject *oa = PyBytes_FromStringAndSize(NULL, k * 8), *ob = PyBytes_FromStringAndSize(NULL, k * 8),
                 *ot = PyBytes_FromStringAndSize(NULL, k), *on = PyBytes_FromStringAndSize(NULL, k * 8);
        if (oa && ob && ot && on) {
            int64_t *pa = (int64_t *)PyBytes_AS_STRING(oa), *pb = (int64_t *)PyBytes_AS_STRING(ob),
                    *pn = (int64_t *)PyBytes_AS_STRING(on);
            int8_t *pt = (int8_t *)PyBytes_AS_STRING(ot);
            Py_ssize_t j = 0;
            for (size_t i = s.len; i-- > 0;)
                if (s.b[i] > s.a[i]) {
                    pa[j] = s.a[i]; pb[j] = s.b[i]; pt[j] = s.type[i]; pn[j] = s.node[i];
                    j++;
                }
            out = PyTuple_Pack(4, oa, ob, ot, on);
        }
        Py_XDECREF(oa); Py_XDECREF(ob); Py_XDECREF(ot); Py_XDECREF(on);
    }
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    free(s.a); free(s.b); free(s.type); free(s.node);
    return out;
}

/* scatter_max(out, idx, val): out[idx[k]] = max(out[idx[k]], val[k]) (numpy's maximum.at) */
static PyObject *py_scatter_max(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[3];
    Py_buffer b[3];
    int got = 0;
    static const char *names[3] = {"out", "idx", "val"};
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    for (; got < 3; got++)
        if (get_buf(o[got], &b[got], 8, got == 0, names[got]) < 0) goto fail;
    Py_ssize_t n = b[0].len / 8, m = b[1].len / 8;
    if (b[2].len / 8 != m) {
        PyErr_Format(PyExc_ValueError, "idx has %zd items, val %zd", m, b[2].len / 8);
        goto fail;
    }
    int64_t *out = b[0].buf;
    const int64_t *idx = b[1].buf, *val = b[2].buf;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = idx[k];
        if (i < 0 || i >= n) { bad = k; break; }
        if (val[k] > out[i]) out[i] = val[k];
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "index %lld (item %zd) outside 0..%zd", (long long)idx[bad], bad, n - 1);
        goto fail;
    }
    for (int i = 0; i < 3; i++) PyBuffer_Release(&b[i]);
    Py_RETURN_NONE;
fail:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return NULL;
}

/* order_by(key, n, out): the stable order of items by key in 0..n-1 (a counting sort) into out */
static PyObject *py_order_by(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ko, *oo;
    Py_ssize_t n;
    Py_buffer kb, ob;
    if (!PyArg_ParseTuple(args, "OnO", &ko, &n, &oo)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 0");
        return NULL;
    }
    if (get_buf(ko, &kb, 8, 0, "key") < 0) return NULL;
    if (get_buf(oo, &ob, 8, 1, "out") < 0) { PyBuffer_Release(&kb); return NULL; }
    Py_ssize_t m = kb.len / 8, bad = -1;
    const int64_t *key = kb.buf;
    int64_t *out = ob.buf;
    int64_t *pos = NULL;
    if (ob.len / 8 != m) {
        PyErr_Format(PyExc_ValueError, "out has %zd items, key %zd", ob.len / 8, m);
        goto done;
    }
    pos = calloc((size_t)n + 1, sizeof(int64_t));
    if (!pos) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < m; k++) {
        if (key[k] < 0 || key[k] >= n) { bad = k; break; }
        pos[key[k] + 1]++;
    }
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n; i++) pos[i + 1] += pos[i];
        for (Py_ssize_t k = 0; k < m; k++) out[pos[key[k]]++] = k;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0)
        PyErr_Format(PyExc_ValueError, "key %lld (item %zd) outside 0..%zd", (long long)key[bad], bad, n - 1);
done:
    free(pos);
    PyBuffer_Release(&kb);
    PyBuffer_Release(&ob);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"replay", py_replay, METH_VARARGS, "List-schedule the graph (see the header); the number of finished nodes."},
    {"critical_path", py_critical_path, METH_VARARGS, "The critical path's segments (see the header)."},
    {"scatter_max", py_scatter_max, METH_VARARGS, "out[idx[k]] = max(out[idx[k]], val[k]), bounds-checked."},
    {"order_by", py_order_by, METH_VARARGS, "The stable order of items by a key in 0..n-1 (counting sort)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_replay", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__replay(void) { return PyModule_Create(&MODULE); }
