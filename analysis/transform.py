"""Each pass's fix as a transformation of the dependency graph (analysis/replay.py), for one finding or many.

A fix names its pass, the slice the finding points at, its window (ts, dur) and the pass's local
estimate (local_ns: what the pass says the fixed version would not need):
- pageable_memory: the copy's DMA chunks at the pinned rate (their span shrinks by local_ns) and
  its call no longer blocks on them (a pinned copy is asynchronous);
- small_transfers: the burst's transfers batched: their busy time shrinks by local_ns;
- redundant_transfers: the copy dropped (its DMA takes no time, its call does not wait);
- copy_compute_serialization: the copy on a queue of its own (no order against the kernels);
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

# pass -> what the replay of its fix cannot see (the finding's impact_basis says so)
BOUNDS = {
    "pageable_memory": "lower bound: the trace does not record the host's staging copies",
    "sync_stalls": "lower bound: the trace does not record which event or queue a sync waits for",
    "launch_gaps": "lower bound: the host work before the late submission is kept as it is",
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
    if fix.pass_id in WINDOW_PASSES:
        return fix.dur > 0 or (fix.slice_id is not None and fix.slice_id in g.index)
    return fix.slice_id is not None and fix.slice_id in g.index


def apply(g: R.Graph, fix: Fix, link_speedup: float = 2.0) -> bool:
    """Transform g in place for one fix; False when the graph has no node for it."""
    return apply_all(g, [fix], link_speedup) > 0


def apply_all(g: R.Graph, fixes: list[Fix], link_speedup: float = 2.0) -> int:
    """Transform g in place for all the fixes together; how many of them applied."""
    by_pass: dict[str, list[Fix]] = defaultdict(list)
    for f in fixes:
        if applicable(g, f) and f.pass_id in _APPLY:
            by_pass[f.pass_id].append(f)
    for pid, fs in by_pass.items():
        _APPLY[pid](g, fs, link_speedup)
    return sum(len(fs) for fs in by_pass.values())


def _mark(n: int, nodes) -> np.ndarray:
    m = np.zeros(n, bool)
    m[np.asarray(list(nodes), np.int64)] = True
    return m


def _siblings(g: R.Graph, slice_id: int) -> np.ndarray:
    """The device-work nodes of one copy call: the DMAs sharing the slice's correlation id."""
    return g.siblings(slice_id)


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
    pid = fs[0].pass_id
    all_dmas = []
    for f in fs:
        dmas = np.asarray(_siblings(g, f.slice_id), np.int64)
        all_dmas.append(dmas)
        if pid == "redundant_transfers":
            g.dur[dmas] = 0
            g.own[dmas] = 0
        else:
            _shrink(g, dmas, f.local_ns)
        # what a chunk waited for beyond its edges was the host staging the copy (or the copy itself)
        g.slack[dmas] = 0
    m = _mark(len(g.ts), np.concatenate(all_dmas))
    _drop_edges(g, m[g.src] & (g.ekind == R.WAIT))


def _submitters(g: R.Graph, nodes: np.ndarray) -> np.ndarray:
    """The host nodes that hand the nodes their work: the doorbells or calls with a start edge into
    them, and the calls with a start edge into those doorbells."""
    m = _mark(len(g.ts), nodes)
    e = (g.ekind == R.AFTER_START) & (g.kind[g.src] == R.HOST)
    first = np.unique(g.src[e & m[g.dst]])
    m2 = _mark(len(g.ts), first)
    return np.union1d(first, g.src[e & m2[g.dst]])


def _small(g, fs, _speedup) -> None:
    # batched: one call and one submission move the burst's bytes; the other calls of the burst take
    # no host time and hand their work on at once, and the transfers lose the fixed cost per transfer
    pcie = _transfers_by_start(g)
    for f in fs:
        burst = _window_nodes(g, pcie, f, overlap=False)
        if len(burst) > 1:
            rest = _submitters(g, burst[1:])
            keep = _submitters(g, burst[:1])
            rest = rest[~np.isin(rest, keep)]
            g.dur[rest] = 0
            g.own[rest] = 0
            g.slack[burst[1:]] = 0
            m = _mark(len(g.ts), rest)
            g.weight[m[g.src] & (g.ekind == R.AFTER_START)] = 0
        _shrink(g, burst, f.local_ns)


def _serialised(g, fs, _speedup) -> None:
    # no order against the queue's kernels: drop the order edges between the copy and a kernel
    # (its engine keeps ordering it against other copies)
    m = _mark(len(g.ts), np.concatenate([np.asarray(_siblings(g, f.slice_id), np.int64) for f in fs]))
    into, out = m[g.dst], m[g.src]
    other = np.where(into, g.src, g.dst)
    _drop_edges(g, (into | out) & (g.ekind == R.AFTER_END) & (g.lane[other] == R.EU))


def _launch(g, fs, _speedup) -> None:
    # submitted early enough: the kernel, and the device work that started or ended during its gap
    # (what the late host also submitted late: the kernel's input copies), lose their submitter
    # constraints and unexplained waits
    dev = np.flatnonzero(g.kind == R.DEVICE)
    by_start = dev[np.argsort(g.ts[dev], kind="stable")]
    ends = g.ts[dev] + g.dur[dev]
    o = np.argsort(ends, kind="stable")
    by_end, ends = dev[o], ends[o]
    parts = [np.array([g.index[f.slice_id] for f in fs], np.int64)]
    for f in fs:
        t1 = f.ts + max(f.dur, 0)
        lo, hi = np.searchsorted(g.ts[by_start], [f.ts, t1], "left")
        lo2, hi2 = np.searchsorted(ends, [f.ts, t1], "right")
        parts.append(np.r_[by_start[lo:hi], by_end[lo2:hi2]])
    # ... and the host work before the first late call shrinks by the gap's local estimate: the thread
    # hands the work over that much sooner (its calls keep their own time)
    host_e = (g.ekind == R.AFTER_END) & (g.lane[g.dst] == R.CPU)
    for f, extra in zip(fs, parts[1:] if len(parts) > 1 else []):
        own = np.r_[extra, g.index[f.slice_id]]
        calls = _submitters(g, own)
        calls = calls[g.lane[calls] == R.CPU]
        if len(calls) and f.local_ns > 0:
            first = calls[np.argmin(g.ts[calls])]
            e = np.flatnonzero(host_e & (g.dst == first))
            g.weight[e] = np.maximum(0, g.weight[e] - f.local_ns)
    nodes = np.unique(np.concatenate(parts))
    m = _mark(len(g.ts), nodes)
    _drop_edges(g, m[g.dst] & (g.ekind == R.AFTER_START) & (g.kind[g.src] == R.HOST))
    g.slack[nodes] = 0


def _sync(g, fs, _speedup) -> None:
    m = _mark(len(g.ts), [g.index[f.slice_id] for f in fs])
    _drop_edges(g, m[g.dst] & (g.ekind == R.WAIT))


def _roofline(g, fs, _speedup) -> None:
    for f in fs:
        v = g.index[f.slice_id]
        g.dur[v] = max(0, g.dur[v] - f.local_ns)
        g.own[v] = g.dur[v]


def _saturation(g, fs, speedup) -> None:
    m = np.zeros(len(g.ts), bool)
    pcie = _transfers_by_start(g)
    for f in fs:
        m[_window_nodes(g, pcie, f, overlap=True)] = True
    g.dur[m] = (g.dur[m] / speedup).astype(np.int64)
    g.own[m] = g.dur[m]


_APPLY = {"pageable_memory": _copies, "redundant_transfers": _copies, "small_transfers": _small,
          "copy_compute_serialization": _serialised, "launch_gaps": _launch, "sync_stalls": _sync,
          "memory_access_inefficiency": _roofline, "pcie_saturation": _saturation}
