"""Live traces over HTTP: the captures' metadata, tiles, slices and search, and the push websocket.

A running capture is a catalog row with status 'live' (server/live.py); its trace page /t/{id} reads
these routes, the twins of /api/traces/{id}/... for a trace that is still growing. The websocket
/api/live/ws?trace=ID pushes, for each change, the time range it touched, so the page refetches only
the tiles over that range (docs/api.md, "Live traces"). /live redirects to the newest live trace.
"""

from __future__ import annotations

import asyncio
import hashlib
from urllib.parse import urlsplit

from fastapi import APIRouter, Path, Query, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse

from acceltrace.server import live
from acceltrace.server.deps import ApiError
from acceltrace.server.live_capture import LiveCapture
from acceltrace.tiles.query import MAX_LEVEL

router = APIRouter(tags=["live"])

TILE_MEDIA_TYPE = "application/octet-stream"
PUSH_WAIT_S = 1.0


def _manager(app) -> live.LiveManager | None:
    return getattr(app.state, "live_manager", None)


def _capture(request_or_ws, trace_id: str) -> LiveCapture:
    mgr = _manager(request_or_ws.app)
    cap = mgr.capture(trace_id) if mgr is not None else None
    if cap is None:
        raise ApiError(404, "not_found", f"no live trace with id {trace_id!r} on this server")
    return cap


def _live_capture(request: Request, trace_id: str) -> LiveCapture:
    cap = _capture(request, trace_id)
    if cap.status in ("final", "failed"):
        raise ApiError(409, "not_live", f"trace {trace_id!r} is no longer live (it is {cap.final_status or cap.status});"
                                        f" read it at /api/traces/{trace_id}")
    return cap


@router.get("/api/live", summary="Live sources and traces",
            description="The live sources this server follows (a growing .atrace or a running tracing daemon) and "
                        "the live traces made of them: id, name, status, events, rate, lost events.")
def live_index(request: Request):
    mgr = _manager(request.app)
    caps = mgr.live() if mgr is not None else []
    sources = [{"source": i, "kind": s["kind"]} for i, s in enumerate(live.live_sources(request.app))]
    return {"sources": sources,
            "traces": [{"id": c.trace_id, "name": c.name, "status": c.status, **c.counts(), "url": f"/t/{c.trace_id}"}
                       for c in caps]}


@router.get("/api/live/{trace_id}", summary="Live trace metadata",
            description="The metadata document of GET /api/traces/{id} for a capture still running (status "
                        "'live'), with a `live` block: head_ns (newest event time, relative), events, rate_per_s, "
                        "lost_events, segments, layout_version.")
def live_metadata(trace_id: str, request: Request) -> dict:
    return live.live_metadata(_live_capture(request, trace_id))


@router.get("/api/live/{trace_id}/tiles/{level}/{index}", summary="One tile of a live trace (binary)",
            description="As /api/traces/{id}/tiles/{level}/{index}, composed from the sealed segments (cached) and "
                        "the open head. The ETag names the segments it was made from: a tile away from the head "
                        "revalidates to 304 until new data reaches its time range.",
            response_class=Response)
def live_tile(request: Request, trace_id: str,
              level: int = Path(..., ge=0, le=MAX_LEVEL), index: int = Path(..., ge=0, le=(1 << 40)),
              group: str = Query(..., description="a tile group id from the metadata (e.g. g0)")) -> Response:
    cap = _live_capture(request, trace_id)
    ngroups = len(cap.layout.groups)
    if not (group.startswith("g") and group[1:].isdigit() and int(group[1:]) < ngroups):
        raise ApiError(404, "not_found", f"no tile group {group!r} in live trace {trace_id!r}")
    grp = int(group[1:])
    etag = '"' + hashlib.sha256(live.tile_etag_key(cap, level, index, grp).encode()).hexdigest()[:32] + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    inm = request.headers.get("if-none-match")
    if inm and etag in [t.strip() for t in inm.split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(live.tile(cap, level, index, grp), media_type=TILE_MEDIA_TYPE, headers=headers)


@router.get("/api/live/{trace_id}/slices/{slice_id}", summary="Slice details of a live trace",
            description="As /api/traces/{id}/slices/{sid}; the correlation chain also follows correlation ids "
                        "into other segments.")
def live_slice(trace_id: str, slice_id: int, request: Request) -> dict:
    d = _live_capture(request, trace_id).slice_detail(slice_id)
    if d is None:
        raise ApiError(404, "not_found", f"no slice {slice_id} in live trace {trace_id!r}")
    return d


@router.get("/api/live/{trace_id}/search", summary="Search a live trace's slices by name",
            description="As /api/traces/{id}/search (offset and limit), over every segment so far.")
def live_search(trace_id: str, request: Request, q: str = Query(..., min_length=1, max_length=500),
                offset: int = Query(0, ge=0, le=100_000), limit: int = Query(100, ge=1, le=1000)) -> dict:
    return _live_capture(request, trace_id).search(q, offset, limit)


def _same_origin(ws: WebSocket) -> bool:
    """No Origin (a non-browser client) or an Origin naming this very host and port."""
    origin = ws.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == (ws.headers.get("host") or "").lower()


@router.websocket("/api/live/ws")
async def live_ws(ws: WebSocket, trace: str = ""):
    if not _same_origin(ws):
        # browsers let any page open a websocket to localhost; only our own pages may read the events
        await ws.close(code=1008)
        return
    await ws.accept()
    try:
        cap = _capture(ws, trace)
    except ApiError as e:
        await ws.send_json({"type": "error", "message": e.message})
        await ws.close()
        return
    gone = asyncio.Event()

    async def watch_close():
        try:
            while (await ws.receive())["type"] != "websocket.disconnect":
                pass
        except (WebSocketDisconnect, RuntimeError):
            pass
        gone.set()

    watcher = asyncio.create_task(watch_close())
    seen = 0
    try:
        while not gone.is_set():
            seq = await run_in_threadpool(cap.wait_change, seen, PUSH_WAIT_S)
            if seq > seen or cap.status in ("final", "failed"):
                msg = live.push_message(cap, seq, seen)
                await ws.send_json(msg)
                seen = seq
                if msg["type"] == "final":
                    break
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        watcher.cancel()
    if not gone.is_set():
        try:
            await ws.close()
        except RuntimeError:
            pass


@router.get("/live", summary="The newest live trace",
            description="Redirects (307) to /t/{id} of the newest live trace, or to the trace list when none runs.",
            response_class=HTMLResponse,
            responses={307: {"description": "to /t/{id} of the newest live trace, or to /"},
                       200: {"description": "the page it redirects to (a client that follows redirects)",
                             "content": {"text/html": {}}}})
def live_page(request: Request):
    mgr = _manager(request.app)
    caps = mgr.live() if mgr is not None else []
    return RedirectResponse(f"/t/{caps[-1].trace_id}" if caps else "/", status_code=307)
