"""The dependency graph of a trace, its critical path, and what-if replay (docs/analysis.md "What if").

Built only from what the trace holds:
- host items: the slices that hand work to the device (API calls, driver doorbells: the sources
  of launch/dma/exec flows) and synchronising calls, chained per track in time order with the
  gaps between them kept as fixed host work (an item that starts inside the previous one keeps
  its offset from that one's start);
- device work (kernels, memsets, copies): after its submitter (the offset from the submitter's
  start to min(its own start, the submitter's end)), after the previous work of its queue (the
  driver queue or stream it was submitted on) and of its engine (its track);
- waits: a synchronising call, and a blocking copy call (one that returned after its own DMA),
  cannot end before the device work it waited for ends;
- slack: where the trace started a node later than all its constraints allow, the difference is
  kept (a wait the trace does not explain), so the untransformed replay gives back the trace.
Replay re-schedules the graph in topological order (Kahn), every node as early as its constraints
allow. A what-if transforms the graph for a finding (analysis/whatif.py) and replays it; the
saving is the makespan difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from acceltrace.analysis.graph import (AFTER_END, AFTER_START, CPU, DEVICE, DRIVER, EU, HOST, LANES, PCIE,
                                       SYNC_RETURN_NS, WAIT, Graph, NodeIndex, build, without_slack)
from acceltrace.analysis.threads import on_thread

try:  # built by `pip install` (setup.py); optional: the Python passes below give the same schedule and path
    from acceltrace.analysis import _replay as _C
except ImportError:  # pragma: no cover - depends on the install
    _C = None

__all__ = ["AFTER_END", "AFTER_START", "CPU", "DEVICE", "DRIVER", "EU", "HOST", "LANES", "PCIE", "SYNC_RETURN_NS",
           "WAIT", "Graph", "NodeIndex", "Schedule", "build", "without_slack", "replay", "critical_path",
           "critical_path_arrays", "breakdown", "LANE_TYPE", "SEGMENT_TYPES"]


@dataclass
class Schedule:
    start: np.ndarray
    end: np.ndarray
    why: np.ndarray  # the node that fixed each node's start (-1: none, its own start or slack)
    why_end: np.ndarray | None = None  # a waiting node: the work whose end its wait ended with (-1: none)

    @property
    def makespan(self) -> int:
        return int(self.end.max() - self.start.min()) if len(self.start) else 0


def replay(g: Graph, compiled: bool = True) -> Schedule:
    """Every node as early as its constraints allow, in topological order (Kahn's algorithm on start
    and end events: a waiting call's start releases the work it submits before its end is known).

    The compiled pass (analysis/_replay.c) and the Python one below schedule in the same order and
    give the same Schedule; a graph with a cycle, an edge naming no node or an unknown edge kind is
    a ValueError, a time past int64 an OverflowError."""
    if compiled and _C is not None:
        n = len(g.ts)
        out = [np.empty(n, np.int64) for _ in range(4)]
        arr = lambda a, t: np.ascontiguousarray(a, dtype=t)  # noqa: E731
        done = _C.replay(arr(g.src, np.int64), arr(g.dst, np.int64), arr(g.ekind, np.int8), arr(g.weight, np.int64),
                         arr(g.ts, np.int64), arr(g.own, np.int64), arr(g.slack, np.int64), *out)
        if done != n:
            raise ValueError(f"the dependency graph has a cycle ({n - done} nodes never finished)")
        return Schedule(*out)
    return _replay_py(g)


def _check(g: Graph) -> None:
    n, m = len(g.ts), len(g.src)
    if not (len(g.dst) == len(g.ekind) == len(g.weight) == m) or not (len(g.own) == len(g.slack) == n):
        raise ValueError("the dependency graph's arrays differ in length")
    if m:
        bad = (g.src < 0) | (g.src >= n) | (g.dst < 0) | (g.dst >= n)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"edge {k} ({int(g.src[k])} -> {int(g.dst[k])}) names a node outside 0..{n - 1}")
        bad = (g.ekind < AFTER_END) | (g.ekind > WAIT)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"edge {k} has kind {int(g.ekind[k])} (expected 0, 1 or 2)")


def _replay_py(g: Graph) -> Schedule:
    """replay() in Python (the fallback, and the reference the compiled pass is tested against)."""
    _check(g)
    n = len(g.ts)
    src = np.asarray(g.src, np.int64)
    out_order = np.argsort(src, kind="stable")
    ptr = np.searchsorted(src[out_order], np.arange(n + 1)).tolist()
    dst = np.asarray(g.dst, np.int64)
    dst_l, ek_l, w_l = dst[out_order].tolist(), g.ekind[out_order].tolist(), g.weight[out_order].tolist()
    wait = g.ekind == WAIT
    need_start = np.bincount(dst[~wait], minlength=n).tolist()
    need_wait = np.bincount(dst[wait], minlength=n).tolist()
    low = np.iinfo(np.int64).min
    # a node that no start constraint points at starts when it did in the trace
    start_l = np.where(np.asarray(need_start) > 0, low, g.ts).tolist()
    wait_l, end_l, why_l, why_end_l = [low] * n, [0] * n, [-1] * n, [-1] * n
    own_l, slack_l = g.own.tolist(), g.slack.tolist()
    started = [False] * n
    starts = [v for v in range(n) if need_start[v] == 0]
    ends: list[int] = []
    done = 0
    while starts or ends:
        if starts:
            v = starts.pop()
            s = start_l[v] = start_l[v] + slack_l[v]
            started[v] = True
            for k in range(ptr[v], ptr[v + 1]):
                if ek_l[k] == AFTER_START:
                    u = dst_l[k]
                    t = s + w_l[k]
                    if t > start_l[u]:
                        start_l[u], why_l[u] = t, v
                    need_start[u] -= 1
                    if need_start[u] == 0:
                        starts.append(u)
            if need_wait[v] == 0:
                ends.append(v)
            continue
        v = ends.pop()
        done += 1
        s = start_l[v]
        # a waiting node spends its own time after the work it waits for is done
        e = end_l[v] = (wait_l[v] if wait_l[v] > s else s) + own_l[v]
        for k in range(ptr[v], ptr[v + 1]):
            kind, u = ek_l[k], dst_l[k]
            if kind == WAIT:  # its weight: the two clocks' skew where a call returned before its DMA's end
                if e + w_l[k] > wait_l[u]:
                    wait_l[u], why_end_l[u] = e + w_l[k], v
                need_wait[u] -= 1
                if need_wait[u] == 0 and started[u]:
                    ends.append(u)
            elif kind == AFTER_END:
                t = e + w_l[k]
                if t > start_l[u]:
                    start_l[u], why_l[u] = t, v
                need_start[u] -= 1
                if need_start[u] == 0:
                    starts.append(u)
    if done != n:
        raise ValueError(f"the dependency graph has a cycle ({n - done} nodes never finished)")
    try:
        return Schedule(np.array(start_l, np.int64), np.array(end_l, np.int64), np.array(why_l, np.int64),
                        np.array(why_end_l, np.int64))
    except OverflowError:
        raise OverflowError("replay: a node's time overflows int64 (bad durations or weights)") from None


# critical-path segment types (docs/analysis.md "Critical path"); a lane's type is LANE_TYPE[lane code]
SEGMENT_TYPES = ("host-bound", "launch overhead", "link/transfer", "device compute", "sync wait", "idle")
HOST_BOUND, LAUNCH, LINK, COMPUTE, SYNC_WAIT, IDLE = range(6)
LANE_TYPE = {CPU: HOST_BOUND, DRIVER: LAUNCH, PCIE: LINK, EU: COMPUTE}
ON_THREAD = 0x40  # added to the lane codes the compiled walk takes: a thread's host work (analysis/_replay.c)


def critical_path(g: Graph, s: Schedule, compiled: bool = True) -> list[tuple[int, int, str, int]]:
    """The chain that sets the makespan as (start, end, type, node or -1) segments, earliest first.

    Walked back from the node that ends last: a node covers its time up to where the path leaves it;
    a waiting call's time after its wait is `sync wait` and the path goes on through the work it
    waited for; the time between a node and the one that set its start is the program's own host
    work (host-bound) or a submission's delay (launch overhead), and a start later than every edge
    allows is `idle` (a wait the trace does not explain). The segments tile the path without overlap,
    so their sum is at most the makespan.
    """
    a, b, t, v = critical_path_arrays(g, s, compiled)
    return list(zip(a.tolist(), b.tolist(), [SEGMENT_TYPES[x] for x in t.tolist()], v.tolist()))


def critical_path_arrays(g: Graph, s: Schedule, compiled: bool = True):
    """critical_path() as arrays (start, end, type code into SEGMENT_TYPES, node or -1)."""
    if compiled and _C is not None:
        arr = lambda x, t: np.ascontiguousarray(x, dtype=t)  # noqa: E731
        a, b, t, v = _C.critical_path(arr(s.start, np.int64), arr(s.end, np.int64), arr(s.why, np.int64),
                                      arr(s.why_end if s.why_end is not None else np.full(len(s.start), -1), np.int64),
                                      arr(g.slack, np.int64), arr(g.own, np.int64), arr(g.kind, np.int8),
                                      arr(g.lane | np.where(on_thread(g)[0], ON_THREAD, 0), np.int8))
        return (np.frombuffer(a, np.int64), np.frombuffer(b, np.int64), np.frombuffer(t, np.int8),
                np.frombuffer(v, np.int64))
    segs = _critical_path_py(g, s)
    cols = list(zip(*segs)) if segs else [(), (), (), ()]
    return (np.array(cols[0], np.int64), np.array(cols[1], np.int64), np.array(cols[2], np.int8),
            np.array(cols[3], np.int64))


def _critical_path_py(g: Graph, s: Schedule) -> list[tuple[int, int, int, int]]:
    """The walk of critical_path() in Python (the fallback and the compiled one's reference)."""
    n = len(s.end)
    if not n:
        return []
    for x in (s.why, s.why_end):
        if x is not None and len(x) and ((x < -1) | (x >= n)).any():
            raise ValueError(f"the schedule points at a node outside 0..{n - 1}")
    segs: list[tuple[int, int, int, int]] = []
    v = int(np.argmax(s.end))
    cursor = int(s.end[v])
    why = s.why.tolist()
    why_end = s.why_end.tolist() if s.why_end is not None else [-1] * len(why)
    start, end, slack, own = s.start.tolist(), s.end.tolist(), g.slack.tolist(), g.own.tolist()
    kind, lane, mine = g.kind.tolist(), g.lane.tolist(), on_thread(g)[0].tolist()
    steps = 0
    while v >= 0 and steps <= 2 * len(start):
        steps += 1
        sv, ev = start[v], min(end[v], cursor)
        w = why_end[v]
        if w >= 0 and end[w] > sv and end[v] - own[v] >= end[w] and ev > end[w]:
            # its end was set by the work it waited for: its own time after the wait, then that work
            segs.append((end[w], ev, SYNC_WAIT if kind[v] == HOST else LANE_TYPE.get(lane[v], IDLE), v))
            v, cursor = w, end[w]
            continue
        if ev > sv:
            segs.append((sv, ev, LANE_TYPE.get(lane[v], IDLE), v))
        p = why[v]
        if slack[v] > 0:
            segs.append((sv - slack[v], sv, IDLE, -1))
        edge_t = sv - slack[v]
        if p < 0:
            break
        p_end = min(end[p], edge_t)
        if edge_t > p_end:
            gap = LAUNCH if kind[p] == HOST and kind[v] == DEVICE else (
                HOST_BOUND if mine[p] and mine[v] else IDLE)  # a thread's own time between its calls
            segs.append((p_end, edge_t, gap, -1))
        v, cursor = p, p_end
    segs.reverse()
    return [x for x in segs if x[1] > x[0]]


def breakdown(segs: list[tuple[int, int, str, int]]) -> dict[str, int]:
    """Time per segment type, largest first."""
    by: dict[str, int] = {}
    for a, b, t, _ in segs:
        by[t] = by.get(t, 0) + (b - a)
    return dict(sorted(by.items(), key=lambda kv: -kv[1]))
