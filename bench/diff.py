"""Diff of two 1 M-event traces (issue 17 target: <= 5 s), next to an anchor measured in the same run.

Two Kineto-like traces of --events events each (bench/gen_chrome.py, seeds 0 and 1: the same
program shape with different timings) are ingested into a temp store (without analysis: the
comparison is what is timed), then `acceltrace.diff.compare` runs --repeat times. The anchor is
the least any name-matching diff must do on the same connection layout: both files attached and
one GROUP BY name over each side's slices (count, sum, p50, p95), full-outer-joined. Wall time
and CPU time (all threads) are both printed, with the load average: on a shared 2-core machine
the wall time mostly measures the other processes.

    python -m bench.diff                   # 1 M events per trace
    python -m bench.diff --events 200000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from acceltrace.diff.compare import compare
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store
from bench.gen_chrome import write

TARGET_S = 5.0


def _anchor(store: Store, a: str, b: str) -> float:
    con = duckdb.connect(":memory:")
    try:
        t0 = time.perf_counter()
        for s, tid in (("a", a), ("b", b)):
            con.execute(f"ATTACH '{store.trace_path(tid)}' AS t{s} (READ_ONLY)")
        con.execute("""
            WITH sa AS (SELECT name, count(*) n, sum(dur) t, quantile_cont(dur, 0.5) p50, quantile_cont(dur, 0.95) p95
                        FROM ta.slices GROUP BY name),
                 sb AS (SELECT name, count(*) n, sum(dur) t, quantile_cont(dur, 0.5) p50, quantile_cont(dur, 0.95) p95
                        FROM tb.slices GROUP BY name)
            SELECT count(*) FROM sa FULL OUTER JOIN sb USING (name)""").fetchall()
        return time.perf_counter() - t0
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events per trace (default 1 M)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-diff-") as tmp:
        tmp = Path(tmp)
        store = Store(tmp / "store")
        ids, slices = [], []
        for seed in (0, 1):
            path = tmp / f"trace-{seed}.json"
            write(path, a.events, seed=seed)
            t0 = time.perf_counter()
            (r,) = ingest_paths(store, [path])
            assert r.error is None, r.error
            print(f"ingested trace {seed}: {r.counts['slices']:,} slices, {r.counts['flows']:,} flows"
                  f" in {time.perf_counter() - t0:.1f} s")
            ids.append(r.id)
            slices.append(r.counts["slices"])
            path.unlink()
        diff_s, cpu_s, anchor_s = [], [], []
        for _ in range(a.repeat):
            anchor_s.append(_anchor(store, *ids))
            t0, c0 = time.perf_counter(), time.process_time()
            doc = compare(store, *ids)
            diff_s.append(time.perf_counter() - t0)
            cpu_s.append(time.process_time() - c0)
        d, an, cpu = statistics.median(diff_s), statistics.median(anchor_s), statistics.median(cpu_s)
        print()
        print(f"| measure | value |\n| --- | --- |")
        print(f"| events per trace (generated) | {a.events:,} |")
        print(f"| slices A / B | {slices[0]:,} / {slices[1]:,} |")
        print(f"| rows / attributed ops | {len(doc['rows'])} / {len(doc['attribution'])} |")
        print(f"| diff, median of {a.repeat} | {d:.2f} s (target <= {TARGET_S:g} s: {'met' if d <= TARGET_S else 'MISSED'}) |")
        # CPU seconds of all the process's threads: what the diff costs whatever else the machine runs
        # (on an idle machine its wall time is at most this)
        print(f"| diff CPU time, all threads, median | {cpu:.2f} s (target: {'met' if cpu <= TARGET_S else 'MISSED'}) |")
        print(f"| anchor: GROUP BY name on both sides, same run | {an:.2f} s |")
        print(f"| diff / anchor | {d / an:.1f}x |")
        print(f"| load average (1 min) at the end, {os.cpu_count()} cores | {os.getloadavg()[0]:.1f} |")


if __name__ == "__main__":
    main()
