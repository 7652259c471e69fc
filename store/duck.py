"""Every DuckDB connection the product opens gets explicit bounds (docs/operations.md).

DuckDB's defaults are 80 % of the machine's memory and, for an in-memory database, a `.tmp`
folder in the current working directory with no size cap: an analysis of a large trace could
take most of the RAM and spill tens of GB into whatever directory the user ran the command
from, and leave it behind after a kill. Here each connection gets a memory limit, a spill
directory of its own inside the store's tmp/ (under `duck.<pid>.spill/`, so the store's sweep
removes it once that process is gone; this process removes its own at exit) and a cap on it.

Limits: ACCELTRACE_DUCKDB_MEMORY (default 2GB), ACCELTRACE_DUCKDB_TEMP_MAX (default 16GB),
ACCELTRACE_DUCKDB_THREADS (default: DuckDB's, one per core).
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import duckdb

DEFAULT_MEMORY = "2GB"
DEFAULT_TEMP_MAX = "16GB"

_seq = itertools.count()
_roots: set[Path] = set()  # this process's spill roots, one per store tmp/ it used
_lock = threading.Lock()
_memory_here: contextvars.ContextVar[str | None] = contextvars.ContextVar("duckdb_memory_here", default=None)


@contextmanager
def memory_limit_here(limit: str):
    """The connections this thread opens in the body get this memory limit instead of the default (the operator's
    ACCELTRACE_DUCKDB_MEMORY still wins; a limit a caller names for one connection too)."""
    token = _memory_here.set(limit)
    try:
        yield
    finally:
        _memory_here.reset(token)


def give_up_memory(con: duckdb.DuckDBPyConnection, limit: str) -> None:
    """con's memory limit lowered to `limit` for what follows (what it holds past it goes to its spill files), for a
    step whose memory is its own (numpy, not DuckDB's); unless the operator set ACCELTRACE_DUCKDB_MEMORY."""
    if not _operators_memory():
        con.execute(f"SET memory_limit = '{limit}'")


def _operators_memory() -> str | None:
    """ACCELTRACE_DUCKDB_MEMORY: the operator's limit, over any the product picks for a step."""
    return os.environ.get("ACCELTRACE_DUCKDB_MEMORY") or None


def settings(tmp_dir: Path, memory_limit: str | None = None) -> dict:
    """The config of one new connection: a fresh spill directory under tmp_dir and the limits."""
    root = Path(tmp_dir) / f"duck.{os.getpid()}.spill"
    root.mkdir(parents=True, exist_ok=True)  # DuckDB makes the last level only
    with _lock:
        if not _roots:
            atexit.register(_cleanup)
        _roots.add(root)
    cfg = {
        "memory_limit": memory_limit or _operators_memory() or _memory_here.get() or DEFAULT_MEMORY,
        "temp_directory": str(root / str(next(_seq))),
        "max_temp_directory_size": os.environ.get("ACCELTRACE_DUCKDB_TEMP_MAX", DEFAULT_TEMP_MAX),
    }
    if os.environ.get("ACCELTRACE_DUCKDB_THREADS"):
        cfg["threads"] = int(os.environ["ACCELTRACE_DUCKDB_THREADS"])
    return cfg


def memory_connection(tmp_dir: Path, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB (attach files to it) bounded in memory and spill space."""
    return duckdb.connect(":memory:", config=settings(tmp_dir, memory_limit))


def search_path(con: duckdb.DuckDBPyConnection) -> str:
    ((path,),) = con.execute("SELECT current_setting('search_path')").fetchall()
    return path


def cursor_like(con: duckdb.DuckDBPyConnection, path: str | None = None) -> duckdb.DuckDBPyConnection:
    """A cursor of con's that names tables as con does. A new cursor starts in the instance's default
    database, and a build's file is attached to an in-memory instance (ingest/opening.py): con's search path
    (the build's file, then the staged slices) is copied, so an unqualified name means the same table.
    `path`: con's search_path(), read beforehand, where con may be busy on another thread meanwhile."""
    path = search_path(con) if path is None else path
    cur = con.cursor()
    cur.execute("SET search_path = " + "'" + path.replace("'", "''") + "'")
    return cur


def unsynced(con: duckdb.DuckDBPyConnection) -> None:
    """For a file built in a temp path and thrown away if the build fails (the store sweeps it after
    a crash): its commits are not synced to the disk one by one (a build's dozens of fdatasyncs:
    28 ms of a 0.75 s ingest); close_synced() syncs the whole file once, before it is published."""
    con.execute("SET fsync_mode = 'NONE'")


def close_synced(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """The last CHECKPOINT of a file built unsynced() at `path`, the connection closed, then the file
    synced to the disk, once.

    DuckDB's own synced checkpoint syncs twice: its new blocks, then the header that points at them
    (so a crash between leaves the previous state whole). A file nobody opens until it is published
    needs only one sync, before the publication: a crash before it leaves a temp file the store
    sweeps. On A100's sample (0.32 s) the checkpoint went 66 -> 43 ms plus 4.5 ms for the one sync."""
    con.execute("CHECKPOINT")
    con.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cleanup() -> None:
    with _lock:
        roots = list(_roots)
        _roots.clear()
    for d in roots:
        shutil.rmtree(d, ignore_errors=True)


def quote_ident(name: str) -> str:
    """A name as a quoted SQL identifier (a table, column or database named by a file or a trace)."""
    return '"' + name.replace('"', '""') + '"'


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    """INSERT rows (tuples in the table's column order) as one Arrow batch.

    DuckDB's executemany runs one statement per row: 40 ms for a few hundred tracks, which is
    noticeable on a trace that takes a second to open. Columns are built from the rows, so
    Python values convert once, and DuckDB casts each to the table's type on insert.
    """
    if not rows:
        return
    import pyarrow as pa  # only writers need it

    names = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
    if len(rows[0]) != len(names):
        raise ValueError(f"insert_rows: {table} has {len(names)} columns, rows have {len(rows[0])}")
    batch = pa.table({f"c{i}": pa.array([r[i] for r in rows]) for i in range(len(names))})
    view = f"_rows_{table}"
    con.register(view, batch)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM {view}")
    finally:
        con.unregister(view)
