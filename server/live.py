"""Live traces: which sources this server follows, and turning a growing .atrace into live messages.

Sources: app.state.live_sources (set by whoever creates the app), $ACCELTRACE_LIVE_FILE (an
.atrace being written) and $ACCELTRACE_SOCKET (a running `acceltrace traced`, asked for its
output file over the daemon's socket protocol). `LiveStream` follows one file and makes the
websocket's messages (docs/tracing.md, "Live view"): events with host times in ns relative to
the first event seen, device events held until their clock domain has sync pairs. The router
(server/routers/live.py) only moves those messages.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from acceltrace.collect.traced import protocol as P
from acceltrace.formats import record as R
from acceltrace.formats.atrace.clock import domain_maps
from acceltrace.formats.atrace.follower import AtraceTail
from acceltrace.formats.atrace.layout import AtraceError

PUSH_INTERVAL_S = 0.1
MAX_EVENTS_PER_PUSH = 20000
MAX_HELD_EVENTS = 100_000  # device events waiting for their first clock-sync pairs
DAEMON_TIMEOUT_S = 2.0


def live_sources(app) -> list[dict]:
    """The live sources this server may follow (never a path a client names)."""
    out = list(getattr(app.state, "live_sources", None) or [])
    if os.environ.get("ACCELTRACE_LIVE_FILE"):
        out.append({"kind": "file", "path": os.environ["ACCELTRACE_LIVE_FILE"]})
    if os.environ.get("ACCELTRACE_SOCKET"):
        out.append({"kind": "daemon", "socket": os.environ["ACCELTRACE_SOCKET"]})
    return out


def source_index(app) -> list[dict]:
    """The sources as GET /api/live lists them."""
    return [{"source": i, "kind": s["kind"], "name": Path(s.get("path") or s.get("socket")).name,
             "websocket": f"/api/live/ws?source={i}"} for i, s in enumerate(live_sources(app))]


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


class LiveStream:
    """One followed file: each `poll` gives the websocket messages that are news since the last."""

    def __init__(self, path: Path):
        self.path = path
        self.tail = AtraceTail(path)
        self.start_ns: int | None = None
        self.maps: dict = {}
        self.n_sync = self.n_meta = 0
        self.held: list[tuple[np.ndarray, np.ndarray]] = []
        self.naming = R.TrackNaming()
        self.skipped = 0
        self.sent_hello = self.was_finished = False

    def poll(self) -> list[dict]:
        """hello (once, before the first events), then events messages; raises AtraceError for a
        file that cannot be followed (not .atrace, a newer version, a corrupt chunk header)."""
        if self.tail.stopped_at is not None:  # after the events before the damage went out
            raise AtraceError(self.tail.problems[-1].message, self.tail.stopped_at)
        events = self.events()
        out = []
        if events and not self.sent_hello:
            out.append({"type": "hello", "file": self.path.name, "start_ns": str(self.start_ns)})
            self.sent_hello = True
        finished = self.tail.trailer is not None
        if events or self.skipped or finished != self.was_finished:
            out.append({"type": "events", "events": events, "skipped": self.skipped, "finished": finished})
            self.skipped, self.was_finished = 0, finished
        return out

    def events(self) -> list[dict]:
        """New events, JSON-ready (formats.record.json_events), times in ns from the first event."""
        recs, streams = self.tail.poll()
        self._metadata()
        if self.held:
            recs = np.concatenate([h[0] for h in self.held] + [recs])
            streams = np.concatenate([h[1] for h in self.held] + [streams])
            self.held = []
        if not len(recs):
            return []
        names = np.isin(recs["kind"], (R.TRACK_NAME, R.PROCESS_NAME))
        for rec, st in zip(recs[names], streams[names]):
            self.naming.note(int(rec["kind"]), int(rec["lane"]), int(rec["device"]), int(rec["pid"]), int(rec["tid"]),
                             self.tail.string(int(st), int(rec["name"])))
        ev = np.isin(recs["kind"], R.EVENT_KINDS) & (recs["lane"] < len(R.LANES))
        recs, streams = recs[ev], streams[ev]
        ts, end, ready = self._host_times(recs)
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
        texts = [self.tail.string(s, n) for s, n in zip(streams.tolist(), recs["name"].tolist())]
        cols = zip(recs["lane"].tolist(), recs["device"].tolist(), recs["pid"].tolist(), recs["tid"].tolist(), texts)
        tracks = [self.naming.title(*c) for c in cols]
        return R.json_events(recs, ts - self.start_ns, end - self.start_ns, texts, tracks)

    def _metadata(self) -> None:
        """Clock maps when new sync pairs arrived; device names when new metadata did."""
        n_meta = len(self.tail.metadata) + bool(self.tail.header)
        meta = self.tail.merged_metadata() if n_meta != self.n_meta else None
        if meta is not None:
            self.n_meta = n_meta
            self.naming.add_devices([d for d in meta.get("devices", []) if isinstance(d, dict)])
        sync = self.tail.sync_pairs()
        if len(sync) != self.n_sync or meta is not None:
            self.n_sync = len(sync)
            domains = (meta if meta is not None else self.tail.merged_metadata()).get("clock_domains", [])
            self.maps, _ = domain_maps(sync, domains if isinstance(domains, list) else [])

    def _host_times(self, recs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start and end in host ns, and which records could be mapped (their domain has sync pairs)."""
        ts = recs["ts"].astype(np.int64)
        dur = np.where(recs["kind"] == R.COMPLETE, recs["dur"], 0)  # a counter's `dur` is its value
        end = ts + dur
        ready = np.ones(len(recs), bool)
        for dom in np.unique(recs["clock"]):
            if dom == R.HOST_CLOCK:
                continue
            m = recs["clock"] == dom
            fn = self.maps.get(int(dom))
            if fn is None:
                ready[m] = False
            else:
                ts[m], end[m] = fn(recs["ts"][m]), fn(recs["ts"][m] + dur[m])
        return ts, end, ready
