"""Benchmark: exporting traces to Chrome JSON and Parquet, each against an anchor measured in the same run.

Traces: the A100 Nsight export (sample_traces/nsys/nsys-2022.2), the A100 PyTorch/Kineto trace
(sample_traces/chrome/kineto/a100-rank0-memcpy.json.gz, 109k events) and, with --synthetic N, a
synthetic trace of N slices (bench/gen_synthetic.py).

Anchors, same run, same trace:
  chrome  DuckDB's own JSON writer: COPY (SELECT * FROM slices) TO x.json (FORMAT json), i.e.
          plain rows with no Chrome layout, no flows, no exact-decimal times: the floor for
          writing JSON out of DuckDB.
  parquet pyarrow: every table fetched to Arrow and written with pyarrow.parquet.write_table,
          the usual way to do it by hand.
  read back  ingesting the exported Chrome file with acceltrace's own reader (ingest/acceltrace_chrome/importer.py)
          against the generic Chrome ingester (ingest/chrome/importer.py) on the same file.
ratio = our time / anchor time (lower is better; 1.0 = as fast as the anchor).

    python bench/export.py                      # A100 traces
    python bench/export.py --synthetic 2000000  # plus a 2M-slice trace
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from acceltrace.export.command import write_chrome  # noqa: E402
from acceltrace.export.parquet import tables_of, write_parquet  # noqa: E402
from acceltrace.ingest.pipeline import ingest_paths  # noqa: E402
from acceltrace.store.catalog import Store  # noqa: E402

NSYS = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"
KINETO = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def best(fn, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def read_back_s(path: Path, work: Path, importer) -> float:
    """Ingest an exported Chrome file with one importer directly (builder finish included)."""
    from acceltrace.ingest.builder import TraceBuilder
    from acceltrace.ingest.sources import open_sources

    d = work / f"read-{time.perf_counter_ns()}"
    d.mkdir()
    t = time.perf_counter()
    b = TraceBuilder(d / "t.duckdb")
    b.work_dir = d / "work"
    session = importer.session(b)
    session.add(open_sources(path)[0])
    session.finish()
    b.finish(importer.name, path.name)
    dt = time.perf_counter() - t
    shutil.rmtree(d, ignore_errors=True)
    return dt


def bench_trace(label: str, store: Store, trace_id: str, work: Path, repeat: int) -> list[str]:
    con = store.connect(trace_id)
    (events,) = con.execute("SELECT (SELECT count(*) FROM slices) + (SELECT count(*) FROM counters)"
                            " + (SELECT count(*) FROM flows)").fetchone()
    js, anchor_js = work / "t.json", work / "anchor.json"
    pq_dir, anchor_pq = work / "pq", work / "anchor-pq"
    t_chrome = best(lambda: write_chrome(con, js), repeat)
    t_anchor_js = best(lambda: con.execute(f"COPY (SELECT * FROM slices) TO '{anchor_js}' (FORMAT json)"), repeat)
    t_parquet = best(lambda: write_parquet(con, pq_dir), repeat)

    def by_hand():
        shutil.rmtree(anchor_pq, ignore_errors=True)
        anchor_pq.mkdir()
        for table in tables_of(con):
            pq.write_table(con.sql(f"SELECT * FROM {table}").to_arrow_table(), anchor_pq / f"{table}.parquet")

    t_anchor_pq = best(by_hand, repeat)
    mb = js.stat().st_size / 1e6
    pq_mb = sum(f.stat().st_size for f in pq_dir.iterdir()) / 1e6
    con.close()
    from acceltrace.ingest.acceltrace_chrome.importer import IMPORTER as OWN
    from acceltrace.ingest.chrome.importer import IMPORTER as GENERIC

    t_read = best(lambda: read_back_s(js, work, OWN), repeat)
    t_generic = best(lambda: read_back_s(js, work, GENERIC), repeat)
    return [
        f"{label:<30} {'chrome':<9} {events:>9} {t_chrome:>8.3f} {events / t_chrome:>11.0f} {mb:>8.1f}"
        f" {mb / t_chrome:>7.1f} {t_anchor_js:>8.3f} {t_chrome / t_anchor_js:>6.2f}",
        f"{'':<30} {'parquet':<9} {events:>9} {t_parquet:>8.3f} {events / t_parquet:>11.0f} {pq_mb:>8.1f}"
        f" {pq_mb / t_parquet:>7.1f} {t_anchor_pq:>8.3f} {t_parquet / t_anchor_pq:>6.2f}",
        f"{'':<30} {'read back':<9} {events:>9} {t_read:>8.3f} {events / t_read:>11.0f} {mb:>8.1f}"
        f" {mb / t_read:>7.1f} {t_generic:>8.3f} {t_read / t_generic:>6.2f}",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", type=int, default=0, help="also a synthetic trace of N slices")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        work = Path(tmp)
        store = Store(work / "store")
        traces = []
        for label, path in (("A100 saxpy (Nsight)", NSYS), ("A100 rank0 (Kineto)", KINETO)):
            if not path.exists():
                print(f"skipped {label}: {path} missing", file=sys.stderr)
                continue
            (res,) = ingest_paths(store, [path])
            if res.error:
                print(f"skipped {label}: {res.error}", file=sys.stderr)
                continue
            traces.append((label, res.id))
        if args.synthetic:
            from bench.gen_synthetic import build_trace

            tid, _info = build_trace(store, args.synthetic, name="synthetic")
            traces.append((f"synthetic {args.synthetic} slices", tid))
        print(f"{'trace':<30} {'format':<9} {'events':>9} {'s':>8} {'events/s':>11} {'MB out':>8} {'MB/s':>7}"
              f" {'anchor s':>8} {'ratio':>6}")
        for label, tid in traces:
            for line in bench_trace(label, store, tid, work, args.repeat):
                print(line, flush=True)
    print("events = slices + counter samples + flows; chrome anchor: DuckDB COPY slices TO json;"
          " parquet anchor: pyarrow write_table of every table; read back: ingesting the exported Chrome file with"
          " ingest/acceltrace_chrome/importer.py, anchor the generic Chrome ingester (ingest/chrome/importer.py) on the same file, builder"
          " finish included in both; ratio = ours / anchor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
