"""What if it were fixed? Each pass's transformation of the dependency graph, replayed (analysis/replay.py).

For every candidate finding of a pass (its `_cand_<pass>` row: slice_id, local_ns, the window),
the pass's fix as a graph transformation, then a replay; the saving is the makespan difference:
- pageable_memory: the copy's DMA chunks at the pinned rate (their span shrinks by local_ns) and
  its call no longer blocks on them (a pinned copy is asynchronous);
- small_transfers: the burst's transfers batched: their busy time shrinks by local_ns;
- redundant_transfers: the copy dropped (its DMA takes no time, its call does not wait);
- copy_compute_serialization: the copy on a queue of its own (no order against the kernels);
- launch_gaps: the kernel submitted early enough (no submitter constraint, no unexplained wait);
- sync_stalls: the synchronising call no longer waits for the device;
- memory_access_inefficiency: the kernel at its roofline time (local_ns shorter);
- pcie_saturation: the transfers of the window on a link `link_speedup` times faster.
A what-if is a bound where the trace lacks an edge the fix would change (docs/analysis.md).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from acceltrace.analysis import params as P
from acceltrace.analysis import replay as R
from acceltrace.analysis import runner

PER_PASS_FINDINGS = 20  # single-finding replays per pass (largest local estimate first)


@dataclass
class Fix:
    pass_id: str
    slice_id: int
    ts: int
    dur: int
    local_ns: int


def _siblings(g: R.Graph, slice_id: int) -> list[int]:
    """The device-work nodes of one copy call: the DMAs sharing the slice's correlation id."""
    return g.siblings.get(slice_id) or [g.index[slice_id]]


def _shrink(g: R.Graph, nodes: list[int], by_ns: int) -> None:
    """Shrink the nodes' durations proportionally so that together they lose by_ns."""
    if not nodes or by_ns <= 0:
        return
    nodes = np.array(nodes)
    total = int(g.dur[nodes].sum())
    if total <= 0:
        return
    f = max(0.0, 1.0 - by_ns / total)
    g.dur[nodes] = np.rint(g.dur[nodes] * f).astype(np.int64)
    g.own[nodes] = np.minimum(g.own[nodes], g.dur[nodes])


def _no_wait_on(g: R.Graph, nodes: list[int]) -> None:
    m = np.isin(g.src, nodes) & (g.ekind == R.WAIT)
    keep = ~m
    g.src, g.dst, g.ekind, g.weight = g.src[keep], g.dst[keep], g.ekind[keep], g.weight[keep]


def _drop_edges(g: R.Graph, mask: np.ndarray) -> None:
    keep = ~mask
    g.src, g.dst, g.ekind, g.weight = g.src[keep], g.dst[keep], g.ekind[keep], g.weight[keep]


def apply(g: R.Graph, fix: Fix, link_speedup: float = 2.0) -> bool:
    """Transform g in place for one fix; False when the graph has no node for it."""
    node = g.index.get(fix.slice_id)
    if node is None:
        return False
    p = fix.pass_id
    if p in ("pageable_memory", "redundant_transfers"):
        dmas = _siblings(g, fix.slice_id)
        if p == "redundant_transfers":
            g.dur[dmas] = 0
            g.own[dmas] = 0
        else:
            _shrink(g, dmas, fix.local_ns)
        _no_wait_on(g, dmas)
    elif p == "small_transfers":
        m = (g.kind == R.DEVICE) & (g.lane == "pcie") & (g.ts >= fix.ts) & (g.ts < fix.ts + max(fix.dur, 1))
        _shrink(g, list(np.flatnonzero(m)), fix.local_ns)
    elif p == "copy_compute_serialization":
        dmas = _siblings(g, fix.slice_id)
        # no order against the queue's kernels: drop the queue edges into and out of the copy
        # between a copy and a kernel (its engine keeps ordering it against other copies)
        d = np.isin(g.dst, dmas) | np.isin(g.src, dmas)
        other = np.where(np.isin(g.dst, dmas), g.src, g.dst)
        _drop_edges(g, d & (g.ekind == R.AFTER_END) & (g.lane[other] == "eu"))
    elif p == "launch_gaps":
        m = (g.dst == node) & (g.ekind == R.AFTER_START) & (g.kind[g.src] == R.HOST)
        _drop_edges(g, m)
        g.slack[node] = 0
    elif p == "sync_stalls":
        _drop_edges(g, (g.dst == node) & (g.ekind == R.WAIT))
    elif p == "memory_access_inefficiency":
        g.dur[node] = max(0, g.dur[node] - fix.local_ns)
        g.own[node] = g.dur[node]
    elif p == "pcie_saturation":
        m = (g.kind == R.DEVICE) & (g.lane == "pcie") & (g.ts < fix.ts + fix.dur) & (g.ts + g.dur > fix.ts)
        g.dur[m] = (g.dur[m] / link_speedup).astype(np.int64)
        g.own[m] = g.dur[m]
    else:
        return False
    return True


def candidates(con, passes: list[str] | None, params: dict | None) -> tuple[dict[str, list[Fix]], list]:
    """Run _common.sql and the passes in con; their candidates as fixes, and the pass statuses."""
    values = P.resolve(params)
    specs = runner.discover()
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", values)
    wanted = list(specs) if not passes else passes
    fixes: dict[str, list[Fix]] = {}
    statuses = []
    for pid in runner.dependency_order(specs, wanted):
        st = runner._run_one(con, specs[pid], values)
        statuses.append(st)
        if st.status != "ran" or pid not in wanted:
            continue
        rows = con.execute(f"SELECT slice_id, ts, dur, local_ns FROM _cand_{pid} WHERE slice_id IS NOT NULL"
                           " ORDER BY local_ns DESC, ts").fetchall()
        fixes[pid] = [Fix(pid, int(s), int(t), int(d or 0), int(ln or 0)) for s, t, d, ln in rows]
    return fixes, statuses


def whatif(store, trace_id: str, passes: list[str] | None = None, params: dict | None = None,
           link_speedup: float = 2.0, per_pass: int = PER_PASS_FINDINGS) -> dict:
    """Replay the trace as it is, each pass fixed, each of its largest findings fixed alone, all fixed."""
    con = store.connect(trace_id, sides=())
    try:
        fixes, statuses = candidates(con, passes, params)
        exact = R.build(con)
        g = R.without_slack(exact)
        base = R.replay(g)
        (t0, t1) = con.execute("SELECT run_start_ns, run_end_ns FROM _run").fetchone()
        makespan = int(t1 - t0)
        # the run outside the graph's span (host work before its first and after its last node)
        # is kept as it is: the replayed run is that plus the replayed graph
        outside = makespan - (int((g.ts + g.dur).max() - g.ts.min()) if len(g.ts) else 0)

        def saving(fs: list[Fix]) -> int:
            h = g.copy()
            applied = [apply(h, f, link_speedup) for f in fs]
            return base.makespan - R.replay(h).makespan if any(applied) else 0

        out_passes, out_findings, everything = [], [], []
        for pid, fs in fixes.items():
            everything += fs
            out_passes.append({"pass": pid, "findings": len(fs), "saving_ns": saving(fs) if fs else 0})
            for f in fs[:per_pass]:
                out_findings.append({"pass": pid, "slice_id": f.slice_id, "ts": f.ts - t0, "local_ns": f.local_ns,
                                     "impact_ns": saving([f])})
        return {
            "trace_id": trace_id,
            "makespan_ns": makespan,
            "replayed_makespan_ns": base.makespan + outside,
            "graph": {"nodes": len(g.ts), "edges": len(g.src), "unexplained_wait_ns": int(exact.slack.sum()),
                      "exact_replay_makespan_ns": R.replay(exact).makespan + outside},
            "passes": sorted(out_passes, key=lambda p: -p["saving_ns"]),
            "all_fixed_saving_ns": saving(everything) if everything else 0,
            "findings": sorted(out_findings, key=lambda f: -f["impact_ns"]),
            "not_applicable": {s.pass_id: s.reason for s in statuses if s.status != "ran"},
            "critical_path": critical_path(g, base),
        }
    finally:
        con.close()


def critical_path(g: R.Graph, s: R.Schedule) -> dict:
    """The chain that sets the makespan, walked back from the node that ends last; its time per type."""
    if not len(s.end):
        return {"segments": 0, "by_type_ns": {}}
    v = int(np.argmax(s.end))
    by: dict[str, int] = {}
    n = 0
    seen = set()
    while v >= 0 and v not in seen:
        seen.add(v)
        n += 1
        lane = g.lane[v]
        typ = {"cpu": "host", "driver": "launch overhead", "pcie": "link/transfer", "eu": "device compute"}.get(lane,
                                                                                                              lane)
        busy = int(s.end[v] - s.start[v])
        waited = max(0, busy - int(g.own[v]))  # a waiting node's time before its wait ended
        by[typ] = by.get(typ, 0) + busy - waited
        if waited:
            by["sync wait"] = by.get("sync wait", 0) + waited
        if g.slack[v]:
            by["idle"] = by.get("idle", 0) + int(g.slack[v])
        p = int(s.why[v])
        if p >= 0 and s.start[v] - int(g.slack[v]) > s.end[p]:
            by["host gap"] = by.get("host gap", 0) + int(s.start[v] - g.slack[v] - s.end[p])
        v = p
    return {"segments": n, "by_type_ns": dict(sorted(by.items(), key=lambda kv: -kv[1]))}


def whatif_command(args) -> int:
    """`acceltrace whatif ID [--pass P] [--link-speedup X] [--json]`."""
    import json

    from acceltrace.store.catalog import Store

    store = Store(args.store)
    row = store.get(args.id)
    if row is None or row["status"] != "ready":
        print(f"acceltrace: no ready trace with id {args.id!r} in {store.root}", file=sys.stderr)
        return 1
    try:
        rep = whatif(store, row["id"], passes=args.passes, link_speedup=args.link_speedup)
    except (ValueError, runner.AnalysisError) as e:
        print(f"acceltrace: whatif failed: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rep))
        return 0
    ms = lambda ns: f"{ns / 1e6:9.3f} ms"  # noqa: E731
    print(f"makespan {ms(rep['makespan_ns'])}; the graph alone replays it in {ms(rep['replayed_makespan_ns'])}"
          f" ({rep['graph']['nodes']} nodes, {rep['graph']['edges']} edges; waits it does not explain:"
          f" {ms(rep['graph']['unexplained_wait_ns'])})")
    print("savings are replays of the graph with each fix: where the trace lacks an edge a fix changes,"
          " they are bounds (docs/analysis.md)")
    print(f"all fixed: saves {ms(rep['all_fixed_saving_ns'])}")
    for p in rep["passes"]:
        print(f"  {p['pass']:30s} {p['findings']:6d} findings  saves {ms(p['saving_ns'])}")
    print("critical path:")
    for k, v in rep["critical_path"]["by_type_ns"].items():
        print(f"  {k:20s} {ms(v)}")
    return 0
