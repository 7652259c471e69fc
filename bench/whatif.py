"""What-if savings against the device model's counterfactual truth (issue 18).

For each single-issue scenario and seed: simulate it (`acceltrace sim`), ingest with the
analysis passes, replay with analysis/whatif.py, and print the saving the replay predicts
for the scenario's pass beside the truth (the model re-run without the issue), and beside
the exclusive critical-path share the findings carry today. Also the replay's own check:
the untransformed replay against the trace's makespan, and the time taken.

    python bench/whatif.py [--seeds 11 12] [--scenarios pageable-memory ...]
"""

from __future__ import annotations

import argparse
import json
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    raise SystemExit(main())
