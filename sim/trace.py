"""What the model's tracing records, held column-wise until it is written through collect's writer.

Each record is what a real instrumented runtime, driver shim or device trace buffer would
emit: a complete span or an instant on a track, with at most one flow end (the record
layout's rule), a correlation id and typed fields. Times are host ns (float, virtual);
device records are converted to their device's ticks when written (sim/output.py).

Ground-truth tags live beside the records (``tags``) and are never written into the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

SPAN, INSTANT = 1, 4  # formats.record COMPLETE / INSTANT

# flow-end direction
NO_FLOW, FLOW_OUT, FLOW_IN = 0, 1, 2


@dataclass
class Track:
    lane: str
    name: str
    device: int | None  # device index, None for host threads
    tid: int  # thread id (cpu), queue (driver), engine (pcie), unit (eu)
    device_clock: bool  # records on this track are timed by the device's clock


COLUMNS = ("kind", "track", "ts", "dur", "name", "corr", "nbytes", "direction", "mem", "args", "flow",
           "flow_kind", "flow_end")


class Recorder:
    """Event log: one tuple per record (COLUMNS order). add() is on the model's hot path."""

    def __init__(self):
        self.tracks: list[Track] = []
        self._track_ids: dict[tuple, int] = {}
        self.rows: list[tuple] = []
        self.tags: dict[int, str] = {}  # record index -> injected issue kind (ground truth only)
        self.ranges: list[tuple[str, int, float, float]] = []  # (kind, track, start, end) ground truth only
        self._next_flow = 0
        self._next_corr = 0

    def __len__(self) -> int:
        return len(self.rows)

    def track_id(self, lane: str, name: str, device: int | None, tid: int, device_clock: bool = False) -> int:
        key = (lane, device, tid)
        t = self._track_ids.get(key)
        if t is None:
            t = self._track_ids[key] = len(self.tracks)
            self.tracks.append(Track(lane, name, device, tid, device_clock))
        return t

    def new_flow(self) -> int:
        self._next_flow += 1
        return self._next_flow

    def new_corr(self) -> int:
        self._next_corr += 1
        return self._next_corr

    def add(self, kind: int, track: int, ts: float, dur: float, name: str, corr: int = 0, nbytes: int = -1,
            direction: str | None = None, mem: str | None = None, args: str | None = None, flow: int = 0,
            flow_kind: str | None = None, flow_end: int = NO_FLOW, tag: str | None = None) -> None:
        if tag:
            self.tags[len(self.rows)] = tag
        self.rows.append((kind, track, ts, dur, name, corr, nbytes, direction, mem, args, flow, flow_kind, flow_end))

    def mark(self, kind: str, track: int, start_ns: float, end_ns: float) -> None:
        """A ground-truth range that is not one record (e.g. host work the device waited for)."""
        if end_ns > start_ns:
            self.ranges.append((kind, track, start_ns, end_ns))
