"""lod_names, lod_slices, lod_long and lod_instants from one read of the slices, in numpy.

tiles/build.py made them with SQL: a DISTINCT and a window for the names, a GROUP BY for the
peak rate, then lod_slices as a CREATE TABLE AS over a three-way join sorted by (grp, chunk, cls,
ts), lod_long and lod_instants as two more, and the merged pyramid read lod_slices back. Here the
slices' columns are read once (name included), names are coded by hashing (Arrow's
dictionary_encode) and ranked by sorting only the distinct ones, and each table is one sort of
integer keys (an argsort of one packed int64 key) and one append of numeric columns; the pyramid (tiles/pyramid.py) gets
lod_slices' columns as they are, without reading them back. The tables are the same, row for row
and in the same order, as the SQL build's (tests/test_lod_numpy.py); ties in the sort keys (the
same group, chunk, class and start) are in either build's own order, and no reader depends on the
order within such a tie.

Memory: about 60 bytes a slice plus its name, and sort temporaries, on top of DuckDB's own limit
while `slices` is written beside it; so MAX_SLICES bounds it to ~100 MB. A larger trace takes the
SQL build, which DuckDB spills to disk: at 2 M slices (the 830 MB generated trace) the numpy build
raised the ingest's peak from 1.40 to 1.70 GB and was slower (17.0 against 15.8 s), the write beside
it sorting within the same two cores.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acceltrace.tiles import pyramid

MAX_SLICES = 1_000_000
_BINCOUNT_MAX = 1 << 22  # the most (group, bucket) bins _peak_rate counts in one array (32 MB)
_I62 = 1 << 62


@dataclass
class Slices:
    """The slices' columns (any order) as numpy arrays, names coded by their rank (= lod_names' name_id)."""

    track: np.ndarray  # int32
    ts: np.ndarray  # int64
    dur: np.ndarray  # int64
    depth: np.ndarray  # int16
    sid: np.ndarray  # int64
    bytes: np.ndarray  # int64, 0 where null
    has_bytes: np.ndarray  # bool
    name_id: np.ndarray  # int32
    names: pa.Array  # lod_names.name, in name_id order

    def max_depth(self) -> pa.Table:
        """(track_id, max_depth) of every track with slices: what build.py's groups read."""
        if not len(self.track):
            return pa.table({"track_id": pa.array([], pa.int32()), "max_depth": pa.array([], pa.int32())})
        n = int(self.track.max()) + 1
        m = np.full(n, -1, np.int32)
        np.maximum.at(m, self.track, self.depth.astype(np.int32))
        has = np.flatnonzero(m >= 0)
        return pa.table({"track_id": has.astype(np.int32), "max_depth": m[has]})


def read(con: duckdb.DuckDBPyConnection, slices: str) -> Slices | None:
    """The columns the LOD tables need, from one scan of `slices`; None when there are more than
    MAX_SLICES or a track id is outside int32's range (the SQL build then runs)."""
    ((n,),) = con.execute(f"SELECT count(*) FROM {slices}").fetchall()
    if n > MAX_SLICES:
        return None
    t = con.sql(f"SELECT track_id, ts, dur, depth, slice_id, bytes, name FROM {slices}").to_arrow_table()
    names = t["name"].combine_chunks() if t.num_rows else pa.array([], pa.string())
    if pa.types.is_dictionary(names.type):
        names = names.cast(names.type.value_type)
    coded = pc.dictionary_encode(names)
    distinct = coded.dictionary
    order = pc.sort_indices(distinct).to_numpy()  # the byte order DuckDB's ORDER BY name gives
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    indices = coded.indices.to_numpy(zero_copy_only=False)
    by = t["bytes"].combine_chunks() if t.num_rows else pa.array([], pa.int64())
    return Slices(
        track=_np(t["track_id"], np.int32), ts=_np(t["ts"], np.int64), dur=_np(t["dur"], np.int64),
        depth=_np(t["depth"], np.int16), sid=_np(t["slice_id"], np.int64),
        bytes=by.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
        has_bytes=by.is_valid().to_numpy(zero_copy_only=False),
        name_id=rank[indices] if len(indices) else np.zeros(0, np.int32), names=distinct.take(pa.array(order)),
    )


def _np(col: pa.ChunkedArray, dtype) -> np.ndarray:
    return col.to_numpy().astype(dtype, copy=False)


def dur_class(dur: np.ndarray) -> np.ndarray:
    """floor(log2(dur)) exactly, for dur > 0 (the float exponent, corrected where rounding moved it)."""
    _, e = np.frexp(dur.astype(np.float64))
    cls = (e - 1).astype(np.int64)
    cls -= (np.left_shift(1, cls, dtype=np.int64) > dur)
    up = cls < 62
    cls += up & (np.left_shift(1, np.minimum(cls + 1, 62), dtype=np.int64) <= dur)
    return cls.astype(np.int8)


@dataclass
class Written:
    """What build.py needs to know of the tables written here."""

    lod_slices: dict  # lod_slices' columns in stored order, as tiles/pyramid.py reads them
    slice_rate: float
    instant_rate: float
    chunk_log2: int
    long_cls: int
    max_cls: int
    slice_counts: np.ndarray  # per grp
    instant_counts: np.ndarray


def write(con: duckdb.DuckDBPyConnection, s: Slices, start_ns: int, max_level: int,
          chunk_log2_of, long_class_of) -> Written:
    """Create lod_names, lod_slices, lod_long and lod_instants. `chunk_log2_of(rate)` and
    `long_class_of(hist, chunk_log2)` are build.py's rules, so both builds choose alike."""
    con.register("_lod_names", pa.table({"name_id": pa.array(np.arange(len(s.names), dtype=np.int32)),
                                         "name": s.names}))
    try:
        con.execute("CREATE TABLE lod_names AS SELECT * FROM _lod_names")
    finally:
        con.unregister("_lod_names")
    ((n_tracks,),) = con.execute("SELECT coalesce(max(track_id), -1) + 1 FROM lod_tracks").fetchall()
    grp_of = np.full(max(n_tracks, int(s.track.max()) + 1 if len(s.track) else 0), -1, np.int32)
    tg = con.execute("SELECT track_id, grp FROM lod_tracks").fetchnumpy()
    grp_of[np.asarray(tg["track_id"], np.int64)] = np.asarray(tg["grp"], np.int32)
    n_grp = int(grp_of.max()) + 1 if len(grp_of) else 0
    grp = grp_of[s.track] if len(s.track) else np.zeros(0, np.int32)
    keep = grp >= 0  # the inner join with lod_tracks (every staged slice's track is in it)
    ts = s.ts - np.int64(start_ns)
    long_ = keep & (s.dur > 0)
    inst = keep & (s.dur == 0)

    rows = np.flatnonzero(long_)
    g, t, d = grp[rows], ts[rows], s.dur[rows]
    rate = _peak_rate(g, t, max_level)
    chunk_log2 = chunk_log2_of(rate)
    cls = dur_class(d)
    chunk = (t >> chunk_log2).astype(np.int32)
    order = _order(g, chunk, cls, t)
    rows, g, t, d, cls, chunk = rows[order], g[order], t[order], d[order], cls[order], chunk[order]
    cols = {
        "grp": g, "chunk": chunk, "cls": cls, "ts": t, "dur": d, "track_id": s.track[rows],
        "depth": s.depth[rows], "slice_id": s.sid[rows], "name_id": s.name_id[rows],
        "bytes": np.ma.masked_array(s.bytes[rows], mask=~s.has_bytes[rows]),
    }
    _create(con, "lod_slices", cols, _SLICE_TYPES)
    hist = np.bincount(cls.astype(np.int64), minlength=1) if len(cls) else np.zeros(1, np.int64)
    long_cls = long_class_of([(k, int(c)) for k, c in enumerate(hist) if c], chunk_log2)
    sel = np.flatnonzero(cls >= long_cls)
    sel = sel[_order(g[sel], cls[sel], t[sel])]
    _create(con, "lod_long", {k: v[sel] for k, v in cols.items()}, _SLICE_TYPES)

    irows = np.flatnonzero(inst)
    ig, it = grp[irows], ts[irows]
    iorder = _order(ig, it)
    irows, ig, it = irows[iorder], ig[iorder], it[iorder]
    _create(con, "lod_instants", {"grp": ig, "ts": it, "track_id": s.track[irows], "depth": s.depth[irows],
                                  "slice_id": s.sid[irows], "name_id": s.name_id[irows]}, _INSTANT_TYPES)
    return Written(
        lod_slices=cols, slice_rate=rate, instant_rate=_peak_rate(ig, it, max_level),
        chunk_log2=chunk_log2, long_cls=long_cls, max_cls=int(cls.max()) if len(cls) else 0,
        slice_counts=np.bincount(g.astype(np.int64), minlength=n_grp),
        instant_counts=np.bincount(ig.astype(np.int64), minlength=n_grp),
    )


def _order(*keys: np.ndarray) -> np.ndarray:
    """The permutation sorting rows by these keys (most significant first): one argsort of a packed
    int64 key where their ranges fit in 63 bits (tiles/pyramid.py), else np.lexsort."""
    if not len(keys[0]):
        return np.zeros(0, np.int64)
    key = pyramid.packed(*keys)
    return np.lexsort(keys[::-1]) if key is None else np.argsort(key, kind="stable")


def sums_fit(cols: dict) -> bool:
    """No sum the pyramid takes can overflow int64 (pyramid.fits, on the columns in hand)."""
    by = np.ma.getdata(cols["bytes"])
    if np.abs(cols["dur"].astype(np.float64)).sum() >= _I62 or np.abs(by.astype(np.float64)).sum() >= _I62:
        return False
    return True


def _peak_rate(grp: np.ndarray, ts: np.ndarray, max_level: int) -> float:
    """build.py's _peak_rate_per_ns: events per ns of the densest (grp, ts >> max_level)."""
    if not len(ts):
        return 0.0
    b = ts >> max_level
    lo, hi = int(b.min()), int(b.max())
    groups = int(grp.max()) + 1
    if lo >= 0 and groups * (hi + 1) <= _BINCOUNT_MAX:  # a bin per (grp, bucket): 1025 buckets per group here
        peak = int(np.bincount(grp.astype(np.int64) * (hi + 1) + b).max())
    else:  # times outside the usual range (a caller's start_ns) or very many groups: no huge bin array
        _, counts = np.unique(np.stack([grp.astype(np.int64), b]), axis=1, return_counts=True)
        peak = int(counts.max())
    return peak / float(1 << max_level)


_SLICE_TYPES = {"grp": "INTEGER", "chunk": "INTEGER", "cls": "TINYINT", "ts": "BIGINT", "dur": "BIGINT",
                "track_id": "INTEGER", "depth": "SMALLINT", "slice_id": "BIGINT", "name_id": "INTEGER",
                "bytes": "BIGINT"}
_INSTANT_TYPES = {"grp": "INTEGER", "ts": "BIGINT", "track_id": "INTEGER", "depth": "SMALLINT",
                  "slice_id": "BIGINT", "name_id": "INTEGER"}


def _create(con: duckdb.DuckDBPyConnection, name: str, cols: dict, types: dict) -> None:
    """CREATE TABLE `name` with these columns and types, filled in the arrays' order."""
    con.execute(f"CREATE TABLE {name} (" + ", ".join(f"{k} {types[k]}" for k in types) + ")")
    if not len(next(iter(cols.values()))):
        return
    arrays = {}
    for k in types:
        v = cols[k]
        arrays[k] = (pa.array(np.ma.getdata(v), mask=np.ma.getmaskarray(v)) if isinstance(v, np.ma.MaskedArray)
                     else pa.array(v))
    con.register("_lod_rows", pa.table(arrays))
    try:
        con.execute(f"INSERT INTO {name} SELECT * FROM _lod_rows")
    finally:
        con.unregister("_lod_rows")
