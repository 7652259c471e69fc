"""Native .atrace ingest speed: decode (chunks -> numpy) and the whole ingest, against DuckDB's own insert.

    .venv/bin/python bench/native_ingest.py                 # 2 M events (~1 min)
    .venv/bin/python bench/native_ingest.py --events 20000000

The file is synthetic but shaped like the device model's: cpu API calls on 8 threads, driver
submissions, DMA and kernel records in a device clock domain with clock-sync pairs every
10 ms, correlation ids on everything, explicit submit flows on a tenth of the calls. The anchor
is DuckDB inserting an Arrow table of the same rows and columns into the same schema: the
floor any ingester that goes through the builder pays.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from acceltrace.formats import record as R  # noqa: E402
from bench._floor import stored_tables_floor  # noqa: E402
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.formats.atrace.writer import AtraceWriter, default_header
from acceltrace.ingest.native.atrace import ingest_atrace  # noqa: E402
from acceltrace.ingest.builder import TraceBuilder  # noqa: E402


def make_file(path: Path, n: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    hdr = default_header(devices=[{"id": 0, "name": "dev0", "link_gen": 4, "link_width": 16,
                                   "max_payload_bytes": 256}], host_clock="virtual")
    w = AtraceWriter(path, hdr, chunk_events=16384)
    names = [w.intern(s) for s in ("launch", "memcpyAsync", "submit", "DMA h2d", "gemm", "softmax")]
    quarter = n // 4
    corr = np.arange(1, quarter + 1, dtype=np.uint64)
    t_host = np.cumsum(rng.integers(500, 3000, quarter)).astype(np.int64) + 10**12
    step = 1 << 16
    ticks_per_ns = 1.5
    span_ns = int(t_host[-1] - t_host[0]) + 10**8
    sync_host = np.arange(t_host[0] - 10**7, t_host[0] + span_ns, 10**7, dtype=np.int64)
    w.add_clock_sync(1, sync_host, ((sync_host - sync_host[0]) * ticks_per_ns).astype(np.int64))
    for lo in range(0, quarter, step):
        hi = min(quarter, lo + step)
        k = hi - lo
        recs = np.zeros(4 * k, R.RECORD_DTYPE)
        cpu, drv, dma, eu = (recs[i * k:(i + 1) * k] for i in range(4))
        th = t_host[lo:hi]
        for part in (cpu, drv, dma, eu):
            part["kind"], part["corr"], part["flags"], part["device"] = R.COMPLETE, corr[lo:hi], R.FLAG_HAS_CORR, 255
        cpu["lane"], cpu["tid"], cpu["pid"], cpu["ts"], cpu["dur"] = 0, corr[lo:hi] % 8 + 100, 7, th, 400
        cpu["name"] = np.where(corr[lo:hi] % 3 == 0, names[1], names[0])
        drv["lane"], drv["device"], drv["tid"], drv["name"], drv["ts"], drv["dur"] = 1, 0, 0, names[2], th + 100, 200
        dev_ticks = ((th + 1000 - sync_host[0]) * ticks_per_ns).astype(np.int64)
        is_copy = corr[lo:hi] % 3 == 0
        dma["lane"], dma["device"], dma["clock"], dma["name"], dma["ts"], dma["dur"] = 2, 0, 1, names[3], dev_ticks, 900
        dma["bytes"], dma["direction"], dma["mem"] = np.where(is_copy, 1 << 20, 4096), 1, 2
        dma["flags"] |= R.FLAG_HAS_BYTES
        eu["lane"], eu["device"], eu["clock"], eu["ts"], eu["dur"] = 3, 0, 1, dev_ticks + 1500, 3000
        eu["tid"] = corr[lo:hi] % 4
        eu["name"] = np.where(corr[lo:hi] % 2 == 0, names[4], names[5])
        flow = (corr[lo:hi] % 10 == 0)
        cpu["flags"] |= np.where(flow, R.FLAG_FLOW_OUT, 0).astype(np.uint8)
        drv["flags"] |= np.where(flow, R.FLAG_FLOW_IN, 0).astype(np.uint8)
        cpu["flow"] = drv["flow"] = np.where(flow, corr[lo:hi], 0).astype(np.uint32)
        cpu["flow_kind"] = drv["flow_kind"] = np.where(flow, R.FLOW_CODES["submit"], 0)
        w.add_records(recs)
    w.close()


def anchor_insert(tmp: Path, n: int) -> float:
    """DuckDB inserting n rows of the slice columns from Arrow through the same builder."""
    b = TraceBuilder(tmp / "anchor.duckdb")
    tr = b.track("cpu", "t")
    rng = np.random.default_rng(2)
    step = 1 << 20
    t0 = time.perf_counter()
    for lo in range(0, n, step):
        k = min(step, n - lo)
        b.add_slices(pa.table({
            "track_id": pa.array(np.full(k, tr, np.int32)), "ts": pa.array(np.arange(lo, lo + k) * 10),
            "dur": pa.array(np.full(k, 5)), "depth": pa.array(np.zeros(k, np.int32)),
            "name": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 6, k)),
                                                   pa.array(["a", "b", "c", "d", "e", "f"])),
            "corr_id": pa.array(np.arange(lo, lo + k)), "bytes": pa.array(np.full(k, 4096))}))
    elapsed = time.perf_counter() - t0
    b.abort()
    return elapsed


class Phases:
    """CPU and wall seconds of named phases of one ingest: each wraps a function for the run."""

    def __init__(self):
        self.t: dict[str, list[float]] = {}
        self._undo: list = []

    def wrap(self, owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr)
        acc = self.t.setdefault(label, [0.0, 0.0])

        def timed(*a, **k):
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                acc[0] += time.perf_counter() - w
                acc[1] += time.process_time() - c

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, fn))

    def undo(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            setattr(owner, attr, fn)
        self._undo = []


def published_s(path: Path, tmp: Path) -> tuple[float, float, int]:
    """`acceltrace ingest` to a published trace (hash, build, LOD, publish; no analysis, no views
    side file), then one tile of its busiest group answered: (wall s, CPU s, tile bytes)."""
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store
    from acceltrace.tiles import layout
    from acceltrace.tiles.query import LodInfo, build_tile

    store = Store(tmp / "store")
    t0, c0 = time.perf_counter(), time.process_time()
    (res,) = ingest_paths(store, [path], views=False)
    if res.error:
        raise SystemExit(f"ingest failed: {res.error}")
    con = store.connect(res.id, sides=())
    info = LodInfo.load(con)
    counts = layout.group_counts(con)
    grp = max(counts, key=lambda g: counts[g][0])
    body = build_tile(con, info, info.max_level, 0, grp, f"g{grp}")
    con.close()
    return time.perf_counter() - t0, time.process_time() - c0, len(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--no-store", action="store_true", help="skip the published-through-the-store row")
    args = ap.parse_args()
    import os
    import shutil

    from acceltrace.ingest import builder as builder_mod
    from acceltrace.ingest import stage as stage_mod
    from acceltrace.ingest.native import atrace as atrace_mod, handover as handover_mod
    from acceltrace.tiles import build as lod_mod, pyramid as pyramid_mod

    tmp = Path(tempfile.mkdtemp(prefix="acceltrace-native-"))
    path = tmp / "bench.atrace"
    t0 = time.perf_counter()
    make_file(path, args.events)
    gen_s = time.perf_counter() - t0
    n = args.events // 4 * 4
    mb = path.stat().st_size / 1e6
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    t0, c0 = time.perf_counter(), time.process_time()
    r = AtraceReader.open(path)
    got = sum(len(recs) for recs, _ in r.iter_events())
    r.close()
    decode_s, decode_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert got == n, (got, n)

    ph = Phases()
    ph.wrap(atrace_mod._Ingest, "_batch", "  records -> columns (strings, tracks; clocks on the read thread)")
    ph.wrap(handover_mod, "depths_and_order", "  depths and stored order (compiled sweep; numpy without a compiler)")
    ph.wrap(builder_mod.TraceBuilder, "add_slices", "  sorted slices into the builder's stage")
    ph.wrap(builder_mod.TraceBuilder, "add_flows", "  flows into the builder")
    ph.wrap(atrace_mod._Ingest, "_flush", " hand-over: depths, sort, staging, flows (the LOD build begins)")
    ph.wrap(stage_mod, "write_slices_and_lod", " finish: slices written || LOD built")
    ph.wrap(lod_mod, "_build", " LOD build (its own thread, from the hand-over on)")
    ph.wrap(pyramid_mod, "build_merged", "  of which the merged pyramid (numpy)")
    b = TraceBuilder(tmp / "trace.duckdb")
    b.sole_source = True  # as the pipeline says of a lone file: its LOD build starts beside its flows
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        ingest_atrace(path, b, alone=True)
        mapped_s, mapped_cpu = time.perf_counter() - t0, time.process_time() - c0
        counts = b.finish("atrace", path.name)
    finally:
        ph.undo()
    total_s, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    c0 = time.process_time()
    anchor_s = anchor_insert(tmp, n)
    anchor_cpu = time.process_time() - c0
    floor_s, floor_cpu, floor_rows = stored_tables_floor(tmp / "trace.duckdb", tmp)
    pub = None if args.no_store else published_s(path, tmp)

    # wall time and CPU time (all threads): on a shared machine the CPU figure is the steadier one
    def rate(k, wall, cpu):
        return f"{k / wall / 1e6:,.2f} M/s wall, {k / cpu / 1e6:,.2f} M per CPU s"

    rows = [
        ("file", f"{n:,} events, {mb:,.0f} MB (written in {gen_s:.1f} s)", ""),
        ("decode: chunks -> numpy records (CRC checked)", rate(n, decode_s, decode_cpu), ""),
        ("ingest_atrace (read, columns, depths, sort, flows, staged)", rate(n, mapped_s, mapped_cpu), ""),
        ("  + builder.finish (LOD tables, slices written, checkpoint)", rate(n, total_s, total_cpu),
         f"builder end to end: {total_s:.2f} s wall, {total_cpu:.2f} CPU s; target >= 10 M/s"),
    ]
    if pub is not None:
        rows.append(("published through the store, then a tile answered", rate(n, pub[0], pub[1]),
                     f"{pub[0]:.2f} s wall, {pub[1]:.2f} CPU s (tile {pub[2]:,} bytes); target >= 10 M/s"))
    rows += [
        ("anchor: DuckDB insert of the same number of Arrow rows", rate(n, anchor_s, anchor_cpu),
         f"anchor / end to end = {anchor_s / total_s:.2f} (wall)"),
        ("floor: DuckDB writing this trace's slices, lod_slices, flows", rate(n, floor_s, floor_cpu),
         f"{floor_rows:,} rows in {floor_s:.2f} s wall, {floor_cpu:.2f} CPU s; floor / end to end = "
         f"{floor_s / total_s:.2f}"),
        ("result", f"{counts['slices']:,} slices, {counts['flows']:,} flows, {counts['tracks']} tracks", ""),
    ]
    w = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{w}}  {value:<48}  {note}")
    print("\nwhere the builder end to end went (nested parts indented; wall s / CPU s, all threads):")
    for label, (wall, cpu) in ph.t.items():
        print(f"  {label:<52} {wall:7.2f} {cpu:7.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
