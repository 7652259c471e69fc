"""Follow an .atrace file that is still being written: new whole chunks as they land.

Used by the live view. Keeps the byte offset of the first chunk not yet read; a chunk whose
bytes are not all there yet is simply retried on the next poll (the writer puts each chunk out
in one write, so a partial tail is a chunk in flight, not damage). Every chunk is parsed and
checked by the reader's code (reader.py: `check_file_header`, `chunk_at`, `ChunkContents`), so
the follower refuses what the reader refuses (a corrupt chunk header stops it, as it stops the
reader, with the same problem), skips what the reader skips, and keeps what it keeps: header,
metadata, strings, clock-sync pairs, the trailer and the per-stream lost counts of LOSS chunks
(`losses`, `lost_events()`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from acceltrace.formats.atrace.layout import CHUNK_HEADER, EVENTS, FILE_HEADER, MAX_CHUNK_BYTES, SYNC_DTYPE, AtraceError
from acceltrace.formats.atrace.reader import ChunkContents, Problem, check_file_header, chunk_at
from acceltrace.formats.record import RECORD_DTYPE

MAX_READ_BYTES = 64 << 20  # per poll, so a big backlog streams out in pieces (a bigger chunk is read whole)


class AtraceTail(ChunkContents):
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0  # file offset of the first chunk not yet read
        self.version: tuple[int, int] | None = None
        self.header: dict = {}
        self.metadata: list[dict] = []
        self.strings: dict[int, dict[int, str]] = {}
        self.sync: list[np.ndarray] = []
        self.trailer: dict | None = None
        self.losses: dict[int, int] = {}
        self.problems: list[Problem] = []
        self.stopped_at: int | None = None  # a corrupt chunk header: nothing after it is read
        self._ino = None

    def poll(self) -> tuple[np.ndarray, np.ndarray]:
        """Records (and their streams) from the chunks completed since the last poll.

        Raises AtraceError when the file is not an .atrace file or has a newer major version.
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return _empty()
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self.offset):
            self.__init__(self.path)  # the file was replaced: start over
        self._ino = st.st_ino
        if self.stopped_at is not None:
            return _empty()
        with open(self.path, "rb") as f:
            if self.offset == 0:
                head = f.read(FILE_HEADER.size)
                if len(head) < FILE_HEADER.size:
                    return _empty()
                self.version = check_file_header(head)
                self.offset = FILE_HEADER.size
            f.seek(self.offset)
            avail = st.st_size - self.offset
            want = min(MAX_READ_BYTES, avail)
            data = f.read(want)
            if len(data) >= CHUNK_HEADER.size:
                (length,) = CHUNK_HEADER.unpack_from(data, 0)[2:3]
                need = CHUNK_HEADER.size + length  # one chunk bigger than a poll's read: read it whole
                if want < need <= avail and length <= MAX_CHUNK_BYTES:
                    data += f.read(need - len(data))
        return self._chunks(data)

    def _chunks(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        parts, streams = [], []
        pos = 0
        while len(data) - pos >= CHUNK_HEADER.size:
            try:
                ch = chunk_at(data, pos, base=self.offset)
            except AtraceError as e:
                self.problems.append(Problem(e.offset, f"{e.detail}; stopped reading here"))
                self.stopped_at = e.offset
                break
            end = pos + CHUNK_HEADER.size + ch.length
            if end > len(data):
                break  # a chunk in flight
            payload = data[pos + CHUNK_HEADER.size: end]
            if ch.type == EVENTS:
                recs = self.records(ch, payload)
                if recs is not None:
                    parts.append(recs)
                    streams.append(np.full(len(recs), ch.stream, np.uint32))
            else:
                self.take(ch, payload, self.sync)
            pos = end
        self.offset += pos
        if not parts:
            return _empty()
        return np.concatenate(parts), np.concatenate(streams)

    def sync_pairs(self) -> np.ndarray:
        return np.concatenate(self.sync) if self.sync else np.zeros(0, SYNC_DTYPE)

    def string(self, stream: int, sid: int) -> str:
        return self.strings.get(stream, {}).get(sid, "")


def _empty():
    return np.zeros(0, RECORD_DTYPE), np.zeros(0, np.uint32)
