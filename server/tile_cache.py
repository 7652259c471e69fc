"""Where a tile's bytes come from: memory (LRU, per worker), disk (shared by all workers), or a build.

Compression is negotiated: a client that accepts gzip gets the gzip twin once it exists; the
first request for a tile is answered uncompressed and the twin is built in the background (zlib
level 6 releases the GIL, ~3x smaller), so compressing never adds to a cold tile's latency.
Tiles under GZIP_MIN_BYTES are always sent as they are. ACCELTRACE_TILE_GZIP=0 turns it off.
"""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from acceltrace.tiles.disk import DiskTiles

GZIP_MIN_BYTES = 2048
GZIP_LEVEL = 6
GZIP_QUEUE_MAX = 64


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    return c.compress(data) + c.flush()


class TileBytes:
    def __init__(self, memory, disk: DiskTiles):
        self.memory = memory
        self.disk = disk
        self.gzip_on = os.environ.get("ACCELTRACE_TILE_GZIP", "1") not in ("0", "false", "no")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tile-gzip")
        self._pending: set[tuple] = set()
        self._lock = threading.Lock()

    def get(self, key: tuple, want_gzip: bool, build: Callable[[], bytes]) -> tuple[bytes, str]:
        """(body, encoding) for key = (trace_id, level, index, group)."""
        if want_gzip and self.gzip_on:
            body = self._lookup(key, "gzip")
            if body is not None:
                return body, "gzip"
        body = self._lookup(key, "identity")
        if body is None:
            body = build()
            self.disk.write(*key, "identity", body)
            self.memory.put(key + ("identity",), body)
        if want_gzip and self.gzip_on and len(body) >= GZIP_MIN_BYTES:
            self._compress_later(key, body)
        return body, "identity"

    def _lookup(self, key: tuple, enc: str) -> bytes | None:
        body = self.memory.get(key + (enc,))
        if body is None:
            body = self.disk.read(*key, enc)
            if body is not None:
                self.memory.put(key + (enc,), body)
        return body

    def _compress_later(self, key: tuple, body: bytes) -> None:
        with self._lock:
            if key in self._pending or len(self._pending) >= GZIP_QUEUE_MAX:
                return
            self._pending.add(key)

        def work():
            try:
                gz = gzip_bytes(body)
                self.disk.write(*key, "gzip", gz)
                self.memory.put(key + ("gzip",), gz)
            finally:
                with self._lock:
                    self._pending.discard(key)

        self._pool.submit(work)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
