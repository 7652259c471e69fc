"""What-if savings against the device model's counterfactual truth (issue 18).

For each single-issue scenario and seed: simulate it (`acceltrace sim`), ingest with the
analysis passes, replay with analysis/whatif.py, and print the saving the replay predicts
for the scenario's pass beside the truth (the model re-run without the issue), and beside
the exclusive critical-path share the findings carry today. Also the replay's own check:
the untransformed replay against the trace's makespan, and the time taken.

    python bench/whatif.py [--seeds 11 12] [--scenarios pageable-memory ...]
    python bench/whatif.py --speed 1000000      # graph, critical path and all what-ifs on N events
                                                # (bench/analysis_perf.py's generated trace; target 10 M <= 30 s)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {"pageable-memory": "pageable_memory", "small-transfers": "small_transfers",
             "pcie-saturation": "pcie_saturation", "strided-access": "memory_access_inefficiency",
             "copy-compute-serialization": "copy_compute_serialization", "launch-gaps": "launch_gaps",
             "sync-stalls": "sync_stalls", "redundant-transfers": "redundant_transfers"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[11])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--speed", type=int, metavar="EVENTS", help="time the replay on a generated trace instead")
    ap.add_argument("--store", default="/tmp/acceltrace-bench-analysis", help="--speed: where the trace is cached")
    ap.add_argument("--python", action="store_true", help="--speed: also time the Python replay (same schedule?)")
    args = ap.parse_args()
    if args.speed:
        return speed(args.speed, args.store, args.python)
    from acceltrace.analysis.runner import after_publish
    from acceltrace.analysis.whatif import whatif
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store

    work = Path(tempfile.mkdtemp(prefix="whatif-bench-"))
    store = Store(work / "store")
    print(f"{'scenario':28} {'seed':>4} {'truth ms':>9} {'what-if ms':>10} {'ratio':>6} {'exclusive ms':>12}"
          f" {'replay/trace':>12} {'time s':>6}")
    for sc in args.scenarios:
        for seed in args.seeds:
            out = work / f"{sc}-{seed}"
            subprocess.run([sys.executable, "-m", "acceltrace", "sim", sc, "--out", str(out), "--seed", str(seed)],
                           check=True, capture_output=True, cwd=ROOT)
            truth = sum(i["impact_ns"] for i in json.loads((out / "ground_truth.json").read_text())["issues"]
                        if i["kind"] == SCENARIOS[sc])
            (res,) = ingest_paths(store, [out], after_publish=after_publish)
            con = store.connect(res.id)
            (excl,) = con.execute("SELECT coalesce(sum(exclusive_ns), 0) FROM findings WHERE pass = ?",
                                  [SCENARIOS[sc]]).fetchone()
            con.close()
            t = time.perf_counter()
            rep = whatif(store, res.id, per_pass=0)
            dt = time.perf_counter() - t
            got = next((p["saving_ns"] for p in rep["passes"] if p["pass"] == SCENARIOS[sc]), 0)
            ok = f"{rep['replayed_makespan_ns'] / rep['makespan_ns']:.3f}"
            print(f"{sc:28} {seed:>4} {truth / 1e6:9.3f} {got / 1e6:10.3f} {got / truth if truth else 0:6.2f}"
                  f" {excl / 1e6:12.3f} {str(ok):>12} {dt:6.2f}", flush=True)
    return 0



def speed(n_events: int, store_dir: str, compare_python: bool = False) -> int:
    """Each step of the what-if on a generated trace, as analysis/impact.py runs it (one graph, every
    transformation an edit of a copy of its arrays, the compiled replay), beside an anchor measured in
    the same run: one full scan of the slices table. Wall and process CPU seconds per step."""
    sys.path.insert(0, str(ROOT / "bench"))
    from analysis_perf import get_trace

    from acceltrace.analysis import impact, replay, runner
    from acceltrace.analysis import params as P
    from acceltrace.analysis import transform as T
    from acceltrace.store.catalog import Store

    store = Store(store_dir)
    tid = get_trace(store, n_events)
    con = store.connect(tid, sides=())
    (n_slices,) = con.execute("SELECT count(*) FROM slices").fetchone()
    t = time.perf_counter()
    con.execute("SELECT track_id, count(*), sum(dur) FROM slices GROUP BY track_id").fetchall()
    scan_s = time.perf_counter() - t
    values = P.resolve(None)
    specs = runner.discover()
    t = time.perf_counter()
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", values)
    for p in runner.dependency_order(specs, list(specs)):
        runner._run_one(con, specs[p], values)
    sql_s = time.perf_counter() - t
    fixes = []
    for pid in specs:
        try:
            rows = con.execute(f"SELECT slice_id, ts, dur, local_ns FROM _cand_{pid}").fetchall()
        except Exception:  # noqa: BLE001 -- a pass that did not apply has no candidate table
            continue
        fixes += [T.Fix(pid, s_, int(t_ or 0), int(d or 0), int(ln or 0)) for s_, t_, d, ln in rows]
    cpu0, t = time.process_time(), time.perf_counter()
    r = impact.replay_impacts(con, fixes, values["whatif_link_speedup"], int(values["whatif_max_replays"]),
                              int(values["whatif_replay_nodes"]))
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu0
    print(f"trace: {n_slices:,} slices; graph {r.nodes:,} nodes, {r.edges:,} edges; anchor: one full scan of"
          f" slices = {scan_s * 1e3:.0f} ms; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores;"
          f" replay compiled: {replay._C is not None}")
    print(f"(_common.sql + the passes' SQL before it: {sql_s:.1f} s; {len(fixes):,} candidates to fix)")
    print(f"{'step':<52} {'wall s':>8} {'CPU s':>8} {'x scan':>8}")
    for name, (ms, cms) in r.steps_ms.items():
        print(f"{name:<52} {ms / 1e3:>8.2f} {cms / 1e3:>8.2f} {ms / 1e3 / scan_s:>8.0f}")
    per = sum(ms for name, (ms, _) in r.steps_ms.items() if name.startswith("per-finding"))
    per_cpu = sum(c for name, (_, c) in r.steps_ms.items() if name.startswith("per-finding"))
    core = wall - per / 1e3
    print(f"{'graph + critical path + all what-ifs':<52} {core:>8.2f} {cpu - per_cpu / 1e3:>8.2f}"
          f" {core / scan_s:>8.0f}  (+ {per / 1e3:.2f} s of per-finding replays)")
    budget = 30.0 * n_slices / 10_000_000
    print(f"target: 10 M events <= 30 s, i.e. {budget:.1f} s at this size: {'met' if core <= budget else 'missed'}"
          f" (wall; load {os.getloadavg()[0]:.1f})")
    if compare_python:
        g = replay.build(con)
        t = time.perf_counter()
        a = replay.replay(g)
        tc = time.perf_counter() - t
        t = time.perf_counter()
        b = replay.replay(g, compiled=False)
        tp = time.perf_counter() - t
        same = all((getattr(a, f) == getattr(b, f)).all() for f in ("start", "end", "why", "why_end"))
        print(f"replay as traced: compiled {tc:.2f} s, Python {tp:.2f} s ({tp / tc:.0f}x); same schedule: {same}")
    con.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
