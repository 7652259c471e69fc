"""The thread's own time before a call, shrunk (launch_gaps' fix in analysis/transform.py).

On a CPU thread the graph keeps the program's work between the calls that hand work to the device as
the weights of its host-chain edges (analysis/graph.py). A late submission comes sooner when that time
shrinks; cut_host_time takes a demand from the gaps closest before the call first, never past a call
that waited for the device, and adds up the demands of several calls of one thread, vectorised.
"""

from __future__ import annotations

import numpy as np

from acceltrace.analysis import replay as R
from acceltrace.analysis.threads import on_thread


def cut_host_time(g: R.Graph, at: np.ndarray, demand: np.ndarray) -> int:
    """Shrink the thread's own time before each of its nodes at[i] by demand[i] ns: the host-chain gaps (the
    AFTER_END edges between consecutive host items of one thread, whose weight is the program's work
    between them) closest before it give first, then the ones before those, each down to 0, never past a
    call that waited for the device (its end is the device's: host time before it moves nothing after it).
    Demands at several calls of one thread add up: each is met before its own call (so a later call keeps
    what an earlier one took), as late as the gaps allow. What the gaps cannot give is dropped. Returns the
    nanoseconds cut."""
    order, pos, chain, seg_start = g.cached("host chains", lambda: host_chains(g))
    n = len(order)
    if not n:
        return 0
    w = np.zeros(n, np.int64)  # per chain position: the own-time gap before it (as the graph now has it)
    w[pos[g.dst[chain]]] = np.maximum(g.weight[chain], 0)
    d = np.zeros(n, np.int64)
    np.add.at(d, pos[at], demand)
    seg = np.cumsum(seg_start) - 1
    first = np.flatnonzero(seg_start)
    wc, dc = np.cumsum(w), np.cumsum(d)
    wc -= np.r_[0, wc][first][seg]  # within the segment, this position's gap included
    dc -= np.r_[0, dc][first][seg]
    # cut so far at p, C(p) = clip(W(p) + max over q >= p in the segment of (D(q) - W(q)), 0, W(p)): every
    # demand met by its call, taken as late as possible; C never falls and never rises by more than w(p)
    f = segment_suffix_max(dc - wc, seg)
    c = np.clip(wc + f, 0, wc)
    prev = np.r_[0, c[:-1]]
    prev[seg_start] = 0
    cut = c - prev
    by_node = np.zeros(len(g.ts), np.int64)
    by_node[order] = cut
    k = chain[by_node[g.dst[chain]] > 0]
    g.weight[k] = np.maximum(0, g.weight[k] - by_node[g.dst[k]])
    return int(cut.sum())


def host_chains(g: R.Graph):
    """A thread's nodes by thread and time (order; pos: node -> its place, -1 elsewhere), the host-chain
    edges into them (chain: their edge indices), and where a segment starts (a thread's first node, and
    the node after one that waits for the device)."""
    mine, thread = on_thread(g)  # a thread's calls, its driver calls among them (analysis/threads.py)
    cpu = np.flatnonzero(mine)
    order = cpu[_by_track_time(thread[cpu], g.ts[cpu])]
    pos = np.full(len(g.ts), -1, np.int64)
    pos[order] = np.arange(len(order))
    chain = np.flatnonzero((g.ekind == R.AFTER_END) & mine[g.dst] & (g.kind[g.src] == R.HOST)
                           & (thread[g.src] == thread[g.dst]))
    waits = np.zeros(len(g.ts), bool)
    waits[g.dst[g.ekind == R.WAIT]] = True
    tr = thread[order]
    seg_start = np.r_[True, tr[1:] != tr[:-1]] if len(order) else np.zeros(0, bool)
    seg_start[1:] |= waits[order][:-1]
    return order, pos, chain, seg_start


def _by_track_time(track: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """np.lexsort((arange, ts, track)): by track, then time, then position. Nodes come from slices stored
    by (track, ts), so this is nearly always the identity: checked in one pass, else one stable sort of a
    packed key where it fits in int64, else the lexsort."""
    n = len(ts)
    if n < 2:
        return np.arange(n)
    same = track[1:] == track[:-1]
    if ((track[1:] > track[:-1]) | (same & (ts[1:] >= ts[:-1]))).all():
        return np.arange(n)
    t0, span = int(ts.min()), int(ts.max()) - int(ts.min()) + 1
    tmin, tracks = int(track.min()), int(track.max()) - int(track.min()) + 1
    if span * tracks < 2 ** 62:
        key = (track.astype(np.int64) - tmin) * span + (ts.astype(np.int64) - t0)
        return np.argsort(key, kind="stable")
    return np.lexsort((np.arange(n), ts, track))


def segment_suffix_max(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Per position: the largest x from it to the end of its segment (seg: non-decreasing segment ids)."""
    if not len(x):
        return x
    # later segments (earlier in the reversed walk) lifted above every value of the ones before them, so a
    # running maximum over the reversed array restarts at each segment; exact while the offsets fit int64
    span = int(x.max()) - int(x.min()) + 1
    nseg = int(seg[-1]) + 1
    if span * nseg < 2 ** 62:
        lift = (nseg - 1 - seg) * span
        return (np.maximum.accumulate((x + lift)[::-1]) - lift[::-1])[::-1]
    out = np.empty_like(x)
    bounds = np.r_[0, np.flatnonzero(np.diff(seg)) + 1, len(x)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[a:b] = np.maximum.accumulate(x[a:b][::-1])[::-1]
    return out
