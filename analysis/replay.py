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

from dataclasses import dataclass, field

import duckdb
import numpy as np

HOST, DEVICE = 0, 1
# a synchronising call returns this soon after the work it waited for: what ended earlier inside it
# was not what it waited for (the trace does not say which event or queue a sync names)
SYNC_RETURN_NS = 20_000
AFTER_END, AFTER_START, WAIT = 0, 1, 2  # edge kinds: start >= end(src)+w, start >= start(src)+w, end >= end(src)


@dataclass
class Graph:
    slice_id: np.ndarray  # per node
    kind: np.ndarray  # HOST or DEVICE
    lane: np.ndarray  # 'cpu', 'driver', 'eu', 'pcie'
    ts: np.ndarray
    dur: np.ndarray
    own: np.ndarray  # a waiting node's time after its wait ends (host); dur otherwise
    slack: np.ndarray
    src: np.ndarray  # edges
    dst: np.ndarray
    ekind: np.ndarray
    weight: np.ndarray
    index: dict = field(default_factory=dict)  # slice_id -> node
    siblings: dict = field(default_factory=dict)  # device slice_id -> the nodes of its correlation id
    track: np.ndarray | None = None  # per node: its track_id (never changed by a transformation)

    def copy(self) -> "Graph":
        return Graph(*(getattr(self, f).copy() for f in ("slice_id", "kind", "lane", "ts", "dur", "own", "slack",
                                                          "src", "dst", "ekind", "weight")),
                     index=self.index, siblings=self.siblings, track=self.track)


def build(con: duckdb.DuckDBPyConnection) -> Graph:
    """The graph of a trace whose connection already ran analysis/_common.sql (its _dev_work, _ready)."""
    dev = con.execute("""
        SELECT w.slice_id, w.lane, w.ts, w.dur, coalesce(r.src_slice, -1) AS src_slice, w.track_id, w.dev,
               coalesce(w.corr_id, -1) AS corr_id,
               coalesce(CASE WHEN r.kind IN ('dma', 'exec') THEN 'q' || r.src_track_id END,
                        'stream:' || coalesce(w.dev, '') || ':' || json_extract_string(s.args, '$.stream'),
                        't' || w.track_id) AS queue
        FROM _dev_work w JOIN slices s USING (slice_id) LEFT JOIN _ready r USING (slice_id)
        ORDER BY w.ts, w.slice_id""").fetchnumpy()
    host = con.execute("""
        WITH items AS (
            SELECT DISTINCT src_slice AS slice_id FROM _ready
            UNION SELECT src_slice FROM flows WHERE kind = 'submit' AND src_slice IS NOT NULL
            UNION SELECT slice_id FROM _sync_calls
        )
        SELECT s.slice_id, t.lane, s.ts, s.dur, s.track_id, coalesce(s.corr_id, -1) AS corr_id,
               s.slice_id IN (SELECT slice_id FROM _sync_calls) AS is_sync
        FROM items i JOIN slices s USING (slice_id) JOIN _track_dev t ON t.track_id = s.track_id
        ORDER BY s.track_id, s.ts, s.slice_id""").fetchnumpy()
    nh, nd = len(host["slice_id"]), len(dev["slice_id"])
    sid = np.concatenate([host["slice_id"], dev["slice_id"]]).astype(np.int64)
    index = {int(s): i for i, s in enumerate(sid)}
    ts = np.concatenate([host["ts"], dev["ts"]]).astype(np.int64)
    dur = np.concatenate([host["dur"], dev["dur"]]).astype(np.int64)
    lane = np.concatenate([np.asarray(host["lane"], dtype=object), np.asarray(dev["lane"], dtype=object)])
    src, dst, ek, wt = [], [], [], []

    # host chains per track: on a thread the gaps are the program's own work, kept; a driver queue's
    # items only keep their order (its gaps are waits for submissions, which their own edges say)
    htrack = host["track_id"]
    for i in range(1, nh):
        if htrack[i] != htrack[i - 1]:
            continue
        p_end = ts[i - 1] + dur[i - 1]
        if ts[i] >= p_end:
            gap = ts[i] - p_end if lane[i] == "cpu" else 0
            src.append(i - 1), dst.append(i), ek.append(AFTER_END), wt.append(gap)
        else:
            src.append(i - 1), dst.append(i), ek.append(AFTER_START), wt.append(ts[i] - ts[i - 1])
    # an API call hands its work to the driver: the doorbell keeps its offset from the call's start
    sub = con.execute("""
        SELECT f.src_slice, f.dst_slice FROM flows f
        WHERE f.kind = 'submit' AND f.src_slice IS NOT NULL AND f.dst_slice IS NOT NULL""").fetchall()
    linked = set()
    calls_by_corr: dict = {}
    for a_, b_ in sub:
        i, k = index.get(int(a_)), index.get(int(b_))
        if i is not None and i < nh and lane[i] == "cpu" and host["corr_id"][i] >= 0:
            calls_by_corr.setdefault(int(host["corr_id"][i]), i)
        if i is not None and k is not None and i < nh and k < nh and ts[k] >= ts[i]:
            src.append(i), dst.append(k), ek.append(AFTER_START), wt.append(ts[k] - ts[i])
            linked.add(k)
    # the driver's doorbell for a call is another slice than the one its submit flow points at (the
    # native runtime writes submit -> driver `submit`, then the doorbell with the same correlation id):
    # the doorbell follows its call too, at most the call's length after its start; what it waited
    # beyond that stays slack
    for k in range(nh):
        c = int(host["corr_id"][k])
        if lane[k] != "driver" or k in linked or c < 0 or c not in calls_by_corr:
            continue
        i = calls_by_corr[c]
        if ts[k] >= ts[i]:
            src.append(i), dst.append(k), ek.append(AFTER_START), wt.append(min(ts[k] - ts[i], dur[i]))
    # device: submitter, queue and engine order
    last_q: dict = {}
    last_e: dict = {}
    for j in range(nd):
        n = nh + j
        sub = dev["src_slice"][j]
        if int(sub) in index:
            k = index[int(sub)]
            # negative where the work started before its submitter in the trace (clocks of two sources):
            # kept, so the replay gives the trace back instead of moving the work after its submitter
            off = min(ts[n], ts[k] + dur[k]) - ts[k]
            src.append(k), dst.append(n), ek.append(AFTER_START), wt.append(off)
        for key, last in ((dev["queue"][j], last_q), (dev["track_id"][j], last_e)):
            if key in last and last[key] != n:
                # profilers' clocks let neighbours overlap by a few us: keep the overlap, never widen it
                k = last[key]
                src.append(k), dst.append(n), ek.append(AFTER_END), wt.append(min(0, ts[n] - ts[k] - dur[k]))
            last[key] = n
    # dependencies the trace records between pieces of work (an event wait: start after the end)
    for a_, b_ in con.execute("""SELECT src_slice, dst_slice FROM flows WHERE kind = 'dependency'
                                 AND src_slice IS NOT NULL AND dst_slice IS NOT NULL""").fetchall():
        i, k = index.get(int(a_)), index.get(int(b_))
        if i is not None and k is not None and i != k and ts[k] >= ts[i] + dur[i]:
            src.append(i), dst.append(k), ek.append(AFTER_END), wt.append(0)
    # waits: a sync call waits for the device work that was submitted before it and ended inside it;
    # a blocking copy call for its own device work when it returned after that work ended
    g = Graph(sid, np.r_[np.zeros(nh, np.int8), np.ones(nd, np.int8)], lane, ts, dur, dur.copy(),
              np.zeros(nh + nd, np.int64), np.array(src, np.int64), np.array(dst, np.int64),
              np.array(ek, np.int8), np.array(wt, np.int64), index,
              track=np.concatenate([host["track_id"], dev["track_id"]]).astype(np.int64))
    waits = con.execute(f"""
        SELECT c.slice_id AS call, w.slice_id AS work, w.end_ns
        FROM _sync_calls c JOIN _dev_work w
          ON w.end_ns > greatest(c.ts, c.end_ns - {SYNC_RETURN_NS}) AND w.end_ns <= c.end_ns
        JOIN _ready r ON r.slice_id = w.slice_id
        JOIN slices sub ON sub.slice_id = r.src_slice
        WHERE sub.ts < c.ts
        UNION ALL
        SELECT s.slice_id, w.slice_id, w.end_ns
        FROM slices s JOIN _track_dev t ON t.track_id = s.track_id
        JOIN _dev_work w ON w.corr_id = s.corr_id AND w.lane = 'pcie'
        WHERE t.lane = 'cpu' AND s.corr_id IS NOT NULL AND s.ts + s.dur >= w.end_ns AND s.ts <= w.ts""").fetchnumpy()
    groups: dict = {}
    for j, corr in enumerate(dev["corr_id"].tolist()):
        if corr is not None and corr >= 0:
            groups.setdefault(corr, []).append(nh + j)
    g.siblings = {int(sid[n]): nodes for nodes in groups.values() for n in nodes}
    _add_waits(g, waits)
    _slack(g)
    _infer_device_dependencies(g, np.asarray(dev["dev"], dtype=object), nh)
    _slack(g)
    return g


def without_slack(g: Graph) -> Graph:
    """The graph as its edges alone explain it: what-ifs replay this (a kept fixed delay would hold
    the work behind a fixed cause in place); the trace's own schedule is the graph with slack."""
    h = g.copy()
    h.slack[:] = 0
    return h


def _infer_device_dependencies(g: Graph, dev_of: np.ndarray, nh: int) -> None:
    """Work that started later than its submitter and queue allow waited for something the trace
    does not record (an event wait on another queue: a result copy after its kernel). Infer the
    edge from the work of the same device that ended last before it started, keeping the gap:
    fixing that work then lets the waiter move, as the device's own dependency would."""
    waiting = np.flatnonzero((g.kind == DEVICE) & (g.slack > 0))
    if not len(waiting):
        return
    devs = g.kind == DEVICE
    src, dst, wt = [], [], []
    dev_all = np.empty(len(g.ts), dtype=object)
    dev_all[nh:] = dev_of
    for d in set(dev_of.tolist()):
        nodes = np.flatnonzero(devs & (dev_all == d))
        ends = g.ts[nodes] + g.dur[nodes]
        order = np.argsort(ends, kind="stable")
        ends_sorted, nodes_sorted = ends[order], nodes[order]
        for v in waiting[dev_all[waiting] == d]:
            k = np.searchsorted(ends_sorted, g.ts[v], side="right") - 1
            while k >= 0 and nodes_sorted[k] == v:
                k -= 1
            if k < 0:
                continue
            gap = int(g.ts[v] - ends_sorted[k])
            if gap < g.slack[v]:
                src.append(int(nodes_sorted[k])), dst.append(int(v)), wt.append(gap)
    if src:
        g.src = np.r_[g.src, np.array(src, np.int64)]
        g.dst = np.r_[g.dst, np.array(dst, np.int64)]
        g.ekind = np.r_[g.ekind, np.full(len(src), AFTER_END, np.int8)]
        g.weight = np.r_[g.weight, np.array(wt, np.int64)]


def _add_waits(g: Graph, waits: dict) -> None:
    calls = [g.index.get(int(c)) for c in waits["call"]]
    works = [g.index.get(int(w)) for w in waits["work"]]
    pairs = [(c, w) for c, w in zip(calls, works) if c is not None and w is not None]
    if not pairs:
        return
    c, w = np.array(pairs, np.int64).T
    g.src = np.r_[g.src, w]
    g.dst = np.r_[g.dst, c]
    g.ekind = np.r_[g.ekind, np.full(len(c), WAIT, np.int8)]
    g.weight = np.r_[g.weight, np.zeros(len(c), np.int64)]
    # a waiting call's own time: what it spent after the last work it waited for ended
    last = np.full(len(g.ts), -1, np.int64)
    np.maximum.at(last, c, g.ts[w] + g.dur[w])
    m = last >= 0
    g.own[m] = np.clip(g.ts[m] + g.dur[m] - last[m], 0, g.dur[m])


def _slack(g: Graph) -> None:
    """Per node: how much later the trace started it than its constraints ask (kept by replay)."""
    earliest = np.full(len(g.ts), np.iinfo(np.int64).min, np.int64)
    m = g.ekind == AFTER_END
    np.maximum.at(earliest, g.dst[m], g.ts[g.src[m]] + g.dur[g.src[m]] + g.weight[m])
    m = g.ekind == AFTER_START
    np.maximum.at(earliest, g.dst[m], g.ts[g.src[m]] + g.weight[m])
    has = earliest > np.iinfo(np.int64).min
    g.slack[has] = np.maximum(0, g.ts[has] - earliest[has])


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
