"""A thread's host work in the dependency graph: its API calls and its driver calls, one chain.

Kineto (its `cuda_driver` events: cuBLAS launching its kernels with cuLaunchKernelEx, say) and Nsight
Systems write the driver calls a thread makes on a track of their own beside the thread's runtime calls:
lane `driver`, the thread's process and thread, no device. They are that thread's own calls, and the
program's time between them and its runtime calls is the thread's, as between two runtime calls: one
chain, in time order, its gaps kept. A driver track with a device or without a thread is a driver queue
(the native runtime's, `dev0 queue 0`): its items keep only their order (their gaps are waits for
submissions, which their own edges say).

Before this, a thread's driver calls were a chain of their own that kept only their order: on a
PyTorch 2.11 trace of an H200 every matmul kernel (launched by cuBLAS through the driver) waited, as
unexplained slack, for the time the thread spent in the pageable copies before it, and fixing those
copies saved nothing in the replay (docs/analysis.md, "What if").
"""

from __future__ import annotations

import numpy as np

# per track: the CPU track of the thread whose own time its host items are (-1: a driver queue, any
# other lane); a thread's driver track maps to the first CPU track of its process and thread
THREAD_OF_TRACK_SQL = """
    SELECT t.track_id,
           CASE WHEN t.lane = 'cpu' THEN t.track_id ELSE coalesce(d.cpu_track, -1) END AS thread
    FROM tracks t LEFT JOIN (
        SELECT d.track_id, arg_min(c.track_id, (c.sort_key, c.track_id)) AS cpu_track
        FROM tracks d JOIN tracks c ON c.lane = 'cpu' AND c.thread = d.thread
                                    AND c.process IS NOT DISTINCT FROM d.process
        WHERE d.lane = 'driver' AND d.device IS NULL AND d.thread IS NOT NULL
        GROUP BY d.track_id) d USING (track_id)"""


def chain_edges(key: np.ndarray, thread: np.ndarray, ts: np.ndarray, dur: np.ndarray):
    """The host chains' edges, for nodes sorted by (key, ts): key is a node's thread (its CPU track) or,
    for a driver queue's items, their own track. Each node follows the one that ended last before it in
    its chain (not merely the one before it: a driver call nested in a runtime call ends before its
    caller, and the next call follows the caller): after its end, with the gap kept on a thread (the
    program's own work) and not in a driver queue; or, where it started inside that node, after its
    start at the same offset. Returns (after_end, after_start): each (src, dst, weight)."""
    n = len(key)
    empty = (np.zeros(0, np.int64),) * 3
    if n < 2:
        return empty, empty
    end = ts + dur
    first = np.r_[True, key[1:] != key[:-1]]
    starts = np.flatnonzero(first)
    runmax = np.empty(n, np.int64)
    for a, b in zip(starts, np.r_[starts[1:], n]):  # one per thread or queue
        runmax[a:b] = np.maximum.accumulate(end[a:b])
    top = first | np.r_[True, end[1:] > runmax[:-1]]  # a node that ends later than all before it
    last_top = np.maximum.accumulate(np.where(top, np.arange(n), 0))
    i = np.flatnonzero(~first)
    p = last_top[i - 1]
    after = ts[i] >= end[p]
    a_i, a_p = i[after], p[after]
    gap = np.where(thread[a_i] >= 0, ts[a_i] - end[a_p], 0)
    s_i, s_p = i[~after], p[~after]
    return (a_p, a_i, gap), (s_p, s_i, ts[s_i] - ts[s_p])


def on_thread(g) -> tuple[np.ndarray, np.ndarray]:
    """Per node: whether it is a thread's host work, and its thread (the CPU track; -1 elsewhere), once
    for a graph and its copies (no transformation changes them). A graph built without threads (by hand,
    in tests) has its CPU nodes each on its own track."""
    return g.cached("on thread", lambda: _on_thread(g))


def _on_thread(g) -> tuple[np.ndarray, np.ndarray]:
    if g.thread is not None:
        return g.thread >= 0, g.thread
    cpu = g.lane == 0  # CPU
    return cpu, np.where(cpu, g.track if g.track is not None else 0, -1)
