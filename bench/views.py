"""Whole-trace call tree and op-to-kernel rollup time at a few sizes (issue 16: <= 1 s at 100 M events).

Each size is a Kineto-shaped trace written straight into the TraceBuilder (numpy, no per-event
Python): CPU threads of steps > ops > runtime calls (launch or copy, each with a correlation id),
and per call its kernel on a stream or its copy (with bytes) on the link, about 5 slices per op.
For each size it prints ingest time (with the views' precompute, store/aggregates.build, timed on
its own), then the whole-trace tree (top-down, bottom-up, device) and rollup as answered from the
precomputed tables, the same computed live from the slices (the path a window takes, and what a
whole-trace request cost before the precompute), a window of a tenth of the trace, and, as the
anchor measured in the same run, a plain `count(*) GROUP BY name` over all slices.

    python -m bench.views                       # 1M and 5M slices
    python -m bench.views --sizes 1M,10M,20M
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store import aggregates
from acceltrace.store.catalog import Store

OUT = Path(__file__).resolve().parent / "out"
START_ABS_NS = 1_767_189_312_000_000_000
OPS = [f"aten::op_{i:02d}" for i in range(40)]
KERNELS = [f"kernel_{i:03d}" for i in range(120)]
COPIES = ["Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)"]
TARGET_S = 1.0


def _size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(s[-1], 1)
    return int(float(s.rstrip("KMG")) * mult)


def _dict(idx: np.ndarray, names: list[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), pa.array(names)).cast(pa.string())


def generate(builder: TraceBuilder, n_slices: int, threads: int = 8, seed: int = 0, batch_ops: int = 400_000) -> int:
    """About n_slices slices: per thread, steps of 20 ops, each op 1-3 calls, each call one kernel or copy."""
    rng = np.random.default_rng(seed)
    cpu = [builder.track("cpu", f"thread {i}", group_name="python 1", process="1", thread=str(i), sort_key=i)
           for i in range(threads)]
    stream = [builder.track("eu", f"stream {7 + i}", group_name="GPU 0", device="0", sort_key=i) for i in range(8)]
    link = builder.track("pcie", "GPU 0 copies", group_name="GPU 0", device="0", sort_key=9)
    busy_until = {t: 0 for t in (*stream, link)}
    n_ops = max(20, n_slices // 5)
    made, corr0, t_base = 0, 0, START_ABS_NS
    for start in range(0, n_ops, batch_ops):
        n = min(batch_ops, n_ops - start)
        calls = rng.integers(1, 4, n)                      # runtime calls per op
        call_dur = rng.integers(3_000, 9_000, int(calls.sum()))
        op_of = np.repeat(np.arange(n), calls)
        first = np.cumsum(calls) - calls
        gap = 1_000
        # the op: 2 us, its calls back to back with 1 us gaps, 2 us
        cum = np.cumsum(call_dur + gap) - (call_dur + gap)
        call_off = 2_000 + cum - cum[first[op_of]]
        op_dur = np.add.reduceat(call_dur + gap, first) + 3_000
        thread = (start + np.arange(n)) % threads
        # ops of a thread follow each other; steps of 20 ops wrap them
        k = (start + np.arange(n)) // threads - start // threads  # batch_ops is a multiple of threads * step_len
        step_len = 20
        per_thread_op = int(op_dur.max()) + 2_000
        op_ts = t_base + k * per_thread_op + (k // step_len) * 5_000 + 3_000
        call_ts = op_ts[op_of] + call_off
        corr = corr0 + np.arange(len(op_of), dtype=np.int64) + 1
        is_copy = rng.random(len(op_of)) < 0.08
        dev_dur = rng.integers(1_000, 16_000, len(op_of))
        ready = call_ts + rng.integers(5_000, 20_000, len(op_of))
        dev_track = np.where(is_copy, link, np.array(stream)[corr % len(stream)])
        dev_ts = np.empty_like(ready)
        for tr in (*stream, link):  # a stream runs one thing at a time: start = max(ready, previous end)
            sel = np.flatnonzero(dev_track == tr)
            sel = sel[np.argsort(ready[sel], kind="stable")]
            c = np.cumsum(dev_dur[sel]) - dev_dur[sel]
            dev_ts[sel] = c + np.maximum.accumulate(np.maximum(ready[sel], busy_until[tr]) - c)
            if len(sel):
                busy_until[tr] = int(dev_ts[sel[-1]] + dev_dur[sel[-1]])
        # steps (depth 0): one per 20 ops of a thread
        step_k = np.unique(k // step_len)
        steps_ts = np.repeat(t_base + step_k * step_len * per_thread_op + (step_k) * 5_000, threads)
        steps_thr = np.tile(np.arange(threads), len(step_k))
        steps_dur = np.full(len(steps_ts), step_len * per_thread_op + 2_000, np.int64)
        cpu_ids = np.array(cpu)
        builder.add_slices({
            "track_id": cpu_ids[steps_thr], "ts": steps_ts, "dur": steps_dur, "depth": np.zeros(len(steps_ts), np.int32),
            "name": pa.array(["ProfilerStep"] * len(steps_ts))})
        builder.add_slices({
            "track_id": cpu_ids[thread], "ts": op_ts, "dur": op_dur, "depth": np.ones(n, np.int32),
            "name": _dict(rng.integers(0, len(OPS), n), OPS)})
        builder.add_slices({
            "track_id": cpu_ids[thread[op_of]], "ts": call_ts, "dur": call_dur, "depth": np.full(len(op_of), 2, np.int32),
            "name": _dict(is_copy.astype(np.int32), ["cudaLaunchKernel", "cudaMemcpyAsync"]), "corr_id": corr})
        kernel_names = rng.integers(0, len(KERNELS), len(op_of))
        names = np.where(is_copy, len(KERNELS) + (corr % 2), kernel_names)
        builder.add_slices({
            "track_id": dev_track.astype(np.int32), "ts": dev_ts, "dur": dev_dur, "corr_id": corr,
            "name": _dict(names, KERNELS + COPIES),
            "bytes": pa.array(np.where(is_copy, dev_dur * 12, 0), mask=~is_copy)})
        made += len(steps_ts) + n + 2 * len(op_of)
        corr0 = int(corr[-1])
        t_base = int(max(op_ts.max(), *busy_until.values()) + per_thread_op * (step_len + 1))
    return made


def build_trace(store: Store, n_slices: int, seed: int = 0) -> tuple[str, dict]:
    label = f"views-bench-{n_slices}"
    trace_id, tmp = store.begin(label, None, None)
    builder = TraceBuilder(tmp)
    t0 = time.perf_counter()
    made = generate(builder, n_slices, seed=seed)
    counts = builder.finish("synthetic", label)
    store.publish(trace_id, tmp, "synthetic", counts)
    return trace_id, {"slices": made, "ingest_s": time.perf_counter() - t0}


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run_size(store: Store, n: int, reuse: bool) -> dict:
    existing = [r for r in store.list("ready") if r["name"] == f"views-bench-{n}"] if reuse else []
    if existing:
        tid, info = existing[0]["id"], {"slices": existing[0].get("slices") or n, "ingest_s": float("nan")}
    else:
        tid, info = build_trace(store, n)
    con = store.connect(tid)
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    whole = (start, end + 1)
    w0 = start + (end - start) * 4 // 10
    window = (w0, w0 + (end - start) // 10)
    row = {"size": n, "slices": info["slices"], "ingest_s": info["ingest_s"],
           "precompute_s": float(dict(con.execute("SELECT key, value FROM agg_info").fetchall())["build_s"])}
    row["anchor_s"] = _best(lambda: con.execute("SELECT name, count(*) FROM slices GROUP BY name").fetchall())
    row["tree_pre_s"] = _best(lambda: aggregates.call_tree(con, *whole))
    row["bu_pre_s"] = _best(lambda: aggregates.call_tree(con, *whole, mode="bottom-up"))
    row["dev_pre_s"] = _best(lambda: aggregates.call_tree(con, *whole, source="device"))
    row["rollup_pre_s"] = _best(lambda: aggregates.rollup(con, *whole))
    row["tree_live_s"] = _best(lambda: aggregates.call_tree(con, *whole, precomputed=False), 1)
    row["rollup_live_s"] = _best(lambda: aggregates.rollup(con, *whole, precomputed=False), 1)
    row["tree_win_s"] = _best(lambda: aggregates.call_tree(con, *window), 1)
    row["rollup_win_s"] = _best(lambda: aggregates.rollup(con, *window), 1)
    # the two paths agree (the precompute is the live query run once at ingest)
    assert aggregates.rollup(con, *whole) == aggregates.rollup(con, *whole, precomputed=False)
    con.close()
    return row


COLS = [("size", "{:>6}"), ("slices", "{:>11,}"), ("ingest_s", "{:>8.1f}"), ("precompute_s", "{:>12.2f}"),
        ("anchor_s", "{:>8.3f}"), ("tree_pre_s", "{:>10.3f}"), ("bu_pre_s", "{:>8.3f}"), ("dev_pre_s", "{:>9.3f}"),
        ("rollup_pre_s", "{:>12.3f}"), ("tree_live_s", "{:>11.2f}"), ("rollup_live_s", "{:>13.2f}"),
        ("tree_win_s", "{:>10.2f}"), ("rollup_win_s", "{:>12.2f}")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,5M")
    ap.add_argument("--store", type=Path, default=OUT / "views-store")
    ap.add_argument("--reuse", action="store_true", help="keep and reuse the generated traces")
    args = ap.parse_args(argv)
    if not args.reuse and args.store.exists():
        shutil.rmtree(args.store)
    store = Store(args.store)
    print(f"whole-trace tree/rollup (target <= {TARGET_S} s at 100 M events); anchor: count(*) GROUP BY name over all slices")
    print(" ".join(f"{k:>{len(f.format(0)) if 'size' != k else 6}}" for k, f in COLS))
    for s in args.sizes.split(","):
        row = run_size(store, _size(s), args.reuse)
        print(" ".join(f.format(row[k]) if k != "size" else f"{s:>6}" for k, f in COLS), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
