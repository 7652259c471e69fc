"""Live traces over HTTP: the list of sources, the websocket that streams one, and the /live page.

What the sources are and how a growing file becomes messages is server/live.py; this router
checks the websocket's origin, moves those messages every PUSH_INTERVAL_S and notices the
client going away (docs/tracing.md, "Live view").
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import HTMLResponse

from acceltrace.formats.atrace.layout import AtraceError
from acceltrace.server import live
from acceltrace.server.deps import AppState, get_state

router = APIRouter(tags=["live"])


@router.get("/api/live", summary="Live sources",
            description="The live sources this server follows (a growing .atrace or a running tracing daemon) "
                        "and the websocket that streams them: /api/live/ws?source=N.")
def live_index(request: Request):
    return {"sources": live.source_index(request.app)}


def _same_origin(ws: WebSocket) -> bool:
    """No Origin (a non-browser client) or an Origin naming this very host and port."""
    origin = ws.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == (ws.headers.get("host") or "").lower()


async def _close(ws: WebSocket, message: str) -> None:
    await ws.send_json({"type": "error", "message": message})
    await ws.close()


@router.websocket("/api/live/ws")
async def live_ws(ws: WebSocket, source: int = 0):
    if not _same_origin(ws):
        # browsers let any page open a websocket to localhost; only our own pages may read the events
        await ws.close(code=1008)
        return
    await ws.accept()
    srcs = live.live_sources(ws.app)
    if not 0 <= source < len(srcs):
        await _close(ws, f"no live source {source}; this server has {len(srcs)}"
                         " (set ACCELTRACE_SOCKET or ACCELTRACE_LIVE_FILE)")
        return
    try:
        path = await asyncio.to_thread(live.resolve, srcs[source])
    except (OSError, ValueError, KeyError) as e:  # no daemon, a timeout, or a reply we cannot read
        await _close(ws, f"cannot reach the live source: {e}")
        return
    stream = live.LiveStream(path)
    gone = asyncio.Event()

    async def watch_close():
        # the client never sends anything we need; receiving is how a disconnect is noticed
        try:
            while (await ws.receive())["type"] != "websocket.disconnect":
                pass
        except (WebSocketDisconnect, RuntimeError):
            pass
        gone.set()

    watcher = asyncio.create_task(watch_close())
    try:
        while not gone.is_set():
            try:
                messages = await asyncio.to_thread(stream.poll)
            except AtraceError as e:
                await ws.send_json({"type": "error", "message": str(e)})
                break
            for msg in messages:
                await ws.send_json(msg)
            try:
                await asyncio.wait_for(gone.wait(), live.PUSH_INTERVAL_S)
            except asyncio.TimeoutError:
                pass
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        watcher.cancel()
    if not gone.is_set():
        try:
            await ws.close()
        except RuntimeError:
            pass


@router.get("/live", response_class=HTMLResponse, summary="Live trace page",
            description="Renders web/templates/live.html, which follows the newest events of a live source over "
                        "/api/live/ws; JSON twin: GET /api/live.")
def live_page(request: Request, state: AppState = Depends(get_state)):
    templates = request.app.state.templates
    if templates is None or not (state.web_dir / "templates" / "live.html").exists():
        # the web UI is not installed: a page that still links the JSON twin
        return HTMLResponse("<!doctype html><meta charset=utf-8><title>acceltrace live</title>"
                            "<h1>acceltrace live</h1><p><a href='/api/live'>live sources (JSON)</a></p>")
    return templates.TemplateResponse(request, "live.html", {})
