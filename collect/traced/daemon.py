"""The tracing daemon: accepts producers on a unix socket, hands each thread a ring, drains them to .atrace.

One thread, one selector loop. Every DRAIN_INTERVAL_S it takes what every ring published,
reads all pending socket messages (so strings sent before a record was published are
written before it), writes the records as event chunks and flushes, so events reach the
file within ~100 ms. SIGINT/SIGTERM: final drain, trailer, exit 0.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from acceltrace.formats import ring as RG
from acceltrace.formats.atrace.writer import AtraceWriter, default_header
from acceltrace.collect.traced import protocol as P
from acceltrace.collect.traced import recover
from acceltrace.collect.traced.drain import REFUSED, Draining
from acceltrace.collect.traced.recover import Recovering
from acceltrace.collect.traced.rings import DaemonRing, pow2_records

DRAIN_INTERVAL_S = 0.02
SYNC_INTERVAL_S = 1.0
MAX_PRODUCERS = 512
MAX_RINGS_PER_PRODUCER = 1024
MAX_STRING_ID = 1 << 31
REALTIME_DOMAIN = 255  # periodic (CLOCK_MONOTONIC, CLOCK_REALTIME) pairs: wall time for the trace


@dataclass
class Conn:
    sock: socket.socket | None  # None: a producer recovered from a killed daemon's state, not reconnected (yet)
    frames: P.FrameBuffer = field(default_factory=P.FrameBuffer)
    stream: int | None = None  # set by hello: this connection is a producer
    pid: int = 0
    name: str = ""
    rings: list[DaemonRing] = field(default_factory=list)
    events: int = 0
    string_ids: int = 0
    unresponsive: bool = False  # a reply could not be sent: no further replies are tried
    drop_reason: str | None = None  # a drop deferred until the current drain has written its records


class Daemon(Draining, Recovering):
    conn_class = Conn

    def __init__(self, socket_path: Path, out_path: Path, buffer_mb: int = 64, mode: str = "discard",
                 ring_records: int | None = None, log=sys.stderr):
        if mode not in RG.MODES:
            raise ValueError(f"mode must be one of {sorted(RG.MODES)}")
        self.socket_path, self.out_path = Path(socket_path), Path(out_path)
        self.mode = mode
        self.budget_bytes = max(1, buffer_mb) << 20
        # default ring: 1/16 of the budget, so 16 threads fit before rings shrink to the minimum
        self.ring_records = pow2_records(ring_records or (self.budget_bytes // 16 // 64))
        self.log = log
        self.conns: dict[int, Conn] = {}
        self.next_stream = 1
        self.draining = True
        self.stop_requested = False
        self.allocated_bytes = 0
        self.retired: list[dict] = []  # producers that disconnected: their final counts
        self.dead_lost = 0
        self._last_loss: dict[int, int] = {}
        self._deferred: list | None = None  # set while a drain has taken records it has not written yet
        self.state_file = recover.state_path(self.out_path)
        self.ring_dir: str | None = None
        self._ring_seq = 0
        self._saved_state: str | None = None
        self._next_reap = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------
    def _bind(self) -> socket.socket:
        path = self.socket_path
        if path.exists() or path.is_symlink():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
                raise SystemExit(f"acceltrace traced: another daemon is listening on {path}")
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink()  # a stale socket from a daemon that died
            finally:
                probe.close()
        # Bind and listen under a temporary name, then rename into place: the socket path
        # appears only once it accepts connections (no "file exists but connection refused"
        # window for a client that waits for the path). Fall back to binding in place when the
        # temporary name would not fit a unix socket address.
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        bind_path = tmp if len(os.fsencode(str(tmp))) < 108 else path
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born owner-only: no window where others could connect
        try:
            srv.bind(str(bind_path))
        finally:
            os.umask(old)
        os.chmod(bind_path, 0o600)
        srv.listen(64)
        if bind_path != path:
            os.replace(bind_path, path)
        srv.setblocking(False)
        return srv

    def run(self) -> int:
        try:
            srv = self._bind()  # first: a live daemon on this socket means we touch no file
        except OSError as e:
            self._print(f"acceltrace traced: cannot listen on {self.socket_path} ({e.strerror or e})")
            return 1
        hdr = default_header(producer="acceltrace traced", mode=self.mode)
        hdr["clock_domains"].append({"id": REALTIME_DOMAIN, "name": "realtime", "kind": "wall", "unit": "ns"})
        if self.out_path.exists() and not self.out_path.is_file():
            # never rotate a directory (or device) out of the way as FILE.old: that moved the
            # user's directory aside and wrote the trace in its place
            self._print(f"acceltrace traced: --out {self.out_path} is not a regular file; name the trace file "
                        f"(e.g. {self.out_path / 'trace.atrace'})")
            srv.close()
            self.socket_path.unlink(missing_ok=True)
            return 2
        try:
            self.ring_dir = recover.ring_dir(self.out_path)
        except OSError as e:  # no private tmpfs directory: anonymous rings, which die with this daemon
            self._print(f"acceltrace traced: rings will not survive a daemon crash ({e})")
        try:
            if not self._resume(hdr):
                if self.out_path.exists() and self.out_path.stat().st_size:
                    # like perf record: keep the previous trace as FILE.old rather than truncating it
                    os.replace(self.out_path, self.out_path.with_name(self.out_path.name + ".old"))
                self.writer = AtraceWriter(self.out_path, hdr)
                self._save_state()
        except OSError as e:
            self._print(f"acceltrace traced: cannot write {self.out_path} ({e.strerror or e})")
            srv.close()
            self.socket_path.unlink(missing_ok=True)
            if self.ring_dir and not self.conns and os.listdir(self.ring_dir) == ["trace"]:
                os.unlink(os.path.join(self.ring_dir, "trace"))
                os.rmdir(self.ring_dir)  # no ring was made
            return 1
        self.sel = selectors.DefaultSelector()
        self.sel.register(srv, selectors.EVENT_READ, None)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self._print(f"acceltrace traced: listening on {self.socket_path}, writing {self.out_path} "
                    f"({self.mode} mode, rings of {self.ring_records} records)")
        next_drain = time.monotonic()
        next_sync = 0.0
        try:
            while not self.stop_requested:
                try:
                    timeout = max(0.0, next_drain - time.monotonic())
                    for key, _ in self.sel.select(timeout):
                        if key.data is None:
                            self._accept(srv)
                        else:
                            self._readable(key.data)
                    now = time.monotonic()
                    if now >= next_drain:
                        self.drain_all()
                        next_drain = now + DRAIN_INTERVAL_S
                    if now >= self._next_reap:
                        self._reap_orphans()
                        self._next_reap = now + 0.5
                    if now >= next_sync:
                        self.writer.add_clock_sync(REALTIME_DOMAIN, time.monotonic_ns(), time.time_ns())
                        next_sync = now + SYNC_INTERVAL_S
                except OSError as e:  # disk full, file gone: say so and stop, never spin
                    self._print(f"acceltrace traced: cannot write {self.out_path} ({e.strerror or e}); stopping")
                    self.stop_requested = True
                    self.write_failed = True
        finally:
            self._shutdown(srv)
        return 1 if getattr(self, "write_failed", False) else 0

    def _on_signal(self, signum, frame) -> None:
        self.stop_requested = True

    def _shutdown(self, srv) -> None:
        try:
            if not getattr(self, "write_failed", False):
                self.drain_all(force=True)
            for c in list(self.conns.values()):
                self._drop(c, "daemon stopping")
            lost, producers = self.totals()
            self.writer.close(lost_events=lost, producers=producers)
            # the trace is complete: nothing to resume, no ring left (each was removed when retired)
            self.state_file.unlink(missing_ok=True)
            if self.ring_dir and os.listdir(self.ring_dir) == ["trace"]:  # every ring retired and removed
                os.unlink(os.path.join(self.ring_dir, "trace"))
                os.rmdir(self.ring_dir)
        except OSError as e:
            self._print(f"acceltrace traced: could not finish {self.out_path} ({e.strerror or e})")
            lost = -1
        self.sel.close()
        srv.close()
        try:
            self.socket_path.unlink()
        except OSError:  # already gone (or its directory was): nothing left to clean up
            pass
        self._print(f"acceltrace traced: wrote {self.writer.events_written} events to {self.out_path}, "
                    f"{lost} lost")

    def _print(self, msg: str) -> None:
        if self.log:
            print(msg, file=self.log, flush=True)

    # -- sockets -----------------------------------------------------------------------------------
    def _accept(self, srv) -> None:
        while True:
            try:
                s, _ = srv.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self._print(f"acceltrace traced: cannot accept ({e.strerror})")
                return
            if len(self.conns) >= MAX_PRODUCERS:
                s.close()
                continue
            s.setblocking(False)
            c = Conn(s)
            self.conns[id(c)] = c
            self.sel.register(s, selectors.EVENT_READ, c)

    def _readable(self, c: Conn) -> None:
        """Read everything available; a protocol error drops that connection only."""
        while True:
            try:
                data = c.sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                if self._deferred is not None:
                    self._deferred.append((c, None))
                else:
                    self._drop(c, None)
                return
            try:
                for msg in c.frames.feed(data):
                    if self._deferred is not None and msg.get("op") not in ("strings", "metadata", "sync"):
                        self._deferred.append((c, msg))  # handled after the taken records are written
                    else:
                        self._handle(c, msg)
            except REFUSED as e:
                self._refuse(c, e)
                return
            if c.sock.fileno() < 0:
                return

    def _refuse(self, c: Conn, e: Exception) -> None:
        """Answer a bad message with an error and drop that connection only. While a drain holds records
        taken from this producer's rings, the drop (which closes the rings) waits until they are written."""
        why = f"protocol error: {e}"
        if not c.unresponsive:
            try:
                self._reply(c, {"ok": False, "error": why})
            except P.ProtocolError:
                pass
        if self._deferred is not None:
            c.drop_reason = why
            self._deferred.append((c, None))
        else:
            self._drop(c, why)

    def _reply(self, c: Conn, msg: dict, fds: list[int] | None = None) -> None:
        try:
            c.sock.setblocking(True)
            c.sock.settimeout(1.0)  # a client that never reads cannot stall the daemon for long...
            P.send_msg(c.sock, msg, fds)
        except OSError:
            # ...and is dropped at once: a stream of requests it never reads would otherwise cost
            # a second each while no ring is drained
            c.unresponsive = True
            raise P.ProtocolError("the client does not read its replies") from None
        finally:
            try:
                c.sock.setblocking(False)
            except OSError:
                pass

    def _drop(self, c: Conn, why: str | None) -> None:
        """Forget a connection: drain its rings one last time (a SIGKILLed producer loses only what it
        had not published), remember its counts for the trailer."""
        if c.stream is not None:
            self._drain_conn(c, force=True)
            self.retired.append(self._producer_info(c, self._conn_lost(c)))
            rings, c.rings = c.rings, []
            self.conns.pop(id(c), None)
            self._save_state()  # retired in the state before its ring files go
            for r in rings:
                self.allocated_bytes -= RG.ring_bytes(r.cap)
                r.close()
        if why:
            self._print(f"acceltrace traced: dropped connection (pid {c.pid or '?'}): {why}")
        self.conns.pop(id(c), None)
        if c.sock is not None:
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
            c.sock.close()

    # -- messages ----------------------------------------------------------------------------------
    def _handle(self, c: Conn, msg: dict) -> None:
        op = msg["op"]
        if op == "ctl":
            self._reply(c, self.control(str(msg.get("cmd"))))
            return
        if op == "hello":
            if c.stream is not None:
                raise P.ProtocolError("hello sent twice")
            if msg.get("resume") is not None:
                self._resume_producer(c, msg)
                return
            c.stream, self.next_stream = self.next_stream, self.next_stream + 1
            c.pid = _int(msg.get("pid", 0), 0, 2**32 - 1, "pid")
            c.name = str(msg.get("name", ""))[:200]
            if msg.get("ring_records") is not None:
                c.ring_records = pow2_records(_int(msg["ring_records"], 1, 1 << 30, "ring_records"))
            self._save_state()
            self._reply(c, {"ok": True, "stream": c.stream, "mode": self.mode, "version": P.PROTOCOL_VERSION})
            return
        if c.stream is None:
            raise P.ProtocolError(f"{op!r} before hello")
        if op == "ring":
            self._give_ring(c, _int(msg.get("tid", 0), 0, 2**32 - 1, "tid"))
        elif op == "strings":
            entries = msg.get("entries")
            if not isinstance(entries, list):
                raise P.ProtocolError("strings: entries must be a list of [id, text]")
            clean = []
            for e in entries:
                if not (isinstance(e, list) and len(e) == 2 and isinstance(e[1], str)):
                    raise P.ProtocolError("strings: each entry must be [id, text]")
                clean.append((_int(e[0], 1, MAX_STRING_ID, "string id"), e[1]))
            self.writer.define_strings(clean, c.stream)
        elif op == "metadata":
            data = msg.get("data")
            if not isinstance(data, dict):
                raise P.ProtocolError("metadata: data must be an object")
            self.writer.add_metadata(data)
        elif op == "sync":
            dom = _int(msg.get("domain"), 1, 254, "clock domain")
            pairs = msg.get("pairs")
            if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise P.ProtocolError("sync: pairs must be a list of [host_ns, dev_ticks]")
            host = [_int(p[0], -(2**63), 2**63 - 1, "host_ns") for p in pairs]
            ticks = [_int(p[1], -(2**63), 2**63 - 1, "dev_ticks") for p in pairs]
            if pairs:
                self.writer.add_clock_sync(dom, host, ticks)
        elif op == "lost":
            # events the client could not put in any ring (the daemon refused it one): cumulative count
            c.client_lost = max(getattr(c, "client_lost", 0), _int(msg.get("count"), 0, 2**63 - 1, "count"))
        elif op == "drain":
            if self.draining:
                self._drain_conn(c)
                self.writer.flush()
            self._reply(c, {"ok": True})
        elif op == "bye":
            self._reply(c, {"ok": True})
            self._drop(c, None)
        else:
            raise P.ProtocolError(f"unknown op {op!r}")

    def _give_ring(self, c: Conn, tid: int) -> None:
        if len(c.rings) >= MAX_RINGS_PER_PRODUCER:
            self._reply(c, {"ok": False, "error": f"more than {MAX_RINGS_PER_PRODUCER} rings for one process"})
            return
        want = getattr(c, "ring_records", None) or self.ring_records
        # within the budget if possible; never below the minimum ring
        while want > 1024 and self.allocated_bytes + RG.ring_bytes(want) > self.budget_bytes:
            want //= 2
        if self.allocated_bytes + RG.ring_bytes(want) > 2 * self.budget_bytes:
            # past twice the budget: refuse; the client counts that thread's events as lost
            self._reply(c, {"ok": False, "error": f"ring memory exhausted ({self.allocated_bytes >> 20} MiB in "
                                                  f"rings; --buffer-mb {self.budget_bytes >> 20})"})
            return
        path = None
        if self.ring_dir:
            self._ring_seq += 1
            path = os.path.join(self.ring_dir, f"acceltrace-ring-{c.stream}-{self._ring_seq}-{os.urandom(4).hex()}")
        ring = DaemonRing(want, RG.MODES[self.mode], c.pid, tid, path=path)
        self.allocated_bytes += RG.ring_bytes(want)
        c.rings.append(ring)
        self._save_state()  # in the state before the producer can write into it
        self._reply(c, {"ok": True, "capacity": want}, fds=[ring.fd])

    def control(self, cmd: str) -> dict:
        if cmd == "start":
            self.draining = True
        elif cmd == "stop":
            self.drain_all(force=True)
            self.draining = False
        elif cmd == "flush":
            self.drain_all(force=True)
            self.writer.flush()
            os.fsync(self.writer._fd)
        elif cmd != "status":
            return {"ok": False, "error": f"unknown ctl command {cmd!r}; expected start, stop, flush or status"}
        lost, producers = self.totals()
        return {"ok": True, "cmd": cmd, "draining": self.draining, "mode": self.mode, "out": str(self.out_path),
                "events_written": self.writer.events_written, "lost_events": lost,
                "producers": producers, "ring_bytes": self.allocated_bytes, "cpu_s": time.process_time()}


def _int(v, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise P.ProtocolError(f"{what} must be an integer in [{lo}, {hi}], got {json.dumps(v)[:40]}")
    return v
