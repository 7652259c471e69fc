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

from acceltrace.analysis.graph import (AFTER_END, AFTER_START, DEVICE, HOST, SYNC_RETURN_NS, WAIT, Graph,
                                       NodeIndex, build, without_slack)

__all__ = ["AFTER_END", "AFTER_START", "DEVICE", "HOST", "SYNC_RETURN_NS", "WAIT", "Graph", "NodeIndex", "Schedule",
           "build", "without_slack", "replay", "critical_path", "breakdown", "LANE_TYPE", "SEGMENT_TYPES"]


@dataclass
class Schedule:
    start: np.ndarray
    end: np.ndarray
    why: np.ndarray  # the node that fixed each node's start (-1: none, its own start or slack)
    why_end: np.ndarray | None = None  # a waiting node: the work whose end its wait ended with (-1: none)

    @property
    def makespan(self) -> int:
        return int(self.end.max() - self.start.min()) if len(self.start) else 0


def replay(g: Graph) -> Schedule:
    """Every node as early as its constraints allow, in topological order (Kahn's algorithm on start
    and end events: a waiting call's start releases the work it submits before its end is known)."""
    n = len(g.ts)
    out_order = np.argsort(g.src, kind="stable")
    ptr = np.searchsorted(g.src[out_order], np.arange(n + 1)).tolist()
    dst_l, ek_l, w_l = g.dst[out_order].tolist(), g.ekind[out_order].tolist(), g.weight[out_order].tolist()
    wait = g.ekind == WAIT
    need_start = np.bincount(g.dst[~wait], minlength=n).tolist()
    need_wait = np.bincount(g.dst[wait], minlength=n).tolist()
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
            if kind == WAIT:
                if e > wait_l[u]:
                    wait_l[u], why_end_l[u] = e, v
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
    return Schedule(np.array(start_l, np.int64), np.array(end_l, np.int64), np.array(why_l, np.int64),
                    np.array(why_end_l, np.int64))


# critical-path segment types (docs/analysis.md "Critical path")
LANE_TYPE = {"cpu": "host-bound", "driver": "launch overhead", "pcie": "link/transfer", "eu": "device compute"}
SEGMENT_TYPES = ("host-bound", "launch overhead", "link/transfer", "device compute", "sync wait", "idle")


def critical_path(g: Graph, s: Schedule) -> list[tuple[int, int, str, int]]:
    """The chain that sets the makespan as (start, end, type, node or -1) segments, earliest first.

    Walked back from the node that ends last: a node covers its time up to where the path leaves it;
    a waiting call's time after its wait is `sync wait` and the path goes on through the work it
    waited for; the time between a node and the one that set its start is the program's own host
    work (host-bound) or a submission's delay (launch overhead), and a start later than every edge
    allows is `idle` (a wait the trace does not explain). The segments tile the path without overlap,
    so their sum is at most the makespan.
    """
    if not len(s.end):
        return []
    segs: list[tuple[int, int, str, int]] = []
    v = int(np.argmax(s.end))
    cursor = int(s.end[v])
    why = s.why.tolist()
    why_end = s.why_end.tolist() if s.why_end is not None else [-1] * len(why)
    start, end, slack, own = s.start.tolist(), s.end.tolist(), g.slack.tolist(), g.own.tolist()
    kind, lane = g.kind.tolist(), g.lane.tolist()
    steps = 0
    while v >= 0 and steps <= 2 * len(start):
        steps += 1
        sv, ev = start[v], min(end[v], cursor)
        w = why_end[v]
        if w >= 0 and end[w] > sv and end[v] - own[v] >= end[w] and ev > end[w]:
            # its end was set by the work it waited for: its own time after the wait, then that work
            segs.append((end[w], ev, "sync wait" if kind[v] == HOST else LANE_TYPE.get(lane[v], "idle"), v))
            v, cursor = w, end[w]
            continue
        if ev > sv:
            segs.append((sv, ev, LANE_TYPE.get(lane[v], "idle"), v))
        p = why[v]
        if slack[v] > 0:
            segs.append((sv - slack[v], sv, "idle", -1))
        edge_t = sv - slack[v]
        if p < 0:
            break
        p_end = min(end[p], edge_t)
        if edge_t > p_end:
            gap = "launch overhead" if kind[p] == HOST and kind[v] == DEVICE else (
                "host-bound" if lane[p] == "cpu" and lane[v] == "cpu" else "idle")
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
