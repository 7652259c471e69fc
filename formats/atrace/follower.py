"""Follow an .atrace file that is still being written: new whole chunks as they land.

Used by the live view. Keeps the byte offset of the first chunk not yet read; a chunk
whose bytes are not all there yet is simply retried on the next poll (the writer puts each
chunk out in one write, so a partial tail is a chunk in flight, not damage).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from acceltrace.formats.atrace.layout import CHUNK_HEADER, CHUNK_NAMES, CLOCK_SYNC, EVENTS, FILE_HEADER, FORMAT_VERSION, HEADER, MAGIC, MAX_CHUNK_BYTES, METADATA, STRING_ENTRY, STRINGS, SYNC_DTYPE, TRAILER, AtraceError
from acceltrace.formats.record import RECORD_DTYPE, RECORD_SIZE

MAX_READ_BYTES = 64 << 20  # per poll, so a big backlog streams out in pieces


class AtraceTail:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self.header: dict | None = None
        self.metadata: list[dict] = []
        self.strings: dict[int, dict[int, str]] = {}
        self.sync: list[np.ndarray] = []
        self.trailer: dict | None = None
        self.problems: list[str] = []
        self._ino = None

    def poll(self) -> tuple[np.ndarray, np.ndarray]:
        """Records (and their streams) from the chunks completed since the last poll."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return _empty()
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self.offset):
            self.__init__(self.path)  # the file was replaced: start over
        self._ino = st.st_ino
        with open(self.path, "rb") as f:
            if self.offset == 0:
                head = f.read(FILE_HEADER.size)
                if len(head) < FILE_HEADER.size:
                    return _empty()
                magic, major, minor, _ = FILE_HEADER.unpack(head)
                if magic != MAGIC:
                    raise AtraceError(f"{self.path.name} is not an .atrace file", 0)
                if major > FORMAT_VERSION[0]:
                    raise AtraceError(f"{self.path.name} has a newer format version {major}.{minor}", 8)
                self.offset = FILE_HEADER.size
            f.seek(self.offset)
            data = f.read(min(MAX_READ_BYTES, st.st_size - self.offset))
        parts, streams = [], []
        pos = 0
        while len(data) - pos >= CHUNK_HEADER.size:
            ctype, stream, length, crc = CHUNK_HEADER.unpack_from(data, pos)
            if ctype not in CHUNK_NAMES or length % 8 or length > MAX_CHUNK_BYTES:
                self.problems.append(f"corrupt chunk header at byte {self.offset + pos}; stopped following")
                self.offset = 1 << 62
                break
            end = pos + CHUNK_HEADER.size + length
            if end > len(data):
                break  # a chunk in flight
            payload = data[pos + CHUNK_HEADER.size: end]
            if zlib.crc32(payload) != crc:
                self.problems.append(f"chunk at byte {self.offset + pos} fails its CRC32 check; skipped")
            elif ctype == EVENTS and length % RECORD_SIZE == 0:
                recs = np.frombuffer(payload, RECORD_DTYPE)
                parts.append(recs)
                streams.append(np.full(len(recs), stream, np.uint32))
            else:
                self._small(ctype, stream, payload)
            pos = end
        if self.offset < (1 << 62):
            self.offset += pos
        if not parts:
            return _empty()
        return np.concatenate(parts), np.concatenate(streams)

    def _small(self, ctype: int, stream: int, payload: bytes) -> None:
        try:
            if ctype == HEADER:
                self.header = json.loads(payload)
            elif ctype == METADATA:
                self.metadata.append(json.loads(payload))
            elif ctype == TRAILER:
                self.trailer = json.loads(payload)
            elif ctype == CLOCK_SYNC:
                self.sync.append(np.frombuffer(payload, SYNC_DTYPE))
            elif ctype == STRINGS:
                (count,) = struct.unpack_from("<I", payload, 0)
                pos, tab = 4, self.strings.setdefault(stream, {0: ""})
                for _ in range(count):
                    sid, n = STRING_ENTRY.unpack_from(payload, pos)
                    pos += STRING_ENTRY.size
                    tab[sid] = payload[pos: pos + n].decode("utf-8", "replace")
                    pos += n
        except (ValueError, struct.error) as e:
            self.problems.append(f"{CHUNK_NAMES[ctype]} chunk cannot be decoded ({e})")

    def sync_pairs(self) -> np.ndarray:
        return np.concatenate(self.sync) if self.sync else np.zeros(0, SYNC_DTYPE)

    def string(self, stream: int, sid: int) -> str:
        return self.strings.get(stream, {}).get(sid, "")


def _empty():
    return np.zeros(0, RECORD_DTYPE), np.zeros(0, np.uint32)
