"""The .atrace file: a fixed file header, then length- and CRC32-checked chunks (docs/formats.md).

One writer (AtraceWriter) serves every producer (the Python client's file path, the tracing
daemon, the device model), so there is one code path from event to file. The layout it writes
is formats/atrace/layout.py; the reader is formats/atrace/reader.py.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from acceltrace.formats.atrace.layout import (
    CHUNK_HEADER, CLOCK_SYNC, EVENTS, FILE_HEADER, FORMAT_VERSION, HEADER, LOSS, LOSS_DTYPE, MAGIC, METADATA,
    STRING_ENTRY, STRINGS, SYNC_DTYPE, TRAILER,
)
from acceltrace.formats.record import RECORD_SIZE

DEFAULT_CHUNK_EVENTS = 16384  # 1 MiB event chunks


def default_header(**extra) -> dict:
    """The HEADER chunk's JSON: version, host, host clock and clock domains (callers add devices)."""
    h = {
        "format": "atrace",
        "version": f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
        "host": {"hostname": socket.gethostname(), "pid": os.getpid()},
        "host_clock": "monotonic",
        "created_unix_ns": time.time_ns(),
        "clock_domains": [{"id": 0, "name": "host", "kind": "host", "unit": "ns"}],
        "devices": [],
    }
    h.update(extra)
    return h


def _pad8(payload: bytes) -> bytes:
    rem = len(payload) % 8
    return payload + b"\0" * (8 - rem) if rem else payload


def _json_payload(obj: dict) -> bytes:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    rem = len(raw) % 8
    return raw + b" " * (8 - rem) if rem else raw  # JSON padded with spaces stays valid JSON


def encode_chunk(ctype: int, payload: bytes, stream: int = 0) -> bytes:
    """One chunk (header + payload) as bytes; payload length must be a multiple of 8."""
    if len(payload) % 8:
        raise ValueError("chunk payload length must be a multiple of 8")
    return CHUNK_HEADER.pack(ctype, stream, len(payload), zlib.crc32(payload)) + payload


def encode_strings(entries: list[tuple[int, str]]) -> bytes:
    parts = [struct.pack("<I", len(entries))]
    for sid, text in entries:
        raw = text.encode("utf-8", "surrogatepass")
        parts.append(STRING_ENTRY.pack(sid, len(raw)))
        parts.append(raw)
    return _pad8(b"".join(parts))


class StringTable:
    """Interns strings to ids (0 is the empty string); remembers which ids are not yet written."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"": 0}
        self.pending: list[tuple[int, str]] = []

    def intern(self, text: str) -> int:
        sid = self.ids.get(text)
        if sid is None:
            sid = len(self.ids)
            self.ids[text] = sid
            self.pending.append((sid, text))
        return sid

    def take_pending(self) -> list[tuple[int, str]]:
        out, self.pending = self.pending, []
        return out


class AtraceWriter:
    """Writes an .atrace file chunk by chunk; every chunk goes out in one write() call.

    Strings are interned per stream (a stream is one producer: the daemon gives each its
    own); a flush writes the pending strings of a stream before its events, so every event
    chunk only references strings already in the file.
    """

    def __init__(self, out: str | Path | BinaryIO, header: dict | None = None,
                 chunk_events: int = DEFAULT_CHUNK_EVENTS, fsync: bool = False, resume_events: int | None = None):
        """`resume_events`: continue an existing file at its end (the tracing daemon after a crash,
        once it has cut the file back to its last whole state); it already holds that many events."""
        if resume_events is not None:
            self._fd = os.open(out, os.O_WRONLY)
            self._file = None
            self.fsync, self.chunk_events = fsync, chunk_events
            self.header = header if header is not None else default_header()
            self._strings, self._pending, self._pending_n = {}, {}, {}
            self.events_written = int(resume_events)
            self.bytes_written = os.lseek(self._fd, 0, os.SEEK_END)
            self.closed = False
            return
        if isinstance(out, (str, Path)):
            self._fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._file = None
        else:
            self._fd = None
            self._file = out
        self.fsync = fsync
        self.chunk_events = chunk_events
        self.header = header if header is not None else default_header()
        self._strings: dict[int, StringTable] = {}
        self._pending: dict[int, list] = {}  # stream -> list of record buffers
        self._pending_n: dict[int, int] = {}
        self.events_written = 0
        self.bytes_written = 0
        self.closed = False
        self._write(FILE_HEADER.pack(MAGIC, FORMAT_VERSION[0], FORMAT_VERSION[1], 0))
        self._write(encode_chunk(HEADER, _json_payload(self.header)))

    # -- low level ---------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self._fd is not None:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        else:
            self._file.write(data)
        self.bytes_written += len(data)

    def write_chunk(self, ctype: int, payload, stream: int = 0) -> None:
        """One chunk; the payload (bytes or a memoryview, e.g. of a ring) is written without a copy."""
        n = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
        if n % 8:
            raise ValueError("chunk payload length must be a multiple of 8")
        head = CHUNK_HEADER.pack(ctype, stream, n, zlib.crc32(payload))
        if self._fd is not None:
            done = os.writev(self._fd, [head, payload])
            if done < len(head) + n:  # short write (rare): finish the rest plainly
                rest = (head + bytes(payload))[done:]
                self._write_rest(rest)
            self.bytes_written += len(head) + n
        else:
            self._file.write(head)
            self._file.write(payload)
            self.bytes_written += len(head) + n

    def _write_rest(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            k = os.write(self._fd, view)
            view = view[k:]

    def add_records_direct(self, views: list, stream: int = 0) -> None:
        """Write record buffers (e.g. memoryviews of a ring) as event chunks at once, without copying."""
        self._flush_stream(stream)
        step = self.chunk_events * RECORD_SIZE
        for v in views:
            v = memoryview(v).cast("B")
            for off in range(0, v.nbytes, step):
                part = v[off: off + step]
                self.write_chunk(EVENTS, part, stream)
                self.events_written += part.nbytes // RECORD_SIZE

    # -- content -----------------------------------------------------------------------------
    def strings(self, stream: int = 0) -> StringTable:
        tab = self._strings.get(stream)
        if tab is None:
            tab = self._strings[stream] = StringTable()
        return tab

    def intern(self, text: str, stream: int = 0) -> int:
        return self.strings(stream).intern(text)

    def define_strings(self, entries: list[tuple[int, str]], stream: int = 0) -> None:
        """Strings a producer interned itself (daemon path): written before that stream's next events."""
        if entries:
            self._flush_stream(stream)
            self.write_chunk(STRINGS, encode_strings(entries), stream)

    def add_records(self, recs: bytes | memoryview | np.ndarray, stream: int = 0) -> None:
        """Queue records (bytes or a RECORD_DTYPE array); once a chunk's worth is queued it is written.

        A batch that fills a chunk is written straight from the caller's buffer (no copy); a small
        one is copied into the queue, since the caller may reuse its buffer.
        """
        if isinstance(recs, np.ndarray):
            view = memoryview(np.ascontiguousarray(recs).view(np.uint8).reshape(-1))
        else:
            view = memoryview(recs).cast("B")
        if view.nbytes % RECORD_SIZE:
            raise ValueError(f"{view.nbytes} bytes is not a whole number of {RECORD_SIZE}-byte records")
        if not view.nbytes:
            return
        n = self._pending_n.get(stream, 0) + view.nbytes // RECORD_SIZE
        if n >= self.chunk_events:
            self._flush_stream(stream, extra=view)
            return
        self._pending.setdefault(stream, []).append(bytes(view))
        self._pending_n[stream] = n

    def add_clock_sync(self, domain: int, host_ns, dev_ticks) -> None:
        """(host ns, device ticks) pairs for one clock domain (scalars or equal-length arrays)."""
        host = np.atleast_1d(np.asarray(host_ns, dtype=np.int64))
        ticks = np.atleast_1d(np.asarray(dev_ticks, dtype=np.int64))
        arr = np.zeros(len(host), dtype=SYNC_DTYPE)
        arr["domain"], arr["host_ns"], arr["dev_ticks"] = domain, host, ticks
        self.write_chunk(CLOCK_SYNC, arr.tobytes())

    def add_metadata(self, obj: dict) -> None:
        """Metadata learned after the header (devices, process names); merged by readers."""
        self.write_chunk(METADATA, _json_payload(obj))

    def add_loss(self, lost_by_stream: dict[int, int]) -> None:
        """Cumulative lost counts so far, so a file without a trailer still reports them."""
        arr = np.zeros(len(lost_by_stream), dtype=LOSS_DTYPE)
        arr["stream"] = list(lost_by_stream)
        arr["lost"] = list(lost_by_stream.values())
        self.write_chunk(LOSS, arr.tobytes())

    def _flush_stream(self, stream: int, extra: memoryview | None = None) -> None:
        tab = self._strings.get(stream)
        if tab is not None and tab.pending:
            self.write_chunk(STRINGS, encode_strings(tab.take_pending()), stream)
        bufs = self._pending.pop(stream, None)
        self._pending_n.pop(stream, None)
        step = self.chunk_events * RECORD_SIZE
        parts = []
        if bufs:
            parts.append(memoryview(b"".join(bufs)))
        if extra is not None:
            parts.append(extra)
        for data in parts:
            for off in range(0, data.nbytes, step):
                part = data[off: off + step]
                self.write_chunk(EVENTS, part, stream)
                self.events_written += part.nbytes // RECORD_SIZE

    def flush(self) -> None:
        """Write everything queued (strings first) and, with fsync, make it durable."""
        for stream in set(self._strings) | set(self._pending):
            self._flush_stream(stream)
        if self._file is not None:
            self._file.flush()
        elif self.fsync:
            os.fsync(self._fd)

    def close(self, lost_events: int = 0, producers: list[dict] | None = None, **extra) -> None:
        """Flush and write the trailer (lost-event counts); the file is complete after this."""
        if self.closed:
            return
        self.flush()
        trailer = {"events": self.events_written, "lost_events": int(lost_events),
                   "producers": producers or [], "closed_unix_ns": time.time_ns(), **extra}
        self.write_chunk(TRAILER, _json_payload(trailer))
        if self._fd is not None:
            if self.fsync:
                os.fsync(self._fd)
            os.close(self._fd)
        else:
            self._file.flush()
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
