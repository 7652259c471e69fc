"""lod_slices (tiles/build.py) ordered in numpy, from the slices the builder holds as Arrow.

The table DuckDB made by joining the slices with lod_tracks and lod_names and sorting them by (group, time
chunk, duration class, ts): the same rows, columns, types and order (tests/test_lod_slices.py), from one
argsort of that key packed into an int64.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class ShortSlices:
    """The slices lod_slices holds (dur > 0) as numpy columns, from the Arrow rows the builder holds:
    lod_slices ordered by one argsort of a packed key instead of DuckDB's join with lod_tracks and
    lod_names and its sort (the same rows and order; 2-2.5 M slices: 0.64-1.23 CPU-s -> 0.27-0.49,
    docs/performance.md, fifteenth stop). Built after lod_tracks and lod_names."""

    def __init__(self, con: duckdb.DuckDBPyConnection, rows: pa.Table, start_ns: int):
        self.rows = rows  # (no copy of its columns: their rows are taken once, in the stored order)
        dur = rows.column("dur").to_numpy()
        self.keep = np.flatnonzero(dur > 0)
        self.dur = dur[self.keep]
        self.ts = rows.column("ts").to_numpy()[self.keep] - start_ns
        self.track = rows.column("track_id").to_numpy()[self.keep].astype(np.int32)
        lt = con.execute("SELECT track_id, grp FROM lod_tracks").fetchnumpy()
        grp_of = np.zeros(int(lt["track_id"].max()) + 1 if len(lt["track_id"]) else 1, np.int32)
        grp_of[lt["track_id"]] = lt["grp"]
        self.grp = grp_of[self.track]
        # a slice before the trace's start (a live capture's segment names its start): negative times have
        # no place in the packed key or the bincount, so the SQL makes both
        self.usable = not len(self.ts) or int(self.ts.min()) >= 0

    def peak_rate_per_ns(self, max_level: int) -> float:
        """_peak_rate_per_ns of these rows: a coarse bucket is ts >> max_level, 0..1024 (the trace's span)."""
        if not len(self.ts):
            return 0.0
        bucket = self.ts >> max_level
        width = int(bucket.max()) + 1
        return int(np.bincount(self.grp.astype(np.int64) * width + bucket).max()) / float(1 << max_level)

    def create(self, con: duckdb.DuckDBPyConnection, chunk_log2: int) -> pa.Table | None:
        """lod_slices, ordered by (grp, chunk, cls, ts), and its rows as stored (the pyramid reads them here,
        tiles/pyramid.py); None (nothing made) where that key does not fit 63 bits (a span past ~2^50 ns with
        thousands of groups) or a time is negative, for the SQL to make."""
        ts, dur = self.ts, self.dur
        if not self.usable:
            return None
        bits_ts = max(chunk_log2, int(ts.max()).bit_length() if len(ts) else 0)
        bits_grp = int(self.grp.max()).bit_length() if len(ts) else 0
        if bits_grp + 6 + bits_ts > 63:
            return None
        # (grp, chunk, cls, ts) as one integer: a chunk is the top bits of ts, so cls goes between them
        cls = dur_class(dur)
        key = self.grp.astype(np.int64) << (bits_ts + 6)
        key |= (ts >> chunk_log2) << (chunk_log2 + 6)
        key |= cls << chunk_log2
        key |= ts & ((1 << chunk_log2) - 1)
        order = np.argsort(key, kind="stable")
        del key  # (each column below is made in order and its source let go: the write of `slices` runs beside)
        cls = cls.astype(np.int8)[order]
        ts, self.ts = ts[order], None
        dur, self.dur = dur[order], None
        rows, self.keep = self.keep[order], None  # the same rows of the whole table
        table = pa.table({
            "grp": self.grp[order], "chunk": (ts >> chunk_log2).astype(np.int32), "cls": cls, "ts": ts, "dur": dur,
            "track_id": self.track[order], "depth": self.rows.column("depth").to_numpy()[rows].astype(np.int16),
            "slice_id": self.rows.column("slice_id").to_numpy()[rows],
            "name_id": _name_ids(con, self.rows.column("name"))[rows],
            # one take of the joined column: 3x faster than numpy's gather with its validity mask, and Arrow's
            # take of the chunked column joins its chunks on every call
            "bytes": self.rows.column("bytes").combine_chunks().take(pa.array(rows)),
        })
        del ts, dur, cls, rows, order
        con.register("_lod_slices_src", table)
        try:
            con.execute("CREATE TABLE lod_slices AS SELECT * FROM _lod_slices_src")
        finally:
            con.unregister("_lod_slices_src")
        return table


def dur_class(dur: np.ndarray) -> np.ndarray:
    """floor(log2(dur)) exactly, for 0 < dur <= 2^62 (dur_class_sql's numbers): the exponent bits of the
    double, one less where rounding to a double reached the next power of two."""
    cls = (dur.astype(np.float64).view(np.int64) >> 52) - 1023
    cls -= np.left_shift(np.int64(1), cls) > dur
    return cls


def _name_ids(con: duckdb.DuckDBPyConnection, names: pa.ChunkedArray) -> np.ndarray:
    """lod_names' name_id of each name (a dictionary chunk's values looked up once each)."""
    known = con.sql("SELECT name FROM lod_names ORDER BY name_id").to_arrow_table().column(0)
    parts = []
    for chunk in names.chunks:
        if pa.types.is_dictionary(chunk.type):
            ids = pc.index_in(chunk.dictionary, value_set=known).to_numpy(zero_copy_only=False)
            parts.append(ids[chunk.indices.to_numpy(zero_copy_only=False)])
        else:
            parts.append(pc.index_in(chunk, value_set=known).to_numpy(zero_copy_only=False))
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
