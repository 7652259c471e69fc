"""What if it were fixed? The replay of analysis/impact.py, as `acceltrace whatif` prints and stores it.

The same run as `acceltrace analyze` (analysis/runner.py: the passes, their findings, the graph
replayed per finding, per pass and with everything fixed) at any graph size, its impacts stored with
the findings (a trace past whatif_max_nodes gets none at analysis: this is its what-if step; the
server runs it after an upload's analysis), reported as the contract of issue 18:
{makespan_ns, replayed_makespan_ns, passes: [{pass, findings, saving_ns}], all_fixed_saving_ns}, plus
the findings with impact_ns / exclusive_ns / impact_basis, the graph's size and the critical path.
Each pass's transformation is in analysis/transform.py; docs/analysis.md "What if" states them.
"""

from __future__ import annotations

import sys

import duckdb

from acceltrace.analysis import params as P
from acceltrace.analysis import impact, runner

FINDINGS_LISTED = 200  # findings in the report (largest impact first); the findings table has them all


def whatif(store, trace_id: str, passes: list[str] | None = None, params: dict | None = None,
           link_speedup: float | None = None, per_pass: int | None = None, keep: bool = True) -> dict:
    """The trace analysed and replayed at any size: the contract keys and the details.

    The passes run with the parameters of the trace's stored analysis (so the findings are the ones it
    has), params and link_speedup over them. keep (and every pass selected): the findings are stored
    with their impact_ns / impact_basis, the passes' and the run's savings and the critical path (the
    findings side file replaced, as analysis does; not when it changed meanwhile: a newer analysis
    wins); `stored` says whether they were."""
    values = stored_params(store, trace_id)
    values.update(params or {})
    if link_speedup is not None:
        values["whatif_link_speedup"] = link_speedup
    if per_pass is not None:
        values["whatif_max_replays"] = per_pass
    values["whatif_max_nodes"] = 1e15  # asked for: replay whatever its size
    keep = keep and not passes
    before = side_version(store, trace_id)
    rep = runner.run_passes(store, trace_id, passes=passes, params=values, write=keep,
                            write_check=lambda: side_version(store, trace_id) == before)
    wi = rep.whatif
    if not wi or wi.get("replayed_makespan_ns") is None:
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
        "stored": rep.written,
    }


def stored_params(store, trace_id: str) -> dict[str, float]:
    """The parameters of the trace's stored analysis (those this version knows), {} without one."""
    con = impact.open_side(store, trace_id, runner.SIDE)
    if con is None:
        return {}
    try:
        rows = con.execute("SELECT name, value FROM analysis_params").fetchall()
    except duckdb.Error:
        return {}
    finally:
        con.close()
    return {k: float(v) for k, v in rows if k in P.PARAMS}


def side_version(store, trace_id: str) -> tuple[int, int] | None:
    """(mtime, size) of the trace's findings side file; None without one."""
    try:
        st = store.side_path(trace_id, runner.SIDE).stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def needs_replay(store, trace_id: str) -> bool:
    """Whether the trace's stored analysis has findings it did not replay because its graph is past
    whatif_max_nodes (the what-if step then replays and stores them)."""
    con = impact.open_side(store, trace_id, runner.SIDE)
    if con is None:
        return False
    try:
        rows = con.execute("SELECT replayed_makespan_ns, nodes FROM whatif").fetchall()
        ((n,),) = con.execute("SELECT count(*) FROM findings WHERE impact_ns IS NULL").fetchall()
    except duckdb.Error:
        return False
    finally:
        con.close()
    return len(rows) == 1 and rows[0][0] is None and (rows[0][1] or 0) > 0 and n > 0


def store_if_skipped(store, trace_id: str) -> bool:
    """The what-if step after analysis (the server runs it in its ingest process, at low priority): a
    trace whose analysis did not replay its graph (past whatif_max_nodes) is replayed at any size and its
    findings' impacts stored. True when it stored them."""
    if not needs_replay(store, trace_id):
        return False
    return bool(whatif(store, trace_id)["stored"])


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
    if rep["stored"]:
        print("stored: the findings' impact_ns, the passes' and the run's savings and the critical path"
              " (the findings route, analyze --json and the UI show them)")
    else:
        print("not stored (" + ("only some passes replayed" if args.passes else
                                "the trace's analysis changed meanwhile") + ")")
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
