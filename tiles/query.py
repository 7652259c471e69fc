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

TILE_FORMAT_VERSION = 1
MAX_LEVEL = 62
CLASS_BAND = 4

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


def _queries(info: LodInfo, level: int, index: int, grp: int | None) -> dict[str, str]:
    """One SQL per section; all bounds are integers computed here (no user text reaches SQL)."""
    L = level
    t0 = index << (L + TILE_BUCKETS_LOG2)
    t1 = (index + 1) << (L + TILE_BUCKETS_LOG2)
    b0 = index << TILE_BUCKETS_LOG2
    g = _grp_filter(grp)
    out = {}

    # long slices: one scan for the classes whose look-back (2^(c+1)) fits in one chunk of
    # lod_slices (the chunk range it reads is then one or two chunks: the window's own), and
    # one per band of CLASS_BAND longer classes, each looking back by its longest class's
    # length: a class-c slice is >= 2^c long, so per track and depth a band's look-back
    # holds at most 2^CLASS_BAND of them
    branches = []
    if L <= info.max_cls:
        near_top = min(info.max_cls, max(L, info.chunk_log2 - 1, L + TILE_BUCKETS_LOG2 - 1))
        branches.append((L, near_top, t0 - (1 << (near_top + 1))))
        for c in range(near_top + 1, info.max_cls + 1, CLASS_BAND):
            hi = min(info.max_cls, c + CLASS_BAND - 1)
            branches.append((c, hi, t0 - (1 << (hi + 1))))
    cols = "track_id, slice_id::DOUBLE, (ts)::DOUBLE, dur::DOUBLE, depth, name_id, coalesce(bytes, 0)::DOUBLE"
    if branches:
        out["slices"] = " UNION ALL ".join(
            f"SELECT {cols} FROM lod_slices WHERE {g}{_chunks(info, look, t1)}cls BETWEEN {lo} AND {hi}"
            f" AND ts >= {max(0, look)} AND ts < {t1} AND ts + dur > {t0}"
            for lo, hi, look in branches
        ) + " ORDER BY 1, 3, 5"
    else:
        out["slices"] = f"SELECT {cols} FROM lod_slices WHERE false"

    if L >= info.base_level:
        out["merged"] = (
            f"SELECT track_id, b - {b0}, depth, count, busy::DOUBLE, coalesce(bytes, 0)::DOUBLE, l_id::DOUBLE,"
            f" l_dur::DOUBLE, l_name FROM lod_merged WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024}"
            " ORDER BY 1, 2, 3"
        )
    else:
        out["merged"] = (
            f"SELECT track_id, bucket, depth, n, busy, bytes, {key_id_sql('k')}::DOUBLE, {key_dur_sql('k')}::DOUBLE,"
            f" name FROM (SELECT track_id, (ts >> {L}) - {b0} AS bucket, depth, count(*) AS n,"
            f" sum(dur)::DOUBLE AS busy, coalesce(sum(bytes), 0)::DOUBLE AS bytes, max({LONGEST_KEY}) AS k,"
            f" arg_max(name_id, {LONGEST_KEY}) AS name"
            f" FROM lod_slices WHERE {g}{_chunks(info, t0, t1)}cls < {L} AND ts >= {t0} AND ts < {t1}"
            " GROUP BY ALL) ORDER BY 1, 2, 3"
        )

    if L >= info.instant_base_level:
        out["instants"] = (
            f"SELECT track_id, b - {b0}, depth, count, slice_id::DOUBLE, ts::DOUBLE, name_id FROM lod_instant_merged"
            f" WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024} ORDER BY 1, 2, 3"
        )
    else:
        out["instants"] = (
            "SELECT track_id, bucket, depth, n, id::DOUBLE, ts::DOUBLE, name FROM ("
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, depth, count(*) AS n, arg_min(slice_id, {FIRST_KEY}) AS id,"
            f" min(ts) AS ts, arg_min(name_id, {FIRST_KEY}) AS name"
            f" FROM lod_instants WHERE {g}ts >= {t0} AND ts < {t1} GROUP BY ALL) ORDER BY 1, 2, 3"
        )

    if L >= info.counter_base_level:
        out["counters"] = (
            f"SELECT track_id, b - {b0}, count, vmin, vmax, vfirst, vlast FROM lod_counter_merged"
            f" WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024} ORDER BY 1, 2"
        )
    else:
        out["counters"] = (
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, count(*), min(value), max(value),"
            f" arg_min(value, ts), arg_max(value, ts) FROM lod_counters"
            f" WHERE {g}ts >= {t0} AND ts < {t1} GROUP BY ALL ORDER BY 1, 2"
        )
    return out


def build_tile(con: duckdb.DuckDBPyConnection, info: LodInfo, level: int, index: int,
               grp: int | None, group_name: str | None = None, empty: frozenset[str] = frozenset(),
               names: list[str] | None = None) -> bytes:
    """The encoded tile (docs/api.md). `con` is a cursor of its own (not shared between threads);
    `empty` names sections known to have no rows in this group (their queries are skipped);
    `names` is the whole lod_names table by name_id when the caller keeps it in memory."""
    arrays: dict[str, list[np.ndarray]] = {}
    for section, sql in _queries(info, level, index, grp).items():
        if section in empty:
            arrays[section] = [np.zeros(0, _NP[dt]) for _, dt in COLUMNS[section]]
            continue
        res = con.execute(sql).fetchnumpy()
        arrays[section] = [np.asarray(v) for v in res.values()]

    def strings_of(ids: np.ndarray) -> list[str]:
        if names is not None:
            return [names[i] for i in ids.tolist()]
        return [r[0] for r in con.execute(
            "SELECT name FROM lod_names WHERE name_id IN (SELECT unnest(?::INTEGER[])) ORDER BY name_id",
            [ids.tolist()]).fetchall()]

    return encode_tile(arrays, level, index, group_name, strings_of)


def encode_tile(arrays: dict[str, list[np.ndarray]], level: int, index: int, group_name: str | None,
                strings_of: Callable[[np.ndarray], list[str]]) -> bytes:
    """The typed-array binary of docs/api.md from each section's columns (COLUMNS order, rows in
    track order); `strings_of(ids)` gives the names of the name ids used (ascending), in that order."""
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
    for section, cols in COLUMNS.items():
        data = arrays[section]
        n = len(data[0]) if data else 0
        col_meta = {}
        for (name, dtype), arr in zip(cols, data):
            if (section, name) in _NAME_COLS and n:
                arr = remap[arr.astype(np.int64)]
            if name == "bytes" and not np.any(arr):
                continue  # no transfer in this tile: the column is left out (docs/api.md)
            dtype = _narrow(dtype, arr)
            raw = np.ascontiguousarray(arr, dtype=_NP[dtype]).astype(f"<{np.dtype(_NP[dtype]).str[1:]}", copy=False).tobytes()
            col_meta[name] = {"dtype": dtype, "offset": offset, "length": n}
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
                tracks.setdefault(str(t), {s: [0, 0] for s in COLUMNS})[section] = [f, c]
    header = {
        "v": TILE_FORMAT_VERSION, "level": level, "index": index, "bucket_ns": 1 << level, "buckets": 1024,
        "t0_rel_ns": index << (level + TILE_BUCKETS_LOG2), "t1_rel_ns": (index + 1) << (level + TILE_BUCKETS_LOG2),
        "group": group_name, "strings": strings, "sections": header_sections, "tracks": tracks,
    }
    hbytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    pad = (-(4 + len(hbytes))) % 8
    return b"".join([struct.pack("<I", len(hbytes)), hbytes, b"\0" * pad, *chunks])


def _narrow(dtype: str, arr: np.ndarray) -> str:
    """The smallest unsigned type holding an unsigned column's values (tiles of shallow, few-track
    groups shrink by a third); float columns stay f64 so times and ids are exact."""
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
        out[section] = {
            name: np.frombuffer(buf, dtype=np.dtype(_NP[c["dtype"]]).newbyteorder("<"), count=c["length"],
                                offset=body + c["offset"])
            for name, c in meta["columns"].items()
        }
    return header, out
