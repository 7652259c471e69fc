"""Export a trace as Parquet: one file per table, readable by pandas, polars, DuckDB, Spark, ... without acceltrace.

The files are written by DuckDB's COPY (streamed, bounded memory, zstd) into a temporary
directory next to the destination, which then replaces it in one rename, so a reader never
sees half an export. Columns and types are exactly the store's (docs/schema.md), times are
absolute int64 ns; docs/export.md describes the layout.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import duckdb

TABLES = ("trace_meta", "tracks", "slices", "flows", "counters")
FILE_NAMES = {f"{t}.parquet" for t in (*TABLES, "findings")}


class ExportError(Exception):
    """A destination we will not write to; str() is the message for the user."""


def tables_of(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables to export: the store's five, plus findings when the trace has been analysed."""
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    return list(TABLES) + (["findings"] if "findings" in views | tables else [])


def write_files(con: duckdb.DuckDBPyConnection, directory: Path) -> list[Path]:
    """Write every table's Parquet file into an existing, empty directory."""
    out = []
    for table in tables_of(con):
        path = directory / f"{table}.parquet"
        # no ORDER BY: the store keeps slices and counters sorted by (track_id, ts) and the other
        # tables in id order, and DuckDB's preserve_insertion_order (on) keeps that order here
        con.execute(
            f"COPY (SELECT * FROM {table}) TO '{_sql_str(path)}'"
            " (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
        )
        out.append(path)
    return out


def write_parquet(con: duckdb.DuckDBPyConnection, dest: Path) -> list[Path]:
    """Write the export directory at dest (replacing an earlier acceltrace Parquet export there)."""
    dest = Path(dest)
    if dest.exists():
        if not dest.is_dir():
            raise ExportError(f"{dest} exists and is not a directory; the Parquet export is a directory of files")
        strangers = [p.name for p in dest.iterdir() if p.name not in FILE_NAMES]
        if strangers:
            raise ExportError(f"{dest} already holds other files ({', '.join(sorted(strangers)[:3])}); "
                              "choose an empty or new directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    old = dest.parent / f".{dest.name}.old-{os.getpid()}"
    try:
        write_files(con, tmp)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return sorted(dest.iterdir())


def write_zip(con: duckdb.DuckDBPyConnection, work_dir: Path) -> Path:
    """The Parquet files in one zip archive (stored: Parquet is already compressed), for downloads."""
    work_dir = Path(work_dir)
    files_dir = work_dir / "parquet"
    files_dir.mkdir(parents=True)
    files = write_files(con, files_dir)
    archive = work_dir / "trace-parquet.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as zf:
        for f in files:
            zf.write(f, arcname=f.name)
    shutil.rmtree(files_dir, ignore_errors=True)
    return archive


def _sql_str(p: Path) -> str:
    return str(p).replace("'", "''")
