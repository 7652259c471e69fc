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
    args = ap.parse_args()
    if args.speed:
        return speed(args.speed, args.store)
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



def speed(n_events: int, store_dir: str) -> int:
    """Each step of the what-if on a generated trace, beside an anchor in the same run: one full scan
    of the slices table. The per-finding replays are capped by whatif_replay_nodes (their count shown)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from analysis_perf import get_trace

    from acceltrace.analysis import replay, runner
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
    steps = []

    def step(name, fn):
        t = time.perf_counter()
        out = fn()
        steps.append((name, time.perf_counter() - t))
        return out

    specs = runner.discover()
    step("_common.sql + passes (SQL)", lambda: [runner._exec_file(con, runner.SQL_DIR / "_common.sql", values)]
         + [runner._run_one(con, specs[p], values) for p in runner.dependency_order(specs, list(specs))])
    fixes = []
    for pid in specs:
        try:
            rows = con.execute(f"SELECT slice_id, ts, dur, local_ns FROM _cand_{pid}").fetchall()
        except Exception:  # noqa: BLE001 -- a pass that did not apply has no candidate table
            continue
        fixes += [T.Fix(pid, s_, int(t_ or 0), int(d or 0), int(ln or 0)) for s_, t_, d, ln in rows]
    g = step("graph build", lambda: replay.build(con))
    s0 = step("replay (as traced)", lambda: replay.replay(g))
    step("critical path", lambda: replay.critical_path(g, s0))
    by_pass: dict = {}
    for f in fixes:
        by_pass.setdefault(f.pass_id, []).append(f)
    for pid, fs in by_pass.items():
        def one(fs=fs):
            h = g.copy()
            T.apply_all(h, fs)
            return replay.replay(h)
        step(f"what-if {pid} ({len(fs)})", one)
    h = g.copy()
    step("what-if all fixed", lambda: (T.apply_all(h, fixes), replay.replay(h)))
    n_alone = min(int(values["whatif_max_replays"]), max(0, int(values["whatif_replay_nodes"]) // max(1, len(g.ts))))
    con.close()
    total = sum(d for _, d in steps[1:])
    print(f"trace: {n_slices:,} slices; graph {len(g.ts):,} nodes, {len(g.src):,} edges; anchor: one full scan of"
          f" slices = {scan_s * 1e3:.0f} ms; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'step':<44} {'s':>8} {'x scan':>8}")
    for name, d in steps:
        print(f"{name:<44} {d:>8.2f} {d / scan_s:>8.0f}")
    per = np.mean([d for n, d in steps if n.startswith("replay")])
    print(f"{'graph + critical path + all what-ifs':<44} {total:>8.2f} {total / scan_s:>8.0f}"
          f"  (+ {n_alone} per-finding replays at ~{per:.2f} s each under the default budget)")
    budget = 30.0 * n_slices / 10_000_000
    print(f"target: 10 M events <= 30 s, i.e. {budget:.1f} s at this size: "
          f"{'met' if total <= budget else 'missed'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
