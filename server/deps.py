"""Shared server state and dependencies: the store, cached read-only trace connections, errors.

The catalog is read on every request (one SQLite lookup), so traces the CLI adds or removes
while the server runs are seen at once; a removed trace answers 404 and its cached
connection is dropped. Published trace files are opened read-only, never written.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import duckdb
from fastapi import Request

from acceltrace.server.ingest_child import IngestProcesses
from acceltrace.server.query_pool import QueryPool
from acceltrace.server.tile_cache import KeyedLocks, TileBytes
from acceltrace.store.catalog import Store
from acceltrace.store.sandbox import DEFAULT_MEMORY_BYTES, stop_ahead
from acceltrace.store import queries
from acceltrace.tiles import layout
from acceltrace.tiles.disk import NAMES_IN_MEMORY_MAX, DiskTiles
from acceltrace.tiles.query import LodInfo

OPEN_TRACES_MAX = 16
DUCKDB_MEMORY_LIMIT = "512MB"
TILE_CACHE_BYTES = int(os.environ.get("ACCELTRACE_TILE_MEMORY_BYTES", 256 << 20))  # per worker
ROW_CACHE_S = 1.0
WEB_DIR = Path(__file__).resolve().parent.parent / "web"  # templates/ and static/


class ApiError(Exception):
    """An error answered as {"error": {"code", "message"}} with this HTTP status."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def not_found(trace_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no trace with id {trace_id!r} in this store")


GROUPS = "groups"  # TraceHandle.cache's entry of tile_groups()
NAMES = "names"  # ... and of tile_names()
DEPTHS = "depths"  # ... and of track_depths()


@dataclass
class TraceHandle:
    """One published trace opened read-only; cursors from it serve one request each
    (`with h.cursor() as cur:`)."""

    trace_id: str
    con: duckdb.DuckDBPyConnection
    info: LodInfo | None
    start_ns: int
    file: str = ""  # the trace's DuckDB file (its existence is checked on the fast path)
    cache: dict = field(default_factory=dict)  # immutable facts computed once (metadata, groups): once()
    # set by the first tile request for it: the page asks for its own tiles (server/first_view.py stops)
    asked: threading.Event = field(default_factory=threading.Event, repr=False)
    _builds: KeyedLocks = field(default_factory=KeyedLocks, repr=False)  # once(): one build per key

    def once(self, key: str, build):
        """cache[key], made by build() the first time it is asked for; a request that meets it being built
        waits for that build (a drop's page, its metadata and its first tiles ask at once) rather than
        making it again."""
        if key in self.cache:
            return self.cache[key]
        with self._builds.hold(key):
            if key not in self.cache:
                self.cache[key] = build()
            return self.cache[key]

    def tile_groups(self) -> tuple[dict, dict]:
        """(rows per section, deepest depth) per tile group, read once."""
        def build() -> tuple[dict, dict]:
            with self.cursor() as cur:
                return layout.group_counts(cur), layout.group_depths(cur)
        return self.once(GROUPS, build)

    def tile_names(self, cur: duckdb.DuckDBPyConnection) -> list[str] | None:
        """The trace's name dictionary (build_tile's `names`), read once with `cur`: None past
        NAMES_IN_MEMORY_MAX names (it nearly never is)."""
        return self.once(NAMES, lambda: layout.name_dictionary(cur, NAMES_IN_MEMORY_MAX))

    def track_depths(self) -> dict:
        """{"tracks": [{track_id, max_depth, counts, launch_depth}]} of its slice tracks (GET .../depths), read once."""
        def build() -> dict:
            with self.cursor() as cur:
                return {"tracks": queries.track_depths(cur)}
        return self.once(DEPTHS, build)

    def ready_for_tiles(self) -> None:
        """Read what every tile needs (its groups, its names) now, on a warming thread (AppState.warm):
        a just-published trace's first tile requests then take the tile fast path (server/tile_cache.py)
        instead of each going through the route to load them."""
        self.tile_groups()
        with self.cursor() as cur:
            self.tile_names(cur)

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of its own (not shared between threads), closed when the block ends."""
        cur = self.con.cursor()
        try:
            cur.execute("USE trace")  # a cursor is a new connection: it starts in the in-memory catalog
            yield cur
        finally:
            cur.close()

    def close(self) -> None:
        try:
            self.con.close()
        except duckdb.Error:
            pass


class AppState:
    """What the routers share: the store, settings, the open traces, background ingests."""

    def __init__(self, store_root: str | Path | None, max_upload_bytes: int = 4 << 30,
                 web_dir: Path | None = None, ingest_wait_s: float = 2.0, query_timeout_s: float = 10.0):
        self.store = Store(store_root)
        self.max_upload_bytes = max_upload_bytes
        self.query_timeout_s = float(os.environ.get("ACCELTRACE_QUERY_TIMEOUT_S", query_timeout_s))
        self.query_memory_bytes = int(os.environ.get("ACCELTRACE_QUERY_MEMORY_BYTES", DEFAULT_MEMORY_BYTES))
        self.ingest_wait_s = ingest_wait_s
        self.web_dir = web_dir or WEB_DIR
        self._open: OrderedDict[str, TraceHandle] = OrderedDict()
        self._opening = KeyedLocks()  # one open per trace at a time (trace())
        self._warming = ThreadPoolExecutor(2, thread_name_prefix="trace-warm")  # warm(): bounded
        self._rows: dict[str, tuple[dict, float]] = {}
        self._lock = threading.Lock()
        self.ingest_slots = threading.Semaphore(2)  # concurrent ingests; more wait their turn
        self.ingests = IngestProcesses(workers=2)  # their processes (server/ingest_child.py)
        self.tiles = TileCache(TILE_CACHE_BYTES)
        self.tile_bytes = TileBytes(self.tiles, DiskTiles(self.store.traces_dir, self.store.tmp_dir))
        self.query_pool = QueryPool(self.store.root)  # SQL queries: processes and slots of their own

    # -- catalog -----------------------------------------------------------------------------
    def row(self, trace_id: str) -> dict:
        """The catalog row, or 404. A ready row is reused for ROW_CACHE_S while its file exists:
        a published file only ever disappears on removal, and one stat() is far cheaper than
        opening the SQLite catalog on every tile request."""
        hit = self._rows.get(trace_id)
        now = time.monotonic()
        if hit is not None and now - hit[1] < ROW_CACHE_S and self.store.trace_path(trace_id).exists():
            return hit[0]
        row = self.store.get(trace_id) if _plausible_id(trace_id) else None
        if row is None:
            self._rows.pop(trace_id, None)
            self.forget(trace_id)
            raise not_found(trace_id)
        if row["status"] == "ready":
            if len(self._rows) > 10_000:
                self._rows.clear()
            self._rows[trace_id] = (row, now)
        else:
            self._rows.pop(trace_id, None)
        return row

    def ready_row(self, trace_id: str) -> dict:
        row = self.row(trace_id)
        if row["status"] != "ready":
            raise ApiError(409, "not_ready", f"trace {trace_id!r} is {row['status']}"
                           + (f": {row['error']}" if row.get("error") else "; try again when it is ready"))
        return row

    # -- open traces -------------------------------------------------------------------------
    def open_trace(self, trace_id: str) -> TraceHandle | None:
        """The handle when both its ready row and the handle are at hand in memory (one stat(), no
        SQLite, no DuckDB): what a tile request in the event loop may use; None otherwise."""
        hit = self._rows.get(trace_id)
        if hit is None or time.monotonic() - hit[1] >= ROW_CACHE_S or hit[0]["status"] != "ready":
            return None
        h = self._open.get(trace_id)
        if h is None or not os.path.exists(h.file):  # a str: no Path built per tile
            return None
        return h

    def trace(self, trace_id: str) -> TraceHandle:
        """The open read-only handle of a ready trace (404 / 409 otherwise)."""
        self.ready_row(trace_id)
        h = self._cached(trace_id)
        if h is not None:
            return h
        # a second request for a trace being opened waits for that open (a drop's page and its first API
        # calls arrive together, and warm() may have begun it) rather than opening a second instance
        with self._opening.hold(trace_id):
            return self._cached(trace_id) or self._open_handle(trace_id)

    def _cached(self, trace_id: str) -> TraceHandle | None:
        with self._lock:
            h = self._open.get(trace_id)
            if h is not None:
                self._open.move_to_end(trace_id)
            return h

    def warm(self, trace_id: str, then=None) -> None:
        """Open a ready trace's handle (and run then(handle)) on a thread of the warming pool, for requests
        about to need it: a trace page answered before its handle exists, an upload just published. Errors
        are left to the request that meets them."""
        def run() -> None:
            try:
                h = self.trace(trace_id)
                if then is not None:
                    then(h)
            except Exception:  # noqa: BLE001  (the request that needs it answers the error)
                pass
        if self._open.get(trace_id) is None or then is not None:
            try:
                self._warming.submit(run)
            except RuntimeError:  # shutting down
                pass

    def _open_handle(self, trace_id: str) -> TraceHandle:
        # Store.connect: an in-memory instance with the file ATTACHed read-only, so other read-only
        # opens of the same file in this process (CLI code, tests) never conflict. No side files:
        # they are rewritten while the server runs, and this handle lives on.
        try:
            con = self.store.connect(trace_id, sides=())
        except FileNotFoundError:  # removed between the catalog read and the open
            raise not_found(trace_id) from None
        except duckdb.Error:
            if not self.store.trace_path(trace_id).exists():
                raise not_found(trace_id) from None
            raise
        con.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        con.execute("SET threads = 2")
        try:
            info = LodInfo.load(con)
            start_ns = info.start_ns
        except duckdb.CatalogException:  # a trace written before LOD tables existed
            info = None
            start_ns = queries.trace_start_ns(con)
        h = TraceHandle(trace_id, con, info, start_ns, str(self.store.trace_path(trace_id)))
        with self._lock:
            old = self._open.get(trace_id)
            if old is not None:  # another request opened it meanwhile
                h.close()
                return old
            self._open[trace_id] = h
            while len(self._open) > OPEN_TRACES_MAX:
                # not closed here: a request may still hold a cursor of it; the DuckDB instance
                # goes when its last cursor does
                self._open.popitem(last=False)
        return h

    @contextmanager
    def connection(self, trace_id: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of its own to a published trace with its side files attached (Store.connect),
        closed when the block ends; 404 when the file is gone."""
        try:
            con = self.store.connect(trace_id)
        except FileNotFoundError:
            raise not_found(trace_id) from None
        try:
            yield con
        finally:
            con.close()

    def forget(self, trace_id: str) -> None:
        """Drop a removed trace's handle and tiles (in-flight requests keep their cursors)."""
        self._rows.pop(trace_id, None)
        self.tiles.drop_trace(trace_id)
        with self._lock:
            self._open.pop(trace_id, None)

    def close_all(self) -> None:
        self._warming.shutdown(wait=True, cancel_futures=True)
        self.query_pool.close()
        stop_ahead(self.store)  # the SQL query process waiting for the next query (store/sandbox.py)
        self.tile_bytes.close()
        self.ingests.close()
        with self._lock:
            handles = list(self._open.values())
            self._open.clear()
        for h in handles:
            h.close()


class TileCache:
    """Encoded tiles of published traces (immutable), least recently used out beyond a byte budget."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._d: OrderedDict[tuple, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> bytes | None:
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: tuple, value: bytes) -> None:
        if len(value) > self.max_bytes // 8:
            return  # one huge tile must not flush everything else
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.bytes -= len(old)
            self._d[key] = value
            self.bytes += len(value)
            while self.bytes > self.max_bytes:
                _, v = self._d.popitem(last=False)
                self.bytes -= len(v)

    def drop_trace(self, trace_id: str) -> None:
        with self._lock:
            for k in [k for k in self._d if k[0] == trace_id]:
                self.bytes -= len(self._d.pop(k))


def _plausible_id(trace_id: str) -> bool:
    return 0 < len(trace_id) <= 64 and all(c.isalnum() or c in "-_" for c in trace_id)


def get_state(request: Request) -> AppState:
    return request.app.state.acceltrace
