"""One live capture: a growing .atrace shown as a trace while it grows, then published under its id.

The capture follows the file with the .atrace follower. Every BUILD_S (while fewer than BUILD_WORKERS
builds run) the records read since the last build become a head segment (server/live_build.py's
build_head: in memory, numpy and Arrow, no fixed SQL cost; the capture's start as time origin),
immutable from then on (its tile parts are cached, tiles/live.py), and its time range is announced
to the page's websocket. Sealing is off the request path: the deltas of the last SEAL_S seconds (or
SEAL_EVENTS records) are compacted on a second thread into one sealed segment (a small DuckDB file
with its LOD tables), which replaces them; what crosses a delta boundary (a begin/end pair, a
correlation) joins up there. Compactions take at most SEAL_CPU_SHARE of a core; a window due while
the compactor is busy or resting stays as head segments. Head segments hold at most
HEAD_MAX_RECORDS records: the oldest beyond go from the live view, their span said (hatched, as
what a server behind could not build). When the file gets its trailer (the daemon stopped), the
whole file is ingested under the same id, analysed, and the row becomes an ordinary ready trace;
the segments go.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np

from acceltrace.formats import record as R
from acceltrace.formats.atrace.follower import AtraceTail
from acceltrace.formats.atrace.layout import AtraceError
from acceltrace.formats.atrace.window import snapshot
from acceltrace.ingest.pipeline import ingest_one
from acceltrace.server.live_build import DeltaBudget, Gaps, trim_oldest
from acceltrace.server.live_seal import Sealing, env_records
from acceltrace.store import live as SL
from acceltrace.store.catalog import Store
from acceltrace.store.errors import IngestError
from acceltrace.tiles.layout import NAMES_TABLE
from acceltrace.tiles.live import LiveLayout, PartCache, Segment

log = logging.getLogger("acceltrace.live")

POLL_S = 0.02             # how often a capture reads its file
BUILD_S = 0.1             # a delta is started at most this often
BUILD_WORKERS = min(2, max(1, (os.cpu_count() or 2) // 2))  # ... at most this many at once (1 on 2 cores)
BEHIND_HOLD_S = 2.0       # ... and one only, for this long after the server was last behind (<= 1 core)
SEAL_EVENTS = 200_000     # deltas holding this many records are compacted into one segment
SEAL_S = 2.0              # ... or once the oldest of them is this old
MAX_DELTA_RECORDS = 500_000  # a server behind builds the newest this many (or what DeltaBudget allows)
HEAD_MAX_RECORDS = 3_000_000  # records in head segments (in memory, ~150 B each); the oldest beyond leave
HEAD_RECORDS_ENV = "ACCELTRACE_LIVE_HEAD_RECORDS"  # ... the live view; the operator's bound (docs/tracing.md)
MAX_GAPS = 1000           # not-drawn spans kept (the newest)
RATE_WINDOW_S = 2.0
READ_AHEAD_BYTES = 64 << 20  # a follower this far behind the file's end reads before it builds ...
READ_AHEAD_S = 1.0        # ... for at most this long
CATALOG_EVERY_S = 1.0

AfterPublish = Callable[[Store, str], None]


class LiveCapture(Sealing):
    """One growing .atrace shown as a live trace; `run` (a thread) follows, builds, seals (Sealing:
    server/live_seal.py), finalises."""

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
        self.sealed: list[Segment] = []  # in time order; every one immutable
        self.parts = PartCache()
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # read, not built yet
        self._name_recs: list[tuple[np.ndarray, np.ndarray]] = []  # track/process names: in every window
        self._window: list[tuple[np.ndarray, np.ndarray]] = []  # built as deltas since the last compaction
        self._window_futs: list[Future] = []  # the delta builds of the window, in read order
        self._building: list[Future] = []  # every delta build not done yet (a window may have moved on)
        self._pool = ThreadPoolExecutor(BUILD_WORKERS, thread_name_prefix=f"live build {self.path.name}")
        self._window_n = 0
        self._window_since = 0.0
        self._next_base = 0
        self._next_build = 0.0
        self._files = 0
        self._compactor: threading.Thread | None = None
        self.compactions = 0
        self.not_shown = 0  # events left out of the live view because the server fell behind
        self.gaps = Gaps(MAX_GAPS)  # ... and their time spans
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
        # per built delta, monotonic ns: its newest record read, build started, built, announced
        self.stages: deque[dict] = deque(maxlen=200)
        self.budget = DeltaBudget(MAX_DELTA_RECORDS)
        self._db = duckdb.connect()  # head segments' tables are views on its cursors
        self._db.execute("SET threads = 1")
        self._seal_after = 0.0  # the compactor rests until then (SEAL_CPU_SHARE)
        self.head_max = env_records(HEAD_RECORDS_ENV, HEAD_MAX_RECORDS)
        self._sealing: list[Future] = []  # the delta builds a compaction in flight replaces (never dropped)
        self.dropped_live = 0  # events drawn live, then dropped from the view (HEAD_MAX_RECORDS)
        self._read_ns = 0
        self._lost_seen = 0
        self._behind_since_compaction = False
        self._behind_at = -BEHIND_HOLD_S
        self._retired: deque[tuple[float, Segment]] = deque()  # compacted deltas, closed a little later
        self._first_seen: float | None = None
        self.finalise_s: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"live {self.path.name}", daemon=True)

    # -- the thread -------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """The server is going: stop following; a trace still live says why it ends there."""
        self.stop_event.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        if self.trace_id is not None and self.status == "live":
            self.status = "failed"
            self.store.fail(self.trace_id, None, f"the server stopped while {self.path.name} was being captured; "
                                                 "ingest the file to see it")
        self._pool.shutdown(wait=True)  # a head build under way (ms) ends before its database closes
        if self._compactor is not None:
            self._compactor.join(timeout=30)  # a DuckDB build cut off at interpreter exit aborts the process
        self._close_segments()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

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
                backlog = (self.path.stat().st_size if self.path.exists() else 0) - self.tail.offset
                caught_up = not got or backlog <= 0
                if self.trace_id is None and self.tail.trailer is not None and caught_up:
                    self.status = "abandoned"  # complete when found: an ordinary file to ingest, not a capture
                    return
                workers = 1 if now - self._behind_at < BEHIND_HOLD_S else BUILD_WORKERS
                reading = backlog > READ_AHEAD_BYTES and now - self._next_build < READ_AHEAD_S  # a burst: read on
                if self._pending and now >= self._next_build and not reading and self._in_flight() < workers:
                    self._build_delta()
                if self._window_n and (self._window_n >= self.seal_events or now - self._window_since >= self.seal_s):
                    self._start_compaction()
                lost = self.tail.lost_events()[0]
                if lost != self._lost_seen and self.trace_id is not None:
                    self._lost_seen = lost  # the page hears of a loss at once, data or not
                    self._announce("counts")
                if self.trace_id is not None and now - last_catalog >= CATALOG_EVERY_S:
                    self.store.set_live_counts(self.trace_id, self.counts(), self.tail.offset)
                    last_catalog = now
                if self.tail.trailer is not None and caught_up:
                    # stopped: what is not built yet is not built (the whole file is ingested now), unless the
                    # server is stopping: then the row says so (stop()) and no ingest outlives it
                    self._pending = []
                    if self.trace_id is not None and not self.stop_event.is_set():
                        self._finalise()
                    return
                if not got:
                    self.stop_event.wait(POLL_S)
        except (AtraceError, OSError, IngestError, duckdb.Error) as e:
            self._fail(f"{self.path.name}: {e}")
        except Exception as e:  # a bug must not leave a row 'live' forever
            log.exception("live capture of %s failed", self.path)
            self._fail(f"{self.path.name}: internal error: {type(e).__name__}: {e}")

    def _take(self, recs: np.ndarray, streams: np.ndarray) -> None:
        kind = recs["kind"]
        names = (kind == R.TRACK_NAME) | (kind == R.PROCESS_NAME)
        if names.any():
            self._name_recs.append((recs[names].copy(), streams[names].copy()))
        n = int(((kind >= min(R.EVENT_KINDS)) & (kind <= max(R.EVENT_KINDS))).sum())  # EVENT_KINDS: 1..5
        self._pending.append((recs, streams))
        self._trim_pending(2 * MAX_DELTA_RECORDS)  # what a build never takes is not kept either
        self.events += n
        self._read_ns = time.monotonic_ns()
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
            segs = list(self.sealed)
        return {"events": self.events, "rate_per_s": round(self.rate_per_s(), 1), "not_shown": self.not_shown,
                "lost_events": self.tail.lost_events()[0], "segments": len(segs),
                "slices": sum(s.n_slices for s in segs), "tracks": len(self.layout.tracks),
                "dropped_live": self.dropped_live}

    # -- builds -----------------------------------------------------------------------------------
    def _build_delta(self) -> None:
        """The records read since the last build (the newest the budget allows) become a segment of
        their own (immutable), built on one of BUILD_WORKERS threads. A delta never holds more than the
        head's bound: a burst over it would be let go as soon as it was built, and nothing drawn."""
        self._trim_pending(min(MAX_DELTA_RECORDS, self.budget.records(), self.head_max))
        pending, self._pending = self._pending, []
        recs = np.concatenate([r for r, _ in self._name_recs] + [r for r, _ in pending])
        streams = np.concatenate([s for _, s in self._name_recs] + [s for _, s in pending])
        if self.trace_id is None:  # the first data: the capture enters the catalog
            self.trace_id = self.store.begin_live(self.name)
            self.dir = self.store.live_dir(self.trace_id)
            self.dir.mkdir(parents=True, exist_ok=True)
            self.status = "live"
        # ids: a segment of n records holds at most n slices, so a range of n ids is its for good; a
        # compaction takes a fresh range, so an id never names two slices (a replaced one answers 404)
        base, self._next_base = self._next_base, self._next_base + len(recs)
        fut = self._pool.submit(self._delta_job, snapshot(self.tail), recs, streams, base, self._read_ns)
        self._next_build = time.monotonic() + BUILD_S
        if not self._window_n:
            self._window_since = time.monotonic()
        self._window += pending
        self._window_n += sum(len(r) for r, _ in pending)
        self._window_futs.append(fut)
        self._building.append(fut)

    def _trim_pending(self, limit: int) -> None:
        """Behind: the live view follows the present and says what it left out (the published trace
        has it all)."""
        for r in trim_oldest(self._pending, limit):
            self.not_shown += int(np.isin(r["kind"], R.EVENT_KINDS).sum())
            self.gaps.add(r)
            self._behind_since_compaction, self._behind_at = True, time.monotonic()

    def _in_flight(self) -> int:
        for f in self._building:
            if f.done() and f.exception() is not None:
                raise f.exception()
        self._building = [f for f in self._building if not f.done()]
        return len(self._building)

    def _delta_job(self, ctx, recs: np.ndarray, streams: np.ndarray, base: int, read_ns: int) -> Segment | None:
        if self.status != "live":  # finalising or stopped since it was queued
            return None
        start_ns = time.monotonic_ns()
        seg = self._head_window(ctx, recs, streams, base)
        built_ns = time.monotonic_ns()
        self.build_ms.append((built_ns - start_ns) / 1e6)
        self.budget.observe(len(recs), (built_ns - start_ns) / 1e9)
        if seg is not None and self.status != "live":  # finalising, failed or stopped meanwhile
            seg.remove()
            if self.status in ("final", "failed"):
                shutil.rmtree(self.dir, ignore_errors=True)  # its folder went before this build ended
            return None
        if seg is not None:
            seg.order = base  # bases are reserved in read order
            with self.lock:
                at = next((i for i, s in enumerate(self.sealed) if s.order > seg.order), len(self.sealed))
                self.sealed.insert(at, seg)
            self._announce("data", seg.lo_ns, seg.hi_ns)
            self.stages.append({"hi_ns": seg.hi_ns, "records": len(recs), "read_ns": read_ns, "start_ns": start_ns,
                                "built_ns": built_ns, "announced_ns": time.monotonic_ns()})
            self._drop_oldest_heads()
        return seg

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
        # builds under way are not waited for: the whole file is ingested now (they drop their result)
        self._pool.shutdown(wait=False, cancel_futures=True)
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
        self._pool.shutdown(wait=True, cancel_futures=True)
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
            segs, self.sealed = list(self.sealed), []
            segs += [r for _, r in self._retired]
            self._retired.clear()
        for s in segs:
            s.close()
        try:
            self._db.close()
        except duckdb.Error:
            pass

    # -- what requests read -----------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        with self.lock:
            return list(self.sealed)

    def head_ns(self) -> int:
        return max((s.hi_ns for s in self.segments()), default=0)

    def slice_detail(self, slice_id: int) -> dict | None:
        return SL.slice_detail(self.segments(), slice_id, self.start_abs_ns or 0)

    def search(self, q: str, offset: int, limit: int) -> dict:
        return SL.search(self.segments(), q, offset, limit, self.start_abs_ns or 0, names=NAMES_TABLE)

