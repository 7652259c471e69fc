"""How live segments are built (server/live_capture.py), and how many records a delta may hold.

A head segment (`build_head`) is what each delta becomes first: the window's records read by the
native importer into an `ArrayBuilder` (the builder's interface kept in memory as Arrow and numpy:
tracks, slices, counters, flows, meta) with the depths ingest gives, a few ms for 50,000 records
and no fixed SQL cost. Its tiles come from numpy (tiles/live.py's HeadArrays) and its detail and
search from its Arrow tables seen through DuckDB views. A sealed segment (`build_segment`) is the
same records, a compaction of several deltas, built off the request path into a DuckDB file:

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
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.formats import record as R
from acceltrace.formats.atrace.window import write_window
from acceltrace.ingest.builder import TIME_LIMIT_NS, TraceBuilder
from acceltrace.ingest.depths import assign_depths
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.ingest.native.atrace import _Ingest as NativeIngest  # the importer's core, fed a WindowReader
from acceltrace.ingest.native.atrace import ingest_atrace
from acceltrace.store import schema
from acceltrace.tiles.head import NAMES_TABLE, HeadArrays, HeadTables, names_table
from acceltrace.tiles.live import unlink_duckdb
from acceltrace.tiles.build import LANE_ORDER

BUILD_TARGET_S = 0.25      # a delta should be built within this: it is most of the event-to-screen time
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


@dataclass
class Head:
    """A head segment as built: its rows for tiles, its tables for detail and search, its facts."""

    arrays: HeadArrays
    tables: HeadTables
    tracks: list[dict]     # tracks in UI order with max_depth (segment_facts' rows)
    names: list[str]       # by local name id
    n_slices: int
    lo_abs: int            # earliest start and latest end, absolute ns
    hi_abs: int
    start_abs: int         # the time origin its relative times use


def build_head(ctx, recs: np.ndarray, streams: np.ndarray, label: str, start_abs_ns: int | None,
               db: duckdb.DuckDBPyConnection) -> Head | None:
    """`recs` as a head segment (in memory), read by the native importer as the window file of the
    same records would be (`WindowReader`: no file written); None when they hold nothing drawable.
    `db`: the capture's in-memory DuckDB (views, flow joins)."""
    b = ArrayBuilder(db)
    try:
        NativeIngest(WindowReader(ctx, recs, streams, label), b, label, None).run(False)
        return b.finish_head(start_abs_ns)
    finally:
        b.abort()


class WindowReader(AtraceReader):
    """What the importer reads of a window (formats/atrace/window.py) without the file: the capture's
    header, metadata, strings and clock pairs, and the window's records grouped by stream as
    write_window groups them (so slice ids are those a sealed segment of the same records gives)."""

    def __init__(self, ctx, recs: np.ndarray, streams: np.ndarray, name: str):
        super().__init__(b"", name=name, header=dict(ctx.header), metadata=list(ctx.metadata), strings=ctx.strings,
                         sync=ctx.sync_pairs(), trailer={})
        if len(streams) and streams.min() != streams.max():
            order = np.argsort(streams, kind="stable")
            recs, streams = recs[order], streams[order]
        self._recs, self._streams = recs, streams

    def iter_events(self, batch_events: int = 1 << 20, check_crc: bool = True):
        for lo in range(0, len(self._recs), batch_events):
            yield self._recs[lo:lo + batch_events], self._streams[lo:lo + batch_events]

    def event_records(self) -> int:
        return len(self._recs)

    def close(self) -> None:
        pass


class ArrayBuilder(TraceBuilder):
    """TraceBuilder's interface (tracks, slices, counters, flows, meta, warnings) kept in memory: what
    the native importer writes goes to Arrow tables, not to a staging DuckDB file, and `finish_head`
    gives the rows a head segment needs: the depths finish() would give (ingest/depths.py on the same
    rows), no LOD tables. Flows (rare in a delta) are joined in a temporary table of a cursor of the
    capture's in-memory DuckDB, made only when an importer asks for `con`."""

    def __init__(self, db: duckdb.DuckDBPyConnection):  # noqa: D107 - no staging file: TraceBuilder's state only
        self.path = None
        self.work_dir = None
        self._db = db
        self._con: duckdb.DuckDBPyConnection | None = None
        self._new_state()
        self._slices: list[pa.Table] = []
        self._counters: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = self._db.cursor()
            self._con.execute(schema.create_sql("flows").replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
        return self._con

    def add_slices(self, batch: pa.Table | dict) -> int:
        table = batch if isinstance(batch, pa.Table) else pa.table(
            {k: v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v) for k, v in batch.items()
             if v is not None})
        n = table.num_rows
        first = self._next_slice
        if n:
            self._slices.append(table.append_column("slice_id", pa.array(np.arange(first, first + n, dtype=np.int64))))
            self._next_slice += n
        return first

    def add_counters(self, track_id, ts, value) -> None:
        if len(ts):
            self._counters.append((np.asarray(track_id, np.int64), np.asarray(ts, np.int64),
                                   np.asarray(value, np.float64)))
            self.n_counters += len(ts)

    def add_flows_sql(self, select_sql: str, params: list | None = None) -> int:
        self.con.register("_slices_staging", self._slices_table())
        try:
            return super().add_flows_sql(select_sql, params)
        finally:
            self.con.unregister("_slices_staging")

    def abort(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def _slices_table(self) -> pa.Table:
        if not self._slices:
            return pa.table({c: pa.array([], pa.int64()) for c in ("slice_id", "track_id", "ts", "dur", "corr_id")})
        return pa.concat_tables(self._slices)

    def finish_head(self, start_abs_ns: int | None) -> Head | None:
        """The head segment of what was added; None when nothing drawable was (names only, say)."""
        lim = TIME_LIMIT_NS
        sl = self._slices_table() if self._slices else None
        if sl is not None:
            ts, dur = sl["ts"].to_numpy(), sl["dur"].to_numpy()
            ok = (ts >= -lim) & (ts <= lim) & (dur <= lim) & (ts <= lim - np.minimum(dur, lim))  # TraceBuilder's bound
            if not ok.all():
                sl = sl.filter(pa.array(ok))
            if not sl.num_rows:
                sl = None
        if self._counters:
            c_track, c_ts, c_val = (np.concatenate(x) for x in zip(*self._counters))
        else:
            c_track, c_ts, c_val = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
        ok = (c_ts >= -lim) & (c_ts <= lim)
        if not ok.all():
            c_track, c_ts, c_val = c_track[ok], c_ts[ok], c_val[ok]
        if sl is None and not len(c_ts):
            return None
        n = sl.num_rows if sl is not None else 0
        if n:
            sid = sl["slice_id"].to_numpy()
            track, ts, dur = sl["track_id"].to_numpy().astype(np.int64), sl["ts"].to_numpy(), sl["dur"].to_numpy()
            depth = self._depths(sid, track, ts, dur)
            names, name_idx = _names(sl["name"])
            nbytes = sl["bytes"].fill_null(0).to_numpy() if "bytes" in sl.column_names else np.zeros(n, np.int64)
        else:
            sid = track = ts = dur = depth = name_idx = nbytes = np.zeros(0, np.int64)
            names = []
        lo = min(x for x in ([int(ts.min())] if n else []) + ([int(c_ts.min())] if len(c_ts) else []))
        hi = max(x for x in ([int((ts + dur).max())] if n else []) + ([int(c_ts.max())] if len(c_ts) else []))
        start = lo if start_abs_ns is None else start_abs_ns
        arrays = HeadArrays.of(track, ts - start, dur, depth, name_idx, sid, nbytes, c_track, c_ts - start, c_val)
        tracks = self._track_facts(track, depth)
        tables = {
            "slices": _slices_view(sl, depth) if n else _empty("slices"),
            "tracks": pa.table({c: pa.array([r[i] for r in self._track_rows], schema.arrow_type(t))
                                for i, (c, t) in enumerate(schema.TABLES["tracks"])}),
            "flows": self._con.sql("SELECT * FROM flows").to_arrow_table() if self._con is not None else _empty("flows"),
            "trace_meta": pa.table({"key": pa.array(list(self.meta), pa.string()),
                                    "value": pa.array(list(self.meta.values()), pa.string())}),
            NAMES_TABLE: names_table(names),
        }
        return Head(arrays, HeadTables(self._db, tables), tracks, names, n, lo, hi, start)

    def _depths(self, sid: np.ndarray, track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
        """The depths TraceBuilder.finish gives these slices: 0 for all when no slice of a track starts
        before the one before it ended (the usual flat track, checked with one sort by track), else
        ingest/depths.py on the same rows."""
        flat = _flat(track, ts, dur)
        if flat:
            return np.zeros(len(sid), np.int64)
        cur = self._db.cursor()
        try:
            cur.register("_head_rows", pa.table({"slice_id": sid, "track_id": track.astype(np.int32), "ts": ts,
                                                 "dur": dur}))
            cur.execute("CREATE TEMP TABLE _slices_staging AS SELECT slice_id, track_id, ts, dur,"
                        " NULL::INTEGER AS depth FROM _head_rows")
            got = assign_depths(cur)
        finally:
            cur.close()
        pos = np.empty(int(sid.max()) + 1, np.int64)
        pos[sid] = np.arange(len(sid))
        depth = np.zeros(len(sid), np.int64)
        depth[pos[got["slice_id"].to_numpy()]] = got["depth"].to_numpy()
        return depth

    def _track_facts(self, track: np.ndarray, depth: np.ndarray) -> list[dict]:
        """Every track with its deepest slice depth, in UI order (tiles/layout.py's tracks_in_ui_order)."""
        deepest = np.zeros(len(self._track_rows), np.int64)
        if len(track):
            np.maximum.at(deepest, track, depth)
        cols = schema.column_names("tracks")
        rows = [{**dict(zip(cols, r)), "max_depth": int(deepest[r[0]])} for r in self._track_rows]
        rank = {lane: i for i, lane in enumerate(LANE_ORDER)}
        return sorted(rows, key=lambda t: (rank.get(t["lane"], len(LANE_ORDER)), t["group_name"], t["sort_key"],
                                           t["track_id"]))


def _flat(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> bool:
    """Whether ingest/depths.py's sweep gives depth 0 to every slice: per track in time order, each
    slice starts at or after the end of the one before it and later than its start (two starting at
    the same time nest: longer first, an instant after a slice of its time)."""
    if len(ts) < 2:
        return True
    if (ts[1:] >= ts[:-1]).all():  # time order kept within a track (a radix sort of few track ids)
        o = np.argsort(track.astype(np.int16) if track.max() < (1 << 15) else track, kind="stable")
    else:
        o = np.lexsort((ts, track))
    t, s = track[o], ts[o]
    e = s + dur[o]
    return bool(((t[1:] != t[:-1]) | ((s[1:] >= e[:-1]) & (s[1:] > s[:-1]))).all())




def _empty(table: str) -> pa.Table:
    return pa.table({c: pa.array([], schema.arrow_type(t)) for c, t in schema.TABLES[table]})


def _names(col: pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """The distinct names of a dictionary (or string) column, sorted, and each row's index into them."""
    texts, idx = [], []
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            ind = chunk.indices.to_numpy(zero_copy_only=False)
            present = np.zeros(len(chunk.dictionary), bool)  # a window's strings: few; its rows: many
            present[ind] = True
            used = np.flatnonzero(present)
            inv = (np.cumsum(present) - 1)[ind]
            texts.append(chunk.dictionary.take(pa.array(used)).to_pylist())
        else:
            used_t, inv = np.unique(np.asarray(chunk.to_pylist(), dtype=object), return_inverse=True)
            texts.append(list(used_t))
        idx.append(inv.reshape(-1))
    names = sorted(set().union(*texts)) if texts else []
    at = {t: i for i, t in enumerate(names)}
    out = [np.asarray([at[t] for t in tx], np.int64)[ix] for tx, ix in zip(texts, idx)]
    return names, np.concatenate(out) if out else np.zeros(0, np.int64)


def _slices_view(sl: pa.Table, depth: np.ndarray) -> pa.Table:
    """The slices table (the store's columns, in order) of a head segment, strings left as dictionaries."""
    cols = {}
    for c, t in schema.TABLES["slices"]:
        if c == "depth":
            cols[c] = pa.array(depth.astype(np.int32))
        elif c in sl.column_names:
            cols[c] = sl[c]
        else:
            cols[c] = pa.nulls(sl.num_rows, schema.arrow_type(t))
    return pa.table(cols)


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

    def add_span(self, lo: int, hi: int) -> None:
        """A span of its own (absolute ns): head segments that left the live view; merged in time order."""
        with self._lock:
            spans = sorted(self.spans + [[lo, hi]])
            out = [spans[0]]
            for a, b in spans[1:]:
                if a <= out[-1][1]:
                    out[-1][1] = max(out[-1][1], b)
                else:
                    out.append([a, b])
            self.spans = out[-self.keep:]

    def relative(self, origin_ns: int) -> list[list[int]]:
        with self._lock:
            return [[lo - origin_ns, hi - origin_ns] for lo, hi in self.spans]
