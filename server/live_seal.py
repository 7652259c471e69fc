"""How a live capture's segments are made, sealed and let go (LiveCapture's part: server/live_capture.py).

A delta becomes a head segment (in memory, server/live_build.py's build_head) or, compacted with the
other deltas of its window, a sealed segment (a DuckDB file, build_segment); both are opened with
their track, name and slice ids mapped to the capture's. The compaction runs on a thread of its own
and then rests, so that it takes at most SEAL_CPU_SHARE of a core; head segments beyond the
capture's `head_max` records (the oldest not being sealed) leave the live view, counted and hatched.
Replaced segments are closed RETIRE_S later, for requests still reading them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import CancelledError
from pathlib import Path

import duckdb
import numpy as np

from acceltrace.formats.atrace.window import snapshot
from acceltrace.server.live_build import Head, build_head, build_segment
from acceltrace.store.errors import IngestError
from acceltrace.tiles.live import Segment, segment_facts
from acceltrace.tiles.query import MAX_LEVEL, LodInfo

log = logging.getLogger("acceltrace.live")

MAX_SEGMENTS = 64         # a server behind compacts only once it holds this many segments
SEAL_CPU_SHARE = 0.35     # compactions rest after each so that they take at most this share of a core
RETIRE_S = 10.0           # a compacted delta stays open this long for requests still reading it
RETIRE_HEAD_S = 1.0       # ... a head segment this long (memory; a request holding it keeps its arrays)


def env_records(name: str, default: int) -> int:
    """A positive record count from the environment, else `default` (a bad value is said in the log)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        v = int(raw)
        if v > 0:
            return v
    except ValueError:
        pass
    log.warning("%s=%r is not a positive number of records; using %d", name, raw, default)
    return default


class Sealing:
    """LiveCapture's segments: opened, sealed by compaction, let go beyond the head's bound (a mixin:
    the state it uses is LiveCapture's)."""

    def _drop_oldest_heads(self) -> None:
        """Head segments beyond HEAD_MAX_RECORDS (the oldest, not being sealed) leave the live view; their
        time span joins the spans not drawn (hatched), and the page refetches it. The newest head is
        never let go: the live view always shows the newest records it built."""
        with self.lock:
            heads = [s for s in self.sealed if s.head is not None]
            newest = max(heads, key=lambda s: s.order, default=None)
            excess = sum(s.records for s in heads) - self.head_max
            if excess <= 0:
                return
            sealing = {f.result().key for f in self._sealing
                       if f.done() and not f.cancelled() and f.exception() is None and f.result() is not None}
            out = []
            for s in heads:
                if excess <= 0:
                    break
                if s.key not in sealing and s is not newest:
                    out.append(s)
                    excess -= s.records
            if not out:
                return
            keys = {s.key for s in out}
            self.sealed = [s for s in self.sealed if s.key not in keys]
            self._retire(out)
        origin = self.start_abs_ns or 0
        for s in out:
            self.parts.drop(s.key)
            self.dropped_live += s.n_slices + len(s.head.c_ts)  # its events as drawn (a begin/end pair: one)
            self.gaps.add_span(origin + s.lo_ns, origin + s.hi_ns)
        self._announce("data", min(s.lo_ns for s in out), max(s.hi_ns for s in out))

    def _start_compaction(self) -> None:
        """Replace the window's delta segments by one sealed segment of all their records, on another
        thread (begin/end pairs and correlation flows that crossed delta boundaries now join up). A
        window due while the compactor builds or rests (SEAL_CPU_SHARE) stays as head segments."""
        if (self._compactor is not None and self._compactor.is_alive()) or time.monotonic() < self._seal_after:
            self._window_futs, self._window, self._window_n = [], [], 0
            return
        if self._behind_since_compaction and len(self.sealed) < MAX_SEGMENTS:
            # behind, a compaction would build the same records a second time and halve what is
            # drawn live; nothing crosses a delta boundary anyway (the records between are not shown)
            self._window_futs, self._window, self._window_n = [], [], 0
            self._behind_since_compaction = False
            return
        self._behind_since_compaction = False
        futs, window = self._window_futs, self._window
        self._window_futs, self._window, self._window_n = [], [], 0
        if len(futs) < 2:
            return
        ctx = snapshot(self.tail)  # the follower keeps changing on this thread
        names = list(self._name_recs)
        n = sum(len(r) for r, _ in names) + sum(len(r) for r, _ in window)
        base, self._next_base = self._next_base, self._next_base + n
        self._sealing = futs
        self._compactor = threading.Thread(target=self._compact, args=(ctx, names, window, futs, base),
                                           name=f"live compaction {self.path.name}", daemon=True)
        self._compactor.start()

    def _compact(self, ctx, names, window, futs, base: int) -> None:
        try:
            segs = [s for s in (f.result() for f in futs) if s is not None]  # every delta of the window is in
            if len(segs) < 2 or self.status != "live":  # finalising meanwhile: the whole file is ingested
                return
            recs = np.concatenate([r for r, _ in names] + [r for r, _ in window])
            streams = np.concatenate([s for _, s in names] + [s for _, s in window])
            t0 = time.monotonic()
            seg = self._ingest_window(ctx, recs, streams, base)
            self._seal_after = time.monotonic() + (time.monotonic() - t0) * (1 / SEAL_CPU_SHARE - 1)
        except CancelledError:  # finalising: its deltas were never built
            return
        except (OSError, IngestError, duckdb.Error) as e:  # the deltas stay: the view is still right
            log.warning("live compaction of %s failed: %s", self.path, e)
            return
        finally:
            with self.lock:
                self._sealing = []
        if seg is None or self.status != "live":
            if seg is not None:
                seg.remove()
            return
        seg.order = segs[0].order
        with self.lock:
            keys = {s.key for s in segs}
            at = next((i for i, s in enumerate(self.sealed) if s.key in keys or s.order > seg.order), len(self.sealed))
            self.sealed = self.sealed[:at] + [seg] + [s for s in self.sealed[at:] if s.key not in keys]
            self._retire(segs)
        for s in segs:
            self.parts.drop(s.key)
        self.compactions += 1
        self._announce("data", seg.lo_ns, seg.hi_ns)

    def _retire(self, segs: list[Segment]) -> None:
        """Segments replaced or let go: closed RETIRE_S later (requests may still read them), head
        segments RETIRE_HEAD_S later (at 1 M events/s ten seconds of them are ~1.5 GB); under lock."""
        now = time.monotonic()
        self._retired += [(now, s) for s in segs]
        keep = []
        for t, s in self._retired:
            if now - t > (RETIRE_HEAD_S if s.head is not None else RETIRE_S):
                s.remove()
            else:
                keep.append((t, s))
        self._retired = deque(keep)

    def _head_window(self, ctx, recs: np.ndarray, streams: np.ndarray, base: int) -> Segment | None:
        """`recs` as a head segment (in memory; server/live_build.py's build_head)."""
        head = build_head(ctx, recs, streams, self.path.name, self.start_abs_ns, self._db)
        if head is None:
            return None
        with self.lock:
            self._files += 1
            key = f"head-{self._files:06d}"
        return self._open_head(head, key, base, len(recs))

    def _open_head(self, head: Head, key: str, base: int, records: int) -> Segment:
        if self.start_abs_ns is None:
            self.start_abs_ns = head.start_abs
        info = LodInfo(start_ns=head.start_abs, duration_ns=max(1, head.hi_abs - head.lo_abs), max_level=MAX_LEVEL,
                       base_level=0, instant_base_level=0, counter_base_level=0, max_cls=MAX_LEVEL, chunk_log2=0)
        tmap, nmap = self._global_ids(head.tracks, head.names)
        return Segment(key=key, con=head.tables, info=info, track_map=tmap, name_map=nmap, slice_base=base,
                       n_slices=head.n_slices, lo_ns=head.lo_abs - head.start_abs, hi_ns=head.hi_abs - head.start_abs,
                       empty=head.arrays.empty, head=head.arrays, records=records)

    def _ingest_window(self, ctx, recs: np.ndarray, streams: np.ndarray, base: int) -> Segment | None:
        with self.lock:
            self._files += 1
            seg_path = self.dir / f"seg-{self._files:06d}.duckdb"
        if not build_segment(ctx, recs, streams, seg_path, self.path.name, self.start_abs_ns):
            return None
        return self._open_segment(seg_path, base)

    def _open_segment(self, path: Path, base: int) -> Segment:
        con = duckdb.connect(str(path), read_only=True)
        con.execute("SET threads = 1")
        info = LodInfo.load(con)
        if self.start_abs_ns is None:
            self.start_abs_ns = info.start_ns
        tracks, names, n_slices, lo, hi, empty = segment_facts(con)
        tmap, nmap = self._global_ids(tracks, names)
        return Segment(key=path.name, con=con, info=info, track_map=tmap, name_map=nmap, slice_base=base,
                       n_slices=n_slices, lo_ns=lo - info.start_ns, hi_ns=hi - info.start_ns, empty=empty)

    def _global_ids(self, tracks: list[dict], names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """A segment's maps from its track ids and name ids to the capture's (new ones are added)."""
        with self.lock:
            gids = self.layout.add(tracks)
            tmap = np.zeros(max([t["track_id"] for t in tracks], default=-1) + 1, np.int64)
            tmap[[t["track_id"] for t in tracks]] = gids
            nmap = np.zeros(len(names), np.int64)
            for i, text in enumerate(names):
                g = self.name_ids.get(text)
                if g is None:
                    g = self.name_ids[text] = len(self.names)
                    self.names.append(text)
                nmap[i] = g
        return tmap, nmap
