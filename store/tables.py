"""The tables of a stored trace and its side files, with row counts (the trace info page)."""

from __future__ import annotations

import duckdb

STORED = ("trace_meta", "tracks", "slices", "flows", "counters")


def _kind(database: str, name: str) -> str:
    if database.startswith("side_"):
        return "analysis"
    if name in STORED:
        return "stored"
    if name.startswith("lod_"):
        return "level of detail"
    if name.startswith("agg_"):
        return "views precompute"
    return "derived"


def trace_tables(cur: duckdb.DuckDBPyConnection) -> list[dict]:
    """[{name, kind, rows, columns}] for every table of the trace (database `trace`) and its attached
    side files (`side_*`, queried by their bare names), the stored five first."""
    found = cur.execute("""
        SELECT database_name, table_name, column_count FROM duckdb_tables()
        WHERE NOT temporary AND (database_name = 'trace' OR starts_with(database_name, 'side_'))""").fetchall()
    out = []
    for database, name, columns in found:
        (rows,) = cur.execute(f'SELECT count(*) FROM "{database}"."{name}"').fetchone()
        out.append({"name": name, "kind": _kind(database, name), "rows": int(rows), "columns": int(columns)})
    order = {k: i for i, k in enumerate(("stored", "analysis", "derived", "views precompute", "level of detail"))}
    out.sort(key=lambda t: (order[t["kind"]], STORED.index(t["name"]) if t["name"] in STORED else 0, t["name"]))
    return out
