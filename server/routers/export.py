"""Download a trace for other tools: Chrome Trace JSON (streamed as it is built) or Parquet (a zip of tables)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import weakref
import zlib
from enum import Enum
from typing import Iterator

import duckdb
from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from acceltrace.export.command import connect_for_export
from acceltrace.export.chrome import chrome_chunks
from acceltrace.export.parquet import write_zip
from acceltrace.server.deps import ApiError, AppState, get_state

router = APIRouter(prefix="/api/traces", tags=["export"])

EXPORTS_AT_ONCE = 2
EXPORT_MEMORY_LIMIT = "512MB"
_slots = threading.BoundedSemaphore(EXPORTS_AT_ONCE)
_CHUNK = 1 << 20


class ExportFormat(str, Enum):
    chrome = "chrome"
    parquet = "parquet"


@router.get(
    "/{trace_id}/export",
    summary="Download the trace as Chrome Trace JSON or Parquet",
    description="format=chrome: Chrome Trace Event JSON (opens in Perfetto and chrome://tracing), streamed while it "
                "is built; gzip=true compresses it (application/gzip). format=parquet: a zip holding one Parquet "
                "file per table (trace_meta, tracks, slices, flows, counters, and findings once analysed). "
                f"At most {EXPORTS_AT_ONCE} exports run at once; more wait their turn. See docs/export.md.",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/json": {}, "application/gzip": {}, "application/zip": {}}}},
)
def export(trace_id: str, format: ExportFormat = Query(..., description="chrome or parquet"),
           gzip: bool = Query(False, description="chrome only: gzip the JSON"),
           state: AppState = Depends(get_state)) -> StreamingResponse:
    row = state.ready_row(trace_id)
    stem = _file_stem(row["name"])
    if format is ExportFormat.chrome:
        body = _chrome_body(state, trace_id, gzip)
        media, filename = ("application/gzip", f"{stem}.json.gz") if gzip else ("application/json", f"{stem}.json")
    else:
        body = _parquet_body(state, trace_id)
        media, filename = "application/zip", f"{stem}-parquet.zip"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"}
    return StreamingResponse(body, media_type=media, headers=headers)


# Everything that can fail before the first byte (opening the trace, building the Parquet zip)
# happens here, before the 200 is sent, so a failure answers the {"error": ...} shape instead of
# an empty 200. What is held (slot, connection, temp files) is released when the body finishes,
# is closed early, or, should the client go away before it starts, when it is collected.
def _opened(state: AppState, trace_id: str):
    _slots.acquire()
    try:
        return connect_for_export(state.store, trace_id, memory_limit=EXPORT_MEMORY_LIMIT, threads=2)
    except duckdb.Error as e:
        _slots.release()
        raise ApiError(500, "export_failed", f"trace {trace_id!r} cannot be read for export "
                                             f"({type(e).__name__})") from None
    except BaseException:
        _slots.release()
        raise


def _release(con, spill, work=None) -> None:
    try:
        con.close()
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        _slots.release()


def _chrome_body(state: AppState, trace_id: str, gzip: bool) -> Iterator[bytes]:
    con, spill = _opened(state, trace_id)
    body = _chrome_chunks(con, gzip)
    return _Body(body, weakref.finalize(body, _release, con, spill))


def _chrome_chunks(con, gzip: bool) -> Iterator[bytes]:
    if not gzip:
        yield from chrome_chunks(con)
        return
    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    for chunk in chrome_chunks(con):
        out = z.compress(chunk)
        if out:
            yield out
    yield z.flush()


def _parquet_body(state: AppState, trace_id: str) -> Iterator[bytes]:
    con, spill = _opened(state, trace_id)
    # named <id>.<pid>.<...> so the store's sweep removes it should this process die mid-export
    work = state.store.tmp_dir / f"{trace_id}.{os.getpid()}.export-{threading.get_ident()}"
    try:
        archive = write_zip(con, work)
    except BaseException as e:
        _release(con, spill, work)
        if isinstance(e, (duckdb.Error, OSError)):
            raise ApiError(500, "export_failed", f"the Parquet export of {trace_id!r} failed "
                                                 f"({type(e).__name__})") from None
        raise
    body = _file_chunks(archive)
    return _Body(body, weakref.finalize(body, _release, con, spill, work))


def _file_chunks(path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


class _Body:
    """Iterates a generator, then runs its finalizer (at once when done or closed; else at collection)."""

    def __init__(self, gen: Iterator[bytes], done: weakref.finalize):
        self._gen, self._done = gen, done

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._gen
        finally:
            self._gen.close()
            self._done()


def _file_stem(name: str) -> str:
    """A safe download name from the trace's name (no quotes, slashes or control characters)."""
    base = re.sub(r"(\.(json|gz|sqlite|sqlite3|atrace|actr|tar|zip|trace|pt))+$", "", name or "", flags=re.I)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._")
    return safe[:100] or "trace"
