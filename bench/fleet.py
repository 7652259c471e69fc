"""Fleet analysis on Dask (issue 19): build, reduce, warm query, scaling, driver memory, accuracy.

    .venv/bin/python bench/fleet.py                      # 200 device-model traces (~15 min on 2 cores)
    .venv/bin/python bench/fleet.py --traces 1000        # the issue's size
    .venv/bin/python bench/fleet.py --traces 40 --scaling 20 --accuracy-seeds 3   # a quick look

Steps, each timed:
1. `sim fleet`: N ranks of ~10 k events (one job, coupled by the all-reduce).
2. Cold build on a LocalCluster of 2 single-threaded worker processes: every trace ingested, analysed,
   measured (the map), results streamed to Parquet, then the reduce. The driver's peak RSS is
   sampled every 20 ms (psutil) while it runs (target < 1 GB for 1,000 traces).
   Anchor in the same run: one trace ingested + analysed + measured serially in this process
   (no Dask): the map's cost per trace without a cluster.
3. Warm fleet query (target < 1 s, Perfetto Batch Trace Processor's published figure for ~1,000 traces):
   an outlier/straggler question over the fleet tables, second run of the same query.
4. Scaling: cold builds of the first --scaling traces on 1 and on 2 workers (target >= 1.7x).
5. A real `dask scheduler` and 2 `dask worker` processes on loopback: the same fleet rebuilt on them
   (the store already holds the traces: the cluster path maps from the cache); results compared
   with the LocalCluster's.
6. Accuracy: --accuracy-seeds fleets of 16 ranks on seeds 1000.. (never used while developing):
   precision and recall of the slow ranks, and whether the cause is named right.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from acceltrace.fleet import query  # noqa: E402
from acceltrace.fleet.build import build_fleet  # noqa: E402
from acceltrace.sim.fleet import write_fleet  # noqa: E402
from acceltrace.store.catalog import Store  # noqa: E402

WARM_SQL = """
SELECT t.rank, t.step_work_ns_median, o.cause, o.metrics, s.excess_ns
FROM traces t JOIN outliers o USING (trace_id) LEFT JOIN stragglers s USING (trace_id)
ORDER BY s.excess_ns DESC NULLS LAST
"""
COMPARED = ("trace_id", "status", "step_ns_median", "step_work_ns_median", "device_busy", "h2d_gbps",
            "kernel_time_ratio", "outlier", "outlier_metrics", "cause")


class PeakRss:
    """Samples this process's RSS every 20 ms on a thread; .peak in bytes."""

    def __init__(self):
        import psutil

        self.p = psutil.Process()
        self.peak = self.p.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.p.memory_info().rss)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def local_client(n: int):
    import logging

    from dask.distributed import Client, LocalCluster

    lc = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR)
    return Client(lc), lc


def timed_build(store, paths, name, client) -> tuple[float, object]:
    t0 = time.perf_counter()
    res = build_fleet(store, paths, name=name, client=client)
    return time.perf_counter() - t0, res


def anchor_serial(run_dir: Path, tmp: Path) -> float:
    """One trace mapped in this process with no Dask (ingest, passes, metrics): seconds."""
    from acceltrace.fleet.task import map_trace

    store = Store(tmp / "anchor-store")
    t0 = time.perf_counter()
    row = map_trace(str(store.root), str(run_dir))
    assert row["status"] == "ok", row
    return time.perf_counter() - t0


def map_stats(store, fleet_id: str) -> dict:
    _, rows, _ = query.run_readonly(store, fleet_id, "SELECT median(map_ms), avg(map_ms), max(map_ms), median(cpu_ms), "
                                                     "count(*) FILTER (WHERE status = 'ok') FROM traces")
    med, avg, mx, cpu, ok = rows[0]
    return {"median_ms": med, "mean_ms": avg, "max_ms": mx, "cpu_ms": cpu, "ok": ok}


def warm_query(store, fleet_id: str) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    query.run_readonly(store, fleet_id, WARM_SQL)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, rows, _ = query.run_readonly(store, fleet_id, WARM_SQL)
    return first, time.perf_counter() - t0, len(rows)


def real_cluster(tmp: Path):
    """`dask scheduler` + 2 `dask worker` processes on loopback; (address, processes)."""
    sched_file = tmp / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 60
    while True:  # the file appears before it is complete
        try:
            address = json.loads(sched_file.read_text())["address"]
            break
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                       "--no-dashboard", "--host", "127.0.0.1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    from dask.distributed import Client

    with Client(address, timeout="30s") as c:
        c.wait_for_workers(2, timeout=60)
    return address, procs


def stop(procs) -> None:
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()


def view(store, fleet_id: str) -> list:
    rep = query.report(store, fleet_id)
    return sorted(([t.get(k) for k in COMPARED] for t in rep["traces"]), key=lambda r: str(r[0]))


def accuracy(tmp: Path, seeds: list[int], ranks: int, client) -> list[dict]:
    out = []
    for seed in seeds:
        d = tmp / f"acc-{seed}"
        write_fleet(d, ranks, seed=seed)
        truth = {s["rank"]: s["cause"] for s in json.loads((d / "fleet_truth.json").read_text())["slow_ranks"]}
        store = Store(tmp / f"acc-store-{seed}")
        res = build_fleet(store, [str(d)], client=client)
        got = {int(t["tags"]["rank"]): t["cause"] for t in query.report(store, res.fleet["id"])["traces"]
               if t["outlier"]}
        tp = len(set(got) & set(truth))
        out.append({"seed": seed, "truth": truth, "got": got, "precision": tp / len(got) if got else 1.0,
                    "recall": tp / len(truth) if truth else 1.0,
                    "causes_right": all(got.get(r) == c for r, c in truth.items())})
        shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=200)
    ap.add_argument("--events", type=int, default=10_000, help="events per trace")
    ap.add_argument("--scaling", type=int, default=40, help="traces in the 1 vs 2 worker cold builds")
    ap.add_argument("--accuracy-seeds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str]] = []
    load0 = os.getloadavg()
    try:
        job = tmp / "job"
        t0 = time.perf_counter()
        info = write_fleet(job, args.traces, seed=args.seed, events=args.events)
        gen_s = time.perf_counter() - t0
        per_trace = info["events"] / args.traces
        rows.append(("sim fleet", f"{args.traces} traces, {per_trace:,.0f} events each: {gen_s:.1f} s",
                     f"{gen_s / args.traces * 1e3:.0f} ms per rank (two passes)"))
        runs = sorted(p for p in job.iterdir() if p.is_dir())
        anchor_s = anchor_serial(runs[0], tmp)

        client, lc = local_client(2)
        try:
            store = Store(tmp / "store")
            with PeakRss() as rss:
                build_s, res = timed_build(store, [str(job)], "bench", client)
            fid = res.fleet["id"]
            ms = map_stats(store, fid)
            t0 = time.perf_counter()
            from acceltrace.fleet import layout
            from acceltrace.fleet.reduce import reduce_fleet

            reduce_fleet(layout.results_dir(store, fid), layout.db_path(store, fid), res.fleet)
            reduce_s = time.perf_counter() - t0
            rows.append(("cold build, 2 local workers", f"{build_s:.1f} s = {build_s / args.traces * 1e3:.0f} ms per "
                         f"trace ({args.traces / build_s:.2f} traces/s)",
                         f"anchor: one trace mapped serially, no Dask: {anchor_s * 1e3:.0f} ms; "
                         f"2 workers ideal {anchor_s / 2 * 1e3:.0f} ms per trace"))
            rows.append(("map task per trace", f"median {ms['median_ms']:.0f} ms wall ({ms['cpu_ms']:.0f} ms CPU), "
                         f"mean {ms['mean_ms']:.0f} ms, max {ms['max_ms']:.0f} ms", f"{ms['ok']} ok of {args.traces}"))
            rows.append(("reduce (Parquet -> fleet.duckdb)", f"{reduce_s * 1e3:.0f} ms",
                         f"{reduce_s / build_s * 100:.1f} % of the build"))
            first, warm, n = warm_query(store, fid)
            rows.append(("warm fleet query", f"{warm * 1e3:.1f} ms (first {first * 1e3:.1f} ms, {n} rows)",
                         "target < 1000 ms (Perfetto BTP, ~1,000 traces, published)"))
            rows.append(("driver peak RSS", f"{rss.peak / 2**20:.0f} MiB",
                         "target < 1024 MiB for 1,000 traces (includes the LocalCluster's scheduler)"))
            t0 = time.perf_counter()
            build_fleet(store, [str(job)], name="bench", client=client)
            warm_build = time.perf_counter() - t0
            rows.append(("rebuild from the store (cache), 2 local workers", f"{warm_build:.1f} s",
                         f"{warm_build / build_s * 100:.0f} % of the cold build: no trace read again"))
            local_view = view(store, fid)
            acc = accuracy(tmp, list(range(1000, 1000 + args.accuracy_seeds)), 16, client)
        finally:
            client.close()
            lc.close()

        address, procs = real_cluster(tmp)
        try:
            t0 = time.perf_counter()
            res_c = build_fleet(store, [str(job)], name="bench-cluster", scheduler=address)
            cluster_s = time.perf_counter() - t0
        finally:
            stop(procs)
        same = view(store, res_c.fleet["id"]) == local_view
        rows.append(("rebuild on dask scheduler + 2 dask workers (loopback)", f"{cluster_s:.1f} s",
                     f"vs {warm_build:.1f} s on the LocalCluster; results identical: {same}"))

        sub = runs[: args.scaling]
        times = {}
        for n in (1, 2):
            client, lc = local_client(n)
            try:
                times[n], _ = timed_build(Store(tmp / f"scale-{n}"), [str(p) for p in sub], f"scale-{n}", client)
            finally:
                client.close()
                lc.close()
        speedup = times[1] / times[2]
        rows.append((f"1 vs 2 workers, {len(sub)} cold traces", f"{times[1]:.1f} s vs {times[2]:.1f} s: "
                     f"{speedup:.2f}x", "target >= 1.7x (anchor: the 1-worker build, same run)"))
        prec = min(a["precision"] for a in acc) if acc else float("nan")
        rec = min(a["recall"] for a in acc) if acc else float("nan")
        causes = all(a["causes_right"] for a in acc)
        rows.append((f"accuracy, {len(acc)} unseen seeds x 16 ranks", f"precision {prec:.2f}, recall {rec:.2f}, "
                     f"causes named right: {causes}", "target 1.0 / 1.0, cause named"))
        for a in acc:
            if a["precision"] < 1 or a["recall"] < 1 or not a["causes_right"]:
                rows.append((f"  seed {a['seed']}", f"truth {a['truth']}", f"found {a['got']}"))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    w = max(len(r[0]) for r in rows)
    print(f"fleet bench: {args.traces} traces, {os.cpu_count()} cores; load average at start {load0[0]:.1f}, "
          f"at end {os.getloadavg()[0]:.1f} (other work on the machine slows the scaling figures)")
    for name, value, note in rows:
        print(f"{name:<{w}}  {value}  |  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
