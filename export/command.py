"""`acceltrace export ID --format chrome|parquet --out PATH`: a stored trace, written for other tools.

chrome: Chrome Trace Event JSON (export/chrome.py), gzipped when PATH ends in .gz;
parquet: a directory with one Parquet file per table (export/parquet.py).
Both are written to a temporary name and renamed into place, so PATH never holds half a file.
"""

from __future__ import annotations

import gzip
import os
import secrets
import shutil
import sys
from pathlib import Path

import duckdb

from acceltrace.export.chrome import chrome_chunks
from acceltrace.export.parquet import ExportError, write_parquet
from acceltrace.store import duck
from acceltrace.store.catalog import Store

FORMATS = ("chrome", "parquet")


def resolve(store: Store, trace_id: str) -> str:
    """A ready trace's id from its id or a unique prefix of at least 4 characters."""
    row = store.get(trace_id)
    if row is None and len(trace_id) >= 4:
        rows = [r for r in store.list(status="ready") if r["id"].startswith(trace_id)]
        row = rows[0] if len(rows) == 1 else None
    if row is None or row["status"] != "ready":
        raise ExportError(f"no ready trace with id {trace_id!r} in {store.root}")
    return row["id"]


def write_chrome(con, dest: Path) -> int:
    """Stream the Chrome JSON into dest (gzip when it ends in .gz); returns the bytes written to disk."""
    dest = Path(dest)
    if dest.is_dir():
        raise ExportError(f"{dest} is a directory; the Chrome export is one file (e.g. {dest / 'trace.json'})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as raw:
            out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) if dest.name.endswith(".gz") else raw
            for chunk in chrome_chunks(con):
                out.write(chunk)
            if out is not raw:
                out.close()
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest.stat().st_size


def connect_for_export(store: Store, trace_id: str, memory_limit: str = "1GB", threads: int | None = None):
    """(connection, spill dir): read-only, its sorts and joins spilling into the store's tmp/.

    The spill directory is named <id>.<pid>.* so the store's sweep removes it if this process
    dies; the caller removes it after closing the connection.
    """
    con = store.connect(trace_id)
    spill = store.tmp_dir / f"{trace_id}.{os.getpid()}.export-spill-{secrets.token_hex(4)}"
    con.execute(f"SET temp_directory = '{str(spill).replace(chr(39), chr(39) * 2)}'")
    duck.give_up_memory(con, memory_limit)  # an operator's ACCELTRACE_DUCKDB_MEMORY wins (docs/operations.md)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con, spill


def export_trace(store: Store, trace_id: str, fmt: str, dest: Path) -> str:
    """Export one trace; returns a one-line description of what was written."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    tid = resolve(store, trace_id)
    con, spill = connect_for_export(store, tid)
    try:
        if fmt == "chrome":
            size = write_chrome(con, dest)
            return f"wrote {dest} (Chrome trace JSON, {size} bytes)"
        files = write_parquet(con, dest)
        total = sum(f.stat().st_size for f in files)
        return f"wrote {dest}/ ({', '.join(f.name for f in files)}; {total} bytes)"
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


def export_to_stdout(store: Store, trace_id: str, fmt: str) -> str:
    """`--out -`: the Chrome JSON streamed to standard output (for a pipe); Parquet is a directory."""
    if fmt != "chrome":
        raise ExportError("--out - (standard output) works only with --format chrome; "
                          "the Parquet export is a directory of files")
    tid = resolve(store, trace_id)
    con, spill = connect_for_export(store, tid)
    size = 0
    try:
        out = sys.stdout.buffer
        for chunk in chrome_chunks(con):
            out.write(chunk)
            size += len(chunk)
        out.flush()
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
    return f"wrote Chrome trace JSON to standard output ({size} bytes)"


def export_command(args) -> int:
    """The CLI handler (args: store, id, format, out)."""
    store = Store(args.store)
    try:
        if str(args.out) == "-":  # as most tools read it; a file named "-" would surprise
            print(export_to_stdout(store, args.id, args.format), file=sys.stderr)
            return 0
        print(export_trace(store, args.id, args.format, Path(args.out)))
    except ExportError as e:
        print(f"acceltrace: export failed: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"acceltrace: export failed: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    except duckdb.OutOfMemoryException as e:  # no file is left: the output is written beside it, then renamed
        print(f"acceltrace: export failed: {args.id}: DuckDB ran out of the export's memory even at one thread"
              f" ({str(e).splitlines()[0]}); " + ("the output above is cut short" if str(args.out) == "-"
                                                   else f"{args.out} was not written"), file=sys.stderr)
        return 1
    return 0
