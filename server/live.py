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
from acceltrace.store.catalog import Store

DAEMON_TIMEOUT_S = 2.0
DISCOVER_S = 0.5          # how often the sources are looked at


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
