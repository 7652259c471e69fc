"""Tiles of a live trace: one tile composed from the segments it overlaps (server/live_capture.py).

Each segment is a small published-format DuckDB file with its own level-of-detail tables, built with
the capture's start as its time origin, so tile (level, index) means the same window in every
segment. A segment's part of a tile is the ordinary tile queries (tiles/query.py) run on that
segment, with its track, slice and name ids mapped to the capture's global ones; parts of sealed
segments never change and are cached by segment key. Composing concatenates the parts of the
group's tracks and re-reduces the per-bucket sections where two parts share a bucket (counts and
busy time add, the longest slice and the first instant win, counter min/max/first/last combine),
all with numpy. A level above a segment's pyramid aggregates the segment's own rows instead (the
segment is small: that is bounded by its size).

A head segment (`HeadArrays`, built in memory by server/live_build.py: no DuckDB file, no LOD tables)
answers its part of a tile from numpy columns with the same semantics as a sealed segment's LOD
queries: slices of class >= level exact, shorter ones merged per (track, bucket, depth) with their
longest, instants per (track, bucket, depth) with their first, counter samples per (track, bucket).
Its parts are cached as a sealed segment's (a head segment never changes either; it is replaced).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import numpy as np

from acceltrace.tiles.build import GROUP_MAX_TRACKS, LANE_ORDER, TILE_BUCKETS_LOG2
from acceltrace.tiles.layout import group_counts, name_dictionary, tracks_in_ui_order
from acceltrace.tiles.query import COLUMNS, MAX_LEVEL, LodInfo, _queries, encode_tile

PART_CACHE_BYTES = 128 << 20
_ID_COLS = {("slices", "id"), ("merged", "longest_id"), ("instants", "id")}
_NAME_COLS = {("slices", "name"), ("merged", "longest_name"), ("instants", "name")}


@dataclass
class Segment:
    """One segment opened read-only, with the maps from its ids to the capture's."""

    key: str                 # unique per segment file: a file never changes, so neither do its parts
    con: duckdb.DuckDBPyConnection
    info: LodInfo
    track_map: np.ndarray    # local track_id -> global track id
    name_map: np.ndarray     # local name_id -> global name id
    slice_base: int          # global slice id of its slice 0
    n_slices: int
    lo_ns: int               # earliest start and latest end, ns relative to the capture's start
    hi_ns: int
    sealed: bool = True
    empty: frozenset = frozenset()  # sections it has no rows for (their queries are skipped)
    order: int = 0                  # read order of its records (segments are kept in this order)
    head: "HeadArrays | None" = None  # an in-memory head segment: its rows (con is then a HeadTables)
    records: int = 0                # records it was built from

    def overlaps(self, t0: int, t1: int) -> bool:
        return self.lo_ns < t1 and self.hi_ns >= t0

    def remove(self) -> None:
        """Close it and remove its file (a compaction replaced it); a request still holding a
        cursor of it keeps the DuckDB instance until that cursor is done."""
        if self.head is not None:  # in memory: nothing on disk
            self.close()
            return
        path = None
        try:
            path = Path(self.con.execute("PRAGMA database_list").fetchone()[2])
        except duckdb.Error:
            pass
        self.close()
        if path is not None:
            unlink_duckdb(path)

    def close(self) -> None:
        try:
            self.con.close()
        except duckdb.Error:
            pass


def unlink_duckdb(path: Path) -> None:
    """A DuckDB file and its write-ahead log."""
    for p in (path, Path(str(path) + ".wal")):
        p.unlink(missing_ok=True)


def segment_facts(con: duckdb.DuckDBPyConnection) -> tuple[list[dict], list[str], int, int, int, frozenset]:
    """(track rows with max_depth, names by name_id, slice count, earliest start, latest end, sections
    without rows) of a segment; times absolute."""
    tracks = tracks_in_ui_order(con)
    names = name_dictionary(con, 1 << 40)
    n, lo, hi = con.execute(
        "SELECT (SELECT count(*) FROM slices), least((SELECT min(ts) FROM slices), (SELECT min(ts) FROM counters)),"
        " greatest((SELECT max(ts + dur) FROM slices), (SELECT max(ts) FROM counters))").fetchone()
    totals = [sum(c[k] for c in group_counts(con).values()) for k in range(3)]
    empty = {name for name, total in zip((("slices", "merged"), ("instants",), ("counters",)), totals) if not total}
    return tracks, names, int(n), int(lo), int(hi), frozenset(x for names_ in empty for x in names_)


class PartCache:
    """Parts of sealed segments by (segment key, level, index); least recently used out beyond a budget."""

    def __init__(self, max_bytes: int = PART_CACHE_BYTES):
        self.max_bytes, self.bytes = max_bytes, 0
        self._d: OrderedDict[tuple, tuple[dict, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple):
        with self._lock:
            v = self._d.get(key)
            if v is None:
                self.misses += 1
                return None
            self.hits += 1
            self._d.move_to_end(key)
            return v[0]

    def put(self, key: tuple, part: dict) -> None:
        size = sum(a.nbytes for cols in part.values() for a in cols)
        with self._lock:
            if key in self._d:
                return
            self._d[key] = (part, size)
            self.bytes += size
            while self.bytes > self.max_bytes and self._d:
                _, (_, s) = self._d.popitem(last=False)
                self.bytes -= s

    def drop(self, seg_key: str) -> None:
        with self._lock:
            for k in [k for k in self._d if k[0] == seg_key]:
                self.bytes -= self._d.pop(k)[1]


def segment_part(seg: Segment, level: int, index: int) -> dict[str, list[np.ndarray]]:
    """The segment's rows of tile (level, index) for all its tracks, in global ids."""
    if seg.head is not None:
        return {section: _to_global(seg, section, cols) for section, cols in head_part(seg.head, level, index).items()}
    info = seg.info
    if level > info.max_level:  # above this segment's pyramid: aggregate its own (bounded) rows
        top = MAX_LEVEL + 1
        info = replace(info, base_level=top, instant_base_level=top, counter_base_level=top)
    cur = seg.con.cursor()
    try:
        out = {}
        for section, sql in _queries(info, level, index, None).items():
            if section in seg.empty:
                out[section] = [np.zeros(0, np.float64 if dt == "f64" else np.int64) for _, dt in COLUMNS[section]]
                continue
            res = cur.execute(sql).fetchnumpy()
            out[section] = _to_global(seg, section, [np.asarray(v) for v in res.values()])
        return out
    finally:
        cur.close()


def _to_global(seg: Segment, section: str, cols: list[np.ndarray]) -> list[np.ndarray]:
    """A section's columns with the segment's track, slice and name ids made the capture's."""
    if len(cols[0]):
        cols[0] = seg.track_map[cols[0].astype(np.int64)]
        for i, (name, _) in enumerate(COLUMNS[section]):
            if (section, name) in _ID_COLS:
                cols[i] = cols[i].astype(np.float64) + seg.slice_base
            elif (section, name) in _NAME_COLS:
                cols[i] = seg.name_map[cols[i].astype(np.int64)]
    return cols


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


def compose_tile(segments: list[Segment], cache: PartCache, level: int, index: int, tracks: np.ndarray,
                 group_name: str | None, names: list[str]) -> bytes:
    """The encoded tile (docs/api.md) of the global `tracks` of one group over every segment."""
    t0 = index << (level + TILE_BUCKETS_LOG2)
    t1 = (index + 1) << (level + TILE_BUCKETS_LOG2)
    parts = []
    for seg in segments:
        if not seg.overlaps(t0, t1):
            continue
        key = (seg.key, level, index)
        part = cache.get(key) if seg.sealed else None
        if part is None:
            part = segment_part(seg, level, index)
            if seg.sealed:
                cache.put(key, part)
        parts.append(part)
    arrays = {s: _merge_section(s, [p[s] for p in parts], tracks) for s in COLUMNS}
    return encode_tile(arrays, level, index, group_name, lambda ids: [names[i] for i in ids.tolist()])


def _merge_section(section: str, parts: list[list[np.ndarray]], tracks: np.ndarray) -> list[np.ndarray]:
    cols_meta = COLUMNS[section]
    kept = []
    for order, cols in enumerate(parts):
        if not len(cols[0]):
            continue
        m = np.isin(cols[0], tracks)
        if m.any():
            kept.append([c[m] for c in cols] + [np.full(int(m.sum()), order, np.int32)])
    if not kept:
        return [np.zeros(0, np.float64 if dt == "f64" else np.int64) for _, dt in cols_meta]
    cols = [np.concatenate([k[i] for k in kept]) for i in range(len(cols_meta) + 1)]
    part_no = cols.pop()
    c = dict(zip([n for n, _ in cols_meta], cols))
    if section == "slices":
        o = np.lexsort((c["depth"], c["ts"], c["track"]))
        return [col[o] for col in cols]
    if len(kept) == 1:  # one part: already reduced and ordered
        return cols
    if section == "merged":
        o = np.lexsort((-c["longest_dur"], c["depth"], c["bucket"], c["track"]))
        keys = ("track", "bucket", "depth")
        sums = ("count", "busy_ns", "bytes")
    elif section == "instants":
        o = np.lexsort((c["ts"], c["depth"], c["bucket"], c["track"]))
        keys, sums = ("track", "bucket", "depth"), ("count",)
    else:  # counters: parts are in time order
        o = np.lexsort((part_no, c["bucket"], c["track"]))
        keys, sums = ("track", "bucket"), ("count",)
    c = {k: v[o] for k, v in c.items()}
    change = np.zeros(len(o), bool)
    change[0] = True
    for k in keys:
        change[1:] |= c[k][1:] != c[k][:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], len(o)) - 1
    out = {k: v[starts] for k, v in c.items()}  # firsts: keys, the longest slice, the first instant
    for k in sums:
        out[k] = np.add.reduceat(c[k], starts)
    if section == "counters":
        out["min"] = np.minimum.reduceat(c["min"], starts)
        out["max"] = np.maximum.reduceat(c["max"], starts)
        out["last"] = c["last"][ends]
    return [out[n] for n, _ in cols_meta]


@dataclass
class LiveLayout:
    """The capture's tracks (global ids, first seen first) and their tile groups.

    A track keeps its group for the whole capture: a new track joins the last group of its lane and
    group name while that has room, else opens a new group, so tiles already fetched stay valid
    for the tracks they hold; `version` changes whenever a track or group is added.
    """

    tracks: list[dict] = field(default_factory=list)
    by_key: dict[tuple, int] = field(default_factory=dict)
    groups: list[dict] = field(default_factory=list)
    version: int = 0

    KEY = ("lane", "group_name", "name", "device", "process", "thread", "unit")

    def add(self, rows: list[dict]) -> np.ndarray:
        """Global ids of a segment's track rows (dicts of the tracks table's columns plus max_depth), in
        their order; unknown tracks are added, known ones keep their id and widen their max_depth."""
        out = np.zeros(len(rows), np.int64)
        for i, r in enumerate(rows):
            key = tuple(r.get(k) for k in self.KEY)
            gid = self.by_key.get(key)
            if gid is None:
                gid = len(self.tracks)
                self.by_key[key] = gid
                grp = self._group_for(r["lane"], r["group_name"], gid)
                self.tracks.append({**{k: r.get(k) for k in self.KEY}, "track_id": gid, "sort_key": r.get("sort_key"),
                                    "max_depth": int(r.get("max_depth") or 0), "grp": grp})
                self.version += 1
            else:
                t = self.tracks[gid]
                d = int(r.get("max_depth") or 0)
                if d > t["max_depth"]:
                    t["max_depth"] = d
                    self.version += 1
            out[i] = gid
        return out

    def _group_for(self, lane: str, group_name: str, gid: int) -> int:
        for g in reversed(self.groups):
            if g["lane"] == lane and g["group_name"] == group_name:
                if len(g["track_ids"]) < GROUP_MAX_TRACKS:
                    g["track_ids"].append(gid)
                    return g["grp"]
                break
        grp = len(self.groups)
        self.groups.append({"grp": grp, "lane": lane, "group_name": group_name, "track_ids": [gid]})
        return grp

    def ui_order(self) -> list[dict]:
        """Tracks as the timeline stacks them (lane, group name, sort key, id: tiles/build.py's order)."""
        rank = {lane: i for i, lane in enumerate(LANE_ORDER)}
        return sorted(self.tracks, key=lambda t: (rank.get(t["lane"], len(LANE_ORDER)), t["group_name"] or "",
                                                  t["sort_key"] if t["sort_key"] is not None else 0, t["track_id"]))

    def group_tracks(self, grp: int) -> np.ndarray:
        return np.asarray(sorted(self.groups[grp]["track_ids"]), np.int64)
