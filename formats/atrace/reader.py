"""Reading .atrace files: chunk index, checksums, cut-off tails, corrupt chunks (docs/formats.md).

The reader walks chunk headers, verifies checksums, keeps going past a corrupt chunk whose
length is still plausible, and stops with a warning at a cut-off tail. Event chunks are
numpy views of the mapped file, decoded in batches.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from acceltrace.formats.atrace.layout import CHUNK_HEADER, CHUNK_NAMES, CLOCK_SYNC, EVENTS, FILE_HEADER, FORMAT_VERSION, HEADER, LOSS, LOSS_DTYPE, MAGIC, MAX_CHUNK_BYTES, METADATA, STRING_ENTRY, STRINGS, SYNC_DTYPE, TRAILER, AtraceError
from acceltrace.formats.record import RECORD_DTYPE, RECORD_SIZE

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


def check_file_header(buf) -> tuple[int, int]:
    """(major, minor) of an .atrace file header; AtraceError if it is short, not .atrace, or too new."""
    size = len(buf)
    if size < FILE_HEADER.size:
        raise AtraceError(f"file is {size} bytes, shorter than the {FILE_HEADER.size}-byte .atrace header", 0)
    magic, major, minor, _ = FILE_HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise AtraceError(f"not an .atrace file (magic {magic!r}, expected {MAGIC!r})", 0)
    if major > FORMAT_VERSION[0]:
        raise AtraceError(
            f"written by a newer acceltrace (.atrace format version {major}.{minor}); this reader "
            f"understands major version {FORMAT_VERSION[0]} only: upgrade acceltrace to read it", 8)
    return major, minor


def chunk_at(buf, pos: int, base: int = 0) -> Chunk:
    """The chunk whose header starts at buf[pos] (file offset base + pos; the caller checked that
    CHUNK_HEADER.size bytes are there). AtraceError for a header no writer makes: an unknown type,
    a length that is not a multiple of 8 or over MAX_CHUNK_BYTES (nothing after it can be trusted)."""
    ctype, stream, length, crc = CHUNK_HEADER.unpack_from(buf, pos)
    if ctype not in CHUNK_NAMES or length % 8 or length > MAX_CHUNK_BYTES:
        raise AtraceError(f"corrupt chunk header (type {ctype}, length {length}); expected a known chunk type "
                          "and a length that is a multiple of 8", base + pos)
    return Chunk(base + pos, ctype, stream, length, crc)


class ChunkContents:
    """What the chunks of one file say, decoded and checked one way for the reader and the follower.

    Holds `header`, `metadata`, `strings`, `trailer`, `losses` (per stream, from LOSS chunks) and
    `problems`; `take` files a non-event chunk, `records` checks an events chunk.
    """

    header: dict
    metadata: list
    strings: dict
    trailer: dict | None
    losses: dict
    problems: list

    def take(self, ch: Chunk, payload: bytes, syncs: list) -> None:
        """A non-event chunk: checked against its CRC32, then decoded (a bad one is a problem, skipped)."""
        if zlib.crc32(payload) != ch.crc:
            self.problems.append(Problem(ch.offset, f"{CHUNK_NAMES[ch.type]} chunk fails its CRC32 check "
                                                    "(corrupt); skipped"))
        else:
            self._small_chunk(ch, payload, syncs)

    def records(self, ch: Chunk, view, crc: int | None = None) -> np.ndarray | None:
        """The records of an events chunk (crc: its payload's CRC32, computed here when None), or None
        with a problem counting its events when it fails its CRC or its length is not whole records."""
        if crc is None:
            crc = zlib.crc32(view)
        n = ch.length // RECORD_SIZE
        if crc != ch.crc:
            self.problems.append(Problem(ch.offset, f"events chunk fails its CRC32 check (corrupt); its {n} events skipped", n))
            return None
        if ch.length % RECORD_SIZE:
            self.problems.append(Problem(ch.offset, f"events chunk length {ch.length} is not a multiple of "
                                                    f"{RECORD_SIZE}; skipped", n))
            return None
        return np.frombuffer(view, RECORD_DTYPE)

    def _small_chunk(self, ch: Chunk, payload: bytes, syncs: list) -> None:
        try:
            if ch.type == HEADER:
                if self.header:
                    raise ValueError("a second header chunk")
                self.header = _json_object(payload)
            elif ch.type == METADATA:
                self.metadata.append(_json_object(payload))
            elif ch.type == TRAILER:
                self.trailer = _check_trailer(_json_object(payload))
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

    def merged_metadata(self) -> dict:
        """The header updated by every METADATA chunk in file order (lists extended, dicts merged)."""
        out = json.loads(json.dumps(self.header or {}))
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


@dataclass
class AtraceReader(ChunkContents):
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
        self.version = check_file_header(buf)
        off = FILE_HEADER.size
        syncs = []
        while off < size:
            if size - off < CHUNK_HEADER.size:
                self._cut(off, f"file ends inside a chunk header ({size - off} of {CHUNK_HEADER.size} bytes)")
                break
            try:
                ch = chunk_at(buf, off)
            except AtraceError as e:
                self.problems.append(Problem(off, f"{e.detail}; stopped reading here"))
                self.truncated_at = off
                break
            end = off + CHUNK_HEADER.size + ch.length
            if end > size:
                self._cut(off, f"file ends inside the {CHUNK_NAMES[ch.type]} chunk starting here ({size - off - CHUNK_HEADER.size} "
                               f"of {ch.length} payload bytes)", ch.length // RECORD_SIZE if ch.type == EVENTS else 0)
                break
            if ch.type != EVENTS:
                self.take(ch, bytes(buf[ch.payload_offset: end]), syncs)
            self.chunks.append(ch)
            off = end
        if not self.header:
            raise AtraceError("no valid header chunk at the start of the file", FILE_HEADER.size)
        self.sync = np.concatenate(syncs) if syncs else np.zeros(0, dtype=SYNC_DTYPE)

    def _cut(self, off: int, what: str, dropped: int = 0) -> None:
        self.truncated_at = off
        self.problems.append(Problem(off, f"{what}: the file was cut short (e.g. the writer crashed); "
                                          f"read up to the last whole chunk, which ends at byte {off}", dropped))

    # -- pass 2: events -----------------------------------------------------------------------
    def event_chunks(self) -> list[Chunk]:
        return [c for c in self.chunks if c.type == EVENTS]

    def event_records(self) -> int:
        """The most records iter_events() can yield (its whole event chunks' records)."""
        return sum(c.length // RECORD_SIZE for c in self.event_chunks())

    def iter_events(self, batch_events: int = 1 << 20, check_crc: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(records, stream per record) in batches of about batch_events, in file order.

        A chunk that fails its CRC is skipped and reported in `problems` with its offset. The
        checksums of a batch's chunks are computed on a few threads (zlib releases the GIL).
        """
        group, n = [], 0
        for ch in self.event_chunks():
            group.append(ch)
            n += ch.length // RECORD_SIZE
            if n >= batch_events:
                yield from self._batch(group, check_crc)
                group, n = [], 0
        if group:
            yield from self._batch(group, check_crc)

    def _batch(self, chunks: list, check_crc: bool):
        views = [memoryview(self.buf)[c.payload_offset: c.payload_offset + c.length] for c in chunks]
        if check_crc:
            if len(views) > 1 and (os.cpu_count() or 1) > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
                    crcs = list(pool.map(zlib.crc32, views))
            else:
                crcs = [zlib.crc32(v) for v in views]
        parts, counts, ids = [], [], []
        for i, (ch, view) in enumerate(zip(chunks, views)):
            recs = self.records(ch, view, crcs[i] if check_crc else ch.crc)
            if recs is None:
                continue
            parts.append(recs)
            counts.append(len(recs))
            ids.append(ch.stream)
        if parts:
            yield _cat(parts), np.repeat(np.asarray(ids, dtype=np.uint32), counts)

    def read_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Every event record (copied out of the file) and its stream."""
        got = list(self.iter_events(batch_events=1 << 62))
        if not got:
            return np.zeros(0, RECORD_DTYPE), np.zeros(0, np.uint32)
        return got[0][0].copy(), got[0][1]

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:
                pass  # numpy views still alive; the mapping goes when they do


def _json_object(payload: bytes) -> dict:
    obj = json.loads(payload)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    return obj


def _check_trailer(t: dict) -> dict:
    """A trailer whose counts are readable (else the chunk is skipped and the loss chunks count)."""
    def count(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    producers = t.get("producers", [])
    if not (count(t.get("lost_events", 0)) and isinstance(producers, list)
            and all(isinstance(p, dict) and count(p.get("stream", 0)) and count(p.get("lost", 0)) for p in producers)):
        raise ValueError("its lost_events or producers are not counts")
    return t


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
