"""Where the builder stages slices until finish(): an attached in-memory DuckDB database.

Appends stay in memory (spilling to the temp directory beyond the builder's memory limit) and
only the sorted final table is written to the trace file. Unlike a TEMP table, an attached
database is seen by every cursor of the connection, so finish() can write `slices` into the
file on one cursor while another builds the level-of-detail tables from the same rows: the
two cores share the two biggest steps of time-to-viewable. The database is on the builder
connection's search path, so ingesters name `_slices_staging` without its catalog.
"""

from __future__ import annotations

import threading
from typing import Callable

import duckdb
import pyarrow as pa

NAME = "_stage"


def attach(con: duckdb.DuckDBPyConnection) -> None:
    (db,) = con.execute("SELECT current_database()").fetchone()
    con.execute(f"ATTACH ':memory:' AS {NAME}")
    con.execute(f"SET search_path = '{_quote_ident(db)},{NAME}'")


def finalize(con: duckdb.DuckDBPyConnection, depths: pa.Table | None) -> bool:
    """`_slices_final`: the staged slices with their depths filled in (the staging table renamed, so
    memory holds one copy of the slices). Returns whether its rows are already in the order `slices`
    is stored in (track_id, ts, depth).

    `depths` None: the staged rows came in that order with their depths (the builder checked as they
    came). Otherwise `depths` (slice_id, depth) are filled in place and the rows stay unsorted: the
    write of `slices` (write_slices_and_lod) sorts them on its way into the file, beside the LOD build,
    which needs no order (each of its tables is sorted in its own), so the sort is no longer a step of
    its own before both (it was a sorted in-memory copy: 65-134 ms for 127-222 k slices)."""
    if depths is None:
        con.execute(f"ALTER TABLE {NAME}._slices_staging RENAME TO _slices_final")
        return True
    if depths.num_rows:
        con.register("_depths_arrow", depths)
        try:
            con.execute(f"UPDATE {NAME}._slices_staging s SET depth = d.depth FROM _depths_arrow d"
                        " WHERE s.slice_id = d.slice_id")
        finally:
            con.unregister("_depths_arrow")
    con.execute(f"ALTER TABLE {NAME}._slices_staging RENAME TO _slices_final")
    return False


def write_slices_and_lod(con: duckdb.DuckDBPyConnection, build_lod: Callable, parallel: bool = True,
                         ordered: bool = True) -> None:
    """`slices` from `_slices_final` (sorted on the way in unless `ordered`), and build_lod over the
    same rows, at once; then detach.

    Each runs on a cursor of its own in a thread of its own (DuckDB releases the GIL); without
    `parallel` (a one-thread build: a fleet runs one per core) one after the other."""
    write = f"INSERT INTO slices SELECT * FROM {NAME}._slices_final" + ("" if ordered else " ORDER BY track_id, ts, depth")
    source = f"{NAME}._slices_final"
    con.execute("SET preserve_insertion_order = true")  # both writes store rows in their order
    try:
        if parallel:
            _in_parallel(lambda cur: cur.execute(write),
                         lambda cur: build_lod(cur, slices=source, keep_order_setting=True), con)
        else:
            con.execute(write)
            build_lod(con, slices=source, keep_order_setting=True)
    finally:
        con.execute("SET preserve_insertion_order = false")
    con.execute("RESET search_path")
    con.execute(f"DETACH {NAME}")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _in_parallel(first, second, con: duckdb.DuckDBPyConnection) -> None:
    """first(cursor) in a thread and second(cursor) here, each on a cursor of its own; the first
    error of either is raised once both are done."""
    errors: list[BaseException] = []

    def run(job):
        cur = con.cursor()
        try:
            job(cur)
        except BaseException as e:  # re-raised below, in the caller's thread
            errors.append(e)
        finally:
            cur.close()

    t = threading.Thread(target=run, args=(first,), name="slices-write")
    t.start()
    try:
        run(second)
    finally:
        t.join()
    if errors:
        raise errors[0]
