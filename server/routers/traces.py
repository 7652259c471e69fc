"""The catalog: list, upload (with progress), delete, and one trace's metadata."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from acceltrace.server import upload
from acceltrace.server.deps import ApiError, AppState, get_state
from acceltrace.server.first_view import VIEW_PX_MAX, VIEW_PX_MIN, build_first_view
from acceltrace.server.metadata import catalog_entry, trace_metadata

router = APIRouter(prefix="/api/traces", tags=["traces"])

PROGRESS_POLL_S = 0.1  # how often a progress stream reads its row: a page waiting on it learns of `ready` this late
PROGRESS_MAX_S = 3600.0


@router.get("", summary="List traces",
            description="The catalog, newest first: id, name, format, status (ingesting, ready, failed), "
                        "sizes, counts, created time, ingest progress and error.")
def list_traces(state: AppState = Depends(get_state)) -> dict:
    return {"traces": [catalog_entry(r) for r in state.store.list()]}


@router.post("", summary="Upload a trace",
             description="Multipart form field `file`, or a raw body with `?name=`. Streamed to disk; over the "
                         "size limit answers 413. Ingested in the background: 201 when ready within ~2 s, 202 "
                         "with status 'ingesting' otherwise (follow /api/traces/{id}/progress), 422 when the "
                         "ingest failed. Identical content already stored answers 200 with that trace.",
             status_code=201, responses={200: {"description": "deduplicated"}, 202: {"description": "ingesting"},
                                         413: {"description": "too large"}, 422: {"description": "ingest failed"}})
async def upload_trace(request: Request, name: str | None = Query(None, description="trace name (raw body uploads)"),
                       view_px: int | None = Query(None, ge=VIEW_PX_MIN, le=VIEW_PX_MAX,
                                               description="the width of the tracks area of the page that opens "
                                                           "the trace next: its first tiles are built meanwhile"),
                       state: AppState = Depends(get_state)):
    early: list = []  # the ingest begun as a JSON trace's first bytes arrived (upload.streamable)

    def on_file(path, filename, expected) -> bool:  # on the upload's thread
        if not upload.streamable(filename):
            return False
        early.append(upload.start_arriving_ingest(state, path, name or filename, expected))
        return True

    try:
        rec = await upload.receive(request, state, name, on_file=on_file)
    except BaseException:
        for j in early:  # the upload's error is the answer: no row of it stays behind
            j.discard = True  # (set here, before any await: even a cancelled request leaves no row)
            await run_in_threadpool(upload.discard_when_ended, state, j)
        raise
    display = name or rec.name
    if early:
        job = early[0]
        existing, claimed = None, False
        try:  # its ingest cannot publish before this mark: a duplicate's row is gone and its ingest stops
            existing = await run_in_threadpool(state.store.claim_content, job.trace_id, rec.size, rec.digest)
            claimed = True
        finally:
            if claimed and existing is None:
                upload.Arriving.complete(rec.path, rec.size)
            else:
                upload.Arriving.failed(rec.path, "the same content is already stored" if claimed
                                       else "the upload could not be registered")
        if existing is not None:
            job = existing
    else:
        job = await run_in_threadpool(upload.start_ingest, state, rec, display)
    if isinstance(job, dict):  # the same content is stored or being ingested (one trace per content)
        row = job
        if row["status"] == "ingesting":
            row = await run_in_threadpool(upload.wait_for_row, state, row["id"], state.ingest_wait_s)
        if row is None or row["status"] == "failed":
            raise ApiError(422, "ingest_failed", (row or {}).get("error")
                           or "the ingest of the same content, started by another upload, failed")
        body = {"id": row["id"], "name": row["name"], "status": row["status"], "deduplicated": True,
                "trace": catalog_entry(row)}
        if row["status"] == "ingesting":
            body["progress_url"] = f"/api/traces/{row['id']}/progress"
        return JSONResponse(body, status_code=200)
    row = await run_in_threadpool(upload.wait_published, state, job, state.ingest_wait_s)
    if row is not None and row["status"] == "ready":  # viewable; its analysis may still be running
        # its page follows at once: the handle opens and its first tiles are built meanwhile
        state.warm(job.trace_id, build_first_view(state, job.trace_id, view_px))
        return JSONResponse({"id": job.trace_id, "name": display, "status": "ready", "trace": catalog_entry(row)},
                            status_code=201)
    if job.done.is_set():
        raise ApiError(422, "ingest_failed", job.error or (row or {}).get("error") or "ingest failed")
    return JSONResponse({"id": job.trace_id, "name": display, "status": "ingesting",
                         "progress_url": f"/api/traces/{job.trace_id}/progress"}, status_code=202)


@router.get("/{trace_id}/progress", summary="Ingest progress (server-sent events)",
            description="A text/event-stream of JSON events {id, status, progress, error} each time the "
                        "catalog row changes, ending with status 'ready' or 'failed'.",
            response_class=StreamingResponse)
async def progress(trace_id: str,
                   view_px: int | None = Query(None, ge=VIEW_PX_MIN, le=VIEW_PX_MAX,
                                           description="the width of the tracks area of the page that follows the "
                                                       "stream: its first tiles are built as the trace is ready"),
                   state: AppState = Depends(get_state)):
    first = await run_in_threadpool(state.row, trace_id)

    async def events():
        row, last, waited = first, None, 0.0
        while True:
            cur = {"id": trace_id, "status": row["status"] if row else "removed",
                   "progress": (row or {}).get("progress"), "error": (row or {}).get("error")}
            if cur["status"] == "ready":  # the page that follows asks for its metadata and tiles next
                # its first tiles only where this stream saw the ingest end (not for any stream of a ready trace)
                saw_it = first is not None and first["status"] == "ingesting"
                state.warm(trace_id, build_first_view(state, trace_id, view_px if saw_it else None))
            if cur != last:
                yield f"data: {json.dumps(cur)}\n\n"
                last = cur
            if row is None or row["status"] != "ingesting" or waited > PROGRESS_MAX_S:
                return
            await asyncio.sleep(PROGRESS_POLL_S)
            waited += PROGRESS_POLL_S
            row = await run_in_threadpool(state.store.get, trace_id)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.delete("/{trace_id}", summary="Delete a trace", status_code=204,
               description="Removes the catalog row, then the trace file and its side files. 404 when unknown.")
def delete_trace(trace_id: str, state: AppState = Depends(get_state)) -> Response:
    row = state.row(trace_id)
    if row["status"] == "ingesting":
        raise ApiError(409, "not_ready", f"trace {trace_id!r} is still ingesting; delete it when it is done")
    state.forget(trace_id)
    state.store.remove(trace_id)
    return Response(status_code=204)


@router.get("/{trace_id}", summary="Trace metadata",
            description="Name, format, status, duration_ns, start_abs_ns (decimal string), counts, warnings, "
                        "dropped and lost events, PCIe link facts, tile levels, the tile groups and the tracks "
                        "(with max_depth) in UI order. A trace still ingesting or failed answers its catalog row.")
def get_trace(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    row = state.row(trace_id)
    if row["status"] != "ready":
        return catalog_entry(row)
    return trace_metadata(state.trace(trace_id), row)
