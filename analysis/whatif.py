"""What if it were fixed? The replay of analysis/impact.py, as `acceltrace whatif` prints it.

The same run as `acceltrace analyze` (analysis/runner.py: the passes, their findings, the graph
replayed per finding, per pass and with everything fixed), reported as the contract of issue 18:
{makespan_ns, replayed_makespan_ns, passes: [{pass, findings, saving_ns}], all_fixed_saving_ns}, plus
the findings with impact_ns / exclusive_ns / impact_basis, the graph's size and the critical path.
Each pass's transformation is in analysis/transform.py; docs/analysis.md "What if" states them.
"""

from __future__ import annotations

import sys

from acceltrace.analysis import params as P
from acceltrace.analysis import impact, runner

FINDINGS_LISTED = 200  # findings in the report (largest impact first); the findings table has them all


def whatif(store, trace_id: str, passes: list[str] | None = None, params: dict | None = None,
           link_speedup: float | None = None, per_pass: int | None = None) -> dict:
    """The trace analysed and replayed (nothing stored): the contract keys and the details."""
    values = dict(params or {})
    if link_speedup is not None:
        values["whatif_link_speedup"] = link_speedup
    if per_pass is not None:
        values["whatif_max_replays"] = per_pass
    values.setdefault("whatif_max_nodes", 1e15)  # asked for: replay whatever its size
    rep = runner.run_passes(store, trace_id, passes=passes, params=values, write=False)
    wi = rep.whatif
    if not wi:
        raise ValueError(f"trace {trace_id}: its dependency graph could not be replayed")
    t0 = rep.run_start_ns
    out_passes = [{"pass": s.pass_id, "findings": s.n_findings, "saving_ns": s.impact_ns,
                   "exclusive_ns": s.exclusive_ns} for s in rep.statuses if s.status == "ran"]
    findings = [{"pass": f["pass"], "slice_id": f["slice_id"], "ts": (f["ts"] - t0) if f["ts"] is not None else None,
                 "impact_ns": f["impact_ns"], "exclusive_ns": f["exclusive_ns"], "impact_basis": f["impact_basis"]}
                for f in rep.findings[:FINDINGS_LISTED]]
    return {
        "trace_id": trace_id,
        "makespan_ns": wi["makespan_ns"],
        "replayed_makespan_ns": wi["replayed_makespan_ns"],
        "graph": {"nodes": wi["nodes"], "edges": wi["edges"], "unexplained_wait_ns": wi["unexplained_wait_ns"],
                  "edges_only_makespan_ns": wi["edges_only_makespan_ns"], "replays": wi["replays"],
                  "elapsed_ms": round(wi["elapsed_ms"], 1)},
        "passes": sorted(out_passes, key=lambda p: -p["saving_ns"]),
        "all_fixed_saving_ns": wi["all_fixed_saving_ns"],
        "findings": findings,
        "not_applicable": {s.pass_id: s.reason for s in rep.statuses if s.status in ("not applicable", "failed")},
        "critical_path": impact.critical_path_summary(rep.critical_path, t0, wi),
    }


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
    except (ValueError, runner.AnalysisError, P.ParamError) as e:
        print(f"acceltrace: whatif failed: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rep))
        return 0
    ms = lambda ns: f"{ns / 1e6:9.3f} ms"  # noqa: E731
    gr = rep["graph"]
    print(f"makespan {ms(rep['makespan_ns'])}; the graph replays it in {ms(rep['replayed_makespan_ns'])}"
          f" ({gr['nodes']} nodes, {gr['edges']} edges; waits it does not explain: {ms(gr['unexplained_wait_ns'])},"
          f" {gr['replays']} replays in {gr['elapsed_ms'] / 1e3:.2f} s)")
    print("savings are replays of the graph with each fix: where the trace lacks an edge a fix changes,"
          " they are bounds (docs/analysis.md)")
    print(f"all fixed: saves {ms(rep['all_fixed_saving_ns'])}")
    for p in rep["passes"]:
        print(f"  {p['pass']:30s} {p['findings']:6d} findings  saves {ms(p['saving_ns'])}"
              f"  (exclusive share {ms(p['exclusive_ns'])})")
    print("critical path:")
    for k, v in rep["critical_path"]["by_type_ns"].items():
        print(f"  {k:20s} {ms(v)}")
    return 0
