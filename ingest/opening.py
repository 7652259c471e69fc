"""The build's DuckDB file, opened on a thread of its own while the importer starts; and how many
threads DuckDB runs in it.

Opening a new DuckDB database costs 11-15 ms before its first statement (the instance sets up its
catalog of built-in functions, its buffer manager and its threads): a tenth of a small trace's time to
viewable when it ran first, in front of everything else. The builder starts it on a thread instead
(TraceBuilder.con waits for it at first use); meanwhile the importer opens its input and the Chrome
reader reads and scans its first chunk. (The format is detected before the builder exists: whether the
build is small, and so its thread count at the open, depends on it: ingest/pipeline.py.)

DuckDB's threads: one for a small build from its start, its default (one per core) for any other,
and one from the write of `slices` (TraceBuilder._one_duckdb_thread). On a small trace the build's own
threads (the Chrome scan's, the writer's, the level-of-detail build's) keep both cores busy, and
DuckDB's worker only competed with them; a big trace's staging appends and link queries gain from two
(docs/performance.md, the twenty-first and twenty-third stops). The count is chosen once, at the
open: each change relaunches DuckDB's pool, which trims the whole heap (`malloc_trim`), so a switch
midway cost what it won (8-10 ms on the main thread at the write; at 830 MB, 0.2 s at 1 M slices).

A process that ingests again (an upload's ingest process, docs/operations.md) or knows an ingest is coming
(the `ingest` command, while it imports the rest) makes the instance ahead: make_spare() starts
`duckdb.connect()` on a thread (DuckDB releases the GIL there), at one thread as a small build runs, and the
next open attaches its file to that instance. The open itself then takes a few ms: on a small trace it ran
40-100 ms beside the scan (17-25 ms alone), and the writer waited for it (docs/performance.md,
thirty-second stop).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb

from acceltrace.ingest import stage
from acceltrace.ingest.made_ahead import OnThread
from acceltrace.store import schema
from acceltrace.store.duck import unsynced

# A small build's tables in row groups of this many rows, not DuckDB's 122,880: `slices` of A100 (67 k rows)
# and V100 (44 k) were one partial row group, compressed whole at the commit; in 16 k groups their writes took
# 119 -> 90 ms (V100), the ingests 6 and 12 % sooner; larger traces level (docs/performance.md, thirty-first stop)
SMALL_ROW_GROUP_ROWS = 16_384
BUILD_DB = "trace"  # the build's file, attached under this name and made the connection's default


def open_build_file(path: Path, memory_limit: str, threads: int | None,
                    row_group_rows: int | None = None) -> duckdb.DuckDBPyConnection:
    """A new trace file at `path` with every table but `slices` (finish() writes it) and the staged
    slices' in-memory database attached (ingest/stage.py); DuckDB at `threads` (None: its default), the
    file's tables in row groups of `row_group_rows` (None: DuckDB's 122,880). The file is attached as
    BUILD_DB, the connection's default database (a cursor starts elsewhere: store/duck.py cursor_like)."""
    con = _take_spare()
    spare_threads = SPARE_THREADS if con is not None else None
    if con is None:
        con = duckdb.connect()
    try:
        size = f" (ROW_GROUP_SIZE {int(row_group_rows)})" if row_group_rows else ""
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS {BUILD_DB}{size}")
        con.execute(f"USE {BUILD_DB}")
        con.execute(f"SET memory_limit = '{memory_limit}'")
        con.execute("SET preserve_insertion_order = false")
        unsynced(con)  # synced once, by the builder's close_synced()
        if threads != spare_threads:  # (the spare's count: a relaunch of DuckDB's pool only where it differs)
            con.execute(f"SET threads = {int(threads)}" if threads else "RESET threads")
        stage.attach(con)
        for table in schema.TABLES:
            if table != "slices":
                con.execute(schema.create_sql(table))
    except BaseException:
        con.close()
        raise
    return con


class Opening(OnThread):
    """open_build_file(...) on a thread; get() waits for the connection and raises what opening raised."""

    def __init__(self, path: Path, memory_limit: str, threads: int | None, row_group_rows: int | None = None):
        super().__init__(open_build_file, path, memory_limit, threads, row_group_rows, name="duckdb-open",
                         at_exit=True)


SPARE_THREADS = 1  # a spare instance's DuckDB threads: a small build's (the builds whose open is felt)
_spare: OnThread | None = None
_spare_lock = threading.Lock()


def _new_instance() -> duckdb.DuckDBPyConnection:
    return duckdb.connect(config={"threads": SPARE_THREADS})


def make_spare() -> None:
    """Start making an in-memory DuckDB instance for this process's next build to open its file in (see the
    module's comment); one at a time. Call it where nothing else needs the cores: before an ingest, or
    after one in a process that lives on."""
    global _spare
    with _spare_lock:
        if _spare is None or _spare.pid != os.getpid():
            _spare = OnThread(_new_instance, name="duckdb-spare", at_exit=True)


def _take_spare() -> duckdb.DuckDBPyConnection | None:
    """The spare, if one was made in this process and the making worked; else None (the open makes its own
    instance, and meets the error there if it is lasting)."""
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is None or spare.pid != os.getpid():
        return None
    try:
        return spare.get()
    except Exception:
        return None
