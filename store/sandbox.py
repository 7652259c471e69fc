"""Read-only SQL on one trace: no writes, no other files, no extensions, no network, bounded time.

One fresh connection per query: the trace attached READ_ONLY, side files (findings)
visible as views, then external access disabled and the configuration locked, so a
query cannot ATTACH, COPY, read_csv, INSTALL, LOAD from disk or SET its way out. A
watchdog interrupts a query that outruns its time limit.
"""

from __future__ import annotations

import threading

import duckdb

from acceltrace.store.catalog import Store

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000


class QueryError(Exception):
    """The query was refused, failed or ran out of time; str() says which and why."""

    def __init__(self, message: str, code: str = "query_failed"):
        super().__init__(message)
        self.code = code


def open_sandboxed(store: Store, trace_id: str, memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    con = store.connect(trace_id)
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET threads = 2")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_readonly(
    store: Store,
    trace_id: str,
    sql: str,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    params: list | None = None,
) -> tuple[list[str], list[tuple], bool]:
    """(columns, rows, truncated). Raises QueryError with a clear message."""
    if not sql or not sql.strip():
        raise QueryError("empty query; expected one SQL statement", "bad_request")
    con = open_sandboxed(store, trace_id)
    timed_out = threading.Event()

    def stop():
        timed_out.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, stop) if timeout_s else None
    try:
        if timer:
            timer.start()
        cur = con.execute(sql, params or [])
        if cur.description is None:
            return [], [], False
        cols = [d[0] for d in cur.description]
        if max_rows is None:
            rows = cur.fetchall()
            truncated = False
        else:
            rows = cur.fetchmany(max_rows + 1)
            truncated = len(rows) > max_rows
            rows = rows[:max_rows]
        return cols, rows, truncated
    except duckdb.Error as e:
        if timed_out.is_set():
            raise QueryError(f"query stopped after the {timeout_s:g} s time limit", "query_timeout") from None
        kind = type(e).__name__
        code = "query_refused" if kind in ("PermissionException", "InvalidInputException") else "query_failed"
        raise QueryError(f"{kind}: {e}", code) from None
    finally:
        if timer:
            timer.cancel()
        con.close()
