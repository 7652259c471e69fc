"""Download a trace for other tools: Chrome Trace JSON (streamed as it is built) or Parquet (a zip of tables)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import zlib
from enum import Enum
from typing import Iterator

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from ingest.export import connect_for_export
from ingest.export_chrome import chrome_chunks
from ingest.export_parquet import write_zip
from server.deps import AppState, get_state

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


# The bodies open what they need only once the response is being sent, inside their own
# try/finally, so a client that goes away early leaves no open connection, slot or temp file.
def _connect(state: AppState, trace_id: str):
    return connect_for_export(state.store, trace_id, memory_limit=EXPORT_MEMORY_LIMIT, threads=2)


def _chrome_body(state: AppState, trace_id: str, gzip: bool) -> Iterator[bytes]:
    with _slots:
        con, spill = _connect(state, trace_id)
        try:
            if not gzip:
                yield from chrome_chunks(con)
                return
            z = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip member
            for chunk in chrome_chunks(con):
                out = z.compress(chunk)
                if out:
                    yield out
            yield z.flush()
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)


def _parquet_body(state: AppState, trace_id: str) -> Iterator[bytes]:
    # named <id>.<pid>.<...> so the store's sweep removes it should this process die mid-export
    work = state.store.tmp_dir / f"{trace_id}.{os.getpid()}.export-{threading.get_ident()}"
    with _slots:
        try:
            con, spill = _connect(state, trace_id)
            try:
                archive = write_zip(con, work)
            finally:
                con.close()
                shutil.rmtree(spill, ignore_errors=True)
            with open(archive, "rb") as f:
                while chunk := f.read(_CHUNK):
                    yield chunk
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _file_stem(name: str) -> str:
    """A safe download name from the trace's name (no quotes, slashes or control characters)."""
    base = re.sub(r"(\.(json|gz|sqlite|sqlite3|atrace|actr|tar|zip|trace|pt))+$", "", name or "", flags=re.I)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._")
    return safe[:100] or "trace"
