"""The Python client's compiled hot path (collect/client/_fastspan.c): the same records as the
pure-Python path, and no crash on bad input (every error path raises a Python exception)."""

import gc
import mmap
import threading
import weakref

import numpy as np
import pytest

from acceltrace.collect import client
from acceltrace.collect.client import tracer
from acceltrace.formats import record as R
from acceltrace.formats import ring as RG
from acceltrace.formats.atrace.reader import AtraceReader

fast = tracer.compiled()
needs_ext = pytest.mark.skipif(fast is None, reason="the client extension is not built here")


def _workload(t):
    with t.span("plain"):
        with t.span("plain"):  # the same cached span nested in itself
            pass
    with t.span("corr", corr=7):
        pass
    with t.span("lane", "driver", 9):
        pass
    with t.span("typed", bytes=64, direction="h2d", note="x"):
        pass

    @t.span("decorated")
    def f(x):
        return x + 1

    assert f(1) == 2
    th = threading.Thread(target=f, args=(2,))
    th.start()
    th.join()
    for i in range(6000):  # past one 4096-record buffer: the drain callback from C
        with t.span(f"n{i % 3}"):
            pass
    with pytest.raises(KeyError):
        with t.span("raised"):
            raise KeyError("inside")
    deep = [t.span("deep") for _ in range(40)]
    for s in deep:
        s.__enter__()
    for s in reversed(deep):
        s.__exit__(None, None, None)
    t.complete("explicit", ts=10, dur=5, corr=3)
    t.instant("mark", ts=20)


def _records(path):
    r = AtraceReader.open(path)
    recs, _ = r.read_all()
    names = r.strings[0]
    out = []
    for rec in recs:
        out.append((names[rec["name"]], names.get(rec["args"]) if rec["args"] else None, int(rec["kind"]),
                    int(rec["lane"]), int(rec["flags"]), int(rec["corr"]), int(rec["bytes"]),
                    int(rec["direction"]), rec["tid"] == threading.get_native_id(), int(rec["dur"]) >= 0))
    return sorted(out, key=repr), r.trailer


@needs_ext
def test_both_paths_write_the_same_records(tmp_path, monkeypatch):
    got = {}
    for path in ("compiled", "python"):
        if path == "python":
            monkeypatch.setenv(tracer.PURE_PYTHON_ENV, "1")
        t = client.connect(file=tmp_path / f"{path}.atrace")
        assert t.compiled == (path == "compiled")
        _workload(t)
        t.close()
        got[path] = _records(tmp_path / f"{path}.atrace")
    assert got["compiled"][0] == got["python"][0]
    recs, trailer = got["compiled"]
    assert trailer["events"] == len(recs) == 2 + 1 + 1 + 1 + 2 + 6000 + 1 + 40 + 2
    assert sum(1 for r in recs if r[0] == "corr" and r[5] == 7 and r[4] & R.FLAG_HAS_CORR) == 1


@needs_ext
def test_a_dropped_tracer_is_collected(tmp_path):
    t = client.connect(file=tmp_path / "a.atrace")
    with t.span("x"):
        pass
    t.close()
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


@needs_ext
def test_ring_core_refuses_bad_buffers_and_state():
    with pytest.raises(BufferError):
        fast.RingCore(b"\0" * 8192, 64, 0)  # read-only
    with pytest.raises(ValueError, match="power of two"):
        fast.RingCore(bytearray(1 << 16), 100, 0)
    with pytest.raises(ValueError, match="smaller than"):
        fast.RingCore(bytearray(4096 + 64 * 8), 64, 0)
    with pytest.raises(ValueError, match="mode"):
        fast.RingCore(bytearray(1 << 16), 64, 7)
    with pytest.raises(RuntimeError, match="not initialised"):
        fast.RingCore.__new__(fast.RingCore).emit(b"\0" * 24, 0, 0, 0, 0, 0, 0)
    mem = mmap.mmap(-1, RG.ring_bytes(64))
    RG.init_ring(mem, 64, RG.MODE_DISCARD, 1, 1)
    r = fast.RingCore(mem, 64, RG.MODE_DISCARD)
    p = b"\x01" + b"\0" * 23
    for bad, exc in ((("short", 0, 0, 0, 0, 0, 0), ValueError), ((b"\0" * 23, 0, 0, 0, 0, 0, 0), ValueError),
                     ((p, "1", 0, 0, 0, 0, 0), TypeError), ((p, 1 << 63, 0, 0, 0, 0, 0), OverflowError),
                     ((p, 0, 0, -1, 0, 0, 0), OverflowError), ((p, 0, 0, 0, 0, 1 << 32, 0), OverflowError),
                     ((p, 0, 0, 0, 0, 0, 2.5), TypeError), ((p, 0, 0), TypeError)):
        with pytest.raises(exc):
            r.emit(*bad)
    r.w = -5
    with pytest.raises(ValueError, match="corrupt"):
        r.emit(p, 0, 0, 0, 0, 0, 0)
    r.w = 0
    for i in range(70):  # discard mode: 64 fit, 6 are counted lost
        r.emit(p, i, 1, i, 0, 0, 0)
    r.publish()
    idx = RG.index_view(mem)
    assert (int(idx[RG.W]), int(idx[RG.L])) == (64, 6)
    ring = np.frombuffer(mem, R.RECORD_DTYPE, count=64, offset=RG.DATA_OFFSET)
    assert ring["ts"].tolist() == list(range(64))
    del ring, idx, r
    mem.close()


@needs_ext
def test_buf_core_spans_and_factory_refuse_bad_use():
    class Sink:
        drained = 0

        def drain(self, w):
            Sink.drained += w.i
            w.i = 0

    b = fast.BufCore(Sink(), 4)
    for i in range(9):
        b.emit(b"\0" * 24, i, 0, 0, 0, 0, 0)
    assert (Sink.drained, b.i) == (8, 1)
    b.i = 99
    with pytest.raises(ValueError, match="outside"):
        b.emit(b"\0" * 24, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        fast.BufCore(Sink(), 0)

    class Failing:
        def drain(self, w):
            raise OSError("disk full")

    f = fast.BufCore(Failing(), 1)
    with pytest.raises(OSError, match="disk full"):
        f.emit(b"\0" * 24, 0, 0, 0, 0, 0, 0)
    with pytest.raises(RuntimeError, match="not initialised"):
        fast.SpanFactory.__new__(fast.SpanFactory)("x")
    with pytest.raises(TypeError):
        fast.SpanFactory(threading.local(), 1, 2, 3)
    bad = fast.SpanFactory(threading.local(), lambda name, lane: "nonsense", lambda *a, **k: None,
                           lambda *a: None)
    with pytest.raises(TypeError, match="_c_entry"):
        bad("x")
    t = client.connect(file="/dev/null")
    s = t.span("never entered")
    with pytest.raises(RuntimeError, match="without being entered"):
        s.__exit__(None, None, None)
    with pytest.raises(TypeError):
        s(1, 2)
    # out-of-range corr goes to the Python path, which names the field
    with pytest.raises(ValueError, match="corr must be"):
        t.span("x", corr=-1)
    with pytest.raises(ValueError, match="corr must be"):
        t.span("x", corr=1 << 64)
    with pytest.raises(ValueError, match="unknown lane"):
        t.span("x", lane="nowhere")
    t.close()
    with pytest.raises(client.ClientError, match="closed"):
        threading_result = []

        def other():
            try:
                t.span("late")
            except client.ClientError as e:
                threading_result.append(e)

        th = threading.Thread(target=other)
        th.start()
        th.join()
        raise threading_result[0]
