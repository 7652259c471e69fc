"""A window of a growing .atrace as a file of its own: what a live capture's segments are ingested from.

A window holds the followed file's header, metadata, every string and clock-sync pair seen so far
(so names and device clocks resolve exactly as in the whole file) and only the window's event
records, grouped by stream as the daemon wrote them. It ends with a trailer, so the importer reads
it as a clean file; lost counts stay with the follower (they belong to the capture, not a window).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from acceltrace.formats.atrace.follower import AtraceTail
from acceltrace.formats.atrace.writer import AtraceWriter


@dataclass(frozen=True)
class Context:
    """What a window needs of the followed file, copied at one moment (for use on another thread)."""

    header: dict
    metadata: list
    strings: dict
    sync: np.ndarray

    def sync_pairs(self) -> np.ndarray:
        return self.sync


def snapshot(tail: AtraceTail) -> Context:
    return Context(dict(tail.header), list(tail.metadata), {k: dict(v) for k, v in tail.strings.items()},
                   tail.sync_pairs().copy())


def write_window(tail: AtraceTail | Context, recs: np.ndarray, streams: np.ndarray, out: str | Path) -> int:
    """Write `recs` (RECORD_DTYPE, with their `streams`) with the file's context (the follower itself,
    or a `snapshot` of it) to `out`; returns the bytes written."""
    w = AtraceWriter(out, header=dict(tail.header))
    try:
        for meta in tail.metadata:
            w.add_metadata(meta)
        sync = tail.sync_pairs()
        for dom in np.unique(sync["domain"]).tolist():
            m = sync["domain"] == dom
            w.add_clock_sync(int(dom), sync["host_ns"][m], sync["dev_ticks"][m])
        for stream, table in sorted(tail.strings.items()):
            if table:
                w.define_strings(sorted(table.items()), stream)
        if len(recs):
            order = np.argsort(streams, kind="stable")  # one run per stream, file order kept within it
            srt, ss = recs[order], streams[order]
            cuts = np.flatnonzero(np.diff(ss.astype(np.int64))) + 1
            for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(ss)]]).tolist()):
                w.add_records(srt[lo:hi], int(ss[lo]))
    finally:
        w.close()
    return w.bytes_written
