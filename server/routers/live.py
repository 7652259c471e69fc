"""Live traces: follow a growing .atrace (or the file a running daemon writes) over a websocket.

Sources: $ACCELTRACE_LIVE_FILE (an .atrace being written) and $ACCELTRACE_SOCKET (a running
`acceltrace traced`, asked for its output file), or app.state.live_sources set by whoever
creates the app. The websocket pushes new events every PUSH_INTERVAL_S with times in ns
relative to the first event seen; /live is a page that draws them as they come.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import HTMLResponse

from acceltrace.formats import record as R
from acceltrace.formats.atrace.layout import AtraceError
from acceltrace.formats.atrace.follower import AtraceTail
from acceltrace.formats.atrace.clock import domain_maps

router = APIRouter(tags=["live"])

PUSH_INTERVAL_S = 0.1
MAX_EVENTS_PER_PUSH = 20000
MAX_HELD_EVENTS = 100_000  # device events waiting for their first clock-sync pairs
_DEFAULT = {0: "thread {}", 1: "queue {}", 2: "engine {}", 3: "unit {}", 4: "{}"}


def live_sources(app) -> list[dict]:
    """The live sources this server may follow (never a path a client names)."""
    out = list(getattr(app.state, "live_sources", None) or [])
    if os.environ.get("ACCELTRACE_LIVE_FILE"):
        out.append({"kind": "file", "path": os.environ["ACCELTRACE_LIVE_FILE"]})
    if os.environ.get("ACCELTRACE_SOCKET"):
        out.append({"kind": "daemon", "socket": os.environ["ACCELTRACE_SOCKET"]})
    return out


def _resolve(src: dict) -> Path:
    if src["kind"] == "file":
        return Path(src["path"])
    from acceltrace.collect.traced.cli import ctl

    reply = ctl(src["socket"], "status", timeout_s=2.0)
    if not reply.get("ok"):
        raise OSError(reply.get("error", "daemon refused status"))
    return Path(reply["out"])


@router.get("/api/live", summary="Live sources",
            description="The live sources this server follows (a growing .atrace or a running tracing daemon) "
                        "and the websocket that streams them: /api/live/ws?source=N.")
def live_index(request: Request):
    srcs = []
    for i, s in enumerate(live_sources(request.app)):
        srcs.append({"source": i, "kind": s["kind"], "name": Path(s.get("path") or s.get("socket")).name,
                     "websocket": f"/api/live/ws?source={i}"})
    return {"sources": srcs}


class _Follower:
    """Turns new records of one file into JSON-ready events (host ns relative to the first event)."""

    def __init__(self, path: Path):
        self.tail = AtraceTail(path)
        self.start_ns: int | None = None
        self.maps: dict = {}
        self.n_sync = 0
        self.held: list[tuple[np.ndarray, np.ndarray]] = []
        self.track_names: dict[tuple, str] = {}
        self.skipped = 0

    def poll(self) -> list[dict]:
        recs, streams = self.tail.poll()
        sync = self.tail.sync_pairs()
        if len(sync) != self.n_sync:
            self.n_sync = len(sync)
            domains = (self.tail.header or {}).get("clock_domains", [])
            for md in self.tail.metadata:
                domains = domains + md.get("clock_domains", [])
            self.maps, _ = domain_maps(sync, domains)
        if self.held:
            recs = np.concatenate([h[0] for h in self.held] + [recs])
            streams = np.concatenate([h[1] for h in self.held] + [streams])
            self.held = []
        if not len(recs):
            return []
        names = (recs["kind"] == R.TRACK_NAME)
        for rec, st in zip(recs[names], streams[names]):
            self.track_names[_track_key(rec)] = self.tail.string(int(st), int(rec["name"]))
        ev = np.isin(recs["kind"], (R.COMPLETE, R.INSTANT, R.BEGIN, R.END, R.COUNTER)) & (recs["lane"] < 5)
        recs, streams = recs[ev], streams[ev]
        ts = recs["ts"].astype(np.int64)
        end = ts + np.where(recs["kind"] == R.COMPLETE, recs["dur"], 0)
        ready = np.ones(len(recs), bool)
        for dom in np.unique(recs["clock"]):
            if dom == 0:
                continue
            m = recs["clock"] == dom
            fn = self.maps.get(int(dom))
            if fn is None:
                ready[m] = False
            else:
                ts[m], end[m] = fn(recs["ts"][m]), fn(recs["ts"][m] + recs["dur"][m])
        if (~ready).any():
            keep = ~ready
            if sum(len(h[0]) for h in self.held) + int(keep.sum()) <= MAX_HELD_EVENTS:
                self.held.append((recs[keep].copy(), streams[keep].copy()))
            else:
                self.skipped += int(keep.sum())
        recs, streams, ts, end = recs[ready], streams[ready], ts[ready], end[ready]
        if not len(recs):
            return []
        if self.start_ns is None:
            self.start_ns = int(ts.min())
        if len(recs) > MAX_EVENTS_PER_PUSH:  # the newest win: the view follows the present
            self.skipped += len(recs) - MAX_EVENTS_PER_PUSH
            recs, streams, ts, end = (x[-MAX_EVENTS_PER_PUSH:] for x in (recs, streams, ts, end))
        values = R.counter_values(recs)
        out = []
        for i, rec in enumerate(recs):
            kind = int(rec["kind"])
            e = {"ts": int(ts[i]) - self.start_ns, "dur": max(0, int(end[i] - ts[i])),
                 "kind": ("complete", "begin", "end", "instant", "counter")[kind - 1],
                 "name": self.tail.string(int(streams[i]), int(rec["name"])),
                 "lane": R.LANES[int(rec["lane"])], "track": self._track_name(rec, int(streams[i]))}
            if rec["flags"] & R.FLAG_HAS_CORR:
                e["corr"] = int(rec["corr"])
            if rec["flags"] & R.FLAG_HAS_BYTES:
                e["bytes"] = int(rec["bytes"])
            if kind == R.COUNTER:
                e["value"] = float(values[i])
            out.append(e)
        return out

    def _track_name(self, rec, stream: int) -> str:
        lane = int(rec["lane"])
        if lane == 4:
            return self.tail.string(stream, int(rec["name"]))
        name = self.track_names.get(_track_key(rec))
        if name:
            return name
        dev = int(rec["device"])
        prefix = f"dev{dev} " if dev != R.NO_DEVICE else f"pid {int(rec['pid'])} "
        return prefix + _DEFAULT[lane].format(int(rec["tid"]))


def _track_key(rec) -> tuple:
    lane = int(rec["lane"])
    return lane, int(rec["pid"]) if lane <= 1 else 0, int(rec["device"]), int(rec["tid"])


def _same_origin(ws: WebSocket) -> bool:
    """No Origin (a non-browser client) or an Origin naming this very host and port."""
    origin = ws.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == (ws.headers.get("host") or "").lower()


@router.websocket("/api/live/ws")
async def live_ws(ws: WebSocket, source: int = 0):
    if not _same_origin(ws):
        # browsers let any page open a websocket to localhost; only our own pages may read the events
        await ws.close(code=1008)
        return
    await ws.accept()
    srcs = live_sources(ws.app)
    if not 0 <= source < len(srcs):
        await ws.send_json({"type": "error", "message": f"no live source {source}; this server has {len(srcs)}"
                                                        " (set ACCELTRACE_SOCKET or ACCELTRACE_LIVE_FILE)"})
        await ws.close()
        return
    try:
        path = await asyncio.to_thread(_resolve, srcs[source])
    except (OSError, ValueError, KeyError) as e:  # no daemon, a timeout, or a reply we cannot read
        await ws.send_json({"type": "error", "message": f"cannot reach the live source: {e}"})
        await ws.close()
        return
    fol = _Follower(path)
    sent_hello = was_finished = False
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
                events = await asyncio.to_thread(fol.poll)
            except AtraceError as e:
                await ws.send_json({"type": "error", "message": str(e)})
                break
            if events and not sent_hello:
                await ws.send_json({"type": "hello", "file": path.name, "start_ns": str(fol.start_ns)})
                sent_hello = True
            finished = fol.tail.trailer is not None
            if events or fol.skipped or finished != was_finished:
                await ws.send_json({"type": "events", "events": events, "skipped": fol.skipped,
                                    "finished": finished})
                fol.skipped, was_finished = 0, finished
            try:
                await asyncio.wait_for(gone.wait(), PUSH_INTERVAL_S)
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
            description="Follows the newest events of a live source over /api/live/ws; JSON twin: GET /api/live.")
def live_page():
    return HTMLResponse(_PAGE)


# Names reach the page only through canvas fillText and textContent, never as HTML.
_PAGE = """<!doctype html><meta charset=utf-8><title>acceltrace live</title>
<style>body{font:13px system-ui;margin:0;background:#111;color:#ddd}#bar{padding:6px 10px}
canvas{display:block;width:100vw;height:calc(100vh - 32px)}</style>
<div id=bar>live: <span id=status>connecting</span> <span id=count></span></div><canvas id=c></canvas>
<script type=module>
const WINDOW_NS = 5e9, ROW = 18, MAX_KEEP = 200000;
const params = new URLSearchParams(location.search);
const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/live/ws?source=${Number(params.get('source') || 0)}`);
const status = document.getElementById('status'), count = document.getElementById('count');
const canvas = document.getElementById('c'), ctx = canvas.getContext('2d');
let events = [], tracks = new Map(), newest = 0, total = 0;
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.type === 'error') { status.textContent = msg.message; return; }
  if (msg.type === 'hello') { status.textContent = msg.file; return; }
  for (const e of msg.events) {
    const key = e.lane + '\\u0000' + e.track;
    if (!tracks.has(key)) tracks.set(key, {row: tracks.size, label: e.lane + ' · ' + e.track});
    e.row = tracks.get(key).row; events.push(e); newest = Math.max(newest, e.ts + e.dur); total++;
  }
  if (events.length > MAX_KEEP) events = events.slice(events.length - MAX_KEEP);
  count.textContent = `${total} events` + (msg.skipped ? ` (${msg.skipped} skipped)` : '') + (msg.finished ? ' — finished' : '');
};
ws.onclose = () => { status.textContent += ' (closed)'; };
const COLORS = {cpu: '#4e79a7', driver: '#f28e2b', pcie: '#59a14f', eu: '#e15759', counter: '#b07aa1'};
function draw() {
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
  ctx.clearRect(0, 0, w, h);
  const labelW = 220, t0 = newest - WINDOW_NS, sx = (w - labelW) / WINDOW_NS;
  ctx.font = '11px system-ui';
  for (const t of tracks.values()) { ctx.fillStyle = '#aaa'; ctx.fillText(t.label.slice(0, 40), 4, t.row * ROW + 13); }
  for (const e of events) {
    if (e.ts + e.dur < t0) continue;
    const x = labelW + Math.max(0, e.ts - t0) * sx, y = e.row * ROW + 2;
    ctx.fillStyle = COLORS[e.lane] || '#888';
    ctx.fillRect(x, y, Math.max(1, e.dur * sx), ROW - 4);
  }
  requestAnimationFrame(draw);
}
requestAnimationFrame(draw);
</script>"""
