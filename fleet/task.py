"""The map of a fleet: one Dask task per trace, run on any worker that can see the store.

The store is the cache: a trace whose content is already stored is not read again (its
content hash finds it), and a trace already analysed is not analysed again. The task returns
a small dict (fleet/metrics.py); any failure comes back as a failed row with its error, never
as an exception, so one bad trace cannot stop the fleet.
"""

from __future__ import annotations

import os
import re
import socket
import time
import traceback
from pathlib import Path

from acceltrace.analysis.runner import SIDE, run_passes
from acceltrace.fleet.metrics import tags_from_meta, trace_metrics
from acceltrace.ingest.pipeline import ingest_one
from acceltrace.store.catalog import Store

TAG_KEYS = ("job", "rank", "host", "run")


def path_tags(path: str, pattern: str | None) -> dict:
    """Named groups of the user's --tag-pattern found in the path, e.g. r'node(?P<host>\\d+)/rank(?P<rank>\\d+)'."""
    if not pattern:
        return {}
    m = re.search(pattern, path)
    return {k: v for k, v in m.groupdict().items() if v is not None} if m else {}


def map_trace(store_root: str, path: str, tag_pattern: str | None = None) -> dict:
    """Ingest (if not stored), analyse (if not analysed) and measure one trace; never raises."""
    t0, c0 = time.perf_counter(), time.process_time()
    row = {"path": path, "name": Path(path).name, "trace_id": None, "status": "failed", "error": None,
           "ingested": False, "analyzed_now": False, "worker": f"{socket.gethostname()}:{os.getpid()}"}
    try:
        store = Store(store_root, sweep=False)
        # one DuckDB thread: a worker process runs one task at a time and the cluster's parallelism
        # is across traces (several threads per task on a busy core only contend)
        res = ingest_one(store, [Path(path)], Path(path).name, skip_existing=True, threads=1)
        if res.error:
            row["error"] = res.error
            return _done(row, t0, c0)
        row["trace_id"] = res.id
        row["ingested"] = not res.skipped
        if not store.side_path(res.id, SIDE).exists():
            run_passes(store, res.id, threads=1)
            row["analyzed_now"] = True
        con = store.connect(res.id)
        try:
            con.execute("SET threads = 1")
            meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
            metrics = trace_metrics(con)
        finally:
            con.close()
        tags = {**tags_from_meta(meta), **path_tags(path, tag_pattern)}
        row.update(metrics)
        row["tags"] = {k: str(v) for k, v in tags.items()}
        row["format"] = meta.get("format")
        row["status"] = "ok"
    except Exception as e:  # a bug or a damaged store file: this trace fails, the fleet goes on
        last = traceback.extract_tb(e.__traceback__)[-1:]
        where = f" ({Path(last[0].filename).name}:{last[0].lineno})" if last else ""
        row["error"] = f"{path}: {type(e).__name__}: {e}{where}"
    return _done(row, t0, c0)


def _done(row: dict, t0: float, c0: float) -> dict:
    row["map_ms"] = (time.perf_counter() - t0) * 1e3
    row["cpu_ms"] = (time.process_time() - c0) * 1e3
    return row
