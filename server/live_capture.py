"""One live capture: a growing .atrace shown as a trace while it grows, then published under its id.

The capture follows the file with the .atrace follower and keeps the records since its last sealed
segment as the open head. Every BUILD_S (or once the previous build is done, when builds take
longer) the head is written out as a window file (formats/atrace/window.py) and ingested with the
native importer and the builder into a small DuckDB file with its LOD tables, all with the
capture's start as the time origin; once the head holds SEAL_EVENTS records or SEAL_S seconds, that
file is sealed: it never changes again and its tile parts are cached (tiles/live.py). Each build
announces the time range it changed to the page's websocket. When the file gets its trailer (the
daemon stopped), the whole file is ingested under the same id, analysed, and the row becomes an
ordinary ready trace; the segments go. server/live.py finds the files and runs one capture each.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np

from acceltrace.formats import record as R
from acceltrace.formats.atrace.follower import AtraceTail
from acceltrace.formats.atrace.layout import AtraceError
from acceltrace.formats.atrace.window import write_window
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.native.atrace import ingest_atrace
from acceltrace.ingest.pipeline import ingest_one
from acceltrace.server.metadata import link_peaks
from acceltrace.store import live as SL
from acceltrace.store.catalog import Store
from acceltrace.store.errors import IngestError
from acceltrace.tiles.layout import NAMES_TABLE
from acceltrace.tiles.live import LiveLayout, PartCache, Segment, compose_tile, segment_facts
from acceltrace.tiles.query import MAX_LEVEL, LodInfo

log = logging.getLogger("acceltrace.live")

POLL_S = 0.02             # how often a capture reads its file
BUILD_S = 0.1             # the head is rebuilt at most this often (and never while a build runs)
SEAL_EVENTS = 200_000     # a head this big is sealed
SEAL_S = 2.0              # ... or this old
RATE_WINDOW_S = 2.0
RETIRE_S = 10.0           # a replaced head build stays open this long for requests still reading it
CATALOG_EVERY_S = 1.0
NAME_KINDS = (R.TRACK_NAME, R.PROCESS_NAME)

AfterPublish = Callable[[Store, str], None]


class LiveCapture:
    """One growing .atrace shown as a live trace; `run` (a thread) follows, builds, seals, finalises."""

    def __init__(self, store: Store, path: Path, name: str, after_publish: AfterPublish | None = None,
                 seal_events: int | None = None, seal_s: float | None = None):
        self.store, self.path, self.name = store, Path(path), name
        self.after_publish = after_publish
        self.seal_events = seal_events or SEAL_EVENTS
        self.seal_s = seal_s or SEAL_S
        self.tail = AtraceTail(self.path)
        self.trace_id: str | None = None  # the catalog row is made with the first segment
        self.dir: Path | None = None
        self.layout = LiveLayout()
        self.names: list[str] = []
        self.name_ids: dict[str, int] = {}
        self.sealed: list[Segment] = []
        self.head: Segment | None = None
        self.parts = PartCache()
        self._head_recs: list[tuple[np.ndarray, np.ndarray]] = []
        self._name_recs: list[tuple[np.ndarray, np.ndarray]] = []
        self._head_n = 0
        self._head_built_n = 0
        self._head_since = 0.0
        self._builds = 0
        self.start_abs_ns: int | None = None
        self.events = 0
        self._rate: deque[tuple[float, int]] = deque()
        self.status = "following"  # following -> live -> finalising -> final | failed | abandoned
        self.error: str | None = None
        self.final_status: str | None = None
        self.seq = 0  # bumped (under cond) with each change the page should hear about
        self.changes: deque[dict] = deque(maxlen=256)
        self.cond = threading.Condition()
        self.lock = threading.RLock()  # segments and layout, read by requests, changed by builds
        self.stop_event = threading.Event()
        self.build_ms: deque[float] = deque(maxlen=50)
        self._retired: deque[tuple[float, Segment]] = deque()  # replaced head builds, closed a little later
        self._first_seen: float | None = None
        self.finalise_s: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"live {self.path.name}", daemon=True)

    # -- the thread -------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)
        self._close_segments()

    def _run(self) -> None:
        last_catalog = 0.0
        try:
            while not self.stop_event.is_set():
                recs, streams = self.tail.poll()
                if self.tail.stopped_at is not None:
                    raise AtraceError(self.tail.problems[-1].message, self.tail.stopped_at)
                got = len(recs) > 0
                if got:
                    self._take(recs, streams)
                now = time.monotonic()
                caught_up = not got or self.tail.offset >= _size(self.path)
                if self.trace_id is None and self.tail.trailer is not None and caught_up:
                    self.status = "abandoned"  # complete when found: an ordinary file to ingest, not a capture
                    return
                if self._head_n > self._head_built_n and now >= self._next_build:
                    self._build_head()
                    if self._head_n >= self.seal_events or now - self._head_since >= self.seal_s:
                        self._seal()
                if self.trace_id is not None and now - last_catalog >= CATALOG_EVERY_S:
                    self.store.set_live_counts(self.trace_id, self.counts(), self.tail.offset)
                    last_catalog = now
                if self.tail.trailer is not None and caught_up and self._head_n == self._head_built_n:
                    if self.trace_id is not None:
                        self._finalise()
                    return
                if not got:
                    self.stop_event.wait(POLL_S)
        except (AtraceError, OSError, IngestError, duckdb.Error) as e:
            self._fail(f"{self.path.name}: {e}")
        except Exception as e:  # a bug must not leave a row 'live' forever
            log.exception("live capture of %s failed", self.path)
            self._fail(f"{self.path.name}: internal error: {type(e).__name__}: {e}")

    _next_build = 0.0

    def _take(self, recs: np.ndarray, streams: np.ndarray) -> None:
        names = np.isin(recs["kind"], NAME_KINDS)
        if names.any():
            self._name_recs.append((recs[names].copy(), streams[names].copy()))
        ev = np.isin(recs["kind"], R.EVENT_KINDS)
        n = int(ev.sum())
        if not self._head_n:
            self._head_since = time.monotonic()
        self._head_recs.append((recs, streams))
        self._head_n += len(recs)
        self.events += n
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = now
        self._rate.append((now, n))
        while self._rate and now - self._rate[0][0] > RATE_WINDOW_S:
            self._rate.popleft()

    def rate_per_s(self) -> float:
        """Events per second over the last RATE_WINDOW_S (or since the capture began, if later)."""
        if not self._rate or self._first_seen is None:
            return 0.0
        span = max(0.5, min(RATE_WINDOW_S, time.monotonic() - self._first_seen))
        return sum(n for _, n in self._rate) / span

    def counts(self) -> dict:
        with self.lock:
            segs = self.sealed + ([self.head] if self.head else [])
            return {"events": self.events, "rate_per_s": round(self.rate_per_s(), 1),
                    "lost_events": self.tail.lost_events()[0], "segments": len(segs),
                    "slices": sum(s.n_slices for s in segs), "tracks": len(self.layout.tracks)}

    # -- builds -----------------------------------------------------------------------------------
    def _build_head(self) -> None:
        t0 = time.perf_counter()
        recs = np.concatenate([r for r, _ in self._name_recs] + [r for r, _ in self._head_recs])
        streams = np.concatenate([s for _, s in self._name_recs] + [s for _, s in self._head_recs])
        built_n = self._head_n
        if self.trace_id is None:  # the first data: the capture enters the catalog
            self.trace_id = self.store.begin_live(self.name)
            self.dir = self.store.live_dir(self.trace_id)
            self.dir.mkdir(parents=True, exist_ok=True)
            self.status = "live"
        self._builds += 1
        seg_path = self.dir / f"seg-{len(self.sealed):06d}.{self._builds}.duckdb"
        seg = self._ingest_window(recs, streams, seg_path)
        self._head_built_n = built_n
        ms = (time.perf_counter() - t0) * 1000
        self.build_ms.append(ms)
        self._next_build = time.monotonic() + max(BUILD_S, ms / 1000)
        if seg is None:
            return
        with self.lock:
            old = self.head
            self.head = seg
        if old is not None:
            self._retired.append((time.monotonic(), old))
        while self._retired and time.monotonic() - self._retired[0][0] > RETIRE_S:
            _drop_file(self._retired.popleft()[1])
        self._announce("data", seg.lo_ns, seg.hi_ns)

    def _ingest_window(self, recs: np.ndarray, streams: np.ndarray, seg_path: Path) -> Segment | None:
        win = seg_path.with_suffix(".atrace")
        tmp = seg_path.with_suffix(".tmp")
        write_window(self.tail, recs, streams, win)
        b = TraceBuilder(tmp, memory_limit="512MB", threads=1)
        try:
            ingest_atrace(win, b, label=self.path.name)
            if b.n_slices == 0 and b.n_counters == 0:  # nothing drawable yet (names, unmapped device events)
                b.abort()
                _unlink(tmp)
                return None
            b.finish("atrace", self.path.name, start_ns=self.start_abs_ns)
        except BaseException:
            b.abort()
            _unlink(tmp)
            raise
        finally:
            win.unlink(missing_ok=True)
        os.replace(tmp, seg_path)
        return self._open_segment(seg_path)

    def _open_segment(self, path: Path) -> Segment:
        con = duckdb.connect(str(path), read_only=True)
        con.execute("SET threads = 1")
        info = LodInfo.load(con)
        if self.start_abs_ns is None:
            self.start_abs_ns = info.start_ns
        tracks, names, n_slices, lo, hi = segment_facts(con)
        with self.lock:
            gids = self.layout.add(tracks)
            tmap = np.zeros(max([t["track_id"] for t in tracks], default=-1) + 1, np.int64)
            tmap[[t["track_id"] for t in tracks]] = gids
            nmap = np.zeros(len(names), np.int64)
            for i, text in enumerate(names):
                g = self.name_ids.get(text)
                if g is None:
                    g = self.name_ids[text] = len(self.names)
                    self.names.append(text)
                nmap[i] = g
            base = sum(s.n_slices for s in self.sealed)
        return Segment(key=path.name, con=con, info=info, track_map=tmap, name_map=nmap, slice_base=base,
                       n_slices=n_slices, lo_ns=lo - info.start_ns, hi_ns=hi - info.start_ns, sealed=False)

    def _seal(self) -> None:
        with self.lock:
            if self.head is not None:
                self.head.sealed = True
                self.sealed.append(self.head)
                self.head = None
        self._head_recs, self._head_n, self._head_built_n = [], 0, 0

    def _announce(self, kind: str, t0_ns: int | None = None, t1_ns: int | None = None) -> None:
        with self.cond:
            self.seq += 1
            self.changes.append({"seq": self.seq, "type": kind, "t0_ns": t0_ns, "t1_ns": t1_ns})
            self.cond.notify_all()

    def wait_change(self, seen: int, timeout_s: float) -> int:
        """Block until seq passes `seen` (or the timeout); returns the current seq."""
        with self.cond:
            self.cond.wait_for(lambda: self.seq > seen or self.status in ("final", "failed"), timeout_s)
            return self.seq

    # -- finalisation ------------------------------------------------------------------------------
    def _finalise(self) -> None:
        self.status = "finalising"
        self._announce("finalising")
        t0 = time.perf_counter()
        tmp = self.store.live_to_ingesting(self.trace_id)
        res = ingest_one(self.store, [self.path], self.name, keep_failed=True, trace_id=self.trace_id, tmp_path=tmp,
                         after_publish=self.after_publish)
        self.finalise_s = time.perf_counter() - t0
        self._close_segments()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.final_status = "failed" if res.error else "ready"
        self.error = res.error
        self.status = "final"
        self._announce("final")

    def _fail(self, message: str) -> None:
        self.error = message
        self.status = "failed"
        if self.trace_id is not None:
            self.store.fail(self.trace_id, None, message)
        self._close_segments()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self._announce("final")

    def _close_segments(self) -> None:
        with self.lock:
            segs, self.sealed, self.head = self.sealed + ([self.head] if self.head else []), [], None
            segs += [r for _, r in self._retired]
            self._retired.clear()
        for s in segs:
            try:
                s.con.close()
            except duckdb.Error:
                pass

    # -- what requests read -----------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        with self.lock:
            return self.sealed + ([self.head] if self.head else [])

    def head_ns(self) -> int:
        segs = self.segments()
        return max((s.hi_ns for s in segs), default=0)

    def tile(self, level: int, index: int, grp: int) -> bytes:
        with self.lock:
            segs = self.sealed + ([self.head] if self.head else [])
            tracks = self.layout.group_tracks(grp)
            g = self.layout.groups[grp]
            names = list(self.names)
        label = f"{g['lane']} · {g['group_name']}" if g["group_name"] else g["lane"]
        return compose_tile(segs, self.parts, level, index, tracks, label, names)

    def tile_etag_key(self, level: int, index: int, grp: int) -> str:
        """What a tile's content depends on: the segments overlapping it and the layout."""
        t0 = index << (level + 10)
        t1 = (index + 1) << (level + 10)
        keys = [s.key for s in self.segments() if s.overlaps(t0, t1)]
        return f"{self.trace_id}/{level}/{index}/{grp}/{self.layout.version}/{','.join(keys)}"

    def metadata(self) -> dict:
        """The trace metadata document (server/metadata.py's shape) of the capture so far."""
        segs = self.segments()
        head = self.head_ns()
        with self.lock:
            tracks = [{**{k: v for k, v in t.items() if k != "grp"}, "group": f"g{t['grp']}"}
                      for t in self.layout.ui_order()]
            groups = [{"id": f"g{g['grp']}", "lane": g["lane"], "group_name": g["group_name"],
                       "name": f"{g['lane']} · {g['group_name']}" if g["group_name"] else g["lane"],
                       "track_ids": list(g["track_ids"])} for g in self.layout.groups]
            version = self.layout.version
        meta = SL.merged_meta([s.con for s in segs[-1:]])
        duration = max(1, head)
        max_level = max(0, min(MAX_LEVEL, (duration // 1024).bit_length()))
        lost = self.tail.lost_events()[0]
        return {
            "id": self.trace_id, "name": self.name, "format": "atrace", "status": "live",
            "start_abs_ns": str(self.start_abs_ns or 0), "duration_ns": duration,
            "warning_count": 0, "warnings": [], "dropped_events": 0, "lost_events": lost,
            "links": link_peaks(meta), "meta": meta,
            "levels": {"min": 0, "max": max_level, "buckets_per_tile": 1024, "pyramid_from": 0},
            "min_level": 0, "max_level": max_level, "groups": groups, "tracks": tracks,
            "counts": self.counts(),
            "live": {"head_ns": head, "events": self.events, "rate_per_s": round(self.rate_per_s(), 1),
                     "lost_events": lost, "segments": len(segs), "layout_version": version, "seq": self.seq,
                     "file": self.path.name},
        }

    def push_message(self, seq: int, since: int) -> dict:
        """The websocket message for changes after `since` up to `seq`: the time range they touched."""
        changed = [c for c in list(self.changes) if since < c["seq"] <= seq]
        data = [c for c in changed if c["type"] == "data"]
        status = self.status
        msg = {"type": "final" if status in ("final", "failed") else "data", "seq": seq,
               "status": self.final_status or ("failed" if status == "failed" else "live"),
               "finalising": status == "finalising", "error": self.error,
               "head_ns": self.head_ns() if status not in ("final", "failed") else None,
               "t0_ns": min((c["t0_ns"] for c in data), default=None),
               "t1_ns": max((c["t1_ns"] for c in data), default=None),
               "layout_version": self.layout.version, **{k: v for k, v in self.counts().items()}}
        return msg

    def slice_detail(self, slice_id: int) -> dict | None:
        return SL.slice_detail(self.segments(), slice_id, self.start_abs_ns or 0)

    def search(self, q: str, offset: int, limit: int) -> dict:
        return SL.search(self.segments(), q, offset, limit, self.start_abs_ns or 0, names=NAMES_TABLE)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(p: Path) -> None:
    for q in (p, Path(str(p) + ".wal")):
        q.unlink(missing_ok=True)


def _drop_file(seg: Segment) -> None:
    """A head build replaced by a newer one: close it and remove its file (requests hold cursors of
    their own; a cursor still reading keeps the DuckDB instance until it is done)."""
    path = None
    try:
        path = Path(seg.con.execute("PRAGMA database_list").fetchone()[2])
    except duckdb.Error:
        pass
    try:
        seg.con.close()
    except duckdb.Error:
        pass
    if path is not None:
        _unlink(path)


