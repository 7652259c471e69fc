"""The dependency graph of a trace (docs/analysis.md "What if"), built with vectorised numpy from
what the trace holds -- see analysis/replay.py for what the edges mean and how they are replayed.

Nodes: the host items (the slices that hand work to the device and the synchronising calls) and
the device work; edges: each thread's and driver queue's host order (analysis/threads.py), call ->
submission -> work, queue and engine order, recorded dependencies, sync and blocking-copy waits,
inferred waits on other work of the device; slack: what a node waited beyond every edge (kept by replay).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from acceltrace.analysis.arrays import NodeIndex, order_by, scatter_max, stable_order
from acceltrace.analysis.threads import THREAD_OF_TRACK_SQL, chain_edges
from acceltrace.store import duck

HOST, DEVICE = 0, 1
# a synchronising call returns this soon after the work it waited for: what ended earlier inside it
# was not what it waited for (the trace does not say which event or queue a sync names)
SYNC_RETURN_NS = 20_000
AFTER_END, AFTER_START, WAIT = 0, 1, 2  # edge kinds: start >= end(src)+w, start >= start(src)+w, end >= end(src)+w
# a node's lane as a code (Graph.lane): LANES[code]; any other lane of the trace is OTHER
LANES = ("cpu", "driver", "eu", "pcie", "other")
CPU, DRIVER, EU, PCIE, OTHER = range(5)
# DuckDB's memory once the build's queries are done (the caller reads little after it; docs/analysis.md)
ARRAYS_DUCKDB_MEMORY = "64MB"


@dataclass
class Graph:
    slice_id: np.ndarray  # per node
    kind: np.ndarray  # HOST or DEVICE
    lane: np.ndarray  # int8 codes: CPU, DRIVER, EU, PCIE, OTHER (LANES names them)
    ts: np.ndarray
    dur: np.ndarray
    own: np.ndarray  # a waiting node's time after its wait ends (host); dur otherwise
    slack: np.ndarray
    src: np.ndarray  # edges
    dst: np.ndarray
    ekind: np.ndarray
    weight: np.ndarray
    index: NodeIndex | None = None  # slice_id -> node
    track: np.ndarray | None = None  # per node: its track_id (never changed by a transformation)
    corr: np.ndarray | None = None  # per node: the device work's correlation id (-1: none, or host)
    direction: np.ndarray | None = None  # per node: a copy's direction, 1 h2d, 2 d2h (0: other, or unknown)
    queue_prev: np.ndarray | None = None  # per node: the work before it in its queue (-1: none, or host)
    queue_next: np.ndarray | None = None  # per node: the work after it in its queue (-1: none, or host)
    # per node: a transfer's unloaded time (alone on its own link) where it ran in a window of a
    # saturated *shared* uplink (pcie_saturation's _sat_members), -1 elsewhere: what its fix gives it
    unloaded: np.ndarray | None = None
    device: np.ndarray | None = None  # per node: the device work's device as a code (-1: host)
    queue: np.ndarray | None = None  # per node: the device work's queue as a code (-1: host)
    thread: np.ndarray | None = None  # per node: the CPU track of the thread it is host work of (-1: none)

    def copy(self) -> "Graph":
        """A graph a transformation may edit: the arrays it edits in place (dur, own, slack, weight) are
        copied; the node identity (slice_id, kind, lane, ts, track, corr) and the edge ends and kinds
        are shared -- a transformation replaces those arrays (drops edges), never writes into them."""
        g = Graph(self.slice_id, self.kind, self.lane, self.ts, self.dur.copy(), self.own.copy(), self.slack.copy(),
                  self.src, self.dst, self.ekind, self.weight.copy(), index=self.index, track=self.track,
                  corr=self.corr, direction=self.direction, queue_prev=self.queue_prev, queue_next=self.queue_next,
                  unloaded=self.unloaded, device=self.device, queue=self.queue, thread=self.thread)
        g._by_corr = getattr(self, "_by_corr", None)
        g._cache = self._shared()
        return g

    def _shared(self) -> dict:
        if getattr(self, "_cache", None) is None:
            self._cache = {}
        return self._cache

    def cached(self, key: str, make):
        """What a transformation derives from the arrays no transformation edits (ts, kind, lane, track,
        corr), computed once for the graph and every copy of it."""
        c = self._shared()
        if key not in c:
            c[key] = make()
        return c[key]

    def siblings_of(self, slice_ids) -> tuple[np.ndarray, np.ndarray]:
        """siblings() of many slices at once: (i, node) pairs, i indexing slice_ids, in their order."""
        v = self.index.nodes(slice_ids)
        if (v < 0).any():
            raise KeyError(int(np.asarray(slice_ids)[np.argmax(v < 0)]))
        c = self.corr[v] if self.corr is not None else np.full(len(v), -1, np.int64)
        if getattr(self, "_by_corr", None) is None:
            dev = np.flatnonzero(self.corr >= 0) if self.corr is not None else np.zeros(0, np.int64)
            o = np.argsort(self.corr[dev], kind="stable") if len(dev) else dev
            self._by_corr = ((self.corr[dev][o], dev[o]) if len(dev) else
                             (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        vals, nodes = self._by_corr
        lo, hi = np.searchsorted(vals, c, "left"), np.searchsorted(vals, c, "right")
        lo, hi = np.where(c < 0, 0, lo), np.where(c < 0, 1, hi)  # no correlation: the node alone
        cnt = hi - lo
        i = np.repeat(np.arange(len(v)), cnt)
        pos = np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(int(cnt.sum()))
        alone = c[i] < 0
        return i, np.where(alone, v[i], nodes[np.minimum(pos, max(len(nodes) - 1, 0))] if len(nodes) else v[i])

    def siblings(self, slice_id: int) -> np.ndarray:
        """The device-work nodes of one copy call: those sharing the slice's correlation id."""
        return self.siblings_of(np.array([slice_id], np.int64))[1]


_LANE_CODE = "CASE {} WHEN 'cpu' THEN 0 WHEN 'driver' THEN 1 WHEN 'eu' THEN 2 WHEN 'pcie' THEN 3 ELSE 4 END::TINYINT"


class _Edges:
    def __init__(self):
        self.parts: list[tuple] = []

    def add(self, s, d, kind: int, w) -> None:
        s = np.asarray(s, np.int64)
        if len(s):
            self.parts.append((s, np.asarray(d, np.int64), np.full(len(s), kind, np.int8), np.asarray(w, np.int64)))

    def arrays(self):
        if not self.parts:
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.int64))
        return tuple(np.concatenate([p[i] for p in self.parts]) for i in range(4))


def build(con: duckdb.DuckDBPyConnection) -> Graph:
    """The graph of a trace whose connection already ran analysis/_common.sql (its _dev_work, _ready)."""
    # device work in time order; its queue is the driver queue that submitted it (a dma/exec flow from
    # a driver track), else its stream (Kineto: args.stream of the device), else its own track
    queued = "coalesce(r.kind IN ('dma', 'exec') AND r.src_track_id IS NOT NULL, false)"
    dev = con.execute(f"""
        SELECT w.slice_id, {_LANE_CODE.format("w.lane")} AS lane, w.ts, w.dur, coalesce(r.src_slice, -1) AS src_slice,
               w.track_id, d.dev_code, coalesce(w.corr_id, -1) AS corr_id,
               CASE w.direction WHEN 'h2d' THEN 1 WHEN 'd2h' THEN 2 ELSE 0 END::TINYINT AS direction,
               CASE WHEN {queued} THEN r.src_track_id ELSE -1 END AS q_track
        FROM _dev_work w LEFT JOIN _ready r USING (slice_id)
        JOIN (SELECT dev, row_number() OVER (ORDER BY dev) AS dev_code
              FROM (SELECT DISTINCT coalesce(dev, '') AS dev FROM _dev_work)) d ON d.dev = coalesce(w.dev, '')
        ORDER BY w.ts, w.slice_id""").fetchnumpy()
    # each column of a query's result is taken out of it where it is used, so that it goes once copied
    # (the Nsight 4 M-slice command: its peak 1.63-1.72 -> 1.37-1.41 GB, docs/performance.md)
    col = lambda d, k, t: np.asarray(d.pop(k), dtype=t)  # noqa: E731
    queue, dtrack = col(dev, "q_track", np.int64), col(dev, "track_id", np.int64)
    unqueued = queue < 0
    if unqueued.any():  # the same rows in the same order: their stream, numbered per device
        streams = con.execute(f"""
            SELECT coalesce(dense_rank() OVER (ORDER BY coalesce(w.dev, ''), st) * (st IS NOT NULL)::INT, 0) AS code
            FROM (SELECT w.*, json_extract_string(s.args, '$.stream') AS st FROM _dev_work w JOIN slices s
                  USING (slice_id)) w LEFT JOIN _ready r USING (slice_id)
            WHERE NOT {queued} ORDER BY w.ts, w.slice_id""").fetchnumpy()
        code = np.asarray(streams["code"], np.int64)
        track = dtrack[unqueued]
        # a queue key per row: the driver queue's track, else the stream, else the work's own track
        # (three ranges of small numbers, so a counting sort orders them)
        top = int(max(queue.max(initial=0), dtrack.max(initial=0))) + 1
        queue[unqueued] = np.where(code > 0, top + code, top + int(code.max(initial=0)) + 1 + track)
    # host items by chain (a thread's, its driver calls in it: analysis/threads.py; a driver queue's), time
    host = con.execute(f"""
        SELECT s.slice_id, {_LANE_CODE.format("t.lane")} AS lane, s.ts, s.dur, s.track_id,
               coalesce(s.corr_id, -1) AS corr_id, th.thread,
               CASE WHEN th.thread >= 0 THEN th.thread ELSE s.track_id END AS chain
        FROM slices s JOIN _track_dev t ON t.track_id = s.track_id JOIN ({THREAD_OF_TRACK_SQL}) th
             ON th.track_id = s.track_id
        WHERE s.slice_id IN (SELECT src_slice FROM _ready
                             UNION ALL SELECT src_slice FROM flows WHERE kind = 'submit' AND src_slice IS NOT NULL
                             UNION ALL SELECT slice_id FROM _sync_calls)
        ORDER BY chain, s.ts, s.slice_id""").fetchnumpy()
    nh, nd = len(host["slice_id"]), len(dev["slice_id"])
    n = nh + nd
    sid = np.concatenate([col(host, "slice_id", np.int64), col(dev, "slice_id", np.int64)])
    index = NodeIndex(sid)
    ts = np.concatenate([col(host, "ts", np.int64), col(dev, "ts", np.int64)])
    dur = np.concatenate([col(host, "dur", np.int64), col(dev, "dur", np.int64)])
    lane = np.concatenate([col(host, "lane", np.int8), col(dev, "lane", np.int8)])
    hcorr = col(host, "corr_id", np.int64)
    E = _Edges()

    # host chains: on a thread the gaps are the program's own work, kept; a driver queue's items only
    # keep their order (its gaps are waits for submissions, which their own edges say)
    htrack, hthread = col(host, "track_id", np.int64), col(host, "thread", np.int64)
    (ea, eb, ew), (sa, sb, sw) = chain_edges(col(host, "chain", np.int64), hthread, ts[:nh], dur[:nh])
    E.add(ea, eb, AFTER_END, ew)
    E.add(sa, sb, AFTER_START, sw)
    # an API call hands its work to the driver: the submission keeps its offset from the call's start
    sub = con.execute("""SELECT src_slice, dst_slice FROM flows WHERE kind = 'submit'
                         AND src_slice IS NOT NULL AND dst_slice IS NOT NULL""").fetchnumpy()
    a, b = index.nodes(col(sub, "src_slice", np.int64)), index.nodes(col(sub, "dst_slice", np.int64))
    m = (a >= 0) & (b >= 0) & (a < nh) & (b < nh)
    m[m] &= ts[b[m]] >= ts[a[m]]
    E.add(a[m], b[m], AFTER_START, ts[b[m]] - ts[a[m]])
    linked = np.zeros(n, bool)
    linked[b[m]] = True
    # the driver's doorbell for a call is another slice than the one its submit flow points at (the
    # native runtime writes submit -> driver `submit`, then the doorbell with the same correlation id):
    # the doorbell follows its call too, at most the call's length after its start; what it waited
    # beyond that stays slack
    calls = np.zeros(nh, bool)
    calls[a[(a >= 0) & (a < nh)]] = True
    calls = np.flatnonzero(calls & (lane[:nh] == CPU) & (hcorr >= 0))
    if len(calls):
        o = np.lexsort((calls, hcorr[calls]))
        cc, cn = hcorr[calls][o], calls[o]
        first = np.r_[True, cc[1:] != cc[:-1]]
        cc, cn = cc[first], cn[first]
        k = np.flatnonzero((lane[:nh] == DRIVER) & ~linked[:nh] & (hcorr >= 0))
        pos = np.minimum(np.searchsorted(cc, hcorr[k]), len(cc) - 1)
        hit = cc[pos] == hcorr[k]
        k, c = k[hit], cn[pos[hit]]
        ok = ts[k] >= ts[c]
        E.add(c[ok], k[ok], AFTER_START, np.minimum(ts[k[ok]] - ts[c[ok]], dur[c[ok]]))
    # device: after its submitter (negative where the work started before its submitter in the trace,
    # clocks of two sources: kept, so the replay gives the trace back), after its queue and engine
    dn = nh + np.arange(nd)
    k = index.nodes(col(dev, "src_slice", np.int64))
    m = k >= 0
    E.add(k[m], dn[m], AFTER_START, np.minimum(ts[dn[m]], ts[k[m]] + dur[k[m]]) - ts[k[m]])
    queue_prev, queue_next = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for codes in (queue, dtrack):
        # device rows are in time order: a stable order by key keeps it per key
        o = stable_order(codes)
        same = codes[o][1:] == codes[o][:-1]
        u, v = dn[o][:-1][same], dn[o][1:][same]
        # profilers' clocks let neighbours overlap by a few us: keep the overlap, never widen it
        E.add(u, v, AFTER_END, np.minimum(0, ts[v] - ts[u] - dur[u]))
        if codes is queue:  # the queue's order, for a transformation that takes work off its queue
            queue_next[u], queue_prev[v] = v, u
    # dependencies the trace records between pieces of work (an event wait: start after the end)
    dep = con.execute("""SELECT src_slice, dst_slice FROM flows WHERE kind = 'dependency'
                         AND src_slice IS NOT NULL AND dst_slice IS NOT NULL""").fetchnumpy()
    a, b = index.nodes(col(dep, "src_slice", np.int64)), index.nodes(col(dep, "dst_slice", np.int64))
    m = (a >= 0) & (b >= 0) & (a != b)
    m[m] &= ts[b[m]] >= ts[a[m]] + dur[a[m]]
    E.add(a[m], b[m], AFTER_END, np.zeros(int(m.sum()), np.int64))
    corr = np.concatenate([np.full(nh, -1, np.int64), col(dev, "corr_id", np.int64)])
    kind = np.concatenate([np.zeros(nh, np.int8), np.ones(nd, np.int8)])
    empty = np.zeros(0, np.int64)
    g = Graph(sid, kind, lane, ts, dur, dur.copy(), np.zeros(n, np.int64), empty, empty, empty.astype(np.int8), empty,
              index, track=np.concatenate([htrack, dtrack]), corr=corr,
              direction=np.concatenate([np.zeros(nh, np.int8), col(dev, "direction", np.int8)]),
              queue_prev=queue_prev, queue_next=queue_next,
              device=np.concatenate([np.full(nh, -1, np.int64), col(dev, "dev_code", np.int64)]),
              queue=np.concatenate([np.full(nh, -1, np.int64), queue]),
              thread=np.concatenate([hthread, np.full(nd, -1, np.int64)]))
    del queue, dtrack, htrack, hthread  # (copied into g)
    # waits: a sync call waits for the device work that was submitted before it and ended inside it
    # (its last SYNC_RETURN_NS); a blocking copy call for its own DMAs when it returned after they ended
    sync = index.nodes(col(con.execute("SELECT slice_id FROM _sync_calls").fetchnumpy(), "slice_id", np.int64))
    # the build's queries are done: the tables DuckDB holds go to its spill files while the arrays grow
    duck.give_up_memory(con, ARRAYS_DUCKDB_MEMORY)
    sync = sync[sync >= 0]
    sub_node = np.full(n, -1, np.int64)
    sub_node[dn] = k  # each device work's submitter (-1: none known)
    c, w = _ranges(sync, np.maximum(ts[sync], ts[sync] + dur[sync] - SYNC_RETURN_NS), ts[sync] + dur[sync],
                   dn, ts[dn] + dur[dn])
    m = sub_node[w] >= 0
    m[m] &= ts[sub_node[w[m]]] < ts[c[m]]
    calls = np.flatnonzero((lane[:nh] == CPU) & (hcorr >= 0))
    xfers = dn[(lane[dn] == PCIE) & (corr[dn] >= 0)]
    bc, bw = _ranges(calls, hcorr[calls] - 1, hcorr[calls], xfers, corr[xfers])
    # (returned after its DMA: two clocks may put the return up to 20 us, at most half the DMA, before its end)
    early = ts[bc] + dur[bc] - ts[bw] - dur[bw]  # < 0: the call's return before its DMA's end
    keep = (early + np.minimum(SYNC_RETURN_NS, dur[bw] // 2) >= 0) & (ts[bc] <= ts[bw])
    _add_waits(g, E, np.concatenate([c[m], bc[keep]]), np.concatenate([w[m], bw[keep]]),
               np.concatenate([np.zeros(int(m.sum()), np.int64), np.minimum(early[keep], 0)]))
    earliest = np.full(n, np.iinfo(np.int64).min, np.int64)
    for part in E.parts:
        _earliest(g, earliest, *part)
    _slack(g, earliest)
    inferred = _infer_device_dependencies(g, g.device)
    if inferred is not None:
        E.add(*inferred)
        _earliest(g, earliest, *E.parts[-1])
        _slack(g, earliest)
    # edges by source (stable): the replay then walks each node's edges in memory order
    # the arrays no longer needed, the edge parts once joined and each unsorted column once sorted let go before the
    # sort (the thirty-sixth stop's 3.6 M nodes: the build's rise +850 -> +310 MB)
    del earliest, sub_node, k, dn
    cols = list(E.arrays())
    E.parts.clear()
    o = order_by(cols[0], n)
    g.src, g.dst, g.ekind, g.weight = (cols.pop(0)[o] for _ in range(4))
    g.unloaded = _shared_uplink_targets(con, index, n)
    g.cached("trace dur", lambda: g.dur)  # the trace's durations (copies edit their own dur arrays, never this one)
    return g


def _shared_uplink_targets(con, index, n: int) -> np.ndarray | None:
    """Graph.unloaded from the pcie_saturation pass's tables, when it ran on this connection."""
    (have,) = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = '_sat_members'").fetchone()
    if not have:
        return None
    t = con.execute("SELECT slice_id, min(unloaded_ns)::BIGINT AS u FROM _sat_members WHERE shared"
                    " GROUP BY slice_id").fetchnumpy()
    out = np.full(n, -1, np.int64)
    v = index.nodes(np.asarray(t["slice_id"], np.int64))
    ok = v >= 0
    out[v[ok]] = np.asarray(t["u"], np.int64)[ok]
    return out


def without_slack(g: Graph) -> Graph:
    """The graph as its edges alone explain it (no unexplained wait kept)."""
    h = g.copy()
    h.slack[:] = 0
    return h


def _ranges(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, b: np.ndarray, key: np.ndarray):
    """All pairs (a[i], b[j]) with lo[i] < key[j] <= hi[i], by sorting b on key (a range join)."""
    o = np.argsort(key, kind="stable")
    ks, bs = key[o], b[o]
    first = np.searchsorted(ks, lo, "right")
    last = np.searchsorted(ks, hi, "right")
    cnt = np.maximum(0, last - first)
    ai = np.repeat(a, cnt)
    if not len(ai):
        return ai, np.zeros(0, np.int64)
    starts = np.repeat(first - np.r_[0, np.cumsum(cnt)[:-1]], cnt)
    return ai, bs[np.arange(len(ai)) + starts]


def _infer_device_dependencies(g: Graph, dev_of: np.ndarray):
    """Work that started later than its submitter and queue allow waited for something the trace
    does not record (an event wait on another queue: a result copy after its kernel). Infer the
    edge from the work of the same device that ended last before it started, keeping the gap:
    fixing that work then lets the waiter move, as the device's own dependency would."""
    waiting = np.flatnonzero((g.kind == DEVICE) & (g.slack > 0))
    if not len(waiting):
        return None
    nodes = np.flatnonzero(g.kind == DEVICE)
    ends = g.ts[nodes] + g.dur[nodes]
    o = np.lexsort((ends, dev_of[nodes]))  # by device, then end
    nodes, ends, devs = nodes[o], ends[o], dev_of[nodes][o]
    # per waiter: the last work of its device that ended at or before its start (not itself)
    lo = np.searchsorted(devs, dev_of[waiting], "left")
    pos = np.empty(len(waiting), np.int64)
    for d in np.unique(dev_of[waiting]):
        a, b = np.searchsorted(devs, d, "left"), np.searchsorted(devs, d, "right")
        w = dev_of[waiting] == d
        pos[w] = a + np.searchsorted(ends[a:b], g.ts[waiting[w]], "right") - 1
    for _ in range(3):  # step over the waiter itself (and zero-length work ending at its start)
        self_ = (pos >= lo) & (nodes[np.maximum(pos, 0)] == waiting)
        pos = pos - self_
    ok = pos >= lo
    u, v = nodes[pos[ok]], waiting[ok]
    gap = g.ts[v] - ends[pos[ok]]
    keep = gap < g.slack[v]
    return u[keep], v[keep], AFTER_END, gap[keep]


def _add_waits(g: Graph, E: _Edges, c: np.ndarray, w: np.ndarray, skew: np.ndarray) -> None:
    m = (c >= 0) & (w >= 0)
    c, w, skew = c[m], w[m], skew[m]
    if not len(c):
        return
    E.add(w, c, WAIT, skew)
    # a waiting call's own time: what it spent after the last work it waited for ended
    last = np.full(len(g.ts), -1, np.int64)
    scatter_max(last, c, g.ts[w] + g.dur[w] + skew)
    m = last >= 0
    g.own[m] = np.clip(g.ts[m] + g.dur[m] - last[m], 0, g.dur[m])


def _earliest(g: Graph, earliest: np.ndarray, src, dst, ekind, weight) -> None:
    """Raise each node's earliest start to what these edges ask (waits ask nothing of a start)."""
    if not len(src):
        return
    k = int(ekind[0]) if (ekind == ekind[0]).all() else None
    if k == WAIT:
        return
    if k is None:
        for kk in (AFTER_END, AFTER_START):
            m = ekind == kk
            _earliest(g, earliest, src[m], dst[m], ekind[m], weight[m])
        return
    t = g.ts[src] + weight
    if k == AFTER_END:
        t += g.dur[src]
    scatter_max(earliest, dst, t)


def _slack(g: Graph, earliest: np.ndarray) -> None:
    """Per node: how much later the trace started it than its constraints ask (kept by replay)."""
    has = earliest > np.iinfo(np.int64).min
    g.slack[has] = np.maximum(0, g.ts[has] - earliest[has])
