"""The typed-array binary of a tile (docs/api.md): its sections and columns, encoding and decoding.

tiles/query.py fills the sections from the LOD tables (tiles/live.py from a live head); this module
only turns columns into bytes and back.
"""

from __future__ import annotations

import json
import struct
from typing import Callable

import numpy as np

from acceltrace.tiles.build import TILE_BUCKETS_LOG2

TILE_FORMAT_VERSION = 2

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


def _col(section: str, name: str) -> int:
    return [c for c, _ in COLUMNS[section]].index(name)


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
