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
    python bench/ingest_nsys.py --readers --iterations 200000 --repeat 1

--readers prints, per input, the reading stage alone next to its anchors (issue 14): the rows the
importer copies (its columns of every table it reads) read into DuckDB staging by the compiled
reader (ingest/nsys/_sqlread.c: the file's b-trees read directly, ingest/nsys/_btree.c, and through
SQLite alone) and by the Python sqlite3 path, next to Python sqlite3 fetching
the same columns (fetchmany, nothing else) and DuckDB inserting the same rows from Arrow; and the
ingester (importer + builder finish) and `acceltrace ingest` to a published trace on each reader (no
analysis and no views' precompute: both come after publication; before the eighteenth stop this row
included the precompute, ~1 s of the 2.83 M-row export's figure).
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
sys.path.insert(0, str(ROOT / "tests"))  # tests/nsys_synth.py writes the synthetic export

from acceltrace.ingest.nsys import read as nsys_read
import nsys_synth as nsys_synth  # noqa: E402
from acceltrace.ingest.pipeline import ingest_paths  # noqa: E402
from acceltrace.store.catalog import Store  # noqa: E402
from bench._floor import stored_tables_floor  # noqa: E402

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


def ingest_s(path: Path, work: Path) -> tuple[float, dict, Path]:
    """Seconds to a published trace: hash, build, LOD, publish (not the views' precompute, a side file
    built after publication, nor the analysis; as bench/ingest.py's "viewable" and bench/native_ingest.py);
    its counts and its file."""
    store = Store(work / f"store-{time.perf_counter_ns()}")
    t = time.perf_counter()
    (res,) = ingest_paths(store, [path], views=False)
    dt = time.perf_counter() - t
    if res.error:
        raise SystemExit(f"ingest failed: {res.error}")
    return dt, res.counts, store.trace_path(res.id)


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
    b.sole_source = True  # as the pipeline says of one file: the LOD build starts beside the flows
    nsys.ingest(open_sources(path)[0], b)
    b.finish("nsys", path.name)
    return time.perf_counter() - t


def _read_spec(path: Path):
    """(export, [(table, spec, as_name)]) the importer copies, with the columns each has."""
    ex = nsys_read.open_export(path, path.name)
    tables = [(t, spec, None) for t, spec in {**nsys_read.EVENT_TABLES, **nsys_read.NAME_TABLES}.items()]
    tables += [(t, spec, t) for t, spec in nsys_read.CPU_TABLES.items()]
    return ex, tables


def copy_rows_s(path: Path, reader: str) -> tuple[float, float, int]:
    """The importer's copy of every table it reads into an in-memory DuckDB staging database:
    (wall s, CPU s, rows), on `reader`: "" the compiled reader (the file's b-trees read directly where it
    can), "sqlite" the compiled reader through SQLite only, "python" the Python sqlite3 path."""
    import os

    import duckdb

    ex, tables = _read_spec(path)
    stage = duckdb.connect(":memory:")
    saved = os.environ.get(nsys_read.READER_ENV)
    os.environ[nsys_read.READER_ENV] = reader
    try:
        t, c = time.perf_counter(), time.process_time()
        rows = sum(nsys_read.copy_table(ex, stage, tb, spec, as_name=a) for tb, spec, a in tables)
        return time.perf_counter() - t, time.process_time() - c, rows
    finally:
        if saved is None:
            os.environ.pop(nsys_read.READER_ENV, None)
        else:
            os.environ[nsys_read.READER_ENV] = saved
        ex.close()
        stage.close()


def anchors_s(path: Path) -> tuple[float, float, float, float]:
    """Anchors over the same columns: (Python sqlite3 fetchmany wall s, its CPU s, DuckDB insert of
    the same rows from Arrow wall s, its CPU s). The Arrow tables are made first, untimed."""
    import duckdb
    import pyarrow as pa

    ex, tables = _read_spec(path)
    selects = []
    for tb, (req, opt), _ in tables:
        cols = [c for c in {**req, **opt} if c in ex.columns.get(tb, ())]
        if cols and ex.has(tb):
            selects.append((tb, cols))
    t, c = time.perf_counter(), time.process_time()
    for tb, cols in selects:
        cur = ex.con.execute(f'SELECT {", ".join(chr(34) + x + chr(34) for x in cols)} FROM "{tb}"')
        while cur.fetchmany(65536):
            pass
    fetch_w, fetch_c = time.perf_counter() - t, time.process_time() - c
    ex.close()
    # the same rows as Arrow (from DuckDB's staging copy, untimed), then inserted into a fresh DuckDB
    src = duckdb.connect(":memory:")
    ex, tables = _read_spec(path)
    for tb, spec, a in tables:
        nsys_read.copy_table(ex, src, tb, spec, as_name=a)
    ex.close()
    arrow = {tb: src.sql(f'SELECT * FROM "{tb}"').to_arrow_table() for tb, _ in selects}
    src.close()
    dst = duckdb.connect(":memory:")
    t, c = time.perf_counter(), time.process_time()
    for tb, table in arrow.items():
        dst.register("_a", table)
        dst.execute(f'CREATE TABLE "{tb}" AS SELECT * FROM _a')
        dst.unregister("_a")
    ins_w, ins_c = time.perf_counter() - t, time.process_time() - c
    dst.close()
    assert all(isinstance(v, pa.Table) for v in arrow.values())
    return fetch_w, fetch_c, ins_w, ins_c


def readers(paths, repeat: int, work: Path) -> None:
    import os

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'input':<34} {'what':<58} {'wall s':>8} {'CPU s':>7} {'rows/s':>11}")
    for label, path in paths:
        best = {}
        for _ in range(repeat):
            for reader, what in (("", "compiled reader, b-trees read directly"),
                                 ("sqlite", "compiled reader through SQLite"), ("python", "Python sqlite3 path")):
                w, c, rows = copy_rows_s(path, reader)
                key = f"copy into staging, {what}"
                best[key] = min(best.get(key, (9e9, 0, 0)), (w, c, rows))
            fw, fc, iw, ic = anchors_s(path)
            best["anchor: Python sqlite3 fetchmany of the same columns"] = min(
                best.get("anchor: Python sqlite3 fetchmany of the same columns", (9e9, 0, 0)), (fw, fc, rows))
            best["anchor: DuckDB insert of the same rows from Arrow"] = min(
                best.get("anchor: DuckDB insert of the same rows from Arrow", (9e9, 0, 0)), (iw, ic, rows))
            for python in (False, True):
                os.environ[nsys_read.READER_ENV] = "python" if python else ""
                try:
                    c0 = time.process_time()
                    d = ingester_s(path, work)
                    key = f"ingester (importer + builder finish), {'Python path' if python else 'compiled'}"
                    best[key] = min(best.get(key, (9e9, 0, 0)), (d, time.process_time() - c0, rows))
                    c0 = time.process_time()
                    d, _, _ = ingest_s(path, work)
                    key = f"acceltrace ingest, published, {'Python path' if python else 'compiled'}"
                    best[key] = min(best.get(key, (9e9, 0, 0)), (d, time.process_time() - c0, rows))
                finally:
                    os.environ.pop(nsys_read.READER_ENV, None)
        for key, (w, c, rows) in best.items():
            print(f"{label:<34} {key:<58} {w:>8.3f} {c:>7.2f} {rows / w:>11,.0f}")
            label = ""
    print("rows: every row the importer copies (event, name and CPU tables); best of the repeats; the"
          " end-to-end rows (ingester, acceltrace ingest) are over the same row count")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20_000, help="synthetic export size (11 rows each)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--readers", action="store_true", help="the reading stage and its anchors (see above)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        work = Path(tmp)
        synth = work / "synth-3x.sqlite"
        nsys_synth.write(synth, iterations=args.iterations, metric_samples=max(10, args.iterations // 10))
        if args.readers:
            readers((("A100 saxpy (Nsight 2022, real)", A100), (f"synthetic 3.x x{args.iterations}", synth)),
                    args.repeat, work)
            return 0
        print(f"{'input':<34} {'rows':>10} {'MB':>7} {'ingest s':>9} {'rows/s':>11} {'ingester s':>10}"
              f" {'rows/s':>11} {'raw read s':>10} {'ratio':>6} {'vs HTA':>7}")
        for label, path in (("A100 saxpy (Nsight 2022, real)", A100),
                            (f"synthetic 3.x x{args.iterations}", synth)):
            best_ingest, best_direct, best_raw, counts, rows = float("inf"), float("inf"), float("inf"), {}, 0
            for _ in range(args.repeat):
                r, rows = raw_read_s(path)
                best_raw = min(best_raw, r)
                d, counts, trace = ingest_s(path, work)
                best_ingest = min(best_ingest, d)
                best_direct = min(best_direct, ingester_s(path, work))
            rate = rows / best_ingest
            print(f"{label:<34} {rows:>10} {path.stat().st_size / 1e6:>7.1f} {best_ingest:>9.3f} {rate:>11.0f}"
                  f" {best_direct:>10.3f} {rows / best_direct:>11.0f}"
                  f" {best_raw:>10.3f} {best_direct / best_raw:>6.1f} {rows / best_direct / HTA_EVENTS_PER_S:>6.1f}x")
            floor_s, floor_cpu, floor_rows = stored_tables_floor(trace, work)
            print(f"{'':<34} -> slices={counts['slices']} flows={counts['flows']} counters={counts['counters']};"
                  f" floor (DuckDB writing its slices, lod_slices, flows: {floor_rows:,} rows) {floor_s:.3f} s wall,"
                  f" {floor_cpu:.2f} CPU s = {rows / floor_s:,.0f} event rows/s")
    print("rows: event-table rows in the file; ingest: `acceltrace ingest` end to end (hash, build, LOD, publish,"
          " post-publish analysis); ingester: nsys.ingest + builder.finish only; ratio: ingester time / raw sqlite3"
          f" fetch of those rows (same run); vs HTA: ingester rows/s over HTA's {HTA_EVENTS_PER_S:.0f} events/s"
          " load rate (REFERENCE.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
