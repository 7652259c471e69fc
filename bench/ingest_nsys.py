"""Benchmark: ingesting Nsight Systems SQLite exports (events/s), against reading the same rows raw.

Rows: the real A100 export (sample_traces/nsys/nsys-2022.2, small: fixed costs dominate) and a synthesized
3.x export (tests/nsys_synth.py) of --iterations iterations (11 event rows each + GPU metric
samples). The anchor, measured in the same run, is the floor for any Python reader: plain
sqlite3 `SELECT *` + fetchall of the same event tables, nothing else. The ratio says how much
the ingester (staging copy, SQL mapping, depths, flows, LOD summaries) costs over just getting
the rows out of SQLite; the end-to-end column adds hashing, the catalog and the analysis passes
the pipeline runs after every publish.

    python bench/ingest_nsys.py                      # ~220k-row synthetic export, 3 repeats
    python bench/ingest_nsys.py --iterations 500000  # ~5.5M rows
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from acceltrace.ingest.nsys import read as nsys_read
import nsys_synth as nsys_synth  # noqa: E402
from acceltrace.ingest.pipeline import ingest_paths  # noqa: E402
from acceltrace.store.catalog import Store  # noqa: E402

A100 = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"
# published/measured anchor from docs (REFERENCE.md): HTA loads a 216k-event V100 trace in ~6.5 s here
HTA_EVENTS_PER_S = 216_000 / 6.5


def raw_read_s(path: Path) -> tuple[float, int]:
    """Seconds to fetch every row of the event tables with plain sqlite3, and the row count."""
    t = time.perf_counter()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = 0
    for table in nsys_read.EVENT_TABLES:
        if table in have:
            cur = con.execute(f'SELECT * FROM "{table}"')
            while batch := cur.fetchmany(65536):
                rows += len(batch)
    con.close()
    return time.perf_counter() - t, rows


def ingest_s(path: Path, work: Path) -> tuple[float, dict]:
    store = Store(work / f"store-{time.perf_counter_ns()}")
    t = time.perf_counter()
    (res,) = ingest_paths(store, [path])
    dt = time.perf_counter() - t
    if res.error:
        raise SystemExit(f"ingest failed: {res.error}")
    return dt, res.counts


def ingester_s(path: Path, work: Path) -> float:
    """The Nsight ingester and the builder's finish alone (no hashing, catalog or post-publish analysis)."""
    from acceltrace.ingest.nsys import importer as nsys
    from acceltrace.ingest.builder import TraceBuilder
    from acceltrace.ingest.sources import open_sources

    d = work / f"direct-{time.perf_counter_ns()}"
    d.mkdir()
    t = time.perf_counter()
    b = TraceBuilder(d / "t.duckdb")
    b.work_dir = d / "work"
    nsys.ingest(open_sources(path)[0], b)
    b.finish("nsys", path.name)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20_000, help="synthetic export size (11 rows each)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        work = Path(tmp)
        synth = work / "synth-3x.sqlite"
        nsys_synth.write(synth, iterations=args.iterations, metric_samples=max(10, args.iterations // 10))
        print(f"{'input':<34} {'rows':>10} {'MB':>7} {'ingest s':>9} {'rows/s':>11} {'ingester s':>10}"
              f" {'rows/s':>11} {'raw read s':>10} {'ratio':>6} {'vs HTA':>7}")
        for label, path in (("A100 saxpy (Nsight 2022, real)", A100),
                            (f"synthetic 3.x x{args.iterations}", synth)):
            best_ingest, best_direct, best_raw, counts, rows = float("inf"), float("inf"), float("inf"), {}, 0
            for _ in range(args.repeat):
                r, rows = raw_read_s(path)
                best_raw = min(best_raw, r)
                d, counts = ingest_s(path, work)
                best_ingest = min(best_ingest, d)
                best_direct = min(best_direct, ingester_s(path, work))
            rate = rows / best_ingest
            print(f"{label:<34} {rows:>10} {path.stat().st_size / 1e6:>7.1f} {best_ingest:>9.3f} {rate:>11.0f}"
                  f" {best_direct:>10.3f} {rows / best_direct:>11.0f}"
                  f" {best_raw:>10.3f} {best_direct / best_raw:>6.1f} {rows / best_direct / HTA_EVENTS_PER_S:>6.1f}x")
            print(f"{'':<34} -> slices={counts['slices']} flows={counts['flows']} counters={counts['counters']}")
    print("rows: event-table rows in the file; ingest: `acceltrace ingest` end to end (hash, build, LOD, publish,"
          " post-publish analysis); ingester: nsys.ingest + builder.finish only; ratio: ingester time / raw sqlite3"
          f" fetch of those rows (same run); vs HTA: ingester rows/s over HTA's {HTA_EVENTS_PER_S:.0f} events/s"
          " load rate (REFERENCE.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
