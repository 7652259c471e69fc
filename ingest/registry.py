"""The input formats: one module each, detected by file name first, then by content.

A format module exposes:
  NAME: str                          the format id stored in trace_meta 'format'
  SUFFIXES: tuple[str, ...]          lower-case file-name endings it claims (container suffix removed)
  sniff(head: bytes) -> bool         does this content look like the format?
  ingest(source, builder) -> None    write the source's events through the TraceBuilder
optionally:
  sniff_dir(path) -> bool            claims a directory (a run directory) as one source
  finish(builder) -> None            after all sources of one trace were ingested (cross-source links)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from ingest.errors import IngestError
from ingest.sources import Source

# Order matters only for content sniffing; names are checked for all modules first.
FORMAT_MODULES = [
    "ingest.export_read",  # acceltrace's own Chrome exports (strict sniff), ahead of the generic reader
    "ingest.chrome",
    "ingest.nsys",
    "ingest.actr",
    "ingest.atrace",
]


def modules() -> list[ModuleType]:
    return [importlib.import_module(m) for m in FORMAT_MODULES]


def detect(source: Source) -> ModuleType:
    """The format module for a source: by name, then by content; a clear error otherwise."""
    mods = modules()
    if source.is_dir:
        for m in mods:
            if hasattr(m, "sniff_dir") and m.sniff_dir(source.path):
                return m
        raise IngestError(source.name, "is a directory that holds no recognised run (expected run.atrace/run.actr)")
    low = source.inner_name.lower()
    by_name = [m for m in mods if any(low.endswith(s) for s in getattr(m, "SUFFIXES", ()))]
    for m in by_name:
        if m.sniff(source.head):
            return m
    for m in mods:
        if m.sniff(source.head):
            return m
    kinds = ", ".join(sorted({m.NAME for m in mods}))
    raise IngestError(
        source.name, f"unrecognised content; expected one of: {kinds}", "byte 0"
    )


def is_binary_garbage(head: bytes) -> bool:
    return b"\x00" in head[:1024]


def claimed_dir(path: Path) -> bool:
    return any(hasattr(m, "sniff_dir") and m.sniff_dir(path) for m in modules())
