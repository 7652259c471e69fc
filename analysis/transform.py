"""Each pass's fix as a transformation of the dependency graph (analysis/replay.py), for one finding or many.

A fix names its pass, the slice the finding points at, its window (ts, dur) and the pass's local
estimate (local_ns: what the pass says the fixed version would not need):
- pageable_memory: the copy's DMA chunks at the pinned rate (their span shrinks by local_ns) and
  its call no longer blocks on them (a pinned copy is asynchronous);
- small_transfers: the burst's transfers batched: their busy time shrinks by local_ns;
- redundant_transfers: the copy dropped (its DMA takes no time, its call does not wait);
- copy_compute_serialization: the copy on a queue of its own per direction, its data dependency kept
  (a host-to-device copy still feeds the kernel after it, a device-to-host copy still follows the
  kernel before it), the queue's kernels keeping their order around it;
- launch_gaps: the kernel submitted early enough (no submitter constraint, no unexplained wait);
- sync_stalls: the synchronising call no longer waits for the device;
- memory_access_inefficiency: the kernel at its roofline time (local_ns shorter);
- pcie_saturation: the transfers of the window on a link `link_speedup` times faster.
Many fixes of one pass are applied together with one pass over the edges (apply_all), so a pass's
"all fixed" costs one transformation, not one per finding. BOUNDS says, per pass, where the trace
lacks an edge the fix would change, so its replayed saving is a bound (docs/analysis.md).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from acceltrace.analysis import replay as R
from acceltrace.analysis.arrays import order_by, scatter_max
from acceltrace.analysis.host_time import cut_host_time
from acceltrace.analysis.threads import on_thread

# pass -> what the replay of its fix cannot see (the finding's impact_basis says so)
BOUNDS = {
    "pageable_memory": "lower bound: the trace does not record the host's staging copies",
    "sync_stalls": "lower bound: the trace does not record which event or queue a sync waits for",
    "launch_gaps": "lower bound where the thread's own time since it last waited for the device is shorter than"
                   " the gap (the trace does not say which host work delayed the submission)",
    "pcie_saturation": "depends on link_speedup: the window's transfers on a link that much faster",
}


@dataclass
class Fix:
    pass_id: str
    slice_id: int | None
    ts: int
    dur: int
    local_ns: int


WINDOW_PASSES = ("small_transfers", "pcie_saturation")  # their fix acts on a window, not one slice


def applicable(g: R.Graph, fix: Fix) -> bool:
    """Whether the graph has what the fix changes (its slice, or a window for a window pass)."""
    return bool(applicable_all(g, [fix])[0])


def applicable_all(g: R.Graph, fixes: list[Fix]) -> np.ndarray:
    """applicable() of every fix (one lookup of all their slices)."""
    sids = np.array([f.slice_id if f.slice_id is not None else -1 for f in fixes], np.int64)
    has = (g.index.nodes(sids) >= 0) & np.array([f.slice_id is not None for f in fixes], bool)
    window = np.array([f.pass_id in WINDOW_PASSES and f.dur > 0 for f in fixes], bool)
    return has | window


def apply(g: R.Graph, fix: Fix, link_speedup: float = 2.0) -> bool:
    """Transform g in place for one fix; False when the graph has no node for it."""
    return apply_all(g, [fix], link_speedup) > 0


def apply_all(g: R.Graph, fixes: list[Fix], link_speedup: float = 2.0) -> int:
    """Transform g in place for all the fixes together; how many of them applied."""
    by_pass: dict[str, list[Fix]] = defaultdict(list)
    ok = applicable_all(g, fixes) if fixes else np.zeros(0, bool)
    for f, a in zip(fixes, ok.tolist()):
        if a and f.pass_id in _APPLY:
            by_pass[f.pass_id].append(f)
    for pid, fs in by_pass.items():
        _APPLY[pid](g, fs, link_speedup)
    return sum(len(fs) for fs in by_pass.values())


def _nodes(g: R.Graph, fs: list[Fix]) -> np.ndarray:
    return g.index.nodes(np.array([f.slice_id for f in fs], np.int64))


def _mark(n: int, nodes) -> np.ndarray:
    m = np.zeros(n, bool)
    m[np.asarray(nodes, np.int64)] = True
    return m


def _shrink(g: R.Graph, nodes: np.ndarray, by_ns: int) -> None:
    """Shrink the nodes' durations proportionally so that together they lose by_ns."""
    if not len(nodes) or by_ns <= 0:
        return
    total = int(g.dur[nodes].sum())
    if total <= 0:
        return
    f = max(0.0, 1.0 - by_ns / total)
    g.dur[nodes] = np.rint(g.dur[nodes] * f).astype(np.int64)
    g.own[nodes] = np.minimum(g.own[nodes], g.dur[nodes])


def _drop_edges(g: R.Graph, mask: np.ndarray) -> None:
    if mask.any():
        keep = ~mask
        g.src, g.dst, g.ekind, g.weight = g.src[keep], g.dst[keep], g.ekind[keep], g.weight[keep]


def _transfers_by_start(g: R.Graph) -> np.ndarray:
    nodes = np.flatnonzero((g.kind == R.DEVICE) & (g.lane == R.PCIE))
    return nodes[np.argsort(g.ts[nodes], kind="stable")]


def _window_nodes(g: R.Graph, pcie: np.ndarray, fix: Fix, overlap: bool) -> np.ndarray:
    """The transfer nodes (pcie: sorted by start) of a window: starting in it, or (overlap) overlapping it."""
    t1 = fix.ts + max(fix.dur, 1)
    hi = np.searchsorted(g.ts[pcie], t1, side="left")
    if not overlap:
        lo = np.searchsorted(g.ts[pcie], fix.ts, side="left")
        return pcie[lo:hi]
    cand = pcie[:hi]
    return cand[g.ts[cand] + g.dur[cand] > fix.ts]


def _copies(g, fs, _speedup) -> None:
    redundant = fs[0].pass_id == "redundant_transfers"
    fi, dmas = g.siblings_of(np.array([f.slice_id for f in fs], np.int64))
    # one copy per call: a later fix of a call already fixed is applied after the others, in order
    v = _nodes(g, fs)
    key = np.where(g.corr[v] >= 0, g.corr[v], -1 - v) if g.corr is not None else -1 - v
    _, first = np.unique(key, return_index=True)
    once = np.zeros(len(fs), bool)
    once[first] = True
    sel = once[fi]
    nodes, owner = dmas[sel], fi[sel]
    if redundant:
        g.dur[nodes] = 0
        g.own[nodes] = 0
    else:
        local = np.array([f.local_ns for f in fs], np.float64)
        total = np.bincount(owner, weights=g.dur[nodes], minlength=len(fs))
        go = (local > 0) & (total > 0)
        f = np.maximum(0.0, 1.0 - local / np.where(go, total, 1.0))
        m = go[owner]
        g.dur[nodes[m]] = np.rint(g.dur[nodes[m]] * f[owner[m]]).astype(np.int64)
        g.own[nodes[m]] = np.minimum(g.own[nodes[m]], g.dur[nodes[m]])
    for i in np.flatnonzero(~once).tolist():
        again = dmas[fi == i]
        if redundant:
            g.dur[again] = 0
            g.own[again] = 0
        else:
            _shrink(g, again, fs[i].local_ns)
    # what a chunk waited for beyond its edges was the host staging the copy (or the copy itself)
    g.slack[dmas] = 0
    m = _mark(len(g.ts), dmas)
    _drop_edges(g, m[g.src] & (g.ekind == R.WAIT))


class _Submitters:
    """Who hands each node its work: the host nodes with a start edge into it (doorbells, calls) and the
    host nodes with a start edge into those -- from the graph's in-edges, gathered once per transformation."""

    def __init__(self, g: R.Graph):
        e = np.flatnonzero((g.ekind == R.AFTER_START) & (g.kind[g.src] == R.HOST))
        o = e[order_by(g.dst[e], len(g.ts))]
        self.src, self.dst = g.src[o], g.dst[o]
        self.ptr = np.searchsorted(self.dst, np.arange(len(g.ts) + 1))

    def direct(self, nodes: np.ndarray) -> np.ndarray:
        lo, hi = self.ptr[nodes], self.ptr[nodes + 1]
        cnt = hi - lo
        if not cnt.sum():
            return np.zeros(0, np.int64)
        return self.src[np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(int(cnt.sum()))]

    def of(self, nodes: np.ndarray) -> np.ndarray:
        first = np.unique(self.direct(np.asarray(nodes, np.int64)))
        return np.union1d(first, self.direct(first))

    def first_cpu(self, g: R.Graph, rank: np.ndarray) -> np.ndarray:
        """Per node: the rank (in `rank`, smaller is earlier) of its earliest CPU submitter; len(rank) if none."""
        none = len(rank)
        cpu = on_thread(g)[0][self.src]  # a thread's calls, its driver calls among them
        neg1 = np.full(len(g.ts), -none, np.int64)  # minima as maxima of the negated ranks
        scatter_max(neg1, self.dst[cpu], -rank[self.src[cpu]])
        neg = neg1.copy()
        scatter_max(neg, self.dst, neg1[self.src])
        return -neg


def _submitters(g: R.Graph) -> _Submitters:
    """The graph's _Submitters, built once for it and its copies: the host start edges they index are the
    trace's (only launch_gaps' fix drops some, after it has read them; the others edit weights or drop
    other edges)."""
    return g.cached("submitters", lambda: _Submitters(g))


def _small(g, fs, _speedup) -> None:
    # batched: one call and one submission move the burst's bytes; the other calls of the burst take
    # no host time and hand their work on at once, and the transfers lose the fixed cost per transfer
    pcie = _transfers_by_start(g)
    sub = _submitters(g)
    rest_all = np.zeros(len(g.ts), bool)  # host nodes (calls, doorbells) a batch makes free
    for f in fs:
        burst = _window_nodes(g, pcie, f, overlap=False)
        if len(burst) > 1:
            rest = sub.of(burst[1:])
            rest_all[rest[~np.isin(rest, sub.of(burst[:1]))]] = True
            g.slack[burst[1:]] = 0
        _shrink(g, burst, f.local_ns)  # transfers only: never a node of rest_all
    g.dur[rest_all] = 0
    g.own[rest_all] = 0
    g.weight[rest_all[g.src] & (g.ekind == R.AFTER_START)] = 0


def _serialised(g, fs, _speedup) -> None:
    # the copy on a queue of its own (one per direction), its data dependency kept: a host-to-device
    # copy no longer waits for the queue's work before it (the kernel it feeds still waits for it), a
    # device-to-host copy still follows the kernel whose result it carries but no longer holds up the
    # queue's work after it; the queue's kernels keep their order around it. The copies taken off one
    # queue in one direction keep their order on their new queue (one after the other, as the queue ran
    # them: two copies feeding the same kernel still arrive one after the other, whatever engines they
    # ran on), and every host-to-device copy feeds the next kernel of its old queue, every device-to-host
    # copy follows the kernel before it, also with other copies between them. Its engine keeps ordering
    # it against the copies on that engine. A copy of no known direction (or a graph without its
    # queues) loses every order edge against kernels (a bound).
    copies = g.siblings_of(np.array([f.slice_id for f in fs], np.int64))[1]
    m = _mark(len(g.ts), copies)
    if g.queue_next is None or g.direction is None:
        into, out = m[g.dst], m[g.src]
        other = np.where(into, g.src, g.dst)
        _drop_edges(g, (into | out) & (g.ekind == R.AFTER_END) & (g.lane[other] == R.EU))
        return
    h2d, d2h = m & (g.direction == 1), m & (g.direction == 2)
    q = (g.ekind == R.AFTER_END) & (g.queue_next[g.src] == g.dst) & (g.track[g.src] != g.track[g.dst])
    unknown = m & ~h2d & ~d2h
    other_eu = lambda a, b: unknown[a] & (g.lane[b] == R.EU)  # noqa: E731
    drop = q & (h2d[g.dst] | d2h[g.src] | other_eu(g.dst, g.src) | other_eu(g.src, g.dst))
    _drop_edges(g, drop)
    c = np.unique(copies)
    # the queue's kernels keep their order: the kernel before each copy, then the kernel after it
    before, after = _queue_eu(g, c, g.queue_prev), _queue_eu(g, c, g.queue_next)
    ok = (before >= 0) & (after >= 0)
    # data: a host-to-device copy feeds the next kernel, a device-to-host copy follows the kernel before it
    up, dn = h2d[c] & (after >= 0), d2h[c] & (before >= 0)
    us, vs = [before[ok], c[up], before[dn]], [after[ok], after[up], c[dn]]
    # the moved copies of one direction, in their old queue's order, one after the other
    if g.queue is not None:
        for moved in (h2d, d2h):
            k = c[moved[c]]
            k = k[np.lexsort((k, g.ts[k], g.queue[k]))]
            same = g.queue[k][1:] == g.queue[k][:-1]
            us.append(k[:-1][same])
            vs.append(k[1:][same])
    u, v = np.concatenate(us), np.concatenate(vs)
    if len(u):
        w = np.minimum(0, g.ts[v] - g.ts[u] - g.dur[u])
        g.src, g.dst = np.concatenate([g.src, u]), np.concatenate([g.dst, v])
        g.ekind = np.concatenate([g.ekind, np.full(len(u), R.AFTER_END, np.int8)])
        g.weight = np.concatenate([g.weight, w])


def _queue_eu(g: R.Graph, nodes: np.ndarray, step: np.ndarray, limit: int = 64) -> np.ndarray:
    """The nearest kernel (eu work) from each node along its queue (step: queue_prev or queue_next); -1: none
    within `limit` steps."""
    v = step[nodes]
    for _ in range(limit):
        go = (v >= 0) & (g.lane[np.maximum(v, 0)] != R.EU)
        if not go.any():
            break
        v = np.where(go, step[np.maximum(v, 0)], v)
    return np.where((v >= 0) & (g.lane[np.maximum(v, 0)] == R.EU), v, -1)


def _launch(g, fs, _speedup) -> None:
    # submitted early enough: each late submission reaches the device when the device ran out of work.
    # What made it late is the thread's own time before it (the graph's host-chain gaps: the program's
    # work between the calls that hand work over). The earliest call that submitted the gap's work (the
    # kernel that ended the gap, and the work of its device that started or ended in the gap: its input
    # copies, submitted late with it) comes the gap's length sooner: the thread's own time before that
    # call shrinks by the gap (analysis/host_time.py), so everything the thread does after it comes sooner too.
    # The kernel and the gap's work also lose their submitter constraints and unexplained waits.
    dev = g.cached("device nodes", lambda: np.flatnonzero(g.kind == R.DEVICE))
    by_start = g.cached("device by start", lambda: dev[np.argsort(g.ts[dev], kind="stable")])
    by_end, ends = g.cached("device by end", lambda: _by_trace_end(g, dev))
    own = _nodes(g, fs)
    f_ts = np.array([f.ts for f in fs], np.int64)
    f_t1 = f_ts + np.maximum(np.array([f.dur for f in fs], np.int64), 0)
    lo, hi = np.searchsorted(g.ts[by_start], f_ts, "left"), np.searchsorted(g.ts[by_start], f_t1, "left")
    lo2, hi2 = np.searchsorted(ends, f_ts, "right"), np.searchsorted(ends, f_t1, "right")
    fi1, n1 = _expand(lo, hi, by_start)
    fi2, n2 = _expand(lo2, hi2, by_end)
    # (fix, node) for every node a fix moves: its own kernel and what its gap holds on its device
    fix_of = np.concatenate([np.arange(len(fs)), fi1, fi2])
    node_of = np.concatenate([own, n1, n2])
    if g.device is not None:
        same = g.device[node_of] == g.device[own[fix_of]]
        fix_of, node_of = fix_of[same], node_of[same]
    # CPU nodes ranked by start, then node: the earliest of a set is its smallest rank
    rank_order, rank = g.cached("cpu rank", lambda: _cpu_rank(g))
    best = _submitters(g).first_cpu(g, rank)
    first = np.full(len(fs), len(rank), np.int64)
    np.minimum.at(first, fix_of, best[node_of])
    local = np.array([f.local_ns for f in fs], np.int64)
    hit = (first < len(rank)) & (local > 0)
    if hit.any():
        cut_host_time(g, rank_order[first[hit]], local[hit])
    m = _mark(len(g.ts), node_of)
    _drop_edges(g, m[g.dst] & (g.ekind == R.AFTER_START) & (g.kind[g.src] == R.HOST))
    g.slack[m] = 0


def _by_trace_end(g: R.Graph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nodes by their end in the trace, and those ends (the durations graph.build recorded: a finding's
    window is in the trace's time, whatever another fix did to a copy's durations)."""
    dur = g.cached("trace dur", lambda: g.dur)
    ends = g.ts[nodes] + dur[nodes]
    o = np.argsort(ends, kind="stable")
    return nodes[o], ends[o]


def _cpu_rank(g: R.Graph) -> tuple[np.ndarray, np.ndarray]:
    cpu = np.flatnonzero(on_thread(g)[0])
    order = cpu[np.argsort(g.ts[cpu], kind="stable")]
    rank = np.full(len(g.ts), len(g.ts), np.int64)
    rank[order] = np.arange(len(order))
    return order, rank


def _expand(lo: np.ndarray, hi: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, items[j]) for every i and lo[i] <= j < hi[i]."""
    cnt = np.maximum(0, hi - lo)
    total = int(cnt.sum())
    if not total:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    fi = np.repeat(np.arange(len(lo)), cnt)
    return fi, items[np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(total)]


def _sync(g, fs, _speedup) -> None:
    m = _mark(len(g.ts), _nodes(g, fs))
    _drop_edges(g, m[g.dst] & (g.ekind == R.WAIT))


def _roofline(g, fs, _speedup) -> None:
    v = _nodes(g, fs)
    local = np.array([f.local_ns for f in fs], np.int64)
    if (local < 0).any():  # a negative estimate: one by one, as given
        for x, ln in zip(v.tolist(), local.tolist()):
            g.dur[x] = max(0, g.dur[x] - ln)
            g.own[x] = g.dur[x]
        return
    cut = np.zeros(len(g.ts), np.int64)
    np.add.at(cut, v, local)
    u = np.unique(v)
    g.dur[u] = np.maximum(0, g.dur[u] - cut[u])
    g.own[u] = g.dur[u]


def _saturation(g, fs, speedup) -> None:
    """The window's transfers as their link not being the limit. Behind a shared (switch) uplink: each at
    its unloaded time, alone on its own device link (the uplink's excess demand spread; several devices
    through one uplink stretch a transfer by up to their number, which no fixed factor models); on a
    device's own saturated link: on a link `speedup` times faster (a later generation, a parameter)."""
    m = np.zeros(len(g.ts), bool)
    pcie = _transfers_by_start(g)
    for f in fs:
        m[_window_nodes(g, pcie, f, overlap=True)] = True
    faster = (g.dur[m] / speedup).astype(np.int64)
    if g.unloaded is not None:
        u = g.unloaded[m]
        faster = np.where(u >= 0, np.minimum(g.dur[m], u), faster)
    g.dur[m] = faster
    g.own[m] = g.dur[m]


_APPLY = {"pageable_memory": _copies, "redundant_transfers": _copies, "small_transfers": _small,
          "copy_compute_serialization": _serialised, "launch_gaps": _launch, "sync_stalls": _sync,
          "memory_access_inefficiency": _roofline, "pcie_saturation": _saturation}
