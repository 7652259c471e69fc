"""Tracer: the user-facing API of the Python client; records go to a sink (file or daemon ring)."""

from __future__ import annotations

import functools
import itertools
import json
import os
import struct
import threading
import time
import weakref

from acceltrace.formats import record as R

# A record is a 24-byte prefix (kind .. tid: fixed per call site and thread, cached) followed
# by ts, dur, corr, bytes, flow, args: packing 7 values instead of 18 is what keeps a span cheap.
PREFIX = struct.Struct("<BBBBBBBBIIII")
PACK_INTO = struct.Struct("<24sqqQQII").pack_into
assert PREFIX.size == 24

_now = time.monotonic_ns

PURE_PYTHON_ENV = "ACCELTRACE_PURE_PYTHON"


def compiled():
    """The compiled hot path (collect/client/_fastspan.c), or None: not built on this machine, or
    ACCELTRACE_PURE_PYTHON=1. Both paths write the same records; the choice is made per Tracer."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from acceltrace.collect.client import _fastspan
    except ImportError:
        return None
    return _fastspan


class ClientError(RuntimeError):
    """The client cannot do what was asked (no daemon, daemon refused, closed tracer)."""


def _check_ids(corr, nbytes, flow) -> None:
    """Range checks a record's integer fields, so a bad value is a ValueError naming it when the event
    is made, not a struct.error from deep inside the ring write (at a span's exit)."""
    for v, what, hi in ((corr, "corr", 1 << 64), (nbytes, "bytes", 1 << 64), (flow, "flow id", 1 << 32)):
        if v is not None and not (isinstance(v, int) and 0 <= v < hi):
            raise ValueError(f"{what} must be an integer in [0, {hi}), got {v!r}")


def _code(table: dict, value, what: str) -> int:
    if value is None:
        return 0
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"unknown {what} {value!r}; expected one of {sorted(table)}") from None


class Span:
    """`with t.span(...)`: one COMPLETE record written at exit. Also a decorator."""

    __slots__ = ("_t", "_emit", "_prefix", "_corr", "_nbytes", "_flow", "_args", "_start")

    def __init__(self, t, emit, prefix, corr, nbytes, flow, args):
        self._t, self._emit, self._prefix = t, emit, prefix
        self._corr, self._nbytes, self._flow, self._args = corr, nbytes, flow, args

    def __enter__(self):
        self._start = _now()
        return self

    def __exit__(self, *exc):
        # the bound emit of the creating thread's buffer: a span belongs to the thread that made it
        start = self._start
        self._emit(self._prefix, start, _now() - start, self._corr, self._nbytes, self._flow, self._args)
        return False

    def __call__(self, fn):
        prefix, corr, nbytes, flow, args, t = self._prefix, self._corr, self._nbytes, self._flow, self._args, self._t
        (owner_tid,) = struct.unpack_from("<I", prefix, 20)

        @functools.wraps(fn)
        def traced(*a, **kw):
            start = _now()
            try:
                return fn(*a, **kw)
            finally:
                w = t._writer()
                tid = t._tl.tid
                # the prefix carries the decorating thread's tid; another thread writes its own
                p = prefix if tid == owner_tid else prefix[:20] + struct.pack("<I", tid)
                w.emit(p, start, _now() - start, corr, nbytes, flow, args)

        return traced


class _CachedSpan:
    """The span object for `t.span(name)` with no corr and no args, reused per thread: no allocation.

    Start times live on a small stack, so the same name may nest or recurse.
    """

    __slots__ = ("_emit", "_prefix", "_starts", "_t")

    def __init__(self, t, emit, prefix):
        self._t, self._emit, self._prefix, self._starts = t, emit, prefix, []

    def __enter__(self):
        self._starts.append(_now())
        return self

    def __exit__(self, *exc):
        start = self._starts.pop()
        self._emit(self._prefix, start, _now() - start, 0, 0, 0, 0)
        return False

    def __call__(self, fn):
        return Span(self._t, self._emit, self._prefix, 0, 0, 0, 0)(fn)


class Tracer:
    """Writes events for one process. Thread-safe: each thread gets its own buffer or ring."""

    def __init__(self, sink, pid: int | None = None, reopen=None):
        self._sink = sink
        self._own_pid = pid is None
        self.pid = os.getpid() if pid is None else int(pid)
        self._tl = threading.local()
        self._flow_ids = itertools.count(1)
        self.closed = False
        # a forked child must not write into its parent's rings (one producer per ring)
        self._reopen = reopen
        # compiled: `t.span` is a SpanFactory (its common call shapes never enter Python) that
        # forwards every other shape to _span_py; pure Python: the class's span (= _span_py)
        self.compiled = getattr(sink, "compiled", None) is not None
        if self.compiled:
            self.span = sink.compiled.SpanFactory(self._tl, self._c_entry, self._span_py, self._decorate)
        os.register_at_fork(after_in_child=functools.partial(_after_fork_in_child, weakref.ref(self)))

    # -- internals ---------------------------------------------------------------------------
    def _writer(self):
        try:
            return self._tl.w
        except AttributeError:
            if self.closed:
                raise ClientError("this tracer is closed") from None
            w = self._tl.w = self._sink.writer()
            self._tl.tid = threading.get_native_id()
            self._tl.prefixes = {}
            self._tl.fast = {}
            self._tl.cached = {}
            return w

    def intern(self, text: str) -> int:
        """The string id of `text` in this producer's table (sent/written before any use)."""
        return self._sink.intern(text)

    def _args_id(self, args: dict) -> int:
        return self._sink.intern(json.dumps(args, sort_keys=True, default=str)) if args else 0

    def _prefix(self, kind, name, lane, clock, direction, mem, flow_kind, flags, device, cat, pid, tid) -> bytes:
        return PREFIX.pack(kind, _code(R.LANE_CODES, lane, "lane"), clock,
                           _code(R.DIRECTION_CODES, direction, "direction"), _code(R.MEM_CODES, mem, "memory kind"),
                           _code(R.FLOW_CODES, flow_kind, "flow kind"), flags,
                           R.NO_DEVICE if device is None else device, self._sink.intern(name),
                           self._sink.intern(cat) if cat else 0, self.pid if pid is None else pid,
                           self._tl.tid if tid is None else tid)

    def _emit(self, kind, name, ts, dur, lane, clock=0, tid=None, pid=None, device=None, cat=None, corr=None,
              bytes=None, direction=None, mem=None, flow_out=None, flow_in=None, flow_kind=None, queue=None,
              args=None):
        w = self._writer()
        flags, flow = 0, 0
        _check_ids(corr, bytes, flow_out if flow_out is not None else flow_in)
        if flow_out is not None and flow_in is not None:
            raise ValueError("one record carries one flow end: give flow_out or flow_in, not both")
        if flow_out is not None:
            flags, flow = R.FLAG_FLOW_OUT, flow_out
        elif flow_in is not None:
            flags, flow = R.FLAG_FLOW_IN, flow_in
        if flow and flow_kind is None:
            flow_kind = "dependency"
        if bytes is not None:
            flags |= R.FLAG_HAS_BYTES
        if corr is not None:
            flags |= R.FLAG_HAS_CORR
        if queue is not None and tid is None:
            tid = queue
        prefix = self._prefix(kind, name, lane, clock, direction, mem, flow_kind, flags, device, cat, pid, tid)
        w.emit(prefix, int(ts), int(dur), corr or 0, bytes or 0, flow, self._args_id(args))

    def _c_entry(self, name: str, lane: str) -> tuple:
        """For the SpanFactory's cache miss: this thread's writer and the record prefix of (name, lane)."""
        w = self._writer()
        key = (name, lane, False, False, False, False, None, None, None, None, None, None)
        prefix = self._tl.prefixes.get(key)
        if prefix is None:
            prefix = self._tl.prefixes[key] = self._prefix(R.COMPLETE, name, lane, 0, None, None, None, 0, None,
                                                           None, None, None)
        return w, prefix

    def _decorate(self, prefix: bytes, corr: int, fn):
        """A compiled span used as a decorator: the Python Span's wrapper (the writing thread's tid)."""
        return Span(self, None, prefix, corr, 0, 0, 0)(fn)

    # -- spans measured now --------------------------------------------------------------------
    def _span_py(self, name: str, lane: str = "cpu", corr: int | None = None, **args) -> Span:
        """A context manager / decorator timing a block as one COMPLETE record on the host clock.

        Typed args (bytes, direction, mem, cat, device, flow_out, flow_in, flow_kind, queue, tid)
        go into their record fields; any other keyword goes into the args JSON.
        """
        if not args:  # the common cases, kept short: one dict lookup per span
            try:
                if corr is None:
                    return self._tl.cached[(name, lane)]
                if not 0 <= corr < 1 << 64:
                    _check_ids(corr, None, None)
                return Span(self, self._tl.w.emit, self._tl.fast[(name, lane, True)], corr, 0, 0, 0)
            except (AttributeError, KeyError):
                pass
        emit = self._writer().emit
        typed = {k: args.pop(k) for k in ("bytes", "direction", "mem", "cat", "device", "flow_out", "flow_in",
                                          "flow_kind", "queue", "tid") if k in args}
        # only what shapes the prefix goes in the key (bytes and flow values vary per call)
        key = (name, lane, corr is not None, typed.get("bytes") is not None, typed.get("flow_out") is not None,
               typed.get("flow_in") is not None, typed.get("direction"), typed.get("mem"), typed.get("cat"),
               typed.get("device"), typed.get("flow_kind"), typed.get("tid", typed.get("queue")))
        prefixes = self._tl.prefixes
        prefix = prefixes.get(key)
        if prefix is None:
            flags, flow = self._flags(typed, corr)
            prefix = self._prefix(R.COMPLETE, name, lane, 0, typed.get("direction"), typed.get("mem"),
                                  typed.get("flow_kind") or ("dependency" if flow else None), flags,
                                  typed.get("device"), typed.get("cat"), None, typed.get("tid", typed.get("queue")))
            prefixes[key] = prefix
            if not typed and not args:
                self._tl.fast[(name, lane, corr is not None)] = prefix
                if corr is None:
                    self._tl.cached[(name, lane)] = _CachedSpan(self, emit, prefix)
                    return self._tl.cached[(name, lane)]
        flow = typed.get("flow_out") or typed.get("flow_in") or 0
        _check_ids(corr, typed.get("bytes"), flow)
        return Span(self, emit, prefix, corr or 0, typed.get("bytes") or 0, flow, self._args_id(args))

    span = _span_py

    @staticmethod
    def _flags(typed: dict, corr) -> tuple[int, int]:
        flags = 0
        if typed.get("flow_out") is not None:
            flags |= R.FLAG_FLOW_OUT
        elif typed.get("flow_in") is not None:
            flags |= R.FLAG_FLOW_IN
        if typed.get("bytes") is not None:
            flags |= R.FLAG_HAS_BYTES
        if corr is not None:
            flags |= R.FLAG_HAS_CORR
        return flags, typed.get("flow_out") or typed.get("flow_in") or 0

    def begin(self, name: str, lane: str = "cpu", ts: int | None = None, **kw) -> None:
        """Open a span on this thread (close it with end(); begin/end must nest per track)."""
        self._emit(R.BEGIN, name, _now() if ts is None else ts, 0, lane, args=_split(kw), **kw)

    def end(self, name: str = "", lane: str = "cpu", ts: int | None = None, **kw) -> None:
        """Close the innermost open span of this thread's track."""
        self._emit(R.END, name, _now() if ts is None else ts, 0, lane, args=_split(kw), **kw)

    def instant(self, name: str, lane: str = "cpu", ts: int | None = None, **kw) -> None:
        """A point event (dur 0)."""
        self._emit(R.INSTANT, name, _now() if ts is None else ts, 0, lane, args=_split(kw), **kw)

    def counter(self, name: str, value: float, ts: int | None = None, unit: str | None = None,
                device: int | None = None, clock: int = 0) -> None:
        """One counter sample (a level or rate in `unit`); the counter's track is its name (and device)."""
        (bits,) = struct.unpack("<q", struct.pack("<d", float(value)))
        self._emit(R.COUNTER, name, _now() if ts is None else ts, bits, "counter", clock=clock, device=device,
                   cat=unit, tid=0)

    # -- events with explicit timestamps (simulators, device trace readers) ---------------------
    def complete(self, name: str, ts: int, dur: int, lane: str = "cpu", **kw) -> None:
        """A COMPLETE record at `ts` for `dur`, in the units of clock domain `clock` (0 = host ns).

        Keywords: clock, tid/queue (the track within the lane: thread, queue, engine, unit), pid,
        device, cat, corr, bytes, direction (h2d/d2h/d2d/p2p), mem (pageable/pinned/device/managed),
        flow_out/flow_in (+ flow_kind); anything else lands in the args JSON.
        """
        if dur < 0:
            raise ValueError(f"negative duration {dur} for {name!r}")
        self._emit(R.COMPLETE, name, ts, dur, lane, args=_split(kw), **kw)

    def write_records(self, recs) -> None:
        """Bulk path: a RECORD_DTYPE array written as is (a device trace-buffer reader's batch).

        Names, categories and args must be ids from `t.intern()`; pid 0 is replaced by this
        process's pid. Far cheaper per event than one call per record.
        """
        import numpy as np

        recs = np.ascontiguousarray(recs, dtype=R.RECORD_DTYPE)
        if (recs["pid"] == 0).any():
            recs = recs.copy()
            recs["pid"][recs["pid"] == 0] = self.pid
        self._writer().write_many(recs)

    def flow(self) -> int:
        """A new flow id for flow_out= on the source event and flow_in= on the destination (same producer)."""
        return next(self._flow_ids)

    # -- naming and metadata --------------------------------------------------------------------
    def name_track(self, lane: str, tid: int, name: str, device: int | None = None, pid: int | None = None) -> None:
        """Give the track (lane, tid[, device]) of this process a display name (thread, queue, engine)."""
        self._emit(R.TRACK_NAME, name, 0, 0, lane, tid=tid, device=device, pid=pid)

    def name_thread(self, name: str) -> None:
        self._writer()
        self.name_track("cpu", self._tl.tid, name)

    def name_process(self, name: str, pid: int | None = None) -> None:
        self._emit(R.PROCESS_NAME, name, 0, 0, "cpu", pid=pid, tid=0)

    def metadata(self, data: dict) -> None:
        """Trace metadata (devices with link_gen/link_width/max_payload_bytes, clock_domains, ...)."""
        self._sink.metadata(data)

    def clock_domain(self, domain_id: int, name: str, device: int | None = None, hz: float | None = None) -> int:
        """Declare a device clock domain (ids 1..253; 0 is the host clock, 254 the C client's TSC,
        255 the daemon's wall clock) and return its id."""
        if not 1 <= domain_id <= 253:
            raise ValueError("device clock domain ids are 1..253 (0 host, 254 TSC, 255 wall clock are reserved)")
        self._sink.metadata({"clock_domains": [{"id": domain_id, "name": name, "kind": "device",
                                                "device": device, "hz": hz}]})
        return domain_id

    def clock_sync(self, domain_id: int, host_ns, dev_ticks) -> None:
        """(host ns, device ticks) pairs for a device domain; ingest maps ticks piecewise-linearly."""
        self._sink.clock_sync(domain_id, host_ns, dev_ticks)

    def flush(self) -> None:
        """Make everything written so far visible to the file or daemon."""
        self._sink.flush()

    def close(self) -> None:
        """Flush every thread's buffer and finish (file: write the trailer)."""
        if not self.closed:
            self.closed = True
            self._sink.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _after_fork_in_child(ref) -> None:
    t = ref()
    if t is None or t.closed:
        return
    t._tl = threading.local()
    if t.compiled:
        t.span.reset(t._tl)
    if t._own_pid:
        t.pid = os.getpid()
    t._sink = _ForkedSink(t._reopen)


class _ForkedSink:
    """The child's sink after fork: its own daemon connection, opened on first use.

    A file tracer cannot continue in the child (two processes appending to one file would
    interleave chunks), so there the first use raises ClientError.
    """

    def __init__(self, reopen):
        self._reopen = reopen
        self._real = None

    def _get(self):
        if self._real is None:
            if self._reopen is None:
                raise ClientError("a file tracer cannot be used in a forked child; call "
                                  "client.connect(file=...) with another file in the child")
            self._real = self._reopen()
        return self._real

    def __getattr__(self, name):
        return getattr(self._get(), name)


_TYPED = ("clock", "tid", "pid", "device", "cat", "corr", "bytes", "direction", "mem", "flow_out", "flow_in",
          "flow_kind", "queue")


def _split(kw: dict) -> dict:
    """Remove and return the untyped keywords (they go to the args JSON)."""
    extra = {k: kw.pop(k) for k in [k for k in kw if k not in _TYPED]}
    return extra
