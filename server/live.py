"""Live traces: the sources this server follows, and one LiveCapture (server/live_capture.py) per
growing file among them.

Sources: app.state.live_sources (set by whoever creates the app), $ACCELTRACE_LIVE_FILE (an .atrace
being written) and $ACCELTRACE_SOCKET (a running `acceltrace traced`, asked for its output file
over the daemon's socket protocol). `LiveManager` looks at them every DISCOVER_S; a file that is
growing becomes a capture: a catalog row with status 'live' made of segments, published under the
same id when it stops (docs/tracing.md, "Live traces").
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from acceltrace.collect.traced import protocol as P
from acceltrace.server.live_capture import AfterPublish, LiveCapture
from acceltrace.server.metadata import link_peaks
from acceltrace.store import live as SL
from acceltrace.store.catalog import Store
from acceltrace.tiles.build import TILE_BUCKETS_LOG2
from acceltrace.tiles.live import compose_tile
from acceltrace.tiles.query import MAX_LEVEL

DAEMON_TIMEOUT_S = 2.0
DISCOVER_S = 0.5          # how often the sources are looked at
STAGES_SENT = 50
NOT_DRAWN_SENT = 20


def live_sources(app) -> list[dict]:
    """The live sources this server may follow (never a path a client names)."""
    out = list(getattr(app.state, "live_sources", None) or [])
    if os.environ.get("ACCELTRACE_LIVE_FILE"):
        out.append({"kind": "file", "path": os.environ["ACCELTRACE_LIVE_FILE"]})
    if os.environ.get("ACCELTRACE_SOCKET"):
        out.append({"kind": "daemon", "socket": os.environ["ACCELTRACE_SOCKET"]})
    return out


def daemon_status(socket_path: str | Path, timeout_s: float = DAEMON_TIMEOUT_S) -> dict:
    """A running daemon's `ctl status` reply (the socket protocol; docs/tracing.md)."""
    return P.ctl(socket_path, "status", timeout_s=timeout_s)


def resolve(src: dict) -> Path:
    """The file a source names: its path, or the output file its daemon reports.

    Raises OSError (no daemon, a timeout, a refusal) or ValueError / KeyError (a reply we cannot read).
    """
    if src["kind"] == "file":
        return Path(src["path"])
    reply = daemon_status(src["socket"])
    if not reply.get("ok"):
        raise OSError(reply.get("error", "daemon refused status"))
    return Path(reply["out"])


# -- what the routes send ---------------------------------------------------------------------------
def live_metadata(self: LiveCapture) -> dict:
    """The trace metadata document (server/metadata.py's shape) of a capture so far, with its `live` block."""
    segs = self.segments()
    head = self.head_ns()
    with self.lock:
        tracks = [{**{k: v for k, v in t.items() if k != "grp"}, "group": f"g{t['grp']}"}
                  for t in self.layout.ui_order()]
        groups = [{"id": f"g{g['grp']}", "lane": g["lane"], "group_name": g["group_name"],
                   "name": f"{g['lane']} · {g['group_name']}" if g["group_name"] else g["lane"],
                   "track_ids": list(g["track_ids"])} for g in self.layout.groups]
        version = self.layout.version
    meta = SL.merged_meta([s.con for s in segs[-1:]])
    duration = max(1, head)
    max_level = max(0, min(MAX_LEVEL, (duration // 1024).bit_length()))
    lost = self.tail.lost_events()[0]
    return {
        "id": self.trace_id, "name": self.name, "format": "atrace", "status": "live",
        "start_abs_ns": str(self.start_abs_ns or 0), "duration_ns": duration,
        "warning_count": 0, "warnings": [], "dropped_events": 0, "lost_events": lost,
        "links": link_peaks(meta), "meta": meta,
        "levels": {"min": 0, "max": max_level, "buckets_per_tile": 1024, "pyramid_from": 0},
        "min_level": 0, "max_level": max_level, "groups": groups, "tracks": tracks,
        "counts": self.counts(),
        "live": {"head_ns": head, "events": self.events, "rate_per_s": round(self.rate_per_s(), 1),
                 "lost_events": lost, "segments": len(segs), "layout_version": version, "seq": self.seq,
                 "file": self.path.name, "compactions": self.compactions,
                 "build_ms": [round(x) for x in list(self.build_ms)[-10:]],
                 # where the time goes (bench/live.py): per recent delta, monotonic ns of its newest
                 # record read, its build's start and end, and its announcement to the pages
                 "stages": list(self.stages)[-STAGES_SENT:], "delta_budget": self.budget.records(),
                 "not_drawn": self.gaps.relative(self.start_abs_ns or 0)},
    }

def tile(self: LiveCapture, level: int, index: int, grp: int) -> bytes:
    """One encoded tile of a tile group, composed from the segments (their cached parts)."""
    with self.lock:
        segs = list(self.sealed)
        tracks = self.layout.group_tracks(grp)
        g = self.layout.groups[grp]
        names = list(self.names)
    label = f"{g['lane']} · {g['group_name']}" if g["group_name"] else g["lane"]
    return compose_tile(segs, self.parts, level, index, tracks, label, names)


def tile_etag_key(self: LiveCapture, level: int, index: int, grp: int) -> str:
    """What a tile's content depends on: the segments overlapping it and the layout."""
    t0, t1 = index << (level + TILE_BUCKETS_LOG2), (index + 1) << (level + TILE_BUCKETS_LOG2)
    keys = [s.key for s in self.segments() if s.overlaps(t0, t1)]
    return f"{self.trace_id}/{level}/{index}/{grp}/{self.layout.version}/{','.join(keys)}"


def push_message(self: LiveCapture, seq: int, since: int) -> dict:
    """The websocket message for changes after `since` up to `seq`: the time range they touched."""
    changed = [c for c in list(self.changes) if since < c["seq"] <= seq]
    data = [c for c in changed if c["type"] == "data"]
    status = self.status
    msg = {"type": "final" if status in ("final", "failed") else "data", "seq": seq,
           "status": self.final_status or ("failed" if status == "failed" else "live"),
           "finalising": status == "finalising", "error": self.error,
           "head_ns": self.head_ns() if status not in ("final", "failed") else None,
           "t0_ns": min((c["t0_ns"] for c in data), default=None),
           "t1_ns": max((c["t1_ns"] for c in data), default=None),
           "layout_version": self.layout.version, **{k: v for k, v in self.counts().items()},
           # the newest spans not drawn live (the server fell behind), relative; the page keeps them by start
           "not_drawn": [] if status in ("final", "failed") else
           self.gaps.relative(self.start_abs_ns or 0)[-NOT_DRAWN_SENT:]}
    return msg


# -- all captures of this server --------------------------------------------------------------------
class LiveManager:
    """Finds growing files among the sources and runs one LiveCapture per file."""

    def __init__(self, app, store: Store, after_publish: AfterPublish | None = None):
        self.app, self.store, self.after_publish = app, store, after_publish
        self.captures: dict[str, LiveCapture] = {}  # trace id -> capture (kept after it is final)
        self._following: dict[tuple, LiveCapture] = {}  # (path, inode) -> capture
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="live sources", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        for c in list(self._following.values()):
            c.stop()

    def capture(self, trace_id: str) -> LiveCapture | None:
        c = self.captures.get(trace_id)
        if c is None:
            for f in list(self._following.values()):
                if f.trace_id == trace_id:
                    self.captures[trace_id] = c = f
        return c

    def live(self) -> list[LiveCapture]:
        return [c for c in self._following.values() if c.trace_id and c.status in ("live", "finalising")]

    def _run(self) -> None:
        while not self._stop.is_set():
            for src in live_sources(self.app):
                try:
                    path = resolve(src)
                    st = path.stat()
                except (OSError, ValueError, KeyError):
                    continue  # no daemon (yet), no file (yet): looked at again next time
                key = (str(path), st.st_ino)
                if key in self._following or st.st_size == 0:
                    continue
                cap = LiveCapture(self.store, path, path.name, self.after_publish)
                self._following[key] = cap
                cap.start()
            for c in list(self._following.values()):
                if c.trace_id:
                    self.captures[c.trace_id] = c
            self._stop.wait(DISCOVER_S)
