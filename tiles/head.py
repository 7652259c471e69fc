"""A live trace's head segments (server/live_build.py builds them in memory): their rows as numpy
columns and their part of a tile (tiles/live.py composes it with the sealed segments' parts).

A head segment (`HeadArrays`, built in memory by server/live_build.py: no DuckDB file, no LOD tables)
answers its part of a tile from numpy columns with the same semantics as a sealed segment's LOD
queries: slices of class >= level exact, shorter ones merged per (track, bucket, depth) with their
longest, instants per (track, bucket, depth) with their first, counter samples per (track, bucket).
Its parts are cached as a sealed segment's (a head segment never changes either; it is replaced).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from acceltrace.tiles.build import TILE_BUCKETS_LOG2


NAMES_TABLE = "lod_names"  # a head's name dictionary, under the name sealed segments give it


def names_table(names: list[str]):
    """The head's name dictionary (name_id -> name) as the table the slice queries join."""
    import pyarrow as pa

    return pa.table({"name_id": pa.array(np.arange(len(names), dtype=np.int32)), "name": pa.array(names, pa.string())})


def dur_class(dur: np.ndarray) -> np.ndarray:
    """floor(log2(dur)) exactly for dur > 0 (tiles/build.py's dur_class_sql; the float log2 alone rounds
    up just below powers of two)."""
    d = np.asarray(dur, np.int64)
    c = np.floor(np.log2(d.astype(np.float64))).astype(np.int64)
    c -= np.left_shift(np.int64(1), c) > d
    c += np.left_shift(np.int64(1), c + 1) <= d
    return c


@dataclass(frozen=True)
class HeadArrays:
    """A head segment's rows as a tile needs them: times relative to the capture's start, the
    segment's own track, name (index into its sorted names) and slice ids. Slices with dur > 0
    (`s_*`), instants (`i_*`) and counter samples (`c_*`), each sorted by time."""

    s_ts: np.ndarray
    s_dur: np.ndarray
    s_track: np.ndarray
    s_depth: np.ndarray
    s_name: np.ndarray
    s_id: np.ndarray
    s_bytes: np.ndarray
    s_cls: np.ndarray
    i_ts: np.ndarray
    i_track: np.ndarray
    i_depth: np.ndarray
    i_name: np.ndarray
    i_id: np.ndarray
    c_ts: np.ndarray
    c_track: np.ndarray
    c_value: np.ndarray

    @classmethod
    def of(cls, track, ts, dur, depth, name, slice_id, nbytes, c_track, c_ts, c_value) -> "HeadArrays":
        """From slice columns (ts relative, bytes 0 where none) and counter columns."""
        track, ts, dur = (np.asarray(a, np.int64) for a in (track, ts, dur))
        depth, name, slice_id, nbytes = (np.asarray(a, np.int64) for a in (depth, name, slice_id, nbytes))
        long_ = dur > 0
        o, i = _by_time(ts, long_), _by_time(ts, ~long_)
        c_ts = np.asarray(c_ts, np.int64)
        c = _by_time(c_ts, None)

        def take(a, rows):
            return a if rows is None else a[rows]

        s_dur = take(dur, o)
        return cls(take(ts, o), s_dur, take(track, o), take(depth, o), take(name, o), take(slice_id, o), take(nbytes, o),
                   dur_class(s_dur), take(ts, i), take(track, i), take(depth, i), take(name, i), take(slice_id, i),
                   take(c_ts, c), take(np.asarray(c_track, np.int64), c), take(np.asarray(c_value, np.float64), c))

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in self.__dataclass_fields__)

    @property
    def empty(self) -> frozenset:
        """Sections without rows (as segment_facts says of a sealed segment)."""
        out = set()
        if not len(self.s_ts):
            out |= {"slices", "merged"}
        if not len(self.i_ts):
            out.add("instants")
        if not len(self.c_ts):
            out.add("counters")
        return frozenset(out)


def _by_time(ts: np.ndarray, mask: np.ndarray | None) -> np.ndarray | None:
    """The rows of `mask` (None: all) in time order (stable); None when that is all rows as they are
    (records mostly come in time order: no sort, no copy)."""
    if mask is None or mask.all():
        if len(ts) < 2 or (ts[1:] >= ts[:-1]).all():
            return None
        return np.argsort(ts, kind="stable")
    rows = np.flatnonzero(mask)
    t = ts[rows]
    if len(t) < 2 or (t[1:] >= t[:-1]).all():
        return rows
    return rows[np.argsort(t, kind="stable")]


def _runs(keys: list[np.ndarray], n: int) -> np.ndarray:
    """Start of each run of equal keys (arrays sorted by them)."""
    change = np.zeros(n, bool)
    if n:
        change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def head_part(h: HeadArrays, level: int, index: int) -> dict[str, list[np.ndarray]]:
    """A head segment's rows of tile (level, index) in its local ids, COLUMNS order, rows ordered as
    the sealed segment's queries order them (tiles/query.py's _queries: the same rows and values)."""
    L = level
    t0, t1 = index << (L + TILE_BUCKETS_LOG2), (index + 1) << (L + TILE_BUCKETS_LOG2)
    b0 = index << TILE_BUCKETS_LOG2
    f64 = np.float64
    out = {}
    # long slices: class >= L, overlapping [t0, t1), starting at or after the capture's start
    max_dur = int(h.s_dur.max()) if len(h.s_dur) else 0
    lo, hi = np.searchsorted(h.s_ts, [t0 - max_dur, t1], side="left")
    r = np.arange(lo, hi)
    r = r[(h.s_cls[r] >= L) & (h.s_ts[r] + h.s_dur[r] > t0) & (h.s_ts[r] >= 0)]
    r = r[np.lexsort((h.s_depth[r], h.s_ts[r], h.s_track[r]))]
    out["slices"] = [h.s_track[r], h.s_id[r].astype(f64), h.s_ts[r].astype(f64), h.s_dur[r].astype(f64),
                     h.s_depth[r], h.s_name[r], h.s_bytes[r].astype(f64)]
    # short slices merged per (track, bucket, depth): count, busy, bytes, the longest (ties: smaller id)
    lo, hi = np.searchsorted(h.s_ts, [t0, t1], side="left")
    r = np.arange(lo, hi)
    r = r[h.s_cls[r] < L]
    b = (h.s_ts[r] >> L) - b0
    o = np.lexsort((h.s_id[r], -h.s_dur[r], h.s_depth[r], b, h.s_track[r]))
    r, b = r[o], b[o]
    st = _runs([h.s_track[r], b, h.s_depth[r]], len(r))
    first = r[st]
    out["merged"] = [h.s_track[first], b[st], h.s_depth[first], np.diff(np.append(st, len(r))),
                     np.add.reduceat(h.s_dur[r], st).astype(f64) if len(r) else np.zeros(0, f64),
                     np.add.reduceat(h.s_bytes[r], st).astype(f64) if len(r) else np.zeros(0, f64),
                     h.s_id[first].astype(f64), h.s_dur[first].astype(f64), h.s_name[first]]
    # instants per (track, bucket, depth): count and the first (by ts, then id)
    lo, hi = np.searchsorted(h.i_ts, [t0, t1], side="left")
    r = np.arange(lo, hi)
    b = (h.i_ts[r] >> L) - b0
    o = np.lexsort((h.i_id[r], h.i_ts[r], h.i_depth[r], b, h.i_track[r]))
    r, b = r[o], b[o]
    st = _runs([h.i_track[r], b, h.i_depth[r]], len(r))
    first = r[st]
    out["instants"] = [h.i_track[first], b[st], h.i_depth[first], np.diff(np.append(st, len(r))),
                       h.i_id[first].astype(f64), h.i_ts[first].astype(f64), h.i_name[first]]
    # counter samples per (track, bucket): count, min, max, the first and last value by time
    lo, hi = np.searchsorted(h.c_ts, [t0, t1], side="left")
    r = np.arange(lo, hi)
    b = (h.c_ts[r] >> L) - b0
    o = np.lexsort((b, h.c_track[r]))  # stable: time order kept within a bucket
    r, b = r[o], b[o]
    st = _runs([h.c_track[r], b], len(r))
    last = np.append(st[1:], len(r))[:len(st)] - 1
    v = h.c_value[r]
    out["counters"] = [h.c_track[r[st]], b[st], np.diff(np.append(st, len(r))),
                       np.minimum.reduceat(v, st) if len(r) else np.zeros(0, f64),
                       np.maximum.reduceat(v, st) if len(r) else np.zeros(0, f64), v[st], v[last]]
    return out


class HeadTables:
    """What store/live.py's queries read of a head segment (slices, tracks, flows, trace_meta and
    lod_names), Arrow tables registered as views on a cursor of the capture's in-memory DuckDB: the
    `con` of a head segment (cursor(), close())."""

    def __init__(self, db: duckdb.DuckDBPyConnection, tables: dict):
        self.db, self.tables = db, tables

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cur = self.db.cursor()
        for name, table in self.tables.items():
            cur.register(name, table)
        return cur

    def close(self) -> None:
        self.tables = {}
