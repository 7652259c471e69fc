/* The compiled hot path of the Python client (collect/client/tracer.py is the reference).
 *
 * Three things are compiled, nothing else: the per-thread writers' emit/publish (RingCore for a
 * daemon ring, BufCore for the file sink's local buffer), the span objects' enter/exit, and the
 * SpanFactory that `t.span(name[, lane][, corr])` resolves to. Every other call shape (typed
 * keywords, args JSON, decorators' bookkeeping, prefixes) is forwarded to the Python
 * implementation, so both paths write the same bytes. Runs only with the GIL held: a writer is
 * touched by its own thread and by the flusher, and the GIL orders them as the Python
 * version's lock does.
 *
 * Bad input raises (TypeError, ValueError, OverflowError, RuntimeError); nothing here may crash
 * the traced process.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the record layout is little-endian; this extension is built for little-endian machines only"
#endif

#define PREFIX_SIZE 24
#define RECORD_SIZE 64
#define DATA_OFFSET 4096
#define WRITE_OFF 64
#define READ_OFF 128
#define LOST_OFF 192
#define FLAG_HAS_CORR 8
#define FLAGS_BYTE 6

static PyObject *s_drain, *s_emit, *s_cache, *s_cpu;

static inline int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void put_record(char *dst, const char *prefix, int64_t ts, int64_t dur, uint64_t corr,
                              uint64_t nbytes, uint32_t flow, uint32_t args) {
    memcpy(dst, prefix, PREFIX_SIZE);
    memcpy(dst + 24, &ts, 8);
    memcpy(dst + 32, &dur, 8);
    memcpy(dst + 40, &corr, 8);
    memcpy(dst + 48, &nbytes, 8);
    memcpy(dst + 56, &flow, 4);
    memcpy(dst + 60, &args, 4);
}

/* ---- argument conversion (every failure is a Python exception) ------------------------------ */
static int as_i64(PyObject *o, int64_t *out, const char *what) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.80s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit a signed 64-bit field", what);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int as_u64(PyObject *o, uint64_t *out, const char *what) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.80s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "%s must be in [0, 2**64)", what);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int as_u32(PyObject *o, uint32_t *out, const char *what) {
    uint64_t v;
    if (as_u64(o, &v, what) < 0)
        return -1;
    if (v > 0xFFFFFFFFu) {
        PyErr_Format(PyExc_OverflowError, "%s must be in [0, 2**32)", what);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int as_prefix(PyObject *o, const char **out) {
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != PREFIX_SIZE) {
        PyErr_SetString(PyExc_ValueError, "a record prefix is exactly 24 bytes");
        return -1;
    }
    *out = PyBytes_AS_STRING(o);
    return 0;
}

/* ---- RingCore: one thread's shared-memory ring (formats/ring.py) --------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *mem;
    Py_buffer view;
    int have_view;
    long long w, pub, lost, limit, every, cap, mask;
} RingCore;

static PyTypeObject RingCoreType;

static inline uint64_t *ring_idx(RingCore *r, int off) { return (uint64_t *)((char *)r->view.buf + off); }

static void ring_publish_c(RingCore *r) {
    if (r->w > r->pub) {
        __atomic_store_n(ring_idx(r, WRITE_OFF), (uint64_t)r->w, __ATOMIC_RELEASE);
        r->pub = r->w;
    }
    if (r->lost)
        __atomic_store_n(ring_idx(r, LOST_OFF), (uint64_t)r->lost, __ATOMIC_RELEASE);
}

static int ring_check(RingCore *r) {
    if (!r->have_view) {
        PyErr_SetString(PyExc_RuntimeError, "this ring writer was not initialised");
        return -1;
    }
    if (r->w < 0 || r->pub < 0 || r->lost < 0 || r->every < 1) {
        PyErr_SetString(PyExc_ValueError, "ring writer state is corrupt (negative index or publish interval)");
        return -1;
    }
    return 0;
}

static int ring_emit_c(RingCore *r, const char *prefix, int64_t ts, int64_t dur, uint64_t corr, uint64_t nbytes,
                       uint32_t flow, uint32_t args) {
    if (ring_check(r) < 0)
        return -1;
    long long w = r->w;
    if (w >= r->limit) {
        uint64_t rd = __atomic_load_n(ring_idx(r, READ_OFF), __ATOMIC_ACQUIRE);
        r->limit = (long long)rd + r->cap;
        if (w >= r->limit) { /* discard mode, ring full: count it (published at once), never block */
            r->lost += 1;
            __atomic_store_n(ring_idx(r, LOST_OFF), (uint64_t)r->lost, __ATOMIC_RELEASE);
            return 0;
        }
    }
    put_record((char *)r->view.buf + DATA_OFFSET + ((w & r->mask) << 6), prefix, ts, dur, corr, nbytes, flow, args);
    r->w = w + 1;
    if (r->w - r->pub >= r->every)
        ring_publish_c(r);
    return 0;
}

static int RingCore_init(RingCore *self, PyObject *a, PyObject *kw) {
    PyObject *mem;
    long long cap;
    int mode;
    static char *kwlist[] = {"mem", "capacity", "mode", NULL};
    if (!PyArg_ParseTupleAndKeywords(a, kw, "OLi", kwlist, &mem, &cap, &mode))
        return -1;
    if (cap <= 0 || (cap & (cap - 1))) {
        PyErr_SetString(PyExc_ValueError, "ring capacity must be a positive power of two");
        return -1;
    }
    if (cap > (1LL << 40)) {
        PyErr_SetString(PyExc_ValueError, "ring capacity is too large");
        return -1;
    }
    if (mode != 0 && mode != 1) {
        PyErr_Format(PyExc_ValueError, "ring mode must be 0 (discard) or 1 (ring), got %d", mode);
        return -1;
    }
    if (self->have_view) {
        PyErr_SetString(PyExc_RuntimeError, "this ring writer is already initialised");
        return -1;
    }
    if (PyObject_GetBuffer(mem, &self->view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0)
        return -1;
    self->have_view = 1;
    if (self->view.len < DATA_OFFSET + cap * RECORD_SIZE) {
        PyBuffer_Release(&self->view);
        self->have_view = 0;
        PyErr_Format(PyExc_ValueError, "ring buffer of %zd bytes is smaller than a %lld-record ring (%lld bytes)",
                     self->view.len, cap, (long long)(DATA_OFFSET + cap * RECORD_SIZE));
        return -1;
    }
    if (((uintptr_t)self->view.buf) & 7) {
        PyBuffer_Release(&self->view);
        self->have_view = 0;
        PyErr_SetString(PyExc_ValueError, "ring buffer is not 8-byte aligned");
        return -1;
    }
    Py_INCREF(mem);
    self->mem = mem;
    self->cap = cap;
    self->mask = cap - 1;
    self->w = self->pub = self->lost = 0;
    self->limit = mode == 0 ? cap : (1LL << 62);
    /* every record is published as it is written (one store): a SIGKILLed producer leaves no
     * written-but-unpublished batch behind, only the record it was writing (docs/tracing.md) */
    self->every = 1;
    return 0;
}

static int RingCore_traverse(RingCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->mem);
    return 0;
}

static int RingCore_clear(RingCore *self) {
    if (self->have_view) {
        PyBuffer_Release(&self->view);
        self->have_view = 0;
    }
    Py_CLEAR(self->mem);
    return 0;
}

static void RingCore_dealloc(RingCore *self) {
    PyObject_GC_UnTrack(self);
    RingCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_emit(PyObject *const *args, Py_ssize_t nargs, const char **prefix, int64_t *ts, int64_t *dur,
                      uint64_t *corr, uint64_t *nbytes, uint32_t *flow, uint32_t *a) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "emit(prefix, ts, dur, corr, nbytes, flow, args) takes 7 arguments, got %zd",
                     nargs);
        return -1;
    }
    if (as_prefix(args[0], prefix) < 0 || as_i64(args[1], ts, "ts") < 0 || as_i64(args[2], dur, "dur") < 0 ||
        as_u64(args[3], corr, "corr") < 0 || as_u64(args[4], nbytes, "bytes") < 0 ||
        as_u32(args[5], flow, "flow") < 0 || as_u32(args[6], a, "args") < 0)
        return -1;
    return 0;
}

static PyObject *RingCore_emit(RingCore *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *p;
    int64_t ts, dur;
    uint64_t corr, nb;
    uint32_t flow, a;
    if (parse_emit(args, nargs, &p, &ts, &dur, &corr, &nb, &flow, &a) < 0)
        return NULL;
    if (ring_emit_c(self, p, ts, dur, corr, nb, flow, a) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *RingCore_publish(RingCore *self, PyObject *unused) {
    if (ring_check(self) < 0)
        return NULL;
    ring_publish_c(self);
    Py_RETURN_NONE;
}

static PyMethodDef RingCore_methods[] = {
    {"emit", (PyCFunction)(void (*)(void))RingCore_emit, METH_FASTCALL, "Write one record (see RingWriter.emit)."},
    {"publish", (PyCFunction)RingCore_publish, METH_NOARGS, "Make written records and the lost count visible."},
    {NULL}};

static PyMemberDef RingCore_members[] = {
    {"mem", T_OBJECT_EX, offsetof(RingCore, mem), READONLY, NULL},
    {"w", T_LONGLONG, offsetof(RingCore, w), 0, NULL},
    {"pub", T_LONGLONG, offsetof(RingCore, pub), 0, NULL},
    {"lost", T_LONGLONG, offsetof(RingCore, lost), 0, NULL},
    {"limit", T_LONGLONG, offsetof(RingCore, limit), 0, NULL},
    {"every", T_LONGLONG, offsetof(RingCore, every), 0, NULL},
    {"cap", T_LONGLONG, offsetof(RingCore, cap), READONLY, NULL},
    {"mask", T_LONGLONG, offsetof(RingCore, mask), READONLY, NULL},
    {NULL}};

static PyTypeObject RingCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "acceltrace.collect.client._fastspan.RingCore",
    .tp_basicsize = sizeof(RingCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RingCore(mem, capacity, mode): a ring writer's compiled emit/publish",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RingCore_init,
    .tp_dealloc = (destructor)RingCore_dealloc,
    .tp_traverse = (traverseproc)RingCore_traverse,
    .tp_clear = (inquiry)RingCore_clear,
    .tp_methods = RingCore_methods,
    .tp_members = RingCore_members,
};

/* ---- BufCore: the file sink's per-thread buffer --------------------------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *sink, *buf;
    Py_ssize_t i, n;
} BufCore;

static PyTypeObject BufCoreType;

static int buf_emit_c(BufCore *b, const char *prefix, int64_t ts, int64_t dur, uint64_t corr, uint64_t nbytes,
                      uint32_t flow, uint32_t args) {
    if (b->buf == NULL || !PyByteArray_Check(b->buf)) {
        PyErr_SetString(PyExc_RuntimeError, "this buffer writer was not initialised");
        return -1;
    }
    Py_ssize_t i = b->i;
    if (i < 0 || i >= b->n || (i + 1) * RECORD_SIZE > PyByteArray_GET_SIZE(b->buf)) {
        PyErr_Format(PyExc_ValueError, "buffer index %zd is outside the %zd-record buffer", i, b->n);
        return -1;
    }
    put_record(PyByteArray_AS_STRING(b->buf) + i * RECORD_SIZE, prefix, ts, dur, corr, nbytes, flow, args);
    b->i = i + 1;
    if (b->i == b->n) {
        PyObject *r = PyObject_CallMethodOneArg(b->sink, s_drain, (PyObject *)b);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

static int BufCore_init(BufCore *self, PyObject *a, PyObject *kw) {
    PyObject *sink;
    Py_ssize_t n = 4096;
    static char *kwlist[] = {"sink", "n", NULL};
    if (!PyArg_ParseTupleAndKeywords(a, kw, "O|n", kwlist, &sink, &n))
        return -1;
    if (n <= 0 || n > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "buffer records must be in [1, 2**24]");
        return -1;
    }
    PyObject *buf = PyByteArray_FromStringAndSize(NULL, n * RECORD_SIZE);
    if (buf == NULL)
        return -1;
    memset(PyByteArray_AS_STRING(buf), 0, n * RECORD_SIZE);
    Py_INCREF(sink);
    Py_XSETREF(self->sink, sink);
    Py_XSETREF(self->buf, buf);
    self->i = 0;
    self->n = n;
    return 0;
}

static int BufCore_traverse(BufCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->sink);
    Py_VISIT(self->buf);
    return 0;
}

static int BufCore_clear(BufCore *self) {
    Py_CLEAR(self->sink);
    Py_CLEAR(self->buf);
    return 0;
}

static void BufCore_dealloc(BufCore *self) {
    PyObject_GC_UnTrack(self);
    BufCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *BufCore_emit(BufCore *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *p;
    int64_t ts, dur;
    uint64_t corr, nb;
    uint32_t flow, a;
    if (parse_emit(args, nargs, &p, &ts, &dur, &corr, &nb, &flow, &a) < 0)
        return NULL;
    if (buf_emit_c(self, p, ts, dur, corr, nb, flow, a) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef BufCore_methods[] = {
    {"emit", (PyCFunction)(void (*)(void))BufCore_emit, METH_FASTCALL, "Write one record (see BufWriter.emit)."},
    {NULL}};

static PyMemberDef BufCore_members[] = {
    {"sink", T_OBJECT_EX, offsetof(BufCore, sink), READONLY, NULL},
    {"buf", T_OBJECT_EX, offsetof(BufCore, buf), READONLY, NULL},
    {"i", T_PYSSIZET, offsetof(BufCore, i), 0, NULL},
    {"n", T_PYSSIZET, offsetof(BufCore, n), READONLY, NULL},
    {NULL}};

static PyTypeObject BufCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "acceltrace.collect.client._fastspan.BufCore",
    .tp_basicsize = sizeof(BufCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "BufCore(sink, n=4096): a file sink buffer's compiled emit",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)BufCore_init,
    .tp_dealloc = (destructor)BufCore_dealloc,
    .tp_traverse = (traverseproc)BufCore_traverse,
    .tp_clear = (inquiry)BufCore_clear,
    .tp_methods = BufCore_methods,
    .tp_members = BufCore_members,
};

/* any writer: compiled ones directly, others (LostWriter, a Python writer) through their emit */
static int emit_any(PyObject *w, const char *prefix, int64_t ts, int64_t dur, uint64_t corr) {
    if (PyObject_TypeCheck(w, &RingCoreType))
        return ring_emit_c((RingCore *)w, prefix, ts, dur, corr, 0, 0, 0);
    if (PyObject_TypeCheck(w, &BufCoreType))
        return buf_emit_c((BufCore *)w, prefix, ts, dur, corr, 0, 0, 0);
    PyObject *r = PyObject_CallMethod(w, "emit", "y#LLKiii", prefix, (Py_ssize_t)PREFIX_SIZE, (long long)ts,
                                      (long long)dur, (unsigned long long)corr, 0, 0, 0);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ---- CSpan: `with t.span(name)`; a stack of start times so the same object may nest ---------- */
typedef struct {
    PyObject_HEAD
    PyObject *writer;
    PyObject *decorate; /* Tracer._decorate(prefix, corr, fn) */
    char prefix[PREFIX_SIZE];
    uint64_t corr;
    int64_t *starts;
    Py_ssize_t depth, room;
    int64_t inline_starts[4];
} CSpan;

static PyTypeObject CSpanType;

static CSpan *cspan_new(PyObject *writer, PyObject *decorate, const char *prefix, uint64_t corr) {
    CSpan *s = PyObject_GC_New(CSpan, &CSpanType);
    if (s == NULL)
        return NULL;
    Py_INCREF(writer);
    Py_INCREF(decorate);
    s->writer = writer;
    s->decorate = decorate;
    memcpy(s->prefix, prefix, PREFIX_SIZE);
    s->corr = corr;
    s->starts = s->inline_starts;
    s->depth = 0;
    s->room = 4;
    PyObject_GC_Track(s);
    return s;
}

static int CSpan_traverse(CSpan *self, visitproc visit, void *arg) {
    Py_VISIT(self->writer);
    Py_VISIT(self->decorate);
    return 0;
}

static int CSpan_clear(CSpan *self) {
    Py_CLEAR(self->writer);
    Py_CLEAR(self->decorate);
    return 0;
}

static void CSpan_dealloc(CSpan *self) {
    PyObject_GC_UnTrack(self);
    CSpan_clear(self);
    if (self->starts != self->inline_starts)
        PyMem_Free(self->starts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *CSpan_enter(CSpan *self, PyObject *unused) {
    if (self->depth == self->room) {
        if (self->room >= (1 << 20)) {
            PyErr_SetString(PyExc_RecursionError, "a span nested more than 2**20 deep");
            return NULL;
        }
        Py_ssize_t room = self->room * 2;
        int64_t *n = PyMem_Malloc(room * sizeof(int64_t));
        if (n == NULL)
            return PyErr_NoMemory();
        memcpy(n, self->starts, self->depth * sizeof(int64_t));
        if (self->starts != self->inline_starts)
            PyMem_Free(self->starts);
        self->starts = n;
        self->room = room;
    }
    self->starts[self->depth++] = now_ns();
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *CSpan_exit(CSpan *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t end = now_ns();
    if (self->depth == 0) {
        PyErr_SetString(PyExc_RuntimeError, "span exited without being entered");
        return NULL;
    }
    if (self->writer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this span has been cleared");
        return NULL;
    }
    int64_t start = self->starts[--self->depth];
    if (emit_any(self->writer, self->prefix, start, end - start, self->corr) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *CSpan_call(CSpan *self, PyObject *args, PyObject *kw) {
    PyObject *fn;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "a span decorates one function (no keywords)");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O:span", &fn))
        return NULL;
    if (self->decorate == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this span has been cleared");
        return NULL;
    }
    return PyObject_CallFunction(self->decorate, "y#KO", self->prefix, (Py_ssize_t)PREFIX_SIZE,
                                 (unsigned long long)self->corr, fn);
}

static PyMethodDef CSpan_methods[] = {
    {"__enter__", (PyCFunction)CSpan_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))CSpan_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyTypeObject CSpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "acceltrace.collect.client._fastspan.Span",
    .tp_basicsize = sizeof(CSpan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A span made by SpanFactory: a context manager and a decorator",
    .tp_free = PyObject_GC_Del,
    .tp_dealloc = (destructor)CSpan_dealloc,
    .tp_traverse = (traverseproc)CSpan_traverse,
    .tp_clear = (inquiry)CSpan_clear,
    .tp_call = (ternaryfunc)CSpan_call,
    .tp_methods = CSpan_methods,
};

/* The cached span of one (name, lane) on one thread is the one instance of its own small heap
 * subtype, whose __enter__/__exit__ are builtins already bound to it: `with` then finds plain
 * callables (builtins do not bind as descriptors do) and allocates no bound method per block,
 * which is half of what a `with` costs. Made once per name and thread, on the cache miss. */
static PyMethodDef bound_enter_def = {"__enter__", (PyCFunction)CSpan_enter, METH_NOARGS, NULL};
static PyMethodDef bound_exit_def = {"__exit__", (PyCFunction)(void (*)(void))CSpan_exit, METH_FASTCALL, NULL};

static PyObject *cached_span_new(PyObject *writer, PyObject *decorate, const char *prefix) {
    PyObject *ns = NULL, *bases = NULL, *T = NULL, *en = NULL, *ex = NULL;
    CSpan *s = NULL;
    ns = Py_BuildValue("{s:()}", "__slots__");
    bases = PyTuple_Pack(1, (PyObject *)&CSpanType);
    if (ns == NULL || bases == NULL)
        goto done;
    T = PyObject_CallFunction((PyObject *)&PyType_Type, "sOO", "Span", bases, ns);
    if (T == NULL)
        goto done;
    s = (CSpan *)((PyTypeObject *)T)->tp_alloc((PyTypeObject *)T, 0);
    if (s == NULL)
        goto done;
    Py_INCREF(writer);
    Py_INCREF(decorate);
    s->writer = writer;
    s->decorate = decorate;
    memcpy(s->prefix, prefix, PREFIX_SIZE);
    s->corr = 0;
    s->starts = s->inline_starts;
    s->depth = 0;
    s->room = 4;
    en = PyCFunction_New(&bound_enter_def, (PyObject *)s);
    ex = PyCFunction_New(&bound_exit_def, (PyObject *)s);
    if (en == NULL || ex == NULL || PyObject_SetAttrString(T, "__enter__", en) < 0 ||
        PyObject_SetAttrString(T, "__exit__", ex) < 0)
        Py_CLEAR(s);
done:
    Py_XDECREF(ns);
    Py_XDECREF(bases);
    Py_XDECREF(T);
    Py_XDECREF(en);
    Py_XDECREF(ex);
    return (PyObject *)s;
}

/* ---- SpanFactory: what `t.span` is when compiled -------------------------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *tl;       /* the tracer's threading.local: the per-thread span cache lives on it */
    PyObject *entry;    /* Tracer._c_entry(name, lane) -> (writer, prefix) */
    PyObject *slow;     /* Tracer._span_py: every other call shape */
    PyObject *decorate; /* Tracer._decorate */
    vectorcallfunc vectorcall;
    /* the last thread's cache (thread state ids are never reused), so the common call skips the
     * threading.local lookup; at most one cache outlives its thread, until another thread calls */
    uint64_t last_id;
    PyObject *last_cache;
} Factory;

static PyObject *forward(Factory *f, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(f->slow, args, nargsf, kwnames);
}

static PyObject *Factory_vectorcall(Factory *f, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *name = NULL, *lane = NULL, *corr = NULL;
    if (nargs < 1 || nargs > 3)
        return forward(f, args, nargsf, kwnames);
    name = args[0];
    if (nargs > 1)
        lane = args[1];
    if (nargs > 2)
        corr = args[2];
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, k);
            if (lane == NULL && PyUnicode_CompareWithASCIIString(key, "lane") == 0)
                lane = args[nargs + k];
            else if (corr == NULL && PyUnicode_CompareWithASCIIString(key, "corr") == 0)
                corr = args[nargs + k];
            else
                return forward(f, args, nargsf, kwnames);
        }
    }
    if (!PyUnicode_CheckExact(name) || (lane != NULL && !PyUnicode_CheckExact(lane)))
        return forward(f, args, nargsf, kwnames);
    uint64_t corr_v = 0;
    int has_corr = corr != NULL && corr != Py_None;
    if (has_corr) {
        if (!PyLong_CheckExact(corr))
            return forward(f, args, nargsf, kwnames);
        corr_v = PyLong_AsUnsignedLongLong(corr);
        if (corr_v == (uint64_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return forward(f, args, nargsf, kwnames); /* out of range: the Python path names the field */
        }
    }
    int default_lane = lane == NULL || lane == s_cpu || PyUnicode_Compare(lane, s_cpu) == 0;
    if (!default_lane && PyErr_Occurred())
        return NULL;
    uint64_t tsid = PyThreadState_GetID(PyThreadState_Get());
    PyObject *cache;
    if (f->last_cache != NULL && f->last_id == tsid) {
        cache = f->last_cache;
        Py_INCREF(cache);
    } else {
        cache = PyObject_GetAttr(f->tl, s_cache);
        if (cache == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear();
            cache = PyDict_New();
            if (cache == NULL || PyObject_SetAttr(f->tl, s_cache, cache) < 0) {
                Py_XDECREF(cache);
                return NULL;
            }
        }
        if (!PyDict_CheckExact(cache)) {
            Py_DECREF(cache);
            PyErr_SetString(PyExc_TypeError, "the span cache on the tracer's threading.local is not a dict");
            return NULL;
        }
        Py_INCREF(cache);
        Py_XSETREF(f->last_cache, cache);
        f->last_id = tsid;
    }
    PyObject *key;
    if (default_lane) {
        key = name;
        Py_INCREF(key);
    } else {
        key = PyTuple_Pack(2, name, lane);
        if (key == NULL) {
            Py_DECREF(cache);
            return NULL;
        }
    }
    PyObject *span = PyDict_GetItemWithError(cache, key); /* borrowed */
    if (span == NULL) {
        if (PyErr_Occurred())
            goto fail;
        PyObject *res = PyObject_CallFunctionObjArgs(f->entry, name, default_lane ? s_cpu : lane, NULL);
        if (res == NULL)
            goto fail;
        const char *prefix;
        if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2 || as_prefix(PyTuple_GET_ITEM(res, 1), &prefix) < 0) {
            Py_DECREF(res);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "_c_entry must return (writer, 24-byte prefix)");
            goto fail;
        }
        span = cached_span_new(PyTuple_GET_ITEM(res, 0), f->decorate, prefix);
        Py_DECREF(res);
        if (span == NULL)
            goto fail;
        int bad = PyDict_SetItem(cache, key, span);
        Py_DECREF(span); /* the cache holds it */
        if (bad < 0)
            goto fail;
    }
    Py_DECREF(key);
    Py_DECREF(cache);
    if (!has_corr) {
        Py_INCREF(span);
        return span;
    }
    CSpan *c = (CSpan *)span;
    char prefix[PREFIX_SIZE];
    memcpy(prefix, c->prefix, PREFIX_SIZE);
    prefix[FLAGS_BYTE] |= FLAG_HAS_CORR;
    return (PyObject *)cspan_new(c->writer, c->decorate, prefix, corr_v);
fail:
    Py_DECREF(key);
    Py_DECREF(cache);
    return NULL;
}

static int Factory_init(Factory *self, PyObject *a, PyObject *kw) {
    PyObject *tl, *entry, *slow, *decorate;
    static char *kwlist[] = {"local", "entry", "slow", "decorate", NULL};
    if (!PyArg_ParseTupleAndKeywords(a, kw, "OOOO", kwlist, &tl, &entry, &slow, &decorate))
        return -1;
    if (!PyCallable_Check(entry) || !PyCallable_Check(slow) || !PyCallable_Check(decorate)) {
        PyErr_SetString(PyExc_TypeError, "entry, slow and decorate must be callable");
        return -1;
    }
    Py_INCREF(tl);
    Py_INCREF(entry);
    Py_INCREF(slow);
    Py_INCREF(decorate);
    Py_XSETREF(self->tl, tl);
    Py_XSETREF(self->entry, entry);
    Py_XSETREF(self->slow, slow);
    Py_XSETREF(self->decorate, decorate);
    Py_CLEAR(self->last_cache);
    self->vectorcall = (vectorcallfunc)Factory_vectorcall;
    return 0;
}

static PyObject *Factory_call(Factory *self, PyObject *args, PyObject *kw) {
    if (self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this span factory was not initialised");
        return NULL;
    }
    return PyObject_Call(self->slow, args, kw);
}

static PyObject *Factory_reset(Factory *self, PyObject *tl) {
    Py_INCREF(tl);
    Py_XSETREF(self->tl, tl);
    Py_CLEAR(self->last_cache);
    Py_RETURN_NONE;
}

static int Factory_traverse(Factory *self, visitproc visit, void *arg) {
    Py_VISIT(self->tl);
    Py_VISIT(self->entry);
    Py_VISIT(self->slow);
    Py_VISIT(self->decorate);
    Py_VISIT(self->last_cache);
    return 0;
}

static int Factory_clear(Factory *self) {
    Py_CLEAR(self->last_cache);
    Py_CLEAR(self->tl);
    Py_CLEAR(self->entry);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->decorate);
    self->vectorcall = NULL;
    return 0;
}

static void Factory_dealloc(Factory *self) {
    PyObject_GC_UnTrack(self);
    Factory_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Factory_methods[] = {
    {"reset", (PyCFunction)Factory_reset, METH_O, "Use a new threading.local (after fork: every cache is the parent's)."},
    {NULL}};

static PyTypeObject FactoryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "acceltrace.collect.client._fastspan.SpanFactory",
    .tp_basicsize = sizeof(Factory),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "SpanFactory(local, entry, slow, decorate): t.span(name, lane='cpu', corr=None, **args)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Factory_init,
    .tp_dealloc = (destructor)Factory_dealloc,
    .tp_traverse = (traverseproc)Factory_traverse,
    .tp_clear = (inquiry)Factory_clear,
    .tp_call = (ternaryfunc)Factory_call,
    .tp_vectorcall_offset = offsetof(Factory, vectorcall),
    .tp_methods = Factory_methods,
};

static PyObject *mod_now(PyObject *m, PyObject *unused) { return PyLong_FromLongLong(now_ns()); }

static PyMethodDef module_methods[] = {
    {"now", mod_now, METH_NOARGS, "CLOCK_MONOTONIC in ns (what time.monotonic_ns returns)."},
    {NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastspan",
                                       "The Python client's compiled hot path (see tracer.py).", -1, module_methods};

PyMODINIT_FUNC PyInit__fastspan(void) {
    s_drain = PyUnicode_InternFromString("drain");
    s_emit = PyUnicode_InternFromString("emit");
    s_cache = PyUnicode_InternFromString("_c");
    s_cpu = PyUnicode_InternFromString("cpu");
    if (!s_drain || !s_emit || !s_cache || !s_cpu)
        return NULL;
    if (PyType_Ready(&RingCoreType) < 0 || PyType_Ready(&BufCoreType) < 0 || PyType_Ready(&CSpanType) < 0 ||
        PyType_Ready(&FactoryType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "RingCore", (PyObject *)&RingCoreType) < 0 ||
        PyModule_AddObjectRef(m, "BufCore", (PyObject *)&BufCoreType) < 0 ||
        PyModule_AddObjectRef(m, "Span", (PyObject *)&CSpanType) < 0 ||
        PyModule_AddObjectRef(m, "SpanFactory", (PyObject *)&FactoryType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
