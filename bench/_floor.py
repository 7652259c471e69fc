"""The floor under an ingester: DuckDB writing the rows a finished trace stores, and nothing else.

bench/native_ingest.py and bench/ingest_nsys.py print it beside their ingest: no ingester that stores these
tables can publish faster on the same machine, whatever it does before the write.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb

from acceltrace.store import schema


def stored_tables_floor(trace: Path, tmp: Path) -> tuple[float, float, int]:
    """The floor under any ingester that stores what this one does: DuckDB writing the trace's own `slices`,
    `lod_slices` and `flows` rows (read back from the finished file as Arrow) into a fresh database file, each
    table by one statement on a thread of its own, at once (both cores), and checkpointed. (wall s, CPU s, rows)"""
    src = duckdb.connect(str(trace), read_only=True)
    tables = {t: src.sql(f"SELECT * FROM {t}").to_arrow_table() for t in ("slices", "lod_slices", "flows")}
    src.close()
    con = duckdb.connect(str(tmp / f"floor-{time.perf_counter_ns()}.duckdb"))
    # slices and flows as the builder creates them (slices' args in zstd, ingest/builder.py), then filled;
    # lod_slices made from its rows, as tiles/lod_slices.py makes it
    for t in ("slices", "flows"):
        con.execute(schema.create_sql(t, [(c, ty + " USING COMPRESSION zstd" * (c == "args"))
                                          for c, ty in schema.TABLES[t]]))

    def write(t):
        cur = con.cursor()
        cur.register("_rows", tables[t])
        cur.execute(f"INSERT INTO {t} SELECT * FROM _rows" if t in schema.TABLES else
                    f"CREATE TABLE {t} AS SELECT * FROM _rows")
        cur.close()

    t0, c0 = time.perf_counter(), time.process_time()
    threads = [threading.Thread(target=write, args=(t,)) for t in tables]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    con.execute("CHECKPOINT")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    con.close()
    return wall, cpu, sum(t.num_rows for t in tables.values())
