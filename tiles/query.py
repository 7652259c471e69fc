"""Tiles from the level-of-detail tables (tiles/build.py), encoded as the typed-array binary of docs/api.md.

Every query reads a bounded range: the long slices of each duration class from a ts range
that looks back no further than the class's length, the merged short slices from one pyramid
level (or, below the pyramid's base, from the tile's own window of raw slices), and the same
for instants and counters. Nothing here loops over events in Python.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Callable

import duckdb
import numpy as np

from acceltrace.tiles.build import FIRST_KEY, LONGEST_KEY, TILE_BUCKETS_LOG2, key_dur_sql, key_id_sql

TILE_FORMAT_VERSION = 2
MAX_LEVEL = 62
CLASS_BAND = 4
# A paged tile carries the exact rows of DEPTH_PAGE depths of its group's tracks (page p: depths
# [p*DEPTH_PAGE, (p+1)*DEPTH_PAGE)) and, per track, the coverage of every deeper depth (the "fold"
# sections), so its size is bounded by tracks x (DEPTH_PAGE + 1) x buckets, whatever the depth
# or the size of the trace (docs/api.md "Depth pages").
DEPTH_PAGE = 4
MAX_PAGE = (1 << 15) // DEPTH_PAGE

# (section, column, dtype) in the order they are written; docs/api.md documents each.
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "slices": [("track", "u32"), ("id", "f64"), ("ts", "f64"), ("dur", "f64"), ("depth", "u16"),
               ("name", "u32"), ("bytes", "f64")],
    "merged": [("track", "u32"), ("bucket", "u16"), ("depth", "u16"), ("count", "u32"), ("busy_ns", "f64"),
               ("bytes", "f64"), ("longest_id", "f64"), ("longest_dur", "f64"), ("longest_name", "u32")],
    "instants": [("track", "u32"), ("bucket", "u16"), ("depth", "u16"), ("count", "u32"), ("id", "f64"),
                 ("ts", "f64"), ("name", "u32")],
    "counters": [("track", "u32"), ("bucket", "u16"), ("count", "u32"), ("min", "f64"), ("max", "f64"),
                 ("first", "f64"), ("last", "f64")],
}
# the fold sections of a paged tile: per track, the union of the time covered by every deeper slice
# (exact ones and merged buckets) as runs, and one tick per bucket holding deeper instants
FOLD_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "fold": [("track", "u32"), ("start", "f64"), ("end", "f64")],
    "fold_instants": [("track", "u32"), ("ts", "f64")],
}
# f64 columns that hold integers (ns, ids, byte counts): sent as base + u8/u16/u32 when their range fits
_INT_F64 = {("slices", "id"), ("slices", "ts"), ("slices", "dur"), ("slices", "bytes"),
            ("merged", "busy_ns"), ("merged", "bytes"), ("merged", "longest_id"), ("merged", "longest_dur"),
            ("instants", "id"), ("instants", "ts"), ("fold", "start"), ("fold", "end"), ("fold_instants", "ts")}
_NP = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "i32": np.int32, "f64": np.float64}
# columns holding name ids, remapped to indices into the tile's string table
_NAME_COLS = {("slices", "name"), ("merged", "longest_name"), ("instants", "name")}


@dataclass(frozen=True)
class LodInfo:
    start_ns: int
    duration_ns: int
    max_level: int
    base_level: int
    instant_base_level: int
    counter_base_level: int
    max_cls: int
    chunk_log2: int

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> "LodInfo":
        kv = dict(con.execute("SELECT key, value FROM lod_info").fetchall())
        return cls(**{f: int(kv[f]) for f in cls.__dataclass_fields__})


def _grp_filter(grp: int | None) -> str:
    return "" if grp is None else f"grp = {int(grp)} AND "


def _chunks(info: LodInfo, lo_ns: int, hi_ns: int) -> str:
    """The chunk range holding starts in [lo_ns, hi_ns) (lod_slices' leading order key)."""
    return f"chunk BETWEEN {max(0, lo_ns) >> info.chunk_log2} AND {max(0, hi_ns - 1) >> info.chunk_log2} AND "


def _long_branches(info: LodInfo, L: int, t0: int) -> list[tuple[int, int, int]]:
    """(lowest class, highest class, look-back start) of each long-slice scan of a level-L tile at t0.

    One scan for the classes whose look-back (2^(c+1)) fits in one chunk of lod_slices (the chunk
    range it reads is then one or two chunks: the window's own), and one per band of CLASS_BAND
    longer classes, each looking back by its longest class's length: a class-c slice is >= 2^c
    long, so per track and depth a band's look-back holds at most 2^CLASS_BAND of them."""
    branches = []
    if L <= info.max_cls:
        near_top = min(info.max_cls, max(L, info.chunk_log2 - 1, L + TILE_BUCKETS_LOG2 - 1))
        branches.append((L, near_top, t0 - (1 << (near_top + 1))))
        for c in range(near_top + 1, info.max_cls + 1, CLASS_BAND):
            hi = min(info.max_cls, c + CLASS_BAND - 1)
            branches.append((c, hi, t0 - (1 << (hi + 1))))
    return branches


def _depth_sql(depths: tuple[int, int] | None) -> str:
    return "" if depths is None else f"depth BETWEEN {int(depths[0])} AND {int(depths[1])} AND "


def _queries(info: LodInfo, level: int, index: int, grp: int | None,
             depths: tuple[int, int] | None = None, order: bool = True) -> dict[str, str]:
    """One SQL per section; all bounds are integers computed here (no user text reaches SQL).
    `depths` (lo, hi): only the slice and instant rows of those depths (a depth page); None: all.
    `order`: rows in the encoding's order (by track, then ts or bucket); without it the caller
    sorts (_section_arrays does, in numpy: DuckDB's ORDER BY was half of a coarse tile's query)."""
    L = level
    t0 = index << (L + TILE_BUCKETS_LOG2)
    t1 = (index + 1) << (L + TILE_BUCKETS_LOG2)
    b0 = index << TILE_BUCKETS_LOG2
    g = _grp_filter(grp)
    d = _depth_sql(depths)
    out = {}

    branches = _long_branches(info, L, t0)
    cols = "track_id, slice_id::DOUBLE, (ts)::DOUBLE, dur::DOUBLE, depth, name_id, coalesce(bytes, 0)::DOUBLE"
    if branches:
        out["slices"] = " UNION ALL ".join(
            f"SELECT {cols} FROM lod_slices WHERE {g}{_chunks(info, look, t1)}{d}cls BETWEEN {lo} AND {hi}"
            f" AND ts >= {max(0, look)} AND ts < {t1} AND ts + dur > {t0}"
            for lo, hi, look in branches
        ) + (" ORDER BY 1, 3, 5" if order else "")
    else:
        out["slices"] = f"SELECT {cols} FROM lod_slices WHERE false"

    if L >= info.base_level:
        out["merged"] = (
            f"SELECT track_id, b - {b0}, depth, count, busy::DOUBLE, coalesce(bytes, 0)::DOUBLE, l_id::DOUBLE,"
            f" l_dur::DOUBLE, l_name FROM lod_merged WHERE level = {L} AND {g}{d}b >= {b0} AND b < {b0 + 1024}"
            + (" ORDER BY 1, 2, 3" if order else "")
        )
    else:
        out["merged"] = (
            f"SELECT track_id, bucket, depth, n, busy, bytes, {key_id_sql('k')}::DOUBLE, {key_dur_sql('k')}::DOUBLE,"
            f" name FROM (SELECT track_id, (ts >> {L}) - {b0} AS bucket, depth, count(*) AS n,"
            f" sum(dur)::DOUBLE AS busy, coalesce(sum(bytes), 0)::DOUBLE AS bytes, max({LONGEST_KEY}) AS k,"
            f" arg_max(name_id, {LONGEST_KEY}) AS name"
            f" FROM lod_slices WHERE {g}{_chunks(info, t0, t1)}{d}cls < {L} AND ts >= {t0} AND ts < {t1}"
            " GROUP BY ALL)" + (" ORDER BY 1, 2, 3" if order else "")
        )

    if L >= info.instant_base_level:
        out["instants"] = (
            f"SELECT track_id, b - {b0}, depth, count, slice_id::DOUBLE, ts::DOUBLE, name_id FROM lod_instant_merged"
            f" WHERE level = {L} AND {g}{d}b >= {b0} AND b < {b0 + 1024}" + (" ORDER BY 1, 2, 3" if order else "")
        )
    else:
        out["instants"] = (
            "SELECT track_id, bucket, depth, n, id::DOUBLE, ts::DOUBLE, name FROM ("
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, depth, count(*) AS n, arg_min(slice_id, {FIRST_KEY}) AS id,"
            f" min(ts) AS ts, arg_min(name_id, {FIRST_KEY}) AS name"
            f" FROM lod_instants WHERE {g}{d}ts >= {t0} AND ts < {t1} GROUP BY ALL)"
            + (" ORDER BY 1, 2, 3" if order else "")
        )

    if L >= info.counter_base_level:
        out["counters"] = (
            f"SELECT track_id, b - {b0}, count, vmin, vmax, vfirst, vlast FROM lod_counter_merged"
            f" WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024}" + (" ORDER BY 1, 2" if order else "")
        )
    else:
        out["counters"] = (
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, count(*), min(value), max(value),"
            f" arg_min(value, ts), arg_max(value, ts) FROM lod_counters"
            f" WHERE {g}ts >= {t0} AND ts < {t1} GROUP BY ALL" + (" ORDER BY 1, 2" if order else "")
        )
    return out


def _union_runs(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """Per track, the union of [start, end) intervals as disjoint runs (touching ones joined), sorted
    by (track, start): the [track, start, end] columns of the fold section. Vectorised per track."""
    if not len(track):
        return [np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.float64)]
    o = np.lexsort((start, track))
    track, start, end = track[o], start[o], end[o]
    uniq, first = np.unique(track, return_index=True)
    bounds = list(first) + [len(track)]
    out_t, out_s, out_e = [], [], []
    for k, t in enumerate(uniq.tolist()):  # one step per track of the group, not per event
        s, e = start[bounds[k]:bounds[k + 1]], end[bounds[k]:bounds[k + 1]]
        reach = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        idx = np.flatnonzero(new)
        last = np.append(idx[1:] - 1, len(s) - 1)
        out_t.append(np.full(len(idx), t, np.int64))
        out_s.append(s[idx])
        out_e.append(reach[last])
    return [np.concatenate(out_t), np.concatenate(out_s), np.concatenate(out_e)]


def page_key(group: str | None, page: int) -> str | None:
    """The name of one depth page of a group's tiles in cache keys, ETags and file names (g3, g3.p1)."""
    return group if not page else f"{group or 'all'}.p{int(page)}"


def page_depths(page: int) -> tuple[int, int]:
    """The depths (lo, hi) whose rows a depth page carries exactly."""
    return page * DEPTH_PAGE, page * DEPTH_PAGE + DEPTH_PAGE - 1


def build_tile(con: duckdb.DuckDBPyConnection, info: LodInfo, level: int, index: int,
               grp: int | None, group_name: str | None = None, empty: frozenset[str] = frozenset(),
               names: list[str] | None = None, page: int | None = 0, max_depth: int | None = None) -> bytes:
    """The encoded tile (docs/api.md). `con` is a cursor of its own (not shared between threads);
    `empty` names sections known to have no rows in this group (their queries are skipped);
    `names` is the whole lod_names table by name_id when the caller keeps it in memory.
    `page`: the depth page (page_depths) whose rows the tile carries, with the fold sections for
    every deeper depth; None: every depth and no fold (the unpaged tile). `max_depth`: the group's
    deepest slice depth when known (build_pages)."""
    if page is None:
        arrays = _section_arrays(con, info, level, index, grp, empty)
        return encode_tile(arrays, level, index, group_name, _strings(con, names))
    return build_pages(con, info, level, index, grp, group_name, empty, names, max_depth, only=page)[page]


def build_pages(con: duckdb.DuckDBPyConnection, info: LodInfo, level: int, index: int,
                grp: int | None, group_name: str | None = None, empty: frozenset[str] = frozenset(),
                names: list[str] | None = None, max_depth: int | None = None,
                only: int | None = None) -> dict[int, bytes]:
    """Every depth page of one tile from one set of queries (the rows are split by depth here, so a
    cold tile costs its group's queries once, not once per page): {page: encoded tile} for pages
    0 .. max_depth // DEPTH_PAGE (max_depth: the group's deepest depth; from the rows when None).
    `only`: just that page (a page past the deepest depth is an empty tile with its fold empty)."""
    depth_empty = only is not None and max_depth is not None and only * DEPTH_PAGE > max_depth
    arrays = _section_arrays(con, info, level, index, grp,
                             empty | ({"slices", "merged", "instants"} if depth_empty else set()))
    if max_depth is None:
        deepest = [int(arrays[s][_col(s, "depth")].max()) for s in ("slices", "merged", "instants")
                   if len(arrays[s][0])]
        max_depth = max(deepest, default=0)
    n_pages = max_depth // DEPTH_PAGE + 1
    pages = [only] if only is not None else list(range(n_pages))
    strings_of = _strings(con, names)
    depth = {s: arrays[s][_col(s, "depth")].astype(np.int64) for s in ("slices", "merged", "instants")}
    out = {}
    for page in pages:
        lo, hi = page_depths(page)
        part = {}
        for s in COLUMNS:
            if s == "counters":  # counters have no depth: page 0 carries them
                part[s] = arrays[s] if page == 0 else [c[:0] for c in arrays[s]]
                continue
            keep = (depth[s] >= lo) & (depth[s] <= hi)
            part[s] = [c[keep] for c in arrays[s]]
        part.update(_fold(arrays, depth, level, index, hi + 1))
        extra = {"page": page, "depth_page": DEPTH_PAGE, "depths": [lo, hi], "fold_from": hi + 1}
        out[page] = encode_tile(part, level, index, group_name, strings_of, extra)
    return out


def _col(section: str, name: str) -> int:
    return [c for c, _ in COLUMNS[section]].index(name)


def _strings(con, names: list[str] | None) -> Callable[[np.ndarray], list[str]]:
    def strings_of(ids: np.ndarray) -> list[str]:
        if names is not None:
            return [names[i] for i in ids.tolist()]
        return [r[0] for r in con.execute(
            "SELECT name FROM lod_names WHERE name_id IN (SELECT unnest(?::INTEGER[])) ORDER BY name_id",
            [ids.tolist()]).fetchall()]
    return strings_of


def _section_arrays(con, info: LodInfo, level: int, index: int, grp: int | None,
                    skip: frozenset[str] | set[str]) -> dict[str, list[np.ndarray]]:
    arrays: dict[str, list[np.ndarray]] = {}
    for section, sql in _queries(info, level, index, grp, order=False).items():
        if section in skip:
            arrays[section] = [np.zeros(0, _NP[dt]) for _, dt in COLUMNS[section]]
            continue
        res = con.execute(sql).fetchnumpy()
        cols = [np.asarray(v) for v in res.values()]
        if len(cols[0]) > 1:
            o = _order(section, cols)
            cols = [c[o] for c in cols]
        arrays[section] = cols
    return arrays


def _order(section: str, cols: list[np.ndarray]) -> np.ndarray:
    """The encoding's row order: by track, then ts and depth (slices) or bucket and depth; one stable
    argsort of a packed int64 key where the columns fit (track < 2^31, bucket < 2^10, depth < 2^15)."""
    track = cols[0].astype(np.int64)
    if section == "slices":
        return np.lexsort((cols[_col(section, "depth")], cols[_col(section, "ts")], track))
    key = (track << 25) | (cols[1].astype(np.int64) << 15)
    if section != "counters":
        key |= cols[2].astype(np.int64)
    return np.argsort(key, kind="stable")


def _fold(arrays: dict[str, list[np.ndarray]], depth: dict[str, np.ndarray], level: int, index: int,
          fold_from: int) -> dict[str, list[np.ndarray]]:
    """The fold sections of a page: per track, the runs covered by its slices of depth >= fold_from
    (exact ones at their times, merged ones as their whole buckets: what the fold row draws) and one
    tick per bucket at the first deeper instant's time."""
    t0 = index << (level + TILE_BUCKETS_LOG2)
    bn = 1 << level
    sl, mg, ins = arrays["slices"], arrays["merged"], arrays["instants"]
    ds, dm, di = depth["slices"] >= fold_from, depth["merged"] >= fold_from, depth["instants"] >= fold_from
    ts = sl[_col("slices", "ts")][ds].astype(np.float64)
    b = mg[_col("merged", "bucket")][dm].astype(np.float64) * bn + t0
    fold = _union_runs(np.concatenate([sl[0][ds], mg[0][dm]]).astype(np.int64), np.concatenate([ts, b]),
                       np.concatenate([ts + sl[_col("slices", "dur")][ds].astype(np.float64), b + bn]))
    itr = ins[0][di].astype(np.int64)
    its = ins[_col("instants", "ts")][di].astype(np.float64)
    ib = ins[_col("instants", "bucket")][di].astype(np.int64)
    if len(itr):  # the first deeper instant of each (track, bucket)
        o = np.lexsort((its, ib, itr))
        itr, its, ib = itr[o], its[o], ib[o]
        first = np.ones(len(itr), dtype=bool)
        first[1:] = (itr[1:] != itr[:-1]) | (ib[1:] != ib[:-1])
        itr, its = itr[first], its[first]
    return {"fold": fold, "fold_instants": [itr, its]}


def encode_tile(arrays: dict[str, list[np.ndarray]], level: int, index: int, group_name: str | None,
                strings_of: Callable[[np.ndarray], list[str]], extra: dict | None = None) -> bytes:
    """The typed-array binary of docs/api.md from each section's columns (COLUMNS order, rows in
    track order; the FOLD_COLUMNS sections too when present); `strings_of(ids)` gives the names of
    the name ids used (ascending), in that order; `extra` adds header fields (a depth page's)."""
    # the tile's string table: the names used, in name_id order; ids remapped to indices into it
    used = [arrays[s][[c for c, _ in COLUMNS[s]].index(col)].astype(np.int64) for s, col in _NAME_COLS]
    used_ids = np.concatenate(used) if used else np.zeros(0, np.int64)
    strings: list[str] = []
    remap = None
    if len(used_ids):
        n_names = int(used_ids.max()) + 1
        present = np.zeros(n_names, dtype=bool)
        present[used_ids] = True
        ids = np.flatnonzero(present)
        remap = np.cumsum(present) - 1  # name_id -> index in strings
        strings = strings_of(ids)
    header_sections = {}
    tracks: dict[str, dict[str, list[int]]] = {}
    chunks: list[bytes] = []
    offset = 0
    all_cols = {**COLUMNS, **{s: c for s, c in FOLD_COLUMNS.items() if s in arrays}}
    for section, cols in all_cols.items():
        data = arrays[section]
        n = len(data[0]) if data else 0
        col_meta = {}
        for (name, dtype), arr in zip(cols, data):
            if (section, name) in _NAME_COLS and n:
                arr = remap[arr.astype(np.int64)]
            if name == "bytes" and not np.any(arr):
                continue  # no transfer in this tile: the column is left out (docs/api.md)
            base = None
            if (section, name) in _INT_F64:
                dtype, base, arr = _frame(arr)
            dtype = _narrow(dtype, arr)
            raw = np.ascontiguousarray(arr, dtype=_NP[dtype]).astype(f"<{np.dtype(_NP[dtype]).str[1:]}", copy=False).tobytes()
            col_meta[name] = {"dtype": dtype, "offset": offset, "length": n}
            if base is not None:
                col_meta[name]["base"] = base
            chunks.append(raw)
            pad = (-len(raw)) % 8
            if pad:
                chunks.append(b"\0" * pad)
            offset += len(raw) + pad
        header_sections[section] = {"rows": n, "columns": col_meta}
        if n:
            track_col = data[0].astype(np.int64)
            uniq, first, count = np.unique(track_col, return_index=True, return_counts=True)
            for t, f, c in zip(uniq.tolist(), first.tolist(), count.tolist()):
                tracks.setdefault(str(t), {s: [0, 0] for s in all_cols})[section] = [f, c]
    header = {
        "v": TILE_FORMAT_VERSION, "level": level, "index": index, "bucket_ns": 1 << level, "buckets": 1024,
        "t0_rel_ns": index << (level + TILE_BUCKETS_LOG2), "t1_rel_ns": (index + 1) << (level + TILE_BUCKETS_LOG2),
        "group": group_name, **(extra or {}), "strings": strings, "sections": header_sections, "tracks": tracks,
    }
    hbytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    pad = (-(4 + len(hbytes))) % 8
    return b"".join([struct.pack("<I", len(hbytes)), hbytes, b"\0" * pad, *chunks])


def _frame(arr: np.ndarray) -> tuple[str, int | None, np.ndarray]:
    """An f64 column of integers as (u32, base, values - base) when its range fits in 32 bits (the
    decoder adds base back: exact, as every value is an integer below 2^53); else (f64, None, arr)."""
    if not len(arr):
        return "f64", None, arr
    a = np.asarray(arr, dtype=np.float64)
    lo, hi = float(a.min()), float(a.max())
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo >= 4294967296.0 or abs(lo) >= 2.0 ** 53:
        return "f64", None, arr
    if not np.array_equal(a, np.floor(a)):
        return "f64", None, arr
    return "u32", int(lo), (a - lo).astype(np.int64)


def _narrow(dtype: str, arr: np.ndarray) -> str:
    """The smallest unsigned type holding an unsigned column's values (tiles of shallow, few-track
    groups shrink by a third); f64 columns of integers were framed (_frame) before; the others stay f64."""
    if dtype not in ("u16", "u32") or not len(arr):
        return dtype
    top = int(arr.max())
    return "u8" if top < 1 << 8 else "u16" if top < 1 << 16 else "u32"


def decode_tile(buf: bytes) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """Inverse of build_tile (tests and benchmarks use it, as the browser would)."""
    (hlen,) = struct.unpack_from("<I", buf, 0)
    header = json.loads(buf[4:4 + hlen].decode())
    body = 4 + hlen + ((-(4 + hlen)) % 8)
    out = {}
    for section, meta in header["sections"].items():
        out[section] = {}
        for name, c in meta["columns"].items():
            v = np.frombuffer(buf, dtype=np.dtype(_NP[c["dtype"]]).newbyteorder("<"), count=c["length"],
                              offset=body + c["offset"])
            out[section][name] = v.astype(np.float64) + c["base"] if "base" in c else v
    return header, out
