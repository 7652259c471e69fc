"""The builder's bounded-memory regime: a trace past SPILL_FROM_SLICES slices is finished by DuckDB.

The in-memory path (ingest/stage.py) keeps the columns SQL reads in an in-memory DuckDB table and the
others as the Arrow batches the ingester gave, then orders, writes and builds the level-of-detail tables
from numpy arrays of every slice: the fastest way on two cores, and about 250 bytes a slice at its peak
(2.5 GB of Kineto JSON, 6 M slices: 2.36 GB). Past SPILL_FROM_SLICES the builder switches, once, to this
regime:
  - every column of a slice is staged in DuckDB (the staged rows so far read back in slice_id order
    beside the held batches' rows, no join; then each new batch whole), and DuckDB's memory limit drops
    to SPILL_MEMORY: what does not fit goes to its temp files;
  - finish() gives depths a run of whole tracks at a time (DEPTH_PART_SLICES slices in memory at most)
    into a table of their own, writes `slices` with one DuckDB sort of the staged rows and their depths
    (it spills), and builds the level-of-detail tables in SQL from the written table (the pyramid in
    parts, as always).
So what the process holds no longer grows with the trace: DuckDB's limit, the scanner's blocks, a depth
part (or the largest track) and the pyramid's parts. It costs time (every column passes through DuckDB's
sort, args included), which is why traces below the threshold keep the in-memory path. The trace
is the same either way, row for row and in the same order (tests/test_spill.py). docs/ingest.md has the
numbers that set the threshold.
"""

from __future__ import annotations

import os
from typing import Callable

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.ingest import stage
from acceltrace.ingest.depths import assign_depths
from acceltrace.store import schema

# the in-memory path's peak: 1.25-1.35 GB at 2 M slices (830 MB of Kineto JSON), 1.36-1.56 GB at 2.5 M (1 GB),
# 1.48-1.66 GB for Nsight's 2.5 M; switching at 2.3 M keeps both paths under 1.5 GB
SPILL_FROM_SLICES = 2_300_000
SPILL_MEMORY = "500MB"  # DuckDB's limit once spilling (the in-memory path's: 900 MB, ingest/builder.py)
AFTER_MEMORY = "1GB"  # ... and for such a trace's views precompute and analysis, one after the other (pipeline.py)
DEPTH_PART_SLICES = 1_000_000  # the depth pass reads whole tracks, about this many slices at a time
BATCH_ROWS = 122_880  # the switch moves the staged and held rows this many at a time


def threshold() -> int:
    """SPILL_FROM_SLICES, or the operator's ACCELTRACE_SPILL_SLICES (a machine with less memory to give)."""
    value = os.environ.get("ACCELTRACE_SPILL_SLICES", "").strip()
    try:
        return max(0, int(value)) if value else SPILL_FROM_SLICES
    except ValueError:
        raise ValueError(f"ACCELTRACE_SPILL_SLICES={value!r}: expected a whole number of slices") from None


_COLUMNS = schema.column_names("slices")
_TYPES = {c: schema.arrow_type(t) for c, t in schema.TABLES["slices"]}
_REST = [c for c in _COLUMNS if c not in stage.STAGED]  # the columns the in-memory path holds in Arrow


def start(con: duckdb.DuckDBPyConnection, held: stage.Held) -> None:
    """Every column of a slice into one staging table: the staged rows read back in slice_id order beside
    the held batches' rows (the same slices in the same order: nothing is deleted before finish()), as
    one stream into a new `_slices_staging`; `held` is emptied as it goes. DuckDB's limit drops first,
    so that from here on it spills to its temp files rather than grow."""
    con.execute(f"SET memory_limit = '{SPILL_MEMORY}'")
    held.mapped()
    ((staged,),) = con.execute("SELECT count(*) FROM _slices_staging").fetchall()
    kept = sum(t.num_rows for t in held)
    if staged != kept:
        raise RuntimeError(f"the builder staged {staged} slices but holds the columns of {kept}")
    cols = [(c, t.replace(" NOT NULL", "")) for c, t in schema.TABLES["slices"]]
    con.execute(schema.create_sql("slices", cols, name="_slices_wide").replace(
        "CREATE TABLE ", f"CREATE TABLE {stage.NAME}.", 1))
    shape = pa.schema([(c, _TYPES[c]) for c in _COLUMNS])
    reader = con.cursor()  # the staged rows stream from a cursor of their own while `con` inserts
    keys = ", ".join(f'"{c}"' for c in stage.STAGED)
    ordered = reader.sql(f"SELECT {keys} FROM {stage.NAME}._slices_staging ORDER BY slice_id").to_arrow_reader(BATCH_ROWS)

    def batches():
        rows = _held_rows(held)
        for b in ordered:
            rest = rows(b.num_rows)
            yield from pa.table([b.column(c) if c in stage.STAGED else rest[c] for c in _COLUMNS],
                                schema=shape).to_batches()

    con.register("_wide_rows", pa.RecordBatchReader.from_batches(shape, batches()))
    try:
        con.execute(f"INSERT INTO {stage.NAME}._slices_wide SELECT * FROM _wide_rows")
    finally:
        con.unregister("_wide_rows")
        reader.close()
    held.discard()
    con.execute(f"DROP TABLE {stage.NAME}._slices_staging")
    con.execute(f"ALTER TABLE {stage.NAME}._slices_wide RENAME TO _slices_staging")


def _held_rows(held: stage.Held) -> Callable[[int], dict]:
    """A function giving the held columns of the next n slices (in slice_id order) as chunked columns of
    their stored types; each held batch is let go once its rows are given (its args may lie in the mapped
    file)."""
    table, at = None, 0

    def take(n: int) -> dict:
        nonlocal table, at
        parts = []
        while n:
            if table is None or at == table.num_rows:
                table, at = held.pop(0), 0
            k = min(n, table.num_rows - at)
            parts.append(table.slice(at, k))
            at, n = at + k, n - k
        return {c: pa.chunked_array([chunk for p in parts for chunk in _stored(p, c).chunks], type=_TYPES[c])
                for c in _REST}

    return take


def _stored(table: pa.Table, name: str) -> pa.ChunkedArray:
    """A held batch's column as its stored type: nulls where the batch has none, dictionaries decoded
    (a cast: the batches' dictionaries need not agree)."""
    typ = _TYPES[name]
    if name not in table.column_names:
        return pa.chunked_array([pa.nulls(table.num_rows, typ)], type=typ)
    col = table.column(name)
    return col if col.type == typ else col.cast(typ)


def append(con: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
    """Stage a batch of slices (slice_id given), every column of it."""
    stage.insert(con, table, _COLUMNS)


def fill_depths(con: duckdb.DuckDBPyConnection) -> None:
    """`_depths` (slice_id, depth) for the staged slices given none, a run of whole tracks at a time (a
    track is the sweep's unit: depths.assign_depths on each run gives the depths it gives all at once)."""
    con.execute(f"CREATE TABLE {stage.NAME}._depths (slice_id BIGINT, depth INTEGER)")
    ((todo,),) = con.execute("SELECT count(*) FROM _slices_staging WHERE depth IS NULL").fetchall()
    if not todo:
        return
    for lo, hi in _track_runs(con, DEPTH_PART_SLICES):
        con.register("_part_depths", assign_depths(con, where=f"track_id BETWEEN {lo} AND {hi}"))
        try:
            con.execute(f"INSERT INTO {stage.NAME}._depths SELECT slice_id, depth FROM _part_depths")
        finally:
            con.unregister("_part_depths")


def write_slices_and_lod(con: duckdb.DuckDBPyConnection, build_lod: Callable) -> None:
    """`slices` from the staged rows and their depths in stored order (track_id, ts, depth; ties in
    slice_id order, as the in-memory path's stable sort leaves them), sorted by DuckDB (which spills);
    then the level-of-detail tables from the written table."""
    depth = "coalesce(d.depth, s.depth, 0)"  # a depth given, or the pass's (0 where neither: as in-memory)
    picks = ", ".join(depth if c == "depth" else f's."{c}"' for c in _COLUMNS)
    con.execute("SET preserve_insertion_order = true")  # both writes store rows in their order
    try:
        con.execute(f"INSERT INTO slices SELECT {picks} FROM _slices_staging s LEFT JOIN _depths d USING (slice_id)"
                    f" ORDER BY s.track_id, s.ts, {depth}, s.slice_id")
        for table in ("_slices_staging", "_depths"):
            con.execute(f"DROP TABLE {stage.NAME}.{table}")
        build_lod(con, slices="slices", keep_order_setting=True)
    finally:
        con.execute("SET preserve_insertion_order = false")
    stage.detach(con)


def _track_runs(con: duckdb.DuckDBPyConnection, limit: int) -> list[tuple[int, int]]:
    """The staged tracks in runs of consecutive ids holding at most `limit` slices (a bigger track is a run
    of its own): [(first track_id, last track_id)], in track order."""
    runs, lo, prev, n = [], None, None, 0
    for track, c in con.execute("SELECT track_id, count(*) FROM _slices_staging GROUP BY 1 ORDER BY 1").fetchall():
        if lo is not None and n + c > limit:
            runs.append((lo, prev))
            lo, n = None, 0
        if lo is None:
            lo = track
        n += c
        prev = track
    if lo is not None:
        runs.append((lo, prev))
    return [(int(a), int(b)) for a, b in runs]
