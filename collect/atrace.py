"""The .atrace file: a fixed file header, then length- and CRC32-checked chunks (docs/formats.md).

One writer (AtraceWriter) serves every producer (the Python client's file path, the tracing
daemon, the device model), so there is one code path from event to file. The reader
(AtraceReader) walks chunk headers, verifies checksums, keeps going past a corrupt chunk
whose length is still plausible, and stops with a warning at a cut-off tail.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from collect.record import RECORD_DTYPE, RECORD_SIZE

MAGIC = b"\x89ATRACE\n"
FORMAT_VERSION = (1, 0)  # (major, minor): readers refuse a newer major
FILE_HEADER = struct.Struct("<8sHHI")  # magic, major, minor, reserved
CHUNK_HEADER = struct.Struct("<IIII")  # type, stream, payload length (multiple of 8), crc32(payload)
MAX_CHUNK_BYTES = 256 << 20

HEADER, STRINGS, EVENTS, CLOCK_SYNC, METADATA, TRAILER, LOSS = 1, 2, 3, 4, 5, 6, 7
CHUNK_NAMES = {HEADER: "header", STRINGS: "strings", EVENTS: "events", CLOCK_SYNC: "clock-sync",
               METADATA: "metadata", TRAILER: "trailer", LOSS: "loss"}

SYNC_DTYPE = np.dtype([("domain", "<u4"), ("reserved", "<u4"), ("host_ns", "<i8"), ("dev_ticks", "<i8")])
LOSS_DTYPE = np.dtype([("stream", "<u4"), ("reserved", "<u4"), ("lost", "<u8")])
STRING_ENTRY = struct.Struct("<II")  # id, utf-8 length; then the bytes

DEFAULT_CHUNK_EVENTS = 16384  # 1 MiB event chunks


class AtraceError(ValueError):
    """An .atrace file that cannot be read; `offset` is the byte where the problem is."""

    def __init__(self, message: str, offset: int | None = None):
        self.offset = offset
        self.detail = message
        super().__init__(f"byte {offset}: {message}" if offset is not None else message)


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
                 chunk_events: int = DEFAULT_CHUNK_EVENTS, fsync: bool = False):
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
        """Queue records (bytes or a RECORD_DTYPE array); full chunks are written at once."""
        data = recs.tobytes() if isinstance(recs, np.ndarray) else bytes(recs)
        if len(data) % RECORD_SIZE:
            raise ValueError(f"{len(data)} bytes is not a whole number of {RECORD_SIZE}-byte records")
        if not data:
            return
        self._pending.setdefault(stream, []).append(data)
        n = self._pending_n.get(stream, 0) + len(data) // RECORD_SIZE
        self._pending_n[stream] = n
        if n >= self.chunk_events:
            self._flush_stream(stream)

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

    def _flush_stream(self, stream: int) -> None:
        tab = self._strings.get(stream)
        if tab is not None and tab.pending:
            self.write_chunk(STRINGS, encode_strings(tab.take_pending()), stream)
        bufs = self._pending.pop(stream, None)
        self._pending_n.pop(stream, None)
        if bufs:
            data = b"".join(bufs)
            step = self.chunk_events * RECORD_SIZE
            for off in range(0, len(data), step):
                part = data[off: off + step]
                self.write_chunk(EVENTS, part, stream)
                self.events_written += len(part) // RECORD_SIZE

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


# ---------------------------------------------------------------------------------------------
@dataclass
class Chunk:
    offset: int  # byte offset of the chunk header in the file
    type: int
    stream: int
    length: int
    crc: int

    @property
    def payload_offset(self) -> int:
        return self.offset + CHUNK_HEADER.size


@dataclass
class Problem:
    offset: int
    message: str
    dropped_events: int = 0


@dataclass
class AtraceReader:
    """Index of an .atrace file held in memory or mapped from disk; see read_all/iter_events."""

    buf: bytes | mmap.mmap | memoryview
    name: str = "<atrace>"
    header: dict = field(default_factory=dict)
    version: tuple[int, int] = FORMAT_VERSION
    chunks: list[Chunk] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    metadata: list[dict] = field(default_factory=list)
    strings: dict[int, dict[int, str]] = field(default_factory=dict)
    trailer: dict | None = None
    losses: dict[int, int] = field(default_factory=dict)
    sync: np.ndarray | None = None
    truncated_at: int | None = None

    @classmethod
    def open(cls, path: str | Path) -> "AtraceReader":
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        r = cls(buf, name=Path(path).name)
        r.scan()
        return r

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<atrace>") -> "AtraceReader":
        r = cls(data, name=name)
        r.scan()
        return r

    # -- pass 1: headers and the small chunks ------------------------------------------------
    def scan(self) -> None:
        buf = self.buf
        size = len(buf)
        if size < FILE_HEADER.size:
            raise AtraceError(f"file is {size} bytes, shorter than the {FILE_HEADER.size}-byte .atrace header", 0)
        magic, major, minor, _ = FILE_HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise AtraceError(f"not an .atrace file (magic {magic!r}, expected {MAGIC!r})", 0)
        self.version = (major, minor)
        if major > FORMAT_VERSION[0]:
            raise AtraceError(
                f"written by a newer acceltrace (.atrace format version {major}.{minor}); this reader "
                f"understands major version {FORMAT_VERSION[0]} only: upgrade acceltrace to read it", 8)
        off = FILE_HEADER.size
        syncs = []
        while off < size:
            if size - off < CHUNK_HEADER.size:
                self._cut(off, f"file ends inside a chunk header ({size - off} of {CHUNK_HEADER.size} bytes)")
                break
            ctype, stream, length, crc = CHUNK_HEADER.unpack_from(buf, off)
            if ctype not in CHUNK_NAMES or length % 8 or length > MAX_CHUNK_BYTES:
                self.problems.append(Problem(off, f"corrupt chunk header (type {ctype}, length {length}); "
                                                  "expected a known chunk type and a length that is a multiple of 8; "
                                                  "stopped reading here"))
                self.truncated_at = off
                break
            end = off + CHUNK_HEADER.size + length
            if end > size:
                self._cut(off, f"file ends inside the {CHUNK_NAMES[ctype]} chunk starting here ({size - off - CHUNK_HEADER.size} "
                               f"of {length} payload bytes)", length // RECORD_SIZE if ctype == EVENTS else 0)
                break
            ch = Chunk(off, ctype, stream, length, crc)
            if ctype != EVENTS:
                payload = bytes(buf[ch.payload_offset: end])
                if zlib.crc32(payload) != crc:
                    self.problems.append(Problem(off, f"{CHUNK_NAMES[ctype]} chunk fails its CRC32 check "
                                                      "(corrupt); skipped"))
                else:
                    self._small_chunk(ch, payload, syncs)
            self.chunks.append(ch)
            off = end
        if not self.header:
            raise AtraceError("no valid header chunk at the start of the file", FILE_HEADER.size)
        self.sync = np.concatenate(syncs) if syncs else np.zeros(0, dtype=SYNC_DTYPE)

    def _cut(self, off: int, what: str, dropped: int = 0) -> None:
        self.truncated_at = off
        self.problems.append(Problem(off, f"{what}: the file was cut short (e.g. the writer crashed); "
                                          f"read up to the last whole chunk, which ends at byte {off}", dropped))

    def _small_chunk(self, ch: Chunk, payload: bytes, syncs: list) -> None:
        try:
            if ch.type == HEADER:
                if self.header:
                    raise ValueError("a second header chunk")
                self.header = json.loads(payload)
            elif ch.type == METADATA:
                self.metadata.append(json.loads(payload))
            elif ch.type == TRAILER:
                self.trailer = json.loads(payload)
            elif ch.type == STRINGS:
                self._strings_chunk(ch.stream, payload)
            elif ch.type == CLOCK_SYNC:
                if len(payload) % SYNC_DTYPE.itemsize:
                    raise ValueError(f"length {len(payload)} is not a multiple of {SYNC_DTYPE.itemsize}")
                syncs.append(np.frombuffer(payload, SYNC_DTYPE))
            elif ch.type == LOSS:
                for row in np.frombuffer(payload, LOSS_DTYPE):
                    self.losses[int(row["stream"])] = int(row["lost"])
        except (ValueError, UnicodeDecodeError, struct.error) as e:
            self.problems.append(Problem(ch.offset, f"{CHUNK_NAMES[ch.type]} chunk cannot be decoded ({e}); skipped"))

    def _strings_chunk(self, stream: int, payload: bytes) -> None:
        (count,) = struct.unpack_from("<I", payload, 0)
        pos = 4
        tab = self.strings.setdefault(stream, {0: ""})
        for _ in range(count):
            sid, n = STRING_ENTRY.unpack_from(payload, pos)
            pos += STRING_ENTRY.size
            if pos + n > len(payload):
                raise ValueError(f"string {sid} runs past the chunk end")
            tab[sid] = payload[pos: pos + n].decode("utf-8", "replace")
            pos += n

    # -- pass 2: events -----------------------------------------------------------------------
    def event_chunks(self) -> list[Chunk]:
        return [c for c in self.chunks if c.type == EVENTS]

    def iter_events(self, batch_events: int = 1 << 20, check_crc: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(records, stream per record) in batches of about batch_events, in file order.

        A chunk that fails its CRC is skipped and reported in `problems` with its offset.
        """
        parts, streams, n = [], [], 0
        for ch in self.event_chunks():
            view = memoryview(self.buf)[ch.payload_offset: ch.payload_offset + ch.length]
            if check_crc and zlib.crc32(view) != ch.crc:
                self.problems.append(Problem(ch.offset, "events chunk fails its CRC32 check (corrupt); "
                                                        f"its {ch.length // RECORD_SIZE} events skipped",
                                             ch.length // RECORD_SIZE))
                continue
            if ch.length % RECORD_SIZE:
                self.problems.append(Problem(ch.offset, f"events chunk length {ch.length} is not a multiple of "
                                                        f"{RECORD_SIZE}; skipped", ch.length // RECORD_SIZE))
                continue
            recs = np.frombuffer(view, RECORD_DTYPE)
            parts.append(recs)
            streams.append(np.full(len(recs), ch.stream, dtype=np.uint32))
            n += len(recs)
            if n >= batch_events:
                yield _cat(parts), _cat(streams)
                parts, streams, n = [], [], 0
        if parts:
            yield _cat(parts), _cat(streams)

    def read_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Every event record (copied out of the file) and its stream."""
        got = list(self.iter_events(batch_events=1 << 62))
        if not got:
            return np.zeros(0, RECORD_DTYPE), np.zeros(0, np.uint32)
        return got[0][0].copy(), got[0][1]

    def merged_metadata(self) -> dict:
        """The header updated by every METADATA chunk in file order (lists extended, dicts merged)."""
        out = json.loads(json.dumps(self.header))
        for md in self.metadata:
            for k, v in md.items():
                if isinstance(v, list) and isinstance(out.get(k), list):
                    out[k] = out[k] + v
                elif isinstance(v, dict) and isinstance(out.get(k), dict):
                    out[k] = {**out[k], **v}
                else:
                    out[k] = v
        return out

    def lost_events(self) -> tuple[int, dict[int, int]]:
        """Total lost and per-stream lost: from the trailer, else from the last LOSS chunks."""
        if self.trailer is not None:
            per = {int(p.get("stream", i)): int(p.get("lost", 0)) for i, p in enumerate(self.trailer.get("producers", []))}
            return int(self.trailer.get("lost_events", sum(per.values()))), per
        return sum(self.losses.values()), dict(self.losses)

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:
                pass  # numpy views still alive; the mapping goes when they do


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
