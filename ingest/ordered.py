"""The staged slices in slice-id order, their depths filled in, and the order they are stored in.

This is where stage.finalize starts. It is made from one read of the staging table, which the depth pass
reads too (depths.assign_depths on the same columns). A Chrome trace makes it on the depth pass's own
thread (TraceBuilder.start_depths), beside the importer's links, so finish() finds it ready. The 830 MB
trace's finalize spent about 0.2 s of one core on it after the links, the other core idle
(docs/performance.md, the thirty-ninth stop). Otherwise finish() or the LOD build's thread makes it
(TraceBuilder.lod_ahead), as before, now with one read of the staging table, not two.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.ingest import depths as depth_pass
from acceltrace.ingest.depths import order_by
from acceltrace.ingest.stage import NAME


@dataclass
class Ordered:
    """`staged`: the staging table's columns (stage.STAGED), one chunk each, in slice_id order; `depth`: each
    row's depth (int32); `order`: the permutation of those rows into stored order, (track_id, ts, depth); None
    where they are in it (an importer that gave its slices in that order, with their depths)."""
    staged: pa.Table
    depth: np.ndarray
    order: np.ndarray | None


def made(con: duckdb.DuckDBPyConnection, depths: bool = True) -> Ordered:
    """Ordered from the staging table as it is now, through the depth pass (`depths`) or not (the staged rows
    came in stored order, with their depths)."""
    staged = read_staged(con)
    return in_order(staged, depth_pass.assign_depths(con, staged=staged) if depths else None)


def read_staged(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Every staged row, in slice_id order: the order of the builder's held rows. The staging's own order is
    not that: appends run in parallel, and so does its scan. Put in order in numpy: row groups out of place
    are a few long sorted runs, which a stable sort merges (2 M native slices: 120-170 ms through DuckDB's
    ORDER BY, 50-100 so). One array a column, joined once here, so numpy reads them without a copy."""
    staged = con.sql(f"SELECT * FROM {NAME}._slices_staging").to_arrow_table().combine_chunks()
    sid = _np(staged["slice_id"])
    if len(sid) > 1 and not (sid[1:] > sid[:-1]).all():
        staged = staged.take(pa.array(np.argsort(sid, kind="stable")))
    return staged


def in_order(staged: pa.Table, depths: pa.Table | None) -> Ordered:
    """`depths` (slice_id, depth), from the depth pass, fill in the staged rows' depths, and one argsort of a
    packed key gives the stored order (depths.order_by); None: the rows are in that order, with theirs."""
    depth = _np(staged["depth"].fill_null(0)).astype(np.int32)
    if depths is None:
        return Ordered(staged, depth, None)
    sid = _np(staged["slice_id"])
    if depths.num_rows:
        have = np.zeros(int(sid.max()) + 1, dtype=bool)
        by_id = np.zeros(len(have), dtype=np.int32)
        dsid = depths["slice_id"].to_numpy()
        have[dsid] = True
        by_id[dsid] = depths["depth"].to_numpy()
        mine = have[sid]
        depth[mine] = by_id[sid[mine]]
    return Ordered(staged, depth, order_by(_np(staged["track_id"]), _np(staged["ts"]), depth))


def _np(col: pa.ChunkedArray) -> np.ndarray:
    """A column of one chunk (or none) as numpy, without a copy where its type allows."""
    if col.num_chunks == 1:
        return col.chunk(0).to_numpy(zero_copy_only=False)
    return col.to_numpy()
