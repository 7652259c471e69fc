"""A run directory recorded by `acceltrace record` (collect/record.py): its PyTorch profiler traces.

The recorder moved run.atrace and run.actr onto the Kineto traces' time base, so the traces
are read as they are, by the Chrome importer, into the same trace as the run's events and
counters (one ChromeSession: flows link across the processes' traces).
"""

from __future__ import annotations

from acceltrace.ingest.chrome.importer import ChromeSession
from acceltrace.ingest.sources import Source, open_sources


def ingest_torch(paths: list, builder, run: Source, with_counters: bool) -> None:
    """The Kineto traces `paths` (torch.<pid>.trace.json) of run directory `run` into `builder`."""
    session = ChromeSession(builder)
    for p in paths:
        for src in open_sources(p):
            src.name = f"{run.name}/{src.name}"
            src.group = run.group
            session.add(src)
    session.finish()
    builder.set_meta("format", "atrace+actr+kineto" if with_counters else "atrace+kineto")
