"""The driver: expand the inputs, fan one map task per trace out on Dask, stream results to Parquet, reduce.

The driver never holds the fleet: at most `window` futures are in flight, and each result is
written to the build's Parquet file (one row group) as soon as it arrives and then dropped. A
LocalCluster with one single-threaded worker process per core by default; with a scheduler
address, the workers of that cluster (they must see the same store path).
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from acceltrace.fleet import layout
from acceltrace.fleet.reduce import reduce_fleet
from acceltrace.fleet.results import ResultWriter
from acceltrace.fleet.task import map_trace
from acceltrace.ingest.pipeline import expand_inputs

# Found inside a directory but not a trace: a fleet generator's answer key. Listed as skipped.
NOT_TRACES = {"fleet_truth.json"}

Progress = Callable[[int, int, int], None]  # (done, failed, total)


class FleetError(Exception):
    """The fleet cannot be built at all (no inputs, no scheduler); str() says why."""


@dataclass
class BuildResult:
    fleet: dict
    counts: dict
    skipped: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    results_file: str | None = None


def expand(paths: list[str]) -> tuple[list[str], list[str]]:
    """(trace inputs, files left out as not traces). Globs are expanded; a path that exists
    nowhere stays in the list so that its map fails and says so."""
    given: list[Path] = []
    for p in paths:
        if not os.path.exists(p) and glob.has_magic(p):
            hits = sorted(glob.glob(p, recursive=True))
            given.extend(Path(h) for h in hits) if hits else given.append(Path(p))
        else:
            given.append(Path(p))
    out, skipped, seen = [], [], set()
    for p in given:
        items = expand_inputs([p]) if p.is_dir() else [p]
        for item in items:
            full = str(item.resolve()) if item.exists() else str(item.absolute())
            if item != p and item.name in NOT_TRACES:
                skipped.append(full)
            elif full not in seen:
                seen.add(full)
                out.append(full)
    return out, skipped


def client_for(scheduler: str | None, workers: int | None):
    """(client, cluster or None): an existing scheduler's client, or a new LocalCluster's."""
    from dask.distributed import Client, LocalCluster

    if scheduler:
        try:
            return Client(scheduler, timeout="20s"), None
        except (OSError, TimeoutError) as e:
            raise FleetError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
    n = workers or len(os.sched_getaffinity(0)) or 1
    if n < 1:
        raise FleetError(f"--workers must be at least 1, got {n}")
    # the dashboard on a free port (":0"): a second fleet, or anything else on 8787, must not collide
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                           silence_logs=logging.ERROR)
    return Client(cluster), cluster


def build_fleet(store, paths: list[str], name: str | None = None, tag_pattern: str | None = None,
                scheduler: str | None = None, workers: int | None = None, progress: Progress | None = None,
                client=None) -> BuildResult:
    """Build or update a fleet; every input ends as an ok or a failed row, never missing."""
    import re

    if tag_pattern:
        try:
            re.compile(tag_pattern)
        except re.error as e:
            raise FleetError(f"--tag-pattern {tag_pattern!r} is not a regular expression: {e}") from None
    inputs, skipped = expand(paths)
    if not inputs:
        raise FleetError("no traces to analyse: " + (", ".join(paths) or "no paths given"))
    own = None
    if client is None:  # first: a scheduler that cannot be reached leaves no half-made fleet behind
        client, own = client_for(scheduler, workers)
    failed: list[dict] = []
    try:
        fleet = layout.open_or_create(store, name, [os.path.abspath(p) for p in paths], tag_pattern)
        fleet["traces_given"] = len(inputs)
        fleet["builds"] = build_no = int(fleet.get("builds", 0)) + 1
        fleet["skipped"] = skipped
        layout.save(store, fleet)
        writer = ResultWriter(layout.results_dir(store, fleet["id"]), build_no)
        try:
            _map(client, str(Path(store.root).resolve()), inputs, tag_pattern, writer, failed, progress)
        finally:  # what was mapped is kept, even when the build is interrupted
            path = writer.close()
    finally:
        if own is not None:
            client.close()
            own.close()
        elif scheduler:
            client.close()
    counts = reduce_fleet(layout.results_dir(store, fleet["id"]), layout.db_path(store, fleet["id"]), fleet)
    fleet["counts"] = counts
    layout.save(store, fleet)
    return BuildResult(fleet, counts, skipped, failed, str(path) if path else None)


def _map(client, store_root: str, inputs: list[str], tag_pattern, writer: ResultWriter, failed: list,
         progress: Progress | None) -> None:
    from dask.distributed import as_completed

    n_workers = max(1, len(client.scheduler_info().get("workers", {})))
    window = max(32, 8 * n_workers)
    pending = iter(enumerate(inputs))
    futures = {}

    def submit_next() -> bool:
        item = next(pending, None)
        if item is None:
            return False
        i, path = item
        fut = client.submit(map_trace, store_root, path, tag_pattern, pure=False, key=f"fleet-map-{i}-{os.getpid()}")
        futures[fut.key] = path
        ac.add(fut)
        return True

    ac = as_completed()
    for _ in range(window):
        if not submit_next():
            break
    done = bad = 0
    total = len(inputs)
    if progress:
        progress(0, 0, total)
    for fut in ac:
        path = futures.pop(fut.key)
        try:
            row = fut.result()
        except Exception as e:  # the worker died or the task could not run: this trace failed
            row = {"path": path, "name": Path(path).name, "status": "failed",
                   "error": f"{path}: the map task failed on the cluster: {type(e).__name__}: {e}"}
        fut.release()
        writer.write(row)
        if row.get("status") != "ok":
            bad += 1
            failed.append({"path": row["path"], "error": row.get("error")})
        done += 1
        if progress:
            progress(done, bad, total)
        submit_next()
