"""Where a tile's bytes come from: memory (LRU, per worker), disk (shared by all workers), or a build.

Compression is negotiated: a client that accepts gzip gets the gzip twin once it exists; the
first request for a tile is answered uncompressed and the twin is built in the background (zlib
releases the GIL; level 1 halves a tile, level 6 saves 4 % more for 4x the CPU, which the next cold
tile would wait for on a busy machine), so compressing never adds to a cold tile's latency.
Tiles under GZIP_MIN_BYTES are always sent as they are. ACCELTRACE_TILE_GZIP=0 turns it off.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Hashable, Iterator

from acceltrace.tiles.build import LOD_VERSION
from acceltrace.tiles.disk import DiskTiles
from acceltrace.tiles.query import MAX_PAGE, TILE_FORMAT_VERSION, page_key

GZIP_MIN_BYTES = 2048
GZIP_LEVEL = 1
GZIP_QUEUE_MAX = 64
IMMUTABLE = "public, max-age=31536000, immutable"
TILE_MEDIA_TYPE = "application/octet-stream"
_TILE_PATH = re.compile(r"^/api/traces/([A-Za-z0-9_-]{1,64})/tiles/(\d{1,2})/(\d{1,13})$")
_GROUP_QS = re.compile(rb"^(?:group=(g\d{1,6})(?:&page=(\d{1,4}))?)?$")


def held_etag(if_none_match: str | None, trace_id: str, level: int, index: int, group: str | None) -> str | None:
    """The tag of If-None-Match that names this tile in either representation (the client holds that
    one, whichever encoding it would get now), or None: the one 304 rule of the route and the fast path."""
    if not if_none_match:
        return None
    tags = [t.strip() for t in if_none_match.split(",")]
    return next((t for t in (tile_etag(trace_id, level, index, group, e) for e in ("identity", "gzip"))
                 if t in tags), None)


@functools.lru_cache(maxsize=1 << 16)  # asked on every tile request, memory hits included
def tile_etag(trace_id: str, level: int, index: int, group: str | None, enc: str = "identity") -> str:
    """The strong ETag of one tile representation (the gzip one has its own)."""
    tag = hashlib.sha256(f"{trace_id}/{level}/{index}/{group}/lod{LOD_VERSION}/tile{TILE_FORMAT_VERSION}".encode()
                         ).hexdigest()[:32]
    return f'"{tag}-gz"' if enc == "gzip" else f'"{tag}"'


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    return c.compress(data) + c.flush()


class KeyedLocks:
    """A lock per key, kept while a thread holds or waits for it: one build of a thing at a time, the others
    waiting for it and then finding what it made (TileBytes' tiles, TraceHandle.once's facts)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[Hashable, list] = {}  # key -> [its lock, threads holding or waiting]

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        with self._lock:
            entry = self._held.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._held[key]

    def users(self, key: Hashable) -> int:
        """Threads holding or waiting for key's lock."""
        with self._lock:
            entry = self._held.get(key)
            return entry[1] if entry else 0


class TileBytes:
    def __init__(self, memory, disk: DiskTiles):
        self.memory = memory
        self.disk = disk
        self.gzip_on = os.environ.get("ACCELTRACE_TILE_GZIP", "1") not in ("0", "false", "no")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tile-gzip")
        self._pending: set[tuple] = set()
        self._builds = KeyedLocks()
        self._lock = threading.Lock()

    def get(self, key: tuple, want_gzip: bool, build: Callable[[], bytes]) -> tuple[bytes, str]:
        """(body, encoding) for key = (trace_id, level, index, group page); `build()` gives that key's
        bytes when no cache has them (kept in both)."""
        if want_gzip and self.gzip_on:
            body = self._lookup(key, "gzip")
            if body is not None:
                return body, "gzip"
        body = self._lookup(key, "identity")
        if body is None:
            # one build of a key at a time: a request meeting one under way (a page's first tiles meeting
            # those server/first_view.py builds ahead) waits for it and finds its bytes
            with self._builds.hold(key):
                body = self._lookup(key, "identity")
                if body is None:
                    body = build()
                    self.disk.write(*key, "identity", body)
                    self.memory.put(key + ("identity",), body)
        if want_gzip and self.gzip_on and len(body) >= GZIP_MIN_BYTES:
            self._compress_later(key, body)
        return body, "identity"

    def in_memory(self, key: tuple, want_gzip: bool) -> tuple[bytes | None, str]:
        """The tile from this worker's memory only (never blocks): (None, "") when not there."""
        if want_gzip and self.gzip_on:
            body = self.memory.get(key + ("gzip",))
            if body is not None:
                return body, "gzip"
        body = self.memory.get(key + ("identity",))
        if body is not None and want_gzip and self.gzip_on and len(body) >= GZIP_MIN_BYTES:
            return None, ""  # its gzip twin may be on disk: the slow path looks
        return body, "identity" if body is not None else ""

    def on_disk(self, key: tuple, want_gzip: bool) -> tuple[bytes | None, str]:
        """The tile from the shared disk cache into this worker's memory (a file read: run it off the
        event loop), as get() would answer it without a build: (None, "") when the route must (no
        file, or only the identity file where a gzip twin is still to be made)."""
        if want_gzip and self.gzip_on:
            body = self._lookup(key, "gzip")
            if body is not None:
                return body, "gzip"
        body = self._lookup(key, "identity")
        if body is None or (want_gzip and self.gzip_on and len(body) >= GZIP_MIN_BYTES):
            return None, ""
        return body, "identity"

    def maybe_on_disk(self, key: tuple, want_gzip: bool) -> bool:
        """False when on_disk() would surely find nothing: no file of the key (stat calls only, so the
        event loop may ask; a cold tile then goes to its route without a thread hop to look)."""
        if want_gzip and self.gzip_on and self.disk.has(*key, "gzip"):
            return True
        return self.disk.has(*key, "identity")

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


class TileFastPath:
    """ASGI: a tile this worker holds in memory, or finds in the shared disk cache, is answered
    here, before FastAPI's routing, validation and dependency machinery (the same bytes and
    headers the route gives); anything else (a tile to build, a trace not open, odd parameters)
    goes on to the route. Inside the Host check and the in-flight bound."""

    def __init__(self, app, fastapi_app, cold_job=None):
        self.app = app
        self.fastapi_app = fastapi_app
        # (state, trace_id, level, index, group, page) -> (key, build) or None: a tile in neither cache
        # that needs no check the route makes is built here too (server/routers/tiles.py cold_job)
        self.cold_job = cold_job

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            m = _TILE_PATH.match(scope["path"])
            q = _GROUP_QS.match(scope.get("query_string", b"")) if m else None
            state = getattr(self.fastapi_app.state, "acceltrace", None) if q else None
            if state is not None and await self._answer(state, m, q, scope, send):
                return
        await self.app(scope, receive, send)

    async def _answer(self, state, m, q, scope, send) -> bool:
        trace_id, level, index = m.group(1), int(m.group(2)), int(m.group(3))
        raw_group = group = q.group(1).decode() if q.group(1) else None
        page = 0
        if q.group(2) is not None:
            page = int(q.group(2))
            if page > MAX_PAGE:
                return False  # the route answers 422
            group = page_key(group, page)
        h = state.open_trace(trace_id)
        if h is None:
            return False
        h.asked.set()
        headers = {k: v for k, v in scope["headers"] if k in (b"accept-encoding", b"if-none-match")}
        want_gzip = b"gzip" in headers.get(b"accept-encoding", b"")
        inm = headers.get(b"if-none-match")
        held = held_etag(inm.decode("latin-1") if inm is not None else None, trace_id, level, index, group)
        key = (trace_id, level, index, group)
        body, enc = state.tile_bytes.in_memory(key, want_gzip)
        loop = asyncio.get_running_loop()
        if body is None and state.tile_bytes.maybe_on_disk(key, want_gzip):
            # built by another worker (or before a restart): its file, read in a thread, still
            # skips the route; the first pass of a team over a trace's tiles goes this way
            body, enc = await loop.run_in_executor(None, state.tile_bytes.on_disk, key, want_gzip)
        if body is None:  # to build: here when nothing needs the route's checks, else by the route
            job = self.cold_job(state, trace_id, level, index, raw_group, page) if self.cold_job else None
            if job is None:
                return False
            if held is None:
                try:
                    body, enc = await loop.run_in_executor(None, state.tile_bytes.get, job[0], want_gzip, job[1])
                except Exception:  # the route builds it again and answers the error its own way
                    return False
            else:  # a valid tile the client holds: its 304 needs no bytes
                enc = "identity"
        etag = tile_etag(trace_id, level, index, group, enc)
        out = [(b"etag", etag.encode()), (b"cache-control", IMMUTABLE.encode()), (b"vary", b"Accept-Encoding")]
        if held is not None:
            out[0] = (b"etag", held.encode())
            await send({"type": "http.response.start", "status": 304, "headers": out})
            await send({"type": "http.response.body", "body": b""})
            return True
        if enc == "gzip":
            out.append((b"content-encoding", b"gzip"))
        out += [(b"content-type", TILE_MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": out})
        await send({"type": "http.response.body", "body": body})
        return True
