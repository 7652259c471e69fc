"""The .actr writer: whole chunks appended, so a killed collector leaves a valid prefix (layout.py)."""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import BinaryIO

import numpy as np

from acceltrace.formats.actr.layout import BUFS_HEADER, CHUNK_HEADER, FILE_HEADER, MAGIC, SMPL_HEADER, VERSION, buffered_dtype, record_dtype, validate_header


class ActrWriter:
    """Appends chunks to a new .actr file. Not thread-safe: one sampler owns it.

    Samples are packed per group into a bytearray (struct.pack_into, the cheapest per-sample
    path in CPython) and written as one SMPL chunk when `flush_records` of a group are
    buffered, or on flush()/close().
    """

    def __init__(self, path: str | os.PathLike, header: dict, flush_records: int = 1024):
        validate_header(header)
        self.path = os.fspath(path)
        self.header = header
        self._f: BinaryIO = open(self.path, "wb")
        self._f.write(FILE_HEADER.pack(MAGIC, VERSION[0], VERSION[1], 0))
        self._chunk(b"HEAD", json.dumps(header, sort_keys=True).encode())
        self._f.flush()
        self.flush_records = max(1, int(flush_records))
        self._structs: dict[int, struct.Struct] = {}
        self._bufs: dict[int, bytearray] = {}
        self._fill: dict[int, int] = {}
        self._k: dict[int, int] = {}
        for g in header["groups"]:
            k = len(g["counters"])
            st = struct.Struct(f"<qqQQ{k}Q")
            self._structs[g["id"]] = st
            self._bufs[g["id"]] = bytearray(st.size * self.flush_records)
            self._fill[g["id"]] = 0
            self._k[g["id"]] = k
        self.samples_written = 0
        self.buffered_written = 0
        self.buffered_dropped = 0
        self.closed = False

    def _chunk(self, tag: bytes, payload) -> None:
        self._f.write(CHUNK_HEADER.pack(tag, len(payload), zlib.crc32(payload)))
        self._f.write(payload)

    def append(self, group: int, host_ns: int, dev_ticks: int, enabled_ns: int, running_ns: int, raw) -> None:
        """One sample of one group; raw: the group's register values (ints 0..2**64-1) in header order.

        Raises ValueError (nothing written) when a value does not fit its field.
        """
        st = self._structs[group]
        i = self._fill[group]
        try:
            st.pack_into(self._bufs[group], i * st.size, host_ns, dev_ticks, enabled_ns, running_ns, *raw)
        except struct.error as e:
            raise ValueError(f"sample for group {group} does not fit the record ({e}); "
                             f"expected {self._k[group]} unsigned 64-bit values") from None
        i += 1
        self._fill[group] = i
        if i == self.flush_records:
            self._write_group(group)

    def append_many(self, group: int, host_ns, dev_ticks, enabled_ns, running_ns, raw) -> None:
        """Many samples of one group at once (arrays of equal length; raw shaped (N, K))."""
        self._write_group(group)
        n = len(host_ns)
        if n == 0:
            return
        k = self._k[group]
        arr = np.zeros(n, dtype=record_dtype(k))
        arr["host_ns"], arr["dev_ticks"] = host_ns, dev_ticks
        arr["enabled_ns"], arr["running_ns"] = enabled_ns, running_ns
        arr["raw"] = np.asarray(raw, dtype=np.uint64).reshape(n, k)
        step = self.flush_records
        for s in range(0, n, step):
            self._write_records(group, arr[s : s + step])

    def _write_group(self, group: int) -> None:
        n = self._fill[group]
        if n:
            st = self._structs[group]
            self._write_payload(group, n, memoryview(self._bufs[group])[: n * st.size])
            self._fill[group] = 0

    def _write_records(self, group: int, recs: np.ndarray) -> None:
        self._write_payload(group, len(recs), recs.tobytes())

    def _write_payload(self, group: int, n: int, body) -> None:
        payload = SMPL_HEADER.pack(group, self._k[group], n, 0) + bytes(body)
        self._chunk(b"SMPL", payload)
        self.samples_written += n

    def append_buffered(self, group: int, *, seq0: int, dropped: int, sync_host_ns: int, sync_dev_ticks: int,
                        period_ticks: int, dev_ticks, raw) -> None:
        """One drain of a device-side PM sampler as one BUFS chunk (written even when empty, so
        its clock pair and dropped count are kept). raw: (N, K) register values."""
        k = self._k[group]
        ticks = np.asarray(dev_ticks, dtype=np.int64)
        n = len(ticks)
        if dropped < 0 or period_ticks <= 0:
            raise ValueError("a BUFS chunk needs dropped >= 0 and period_ticks > 0")
        arr = np.zeros(n, dtype=buffered_dtype(k))
        arr["dev_ticks"] = ticks
        if n:
            arr["raw"] = np.asarray(raw, dtype=np.uint64).reshape(n, k)
        payload = BUFS_HEADER.pack(group, k, n, 0, seq0, dropped, sync_host_ns, sync_dev_ticks, period_ticks)
        self._chunk(b"BUFS", payload + arr.tobytes())
        self.buffered_written += n
        self.buffered_dropped += int(dropped)

    def note(self, obj: dict) -> None:
        """A NOTE chunk (e.g. a source that could not open some counters), written at once."""
        self.flush()
        self._chunk(b"NOTE", json.dumps(obj, sort_keys=True).encode())
        self._f.flush()

    def flush(self) -> None:
        """Write every buffered sample as chunks and hand them to the OS."""
        for g in self._bufs:
            self._write_group(g)
        self._f.flush()

    def close(self, tail: dict | None = None) -> None:
        """Flush, write the TAIL chunk (totals, how collection ended) and close; idempotent."""
        if self.closed:
            return
        self.flush()
        t = dict(tail or {})
        t.setdefault("samples", self.samples_written)
        if self.buffered_written or self.buffered_dropped:
            t.setdefault("buffered_samples", self.buffered_written)
            t.setdefault("buffered_dropped", self.buffered_dropped)
        self._chunk(b"TAIL", json.dumps(t, sort_keys=True).encode())
        self._f.flush()
        try:
            os.fsync(self._f.fileno())
        except OSError:
            pass
        self._f.close()
        self.closed = True
