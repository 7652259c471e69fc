"""Where the Tracer's records go: an .atrace file directly, or the daemon's shared-memory rings."""

from __future__ import annotations

import mmap
import os
import select
import socket
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np

from acceltrace.formats import ring as RG
from acceltrace.formats.atrace.writer import AtraceWriter, StringTable, default_header
from acceltrace.collect.client.tracer import PACK_INTO, ClientError, compiled
from acceltrace.collect.traced import protocol as P

BUFFER_RECORDS = 4096


class BufWriter:
    """One thread's local buffer for the file sink; handed to the writer when full or flushed."""

    __slots__ = ("sink", "buf", "i", "n")

    def __init__(self, sink: "FileSink", n: int = BUFFER_RECORDS):
        self.sink, self.buf, self.i, self.n = sink, bytearray(n * 64), 0, n

    def emit(self, prefix, ts, dur, corr, nbytes, flow, args):
        i = self.i
        PACK_INTO(self.buf, i << 6, prefix, ts, dur, corr, nbytes, flow, args)
        i += 1
        self.i = i
        if i == self.n:
            self.sink.drain(self)


    def write_many(self, recs) -> None:
        self.sink.drain(self)  # keep order: what this thread buffered goes first
        with self.sink.lock:
            self.sink.writer_.define_strings(self.sink.strings.take_pending())
            self.sink.writer_.add_records(recs)


def _compiled_writers():
    """BufWriter and RingWriter on the compiled cores (emit/publish in C, the rest shared), or None."""
    fast = compiled()
    if fast is None:
        return None
    global _COMPILED
    if _COMPILED is None:
        class CBufWriter(fast.BufCore):
            """BufWriter with a compiled emit (same fields, same drain protocol)."""

            __slots__ = ()
            write_many = BufWriter.write_many

        class CRingWriter(fast.RingCore):
            """RingWriter with a compiled emit/publish (the GIL orders the flusher and the owner thread)."""

            __slots__ = ("idx", "lock", "__weakref__")

            def __init__(self, mem, capacity: int, mode: int):
                super().__init__(mem, capacity, mode)
                self.idx = RG.index_view(mem)
                self.lock = threading.Lock()

            write_many = RingWriter.write_many

        _COMPILED = (fast, CBufWriter, CRingWriter)
    return _COMPILED


_COMPILED = None


class FileSink:
    """Writes records straight into an .atrace file (no daemon): the explicit fallback."""

    def __init__(self, path: Path, header: dict | None = None):
        c = _compiled_writers()
        self.compiled, self._buf_cls = (c[0], c[1]) if c else (None, BufWriter)
        hdr = default_header()
        if header:
            hdr.update(header)
        self.lock = threading.Lock()
        self.writer_ = AtraceWriter(path, hdr)
        self.strings = StringTable()
        self.buffers: list[BufWriter] = []

    def writer(self) -> BufWriter:
        w = self._buf_cls(self)
        with self.lock:
            self.buffers.append(w)
        return w

    def intern(self, text: str) -> int:
        with self.lock:
            return self.strings.intern(text)

    def drain(self, w: BufWriter) -> None:
        with self.lock:
            self._drain_locked(w)

    def _drain_locked(self, w: BufWriter) -> None:
        # strings first: every id a record uses was interned before the record was packed
        self.writer_.define_strings(self.strings.take_pending())
        if w.i:
            self.writer_.add_records(bytes(memoryview(w.buf)[: w.i << 6]))
            w.i = 0

    def metadata(self, data: dict) -> None:
        with self.lock:
            self.writer_.add_metadata(data)

    def clock_sync(self, domain: int, host_ns, dev_ticks) -> None:
        with self.lock:
            self.writer_.add_clock_sync(domain, host_ns, dev_ticks)

    def flush(self) -> None:
        with self.lock:
            for w in self.buffers:
                self._drain_locked(w)
            self.writer_.flush()

    def close(self) -> None:
        with self.lock:
            for w in self.buffers:
                self._drain_locked(w)
            self.writer_.flush()
            self.writer_.close(lost_events=0, producers=[{"stream": 0, "pid": os.getpid(), "lost": 0,
                                                          "events": self.writer_.events_written}])


class RingWriter:
    """One thread's shared-memory ring (single producer); see formats/ring.py for the protocol.

    Every record and every lost count is published as it is made (one aligned 8-byte store into
    the ring header): a SIGKILLed producer leaves nothing in its ring that the daemon cannot see,
    except the one record it was writing when it died.
    """

    __slots__ = ("mem", "idx", "hdr", "cap", "mask", "w", "pub", "lost", "limit", "lock", "__weakref__")

    def __init__(self, mem: mmap.mmap, capacity: int, mode: int):
        self.mem, self.cap, self.mask = mem, capacity, capacity - 1
        self.idx = RG.index_view(mem)
        self.hdr = memoryview(mem)[: RG.DATA_OFFSET].cast("Q")  # W, R, L as slots RG.W, RG.R, RG.L
        self.w = self.pub = self.lost = 0
        self.limit = capacity if mode == RG.MODE_DISCARD else 1 << 62
        self.lock = threading.Lock()

    def emit(self, prefix, ts, dur, corr, nbytes, flow, args):
        w = self.w
        if w >= self.limit:
            self.limit = self.hdr[16] + self.cap  # RG.R
            if w >= self.limit:  # discard mode, ring full: count it (published at once), never block
                self.lost += 1
                self.hdr[24] = self.lost  # RG.L
                return
        PACK_INTO(self.mem, 4096 + ((w & self.mask) << 6), prefix, ts, dur, corr, nbytes, flow, args)
        w += 1
        self.w = w
        self.hdr[8] = w  # RG.W: published with the record

    def write_many(self, recs) -> None:
        """Copy a record array into the ring in at most two slices; what does not fit is counted lost."""
        n = len(recs)
        w = self.w
        if self.limit < (1 << 62):  # discard mode: only what the ring has room for
            self.limit = int(self.idx[RG.R]) + self.cap
            room = max(0, self.limit - w)
            if room < n:
                self.lost += n - room
                recs, n = recs[:room], room
        elif n > self.cap:  # ring mode: only the newest capacity's worth can survive
            self.lost += n - self.cap
            recs, n = recs[n - self.cap:], self.cap
        if n:
            ring = np.frombuffer(self.mem, dtype=recs.dtype, count=self.cap, offset=RG.DATA_OFFSET)
            start = w & self.mask
            first = min(n, self.cap - start)
            ring[start:start + first] = recs[:first]
            if n > first:
                ring[: n - first] = recs[first:]
            del ring
            self.w = w + n
        self.publish()

    def publish(self) -> None:
        """Make written records and the lost count visible (single aligned 8-byte stores). emit does
        this per record; write_many calls it. Only the owner thread calls it: a store from another
        thread could publish an older index after a newer one."""
        self.hdr[8] = self.pub = self.w
        self.hdr[24] = self.lost


class LostWriter:
    """A thread the daemon gave no ring: its events are counted, and reported to the daemon as lost."""

    __slots__ = ("lost",)

    def __init__(self, sink) -> None:
        self.lost = 0

    def emit(self, prefix, ts, dur, corr, nbytes, flow, args):
        self.lost += 1

    def write_many(self, recs) -> None:
        self.lost += len(recs)


class DaemonSink:
    """Talks to the daemon over its unix socket: one stream per process, one ring per thread."""

    FLUSH_INTERVAL_S = 0.02
    # a daemon that accepts but never answers (stopped with Ctrl-Z, hung) must not hang the traced
    # program: every request gives up after this long and raises ClientError
    REPLY_TIMEOUT_S = 10.0

    def __init__(self, sock_path: Path, ring_records: int | None = None, name: str | None = None):
        c = _compiled_writers()
        self.compiled, self._ring_cls = (c[0], c[2]) if c else (None, RingWriter)
        self.sock_path = sock_path
        self._next_reconnect = 0.0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.REPLY_TIMEOUT_S)
        try:
            self.sock.connect(str(sock_path))
        except OSError as e:
            self.sock.close()
            raise ClientError(f"cannot reach the tracing daemon at {sock_path} ({e.strerror or e}); is "
                              "`acceltrace traced` running? (or write a file with connect(file=...))") from None
        self.lock = threading.Lock()
        self.dead = False
        self.strings = StringTable()
        self.rings: list[RingWriter] = []
        self.lost_writers: list[LostWriter] = []
        self.lost_reported = 0
        hello = {"op": "hello", "pid": os.getpid(), "version": P.PROTOCOL_VERSION,
                 "name": name or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python")}
        if ring_records:
            hello["ring_records"] = int(ring_records)
        reply = self._call(hello)
        self.stream = reply["stream"]
        self.mode = RG.MODES[reply["mode"]]
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=_flush_loop, args=(weakref.ref(self), self._stop),
                                         name="acceltrace-flush", daemon=True)
        self._flusher.start()

    def _call(self, msg: dict, want_fd: bool = False):
        with self.lock:
            try:
                return self._call_locked(msg, want_fd)
            except (OSError, P.ProtocolError) as e:
                self.dead = True  # the flusher reconnects once a daemon listens again
                raise ClientError(f"lost the tracing daemon ({e}); events already published are in its file") from None

    def _call_locked(self, msg: dict, want_fd: bool = False):
        P.send_msg(self.sock, msg)
        reply, fds = P.recv_msg(self.sock, want_fds=want_fd)
        if reply is None:
            raise ClientError("the tracing daemon closed the connection")
        if not reply.get("ok"):
            for fd in fds:
                os.close(fd)
            raise ClientError(f"the tracing daemon refused {msg.get('op')!r}: {reply.get('error')}")
        return (reply, fds) if want_fd else reply

    def writer(self):
        try:
            return self._ring_writer()
        except ClientError:
            # no ring for this thread (daemon refused or gone): count its events, report them as lost
            w = LostWriter(self)
            with self.lock:
                self.lost_writers.append(w)
            return w

    def _ring_writer(self) -> RingWriter:
        reply, fds = self._call({"op": "ring", "tid": threading.get_native_id()}, want_fd=True)
        if len(fds) != 1:
            raise ClientError("the tracing daemon sent no ring")
        cap = int(reply["capacity"])
        try:
            # MAP_POPULATE: fault the ring in now, not one page per 64 events on the hot path
            mem = mmap.mmap(fds[0], RG.ring_bytes(cap), mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                            mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fds[0])
        info = RG.read_info(mem)
        if info["magic"] != RG.RING_MAGIC or info["capacity"] != cap:
            raise ClientError("the tracing daemon sent a ring with a bad header")
        w = self._ring_cls(mem, cap, info["mode"])
        with self.lock:
            self.rings.append(w)
        return w

    def intern(self, text: str) -> int:
        with self.lock:
            sid = self.strings.ids.get(text)
            if sid is not None:
                return sid
            sid = self.strings.intern(text)
            self.strings.pending.clear()
            # sent before any record using it is published, so the daemon always knows it first
            self._send_locked({"op": "strings", "entries": [[sid, text]]})
            return sid

    def _send_locked(self, msg: dict) -> None:
        # a dead daemon must not raise inside the traced program's spans; flush()/close() report it
        if self.dead:
            return
        try:
            P.send_msg(self.sock, msg)
        except OSError:
            self.dead = True

    def metadata(self, data: dict) -> None:
        with self.lock:
            self._send_locked({"op": "metadata", "data": data})

    def clock_sync(self, domain: int, host_ns, dev_ticks) -> None:
        host = np.atleast_1d(np.asarray(host_ns, dtype=np.int64)).tolist()
        ticks = np.atleast_1d(np.asarray(dev_ticks, dtype=np.int64)).tolist()
        with self.lock:
            self._send_locked({"op": "sync", "domain": int(domain), "pairs": [list(p) for p in zip(host, ticks)]})

    def publish_all(self) -> None:
        """Report the lost counts of threads without a ring (every ring publishes its own records and
        lost count as it writes them, on both the compiled and the Python path)."""
        lost = sum(w.lost for w in self.lost_writers)
        if lost != self.lost_reported:
            with self.lock:
                self._send_locked({"op": "lost", "count": lost})
            self.lost_reported = lost

    RECONNECT_INTERVAL_S = 0.1

    def check_daemon(self) -> None:
        """Notice a daemon that went away (its end of the socket closed) and reconnect to a restarted one
        on the same socket: it reopened our rings from its state file and drains them already; this
        gives back the stream, so strings interned meanwhile, flush and close work again."""
        if not self.dead:
            if not self.lock.acquire(blocking=False):
                return
            try:
                # readable with nothing to read: the daemon's end closed (select first: a recv on a
                # socket with a timeout would wait for data)
                if select.select([self.sock], [], [], 0)[0] and self.sock.recv(1, socket.MSG_PEEK) == b"":
                    self.dead = True
            except (OSError, ValueError):
                self.dead = True
            finally:
                self.lock.release()
        if self.dead and time.monotonic() >= self._next_reconnect:
            self._next_reconnect = time.monotonic() + self.RECONNECT_INTERVAL_S
            self._reconnect()

    def _reconnect(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.REPLY_TIMEOUT_S)
        try:
            s.connect(str(self.sock_path))
            P.send_msg(s, {"op": "hello", "resume": self.stream, "pid": os.getpid(), "version": P.PROTOCOL_VERSION})
            reply, _ = P.recv_msg(s)
        except (OSError, P.ProtocolError):
            s.close()
            return False
        if not reply or not reply.get("ok"):  # a daemon without our stream (a new trace): rings not drained
            s.close()
            return False
        with self.lock:
            old, self.sock = self.sock, s
            old.close()
            self.dead = False
            entries = [[sid, text] for text, sid in self.strings.ids.items() if sid]
            for i in range(0, len(entries), 2000):  # every string again: some may have gone with the daemon
                self._send_locked({"op": "strings", "entries": entries[i:i + 2000]})
            self.lost_reported = -1
        return not self.dead

    def flush(self) -> None:
        """Publish every ring and wait until the daemon has drained this producer into the file."""
        self.publish_all()
        self._call({"op": "drain"})

    def close(self) -> None:
        """Publish, say goodbye (the daemon then drains our rings into the file) and disconnect.
        Raises ClientError when the daemon is gone: what was written since it went is lost."""
        self._stop.set()
        if self.dead:
            self._reconnect()
        self.publish_all()
        lost = None
        try:
            self._call({"op": "bye"})
        except ClientError as e:
            lost = e
        finally:
            self.sock.close()
        if lost is not None:
            raise ClientError(f"closing: {lost}; events written after it went away are lost")


def _flush_loop(ref, stop: threading.Event) -> None:
    """Reports the lost counts of threads without a ring, and reconnects to a restarted daemon."""
    while not stop.wait(DaemonSink.FLUSH_INTERVAL_S):
        sink = ref()
        if sink is None:
            return
        sink.publish_all()
        sink.check_daemon()
        del sink
