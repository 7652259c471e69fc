"""How one live segment is built (server/live_capture.py), and how many records a delta may hold.

A segment is a window file (formats/atrace/window.py: the capture's header, metadata, strings and clock
pairs plus some of its records) ingested with the native importer and the builder into a small
DuckDB file with its LOD tables, the capture's start as its time origin. A build costs a fixed part
(~40 SQL statements, ~0.1-0.2 s) plus ~2-3 us per record on one core; `DeltaBudget` learns that cost
from the builds so far and sizes the next delta so that it is built within BUILD_TARGET_S: a capture
faster than the server can build shows the newest records of each read and counts the rest as not
drawn live (the finished trace has every one).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from acceltrace.formats import record as R
from acceltrace.formats.atrace.window import write_window
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.native.atrace import ingest_atrace
from acceltrace.tiles.live import unlink_duckdb

BUILD_TARGET_S = 0.3       # a delta should be built within this: it is most of the event-to-screen time
MIN_DELTA_RECORDS = 50_000  # ... but never fewer (a loaded machine must not drop a modest rate)
MEASURED_RECORDS = 20_000   # builds at least this big teach the budget


def build_segment(ctx, recs: np.ndarray, streams: np.ndarray, seg_path: Path, label: str,
                  start_abs_ns: int | None) -> bool:
    """Write `recs` as the segment file `seg_path` (atomically); False when they hold nothing drawable."""
    win = seg_path.with_suffix(".atrace")
    tmp = seg_path.with_suffix(".tmp")
    write_window(ctx, recs, streams, win)
    b = TraceBuilder(tmp, memory_limit="512MB", threads=1)
    try:
        ingest_atrace(win, b, label=label)
        if b.n_slices == 0 and b.n_counters == 0:  # nothing drawable yet (names, unmapped device events)
            b.abort()
            unlink_duckdb(tmp)
            return False
        b.finish("atrace", label, start_ns=start_abs_ns)  # no views precompute: that is a published trace's
    except BaseException:
        b.abort()
        unlink_duckdb(tmp)
        raise
    finally:
        win.unlink(missing_ok=True)
    os.replace(tmp, seg_path)
    return True


def trim_oldest(pending: list[tuple[np.ndarray, np.ndarray]], limit: int) -> list[np.ndarray]:
    """Cut the oldest records of `pending` (reads of (records, streams), in read order) until at most
    `limit` are left, whole reads first; returns the records cut."""
    cut_off = []
    while (excess := sum(len(r) for r, _ in pending) - limit) > 0:
        r, s = pending[0]
        cut = min(len(r), excess)
        pending[0] = (r[cut:], s[cut:])
        if cut == len(r):
            pending.pop(0)
        cut_off.append(r[:cut])
    return cut_off


class DeltaBudget:
    """The most records the next delta may hold: BUILD_TARGET_S over the build cost per record seen.

    The cost per record is a moving average of build time / records over the builds of at least
    MEASURED_RECORDS (smaller ones are mostly fixed cost and a capture that small is never behind).
    It includes the fixed part, so the size this gives converges to the one built in BUILD_TARGET_S.
    Until such a build was measured, the floor holds (a first build of the ceiling's size takes seconds).
    """

    def __init__(self, ceiling: int, target_s: float = BUILD_TARGET_S):
        self.ceiling, self.target_s = ceiling, target_s
        self.per_record_s: float | None = None

    def observe(self, n_records: int, build_s: float) -> None:
        if n_records >= MEASURED_RECORDS:
            per = build_s / n_records
            self.per_record_s = per if self.per_record_s is None else 0.6 * self.per_record_s + 0.4 * per

    def records(self) -> int:
        if not self.per_record_s:
            return min(self.ceiling, MIN_DELTA_RECORDS)
        return int(max(MIN_DELTA_RECORDS, min(self.ceiling, self.target_s / self.per_record_s)))


class Gaps:
    """The time spans a server behind left undrawn: the host-clock span of each run of records it
    did not build, merged where they touch, the newest `keep`. [lo, hi] absolute ns."""

    def __init__(self, keep: int):
        self.keep = keep
        self.spans: list[list[int]] = []
        self._lock = threading.Lock()

    def add(self, dropped: np.ndarray) -> None:
        ev = dropped[np.isin(dropped["kind"], R.EVENT_KINDS) & (dropped["clock"] == R.HOST_CLOCK)]
        if not len(ev):
            return
        ends = np.where(ev["kind"] == R.COMPLETE, ev["ts"] + np.maximum(ev["dur"], 0), ev["ts"])
        lo, hi = int(ev["ts"].min()), int(ends.max())
        with self._lock:
            if self.spans and lo <= self.spans[-1][1]:
                self.spans[-1][1] = max(self.spans[-1][1], hi)
            else:
                self.spans.append([lo, hi])
            del self.spans[:-self.keep]

    def relative(self, origin_ns: int) -> list[list[int]]:
        with self._lock:
            return [[lo - origin_ns, hi - origin_ns] for lo, hi in self.spans]
