"""Reading an Nsight Systems SQLite export: what it holds, and copying its tables into a DuckDB staging database.

Nsight's export schema changes between versions (2.x from Nsight 2022, 3.x from 2023 on): tables are created
lazily, columns come and go, and the metadata table was renamed. So we inventory tables and columns first, check
each event table we use has the columns we need (refusing the file with the table and column named otherwise),
and copy only the columns present, filling absent optional ones with NULL. Rows cross in bounded batches, as Arrow
columns, read by the compiled reader (`_sqlread.c`, the GIL released: straight from the file's table b-trees
where direct.py says that gives what SQLite gives, else sqlite3_step on the system libsqlite3) where it is built,
else by Python's sqlite3 (DuckDB's SQLite extension cannot be installed offline). All give the same rows: the
compiled reader hands a table whose values it would read differently (text in a number column, say) back to the
Python path, which then reads or refuses it as it always did. ACCELTRACE_NSYS_READER=python (or USE_COMPILED =
False) forces the Python path; =sqlite, the compiled reader through SQLite only.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.ingest.made_ahead import MadeAhead, Pool
from acceltrace.ingest.nsys import direct
from acceltrace.store import schema
from acceltrace.store.duck import quote_ident
from acceltrace.store.errors import IngestError

try:  # built by `pip install` (setup.py) where libsqlite3's header is; optional
    from acceltrace.ingest.nsys import _sqlread
except ImportError:  # pragma: no cover - depends on the install
    _sqlread = None

SQLITE_MAGIC = b"SQLite format 3\x00"
BATCH_ROWS = 65_536
COMPILED_BATCH_ROWS = 131_072
# a table this small is read on the Python path: the compiled reader's own connection, schema parse
# and prefetch thread cost more than its rows (same rows either way)
COMPILED_MIN_ROWS = 4096
USE_COMPILED = True
READER_ENV = "ACCELTRACE_NSYS_READER"


def compiled_reader() -> bool:
    """Whether copy_table reads with the compiled reader (built, and not turned off)."""
    return USE_COMPILED and _sqlread is not None and os.environ.get(READER_ENV, "").lower() != "python"

I, T, F = "BIGINT", "VARCHAR", "DOUBLE"

# table -> (required columns, optional columns); every column with its staging type.
# Tables are optional as a whole (Nsight creates them lazily) but at least one event table must exist.
EVENT_TABLES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        {"start": I, "end": I, "globalTid": I, "correlationId": I, "nameId": I},
        {"eventClass": I, "returnValue": I, "callchainId": I},
    ),
    "CUPTI_ACTIVITY_KIND_DRIVER": (
        {"start": I, "end": I, "globalTid": I, "correlationId": I, "nameId": I},
        {"eventClass": I, "returnValue": I, "callchainId": I},
    ),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        {"start": I, "end": I, "deviceId": I, "streamId": I, "correlationId": I},
        {"demangledName": I, "shortName": I, "mangledName": I, "contextId": I, "globalPid": I,
         "gridX": I, "gridY": I, "gridZ": I, "blockX": I, "blockY": I, "blockZ": I,
         "registersPerThread": I, "staticSharedMemory": I, "dynamicSharedMemory": I,
         "localMemoryTotal": I, "launchType": I, "graphNodeId": I},
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        {"start": I, "end": I, "deviceId": I, "streamId": I, "correlationId": I, "bytes": I, "copyKind": I},
        {"srcKind": I, "dstKind": I, "contextId": I, "globalPid": I, "srcDeviceId": I, "dstDeviceId": I,
         "graphNodeId": I},
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        {"start": I, "end": I, "deviceId": I, "streamId": I, "correlationId": I, "bytes": I},
        {"value": I, "memKind": I, "contextId": I, "globalPid": I, "graphNodeId": I},
    ),
    "NVTX_EVENTS": (
        {"start": I, "eventType": I},
        {"end": I, "text": T, "textId": I, "globalTid": I, "endGlobalTid": I, "domainId": I,
         "rangeId": I, "category": I, "color": I},
    ),
    "GPU_METRICS": (
        {"timestamp": I, "typeId": I, "metricId": I, "value": F},
        {},
    ),
}

# CPU-side tables drawn on the cpu lane when the export has them (never required): OS runtime
# calls, thread scheduling, and CPU samples with their call stacks.
CPU_TABLES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "OSRT_API": ({"start": I, "end": I, "globalTid": I, "nameId": I},
                 {"returnValue": I, "nestingLevel": I, "callchainId": I}),
    "SCHED_EVENTS": ({"start": I, "cpu": I, "isSchedIn": I, "globalTid": I}, {}),
    "COMPOSITE_EVENTS": ({"id": I, "start": I, "globalTid": I}, {"cpu": I, "threadState": I}),
    "SAMPLING_CALLCHAINS": ({"id": I, "symbol": I, "module": I, "stackDepth": I}, {}),
}

# What each table we read gives, for trace_meta not_present (the trace info says what a file lacks).
GIVES = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": "CUDA runtime API calls", "CUPTI_ACTIVITY_KIND_DRIVER": "CUDA driver API calls",
    "CUPTI_ACTIVITY_KIND_KERNEL": "kernels", "CUPTI_ACTIVITY_KIND_MEMCPY": "memory copies",
    "CUPTI_ACTIVITY_KIND_MEMSET": "memsets", "NVTX_EVENTS": "NVTX ranges and marks",
    "GPU_METRICS": "GPU metrics (counters)", "OSRT_API": "OS runtime library calls",
    "SCHED_EVENTS": "thread scheduling", "COMPOSITE_EVENTS": "CPU samples",
    "SAMPLING_CALLCHAINS": "CPU sample call stacks",
}

# Tables that name things; used when present.
NAME_TABLES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "StringIds": ({"id": I, "value": T}, {}),
    "ThreadNames": ({"nameId": I, "globalTid": I}, {}),
    "PROCESSES": ({"globalPid": I, "pid": I, "name": T}, {}),
    "TARGET_INFO_GPU": ({"id": I}, {"name": T, "busLocation": T}),
    "TARGET_INFO_GPU_METRICS": ({"typeId": I, "metricId": I, "metricName": T}, {"typeName": T, "sourceId": I}),
    "ENUM_NSYS_EVENT_CLASS": ({"id": I, "name": T}, {}),
    "ENUM_CUDA_MEM_KIND": ({"id": I, "name": T}, {"label": T}),
}

# An event table needs these other tables when it has rows (names come from them).
NEEDS: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("StringIds",),
    "CUPTI_ACTIVITY_KIND_DRIVER": ("StringIds",),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("StringIds",),
    "GPU_METRICS": ("TARGET_INFO_GPU_METRICS",),
}


@dataclass
class Export:
    """An open Nsight export: its tables, their columns and row counts, its metadata."""

    name: str
    con: sqlite3.Connection
    uri: str | None = None  # the read-only URI `con` was opened with (the compiled reader opens its own)
    path: Path | None = None  # the file (the compiled reader reads its b-trees straight from it where it can)
    columns: dict[str, set[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)

    def has(self, table: str) -> bool:
        return self.rows.get(table, 0) > 0

    def close(self) -> None:
        self.con.close()


def open_export(path: Path, name: str) -> Export:
    """Open read-only and inventory; IngestError for anything that is not a readable Nsight export."""
    with open(path, "rb") as f:
        if f.read(16) != SQLITE_MAGIC:
            raise IngestError(name, "not an SQLite database (expected the header 'SQLite format 3')", "byte 0")
    # immutable=1: no locks, no journal lookups; the file must not change while we read (it is ours or the user's input)
    uri = f"file:{quote(str(path))}?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    ex = Export(name=name, con=con, uri=uri, path=path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            ex.columns[t] = {r[1] for r in con.execute(f'PRAGMA table_info({quote_ident(t)})')}
        for t in list(EVENT_TABLES) + list(NAME_TABLES) + list(CPU_TABLES):
            if t in ex.columns:
                (ex.rows[t],) = con.execute(f'SELECT count(*) FROM {quote_ident(t)}').fetchone()
        for meta_table in ("EXPORT_META_DATA", "META_DATA_EXPORT"):  # 2.x name, 3.x name
            if {"name", "value"} <= ex.columns.get(meta_table, set()):
                ex.meta.update({str(k): str(v) for k, v in con.execute(f"SELECT name, value FROM {meta_table}")})
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:  # a wrecked schema can hold names that are not UTF-8
        con.close()
        raise IngestError(name, f"damaged or unreadable SQLite database ({e}); expected an Nsight Systems export") from None
    present = [t for t in EVENT_TABLES if t in ex.columns]
    if not present:
        con.close()
        if "StringIds" in ex.columns or any(t.startswith("TARGET_INFO_") for t in ex.columns):
            raise IngestError(name, "is an Nsight Systems export without CUDA, NVTX or GPU metric tables"
                              f" (expected at least one of: {', '.join(EVENT_TABLES)}); nothing to show")
        raise IngestError(name, "is an SQLite database but not an Nsight Systems export: it has none of the"
                          f" tables {', '.join(EVENT_TABLES)}")
    for t in present:
        _check_columns(ex, t, EVENT_TABLES[t][0])
        if ex.rows.get(t, 0) > 0:
            for needed in NEEDS.get(t, ()):
                if needed not in ex.columns:
                    con.close()
                    raise IngestError(name, f"table {t} has rows but table {needed} (its names) is missing")
                _check_columns(ex, needed, NAME_TABLES[needed][0])
    if ex.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        if not {"demangledName", "shortName"} & ex.columns["CUPTI_ACTIVITY_KIND_KERNEL"]:
            con.close()
            raise IngestError(name, "table CUPTI_ACTIVITY_KIND_KERNEL lacks both demangledName and shortName"
                              " (expected at least one for kernel names)")
    if ex.has("NVTX_EVENTS") and not {"text", "textId"} & ex.columns["NVTX_EVENTS"]:
        con.close()
        raise IngestError(name, "table NVTX_EVENTS lacks both text and textId (expected one for range names)")
    return ex


def _check_columns(ex: Export, table: str, required: dict[str, str]) -> None:
    missing = [c for c in required if c not in ex.columns[table]]
    if missing:
        ex.con.close()
        raise IngestError(ex.name, f"table {table} lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
                          f" (export schema {ex.meta.get('EXPORT_SCHEMA_VERSION', 'unknown')}); cannot read it")


def session_start_utc_ns(ex: Export) -> int | None:
    """UTC epoch ns of Nsight timestamp 0 (TARGET_INFO_SESSION_START_TIME), if recorded."""
    if "utcEpochNs" not in ex.columns.get("TARGET_INFO_SESSION_START_TIME", set()):
        return None
    row = ex.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) else None


def copy_table(ex: Export, stage: duckdb.DuckDBPyConnection, table: str, spec: tuple[dict, dict],
               as_name: str | None = None, batch_rows: int | None = None) -> int:
    """Copy one table's known columns into the staging database (absent optional columns as NULL)."""
    return copy_tables(ex, stage, [(table, spec, as_name)], batch_rows)


def copy_tables(ex: Export, stage: duckdb.DuckDBPyConnection, jobs: list[tuple[str, tuple[dict, dict], str | None]],
                batch_rows: int | None = None, workers: int = 2) -> int:
    """copy_table for each (table, spec, as_name) of `jobs`; returns the rows copied.

    The tables the compiled reader takes are read `workers` at a time, each on a DuckDB cursor of
    its own (SQLite steps and DuckDB appends release the GIL: one table's reader is one core's
    work, so two big tables take the time of one). Whatever it hands back (a value it would
    read differently) and the small tables are then read one by one on the Python path, on this
    thread (the export's sqlite3 connection is this thread's). Errors are raised in job order."""
    targets = []
    for table, (required, optional), as_name in jobs:
        cols = {**required, **optional}
        target = as_name or table
        stage.execute(f'CREATE TABLE {quote_ident(target)} ({", ".join(f"{quote_ident(c)} {t}" for c, t in cols.items())})')
        targets.append((table, target, cols))
    compiled = [j for j in targets if _compiled_takes(ex, j[0], j[2])]
    done: dict[str, int | None | BaseException] = {}
    if compiled:
        # which tables the reader takes from the file's b-tree, asked of SQLite here (`ex.con` is this thread's)
        layouts = {target: _layout(ex, table, cols) for table, target, cols in compiled}

        def run(job):
            table, target, cols = job
            cur = stage.cursor()
            try:
                return _copy_compiled(ex, cur, table, target, cols, batch_rows, layouts[target])
            finally:
                cur.close()
        order = sorted(compiled, key=lambda j: -ex.rows.get(j[0], 0))  # the biggest first: the two end together
        with Pool(max(1, min(workers, len(order))), thread_name_prefix="nsys-copy") as pool:
            futures = {j[1]: pool.submit(run, j) for j in order}
        for target, fut in futures.items():
            try:
                done[target] = fut.result()
            except BaseException as e:  # raised below in job order
                done[target] = e
    n = 0
    for table, target, cols in targets:
        got = done.get(target)
        if isinstance(got, BaseException):
            raise got
        if got is None and target in done:
            stage.execute(f'DELETE FROM {quote_ident(target)}')  # a value it reads otherwise: the Python path reads the table
        if got is None and table in ex.columns:
            got = _copy_python(ex, stage, table, target, cols, batch_rows)
        n += got or 0
    return n


def _compiled_takes(ex: Export, table: str, cols: dict) -> bool:
    return (ex.uri is not None and compiled_reader() and ex.rows.get(table, COMPILED_MIN_ROWS) >= COMPILED_MIN_ROWS
            and any(c in ex.columns.get(table, set()) for c in cols))


def _copy_python(ex: Export, stage: duckdb.DuckDBPyConnection, table: str, target: str, cols: dict,
                 batch_rows: int | None) -> int:
    """copy_table's rows through Python's sqlite3 (values checked and named one by one)."""
    have = ex.columns.get(table, set())
    names = list(cols)
    n = 0
    try:
        fast = all(t == I for t in cols.values()) and _all_integers(ex, table, [c for c in names if c in have])
        def col(c: str) -> str:
            if c not in have:
                return "NULL"
            if c in _TIME_COLUMNS and cols[c] == I:
                return (f"CASE WHEN typeof({quote_ident(c)}) = 'integer' AND {quote_ident(c)} NOT BETWEEN {-TIME_LIMIT_NS}"
                        f" AND {TIME_LIMIT_NS} THEN NULL ELSE {quote_ident(c)} END")  # text stays, to be named
            return f"CASE WHEN {quote_ident(c)} = {_NULL_INT} THEN NULL ELSE {quote_ident(c)} END" if cols[c] == I else quote_ident(c)

        if fast:
            # every value is an integer or NULL (checked in SQLite): one int64 matrix per batch, NULL as a sentinel
            select = ", ".join(f"coalesce({col(c)}, {_NULL_INT})" if c in have else str(_NULL_INT) for c in names)
        else:
            select = ", ".join(f"{col(c)} AS {quote_ident(c)}" for c in names)
        cur = ex.con.execute(f'SELECT {select} FROM {quote_ident(table)}')
        while rows := cur.fetchmany(batch_rows or BATCH_ROWS):
            if fast:
                matrix = np.array(rows, dtype=np.int64).reshape(len(rows), len(names))
                arrays = [pa.array(matrix[:, i], mask=matrix[:, i] == _NULL_INT) for i in range(len(names))]
            else:
                columns = list(zip(*rows))
                arrays = [_column(ex.name, table, c, columns[i], schema.arrow_type(cols[c]), n) for i, c in enumerate(names)]
            stage.register("_copy_batch", pa.table(dict(zip(names, arrays))))
            try:
                stage.execute(f'INSERT INTO {quote_ident(target)} SELECT * FROM _copy_batch')
            finally:
                stage.unregister("_copy_batch")
            n += len(rows)
    except sqlite3.DatabaseError as e:
        raise IngestError(ex.name, f"damaged SQLite database while reading table {table} ({e})",
                          f"after row {n}") from None
    return n


def _kinds(cols: dict, present: list[str]) -> str:  # the compiled reader's letter for each column's staging type
    return "".join(("t" if c in _TIME_COLUMNS else "i") if cols[c] == I else "f" if cols[c] == F else "s"
                   for c in present)


def _layout(ex: Export, table: str, cols: dict) -> tuple | None:
    present = [c for c in cols if c in ex.columns.get(table, set())]
    if ex.path is None or not present or os.environ.get(READER_ENV, "").lower() == "sqlite":
        return None
    return direct.layout(ex.con, ex.path, table, present, _kinds(cols, present))


def _copy_compiled(ex: Export, stage: duckdb.DuckDBPyConnection, table: str, target: str, cols: dict,
                   batch_rows: int | None, layout: tuple | None = None) -> int | None:
    """copy_table's rows through the compiled reader; None when a value needs the Python path. With a
    `layout` (direct.py) it reads the file's b-tree; what that read does not take, SQLite reads again."""
    if layout is not None:
        try:
            return _read_compiled(ex, stage, table, target, cols, batch_rows, layout)
        except _sqlread.Unsupported:
            stage.execute(f'DELETE FROM {quote_ident(target)}')
    return _read_compiled(ex, stage, table, target, cols, batch_rows, None)


def _read_compiled(ex: Export, stage: duckdb.DuckDBPyConnection, table: str, target: str, cols: dict,
                   batch_rows: int | None, layout: tuple | None) -> int | None:
    names, have = list(cols), ex.columns.get(table, set())
    present = [c for c in names if c in have]
    if not present:
        return None
    kinds = _kinds(cols, present)
    n = 0
    try:
        q = _sqlread.Query(ex.uri, f'SELECT {", ".join(map(quote_ident, present))} FROM {quote_ident(table)}', kinds,
                           table=layout)
    except _sqlread.Error as e:
        raise IngestError(ex.name, f"damaged SQLite database while reading table {table} ({e.args[0]})",
                          "after row 0") from None
    step = batch_rows or COMPILED_BATCH_ROWS
    # SQLite steps the next batches on a thread of their own (no GIL) while DuckDB inserts this one
    batches = MadeAhead(iter(lambda: q.fetch(step), None), depth=1, name="nsys-read")
    try:
        for rows, buffers in batches:
            arrays, it = {}, iter(zip(kinds, buffers))
            for c in names:
                arrays[c] = _arrow(*next(it), rows) if c in have else pa.nulls(rows, schema.arrow_type(cols[c]))
            stage.register("_copy_batch", pa.table(arrays))
            try:
                stage.execute(f'INSERT INTO {quote_ident(target)} SELECT * FROM _copy_batch')
            finally:
                stage.unregister("_copy_batch")
            n += rows
    except _sqlread.Mismatch:
        return None
    except _sqlread.Error as e:
        raise IngestError(ex.name, f"damaged SQLite database while reading table {table} ({e.args[0]})",
                          f"after row {n}") from None
    finally:
        batches.close()  # the fetch under way ends before its query is closed
        q.close()
    return n


def _arrow(kind: str, buffers: tuple, rows: int) -> pa.Array:
    """One column of the compiled reader's batch as an Arrow array (its buffers, not copied again)."""
    valid = np.frombuffer(buffers[-1], dtype=np.bool_)
    nulls = not valid.all()
    if kind == "s":
        bitmap = pa.array(valid).buffers()[1] if nulls else None
        return pa.LargeStringArray.from_buffers(rows, pa.py_buffer(buffers[0]), pa.py_buffer(buffers[1]), bitmap)
    values = np.frombuffer(buffers[0], dtype=np.float64 if kind == "f" else np.int64)
    return pa.array(values, mask=~valid if nulls else None)


_NULL_INT = -(1 << 63)  # INT64_MIN: no Nsight id, count or timestamp takes it
# A timestamp beyond +-2^62 ns (146 years) is corruption: read as missing, so the row is counted
# with the rows that have no start or end, and no later subtraction can overflow int64.
TIME_LIMIT_NS = 1 << 62
_TIME_COLUMNS = frozenset({"start", "end", "timestamp"})


def _all_integers(ex: Export, table: str, columns: list[str]) -> bool:
    """Whether every value of these columns is an integer (other than INT64_MIN) or NULL: one scan, in SQLite."""
    if not columns:
        return True
    checks = " OR ".join(f"(typeof({quote_ident(c)}) NOT IN ('integer', 'null') OR {quote_ident(c)} = {_NULL_INT})" for c in columns)
    (bad,) = ex.con.execute(f'SELECT EXISTS (SELECT 1 FROM {quote_ident(table)} WHERE {checks})').fetchone()
    return not bad


def _column(file: str, table: str, col: str, values: tuple, typ: pa.DataType, first_row: int) -> pa.Array:
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        # Only on the error path: find the first value of the wrong kind, to name it.
        want = {pa.int64(): (int,), pa.float64(): (int, float), pa.string(): (str,)}[typ]
        for i, v in enumerate(values):
            if v is not None and (not isinstance(v, want) or isinstance(v, bool)
                                  or (typ == pa.int64() and not -(1 << 63) <= v < (1 << 63))):
                kind = "an integer" if typ == pa.int64() else "a number" if typ == pa.float64() else "text"
                raise IngestError(file, f"table {table} column {col}: expected {kind}, found {v!r}",
                                  f"row {first_row + i + 1}") from None
        raise
