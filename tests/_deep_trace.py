"""A trace whose one tile group is 16 tracks of stacks 40 deep (tests of depth pages, issue 15)."""

from __future__ import annotations

import numpy as np

from acceltrace.store.catalog import Store

DEEP_TRACKS, DEEP_DEPTH, DEEP_ROOTS, DEEP_PERIOD = 16, 40, 64, 100_000


def build_deep_trace(store: Store) -> str:
    """One tile group of 16 tracks, each a stack 40 deep (depth d: [k*P + 1000d, (k+1)*P - 1000d - 1000)),
    15 short slices at depth 40 under each stack and an instant at depth 41 under each short one."""
    from acceltrace.ingest.builder import TraceBuilder

    trace_id, tmp = store.begin("deep-stacks", None, None)
    b = TraceBuilder(tmp)
    tracks = [b.track("cpu", f"thread {i}", group_name="deep process", sort_key=i) for i in range(DEEP_TRACKS)]
    k = np.arange(DEEP_ROOTS, dtype=np.int64) * DEEP_PERIOD
    d = np.arange(DEEP_DEPTH, dtype=np.int64)
    ts = (k[:, None] + 1000 * d[None, :]).ravel()
    dur = np.broadcast_to(DEEP_PERIOD - 2000 * d - 1000, (DEEP_ROOTS, DEEP_DEPTH)).ravel()
    depth = np.broadcast_to(d, (DEEP_ROOTS, DEEP_DEPTH)).ravel()
    short_ts = (k[:, None] + 1000 * (DEEP_DEPTH - 1) + 500 + 1200 * np.arange(15)[None, :]).ravel()
    all_ts = np.concatenate([ts, short_ts, short_ts + 50])
    all_dur = np.concatenate([dur, np.full(len(short_ts), 200), np.zeros(len(short_ts), np.int64)])
    all_depth = np.concatenate([depth, np.full(len(short_ts), DEEP_DEPTH), np.full(len(short_ts), DEEP_DEPTH + 1)])
    names = np.array([f"frame_{x}" for x in all_depth])
    n = len(all_ts)
    start = 1_700_000_000_000_000_000
    for t in tracks:
        b.add_slices({"track_id": np.full(n, t, np.int32), "ts": all_ts + start, "dur": all_dur,
                      "depth": all_depth.astype(np.int32), "name": names})
    counts = b.finish("synthetic", "deep-stacks")
    store.publish(trace_id, tmp, "synthetic", counts)
    return trace_id
