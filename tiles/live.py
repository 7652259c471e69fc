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

A head segment (in memory) answers its part from numpy instead: tiles/head.py.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import numpy as np

from acceltrace.tiles.build import GROUP_MAX_TRACKS, LANE_ORDER, TILE_BUCKETS_LOG2
from acceltrace.tiles.head import HeadArrays, head_part
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
    head: HeadArrays | None = None  # an in-memory head segment: its rows (con is then a HeadTables)
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
