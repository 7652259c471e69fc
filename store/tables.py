"""The tables of a stored trace and its side files, with row counts (the trace info page)."""

from __future__ import annotations

from pathlib import Path

import duckdb

STORED = ("trace_meta", "tracks", "slices", "flows", "counters")


def _kind(name: str) -> str:
    if name in STORED:
        return "stored"
    if name.startswith("lod_"):
        return "level of detail"
    if name.startswith("agg_"):
        return "views precompute"
    return "derived"


def trace_tables(cur: duckdb.DuckDBPyConnection, side_files: tuple[Path, ...] = ()) -> list[dict]:
    """[{name, kind, rows, columns}] for every table of the trace (database `trace`) and of its side
    files (the findings: queried by their bare names), the stored five first. A side file is read
    through a connection of its own, attached read-only (as the query sandbox does), so a cursor of
    the shared trace connection never attaches anything."""
    found = cur.execute("""
        SELECT table_name, column_count FROM duckdb_tables()
        WHERE NOT temporary AND database_name = 'trace'""").fetchall()
    out = []
    for name, columns in found:
        (rows,) = cur.execute(f'SELECT count(*) FROM trace."{name}"').fetchone()
        out.append({"name": name, "kind": _kind(name), "rows": int(rows), "columns": int(columns)})
    for path in side_files:
        out += _side_tables(Path(path))
    order = {k: i for i, k in enumerate(("stored", "analysis", "derived", "views precompute", "level of detail"))}
    out.sort(key=lambda t: (order[t["kind"]], STORED.index(t["name"]) if t["name"] in STORED else 0, t["name"]))
    return out


def _side_tables(path: Path) -> list[dict]:
    if not path.exists():
        return []
    con = duckdb.connect(":memory:", config={"memory_limit": "256MB"})  # counts only
    try:
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS side (READ_ONLY)")
        found = con.execute("SELECT table_name, column_count FROM duckdb_tables() WHERE database_name = 'side'").fetchall()
        return [{"name": name, "kind": "views precompute" if name.startswith("agg_") else "analysis",
                 "columns": int(columns),
                 "rows": int(con.execute(f'SELECT count(*) FROM side."{name}"').fetchone()[0])} for name, columns in found]
    except duckdb.Error:  # being rewritten by a running analysis: listed once it is done
        return []
    finally:
        con.close()
