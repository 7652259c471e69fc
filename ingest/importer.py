"""The one interface every input format implements (docs/architecture.md, "Add an input format").

An `Importer` says what it claims (file-name suffixes, a content sniff, optionally a run
directory) and opens a per-trace `ImportSession` on a TraceBuilder. The pipeline feeds the
session every source of one trace, then calls `finish()` once, where a format resolves what
needs the whole trace (B/E pairs, flows across files). State lives in the session, never on
the builder, so two formats in one archive cannot see each other's staging.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.sources import Source


class ImportSession(Protocol):
    def add(self, source: Source) -> None:
        """Write one source's events through the builder."""

    def finish(self) -> None:
        """After every source of the trace was added: cross-source links, track names."""


@dataclass(frozen=True)
class Importer:
    name: str  # the format id stored in trace_meta 'format'
    suffixes: tuple[str, ...]  # lower-case file-name endings it claims (container suffix removed)
    sniff: Callable[[bytes], bool]  # does this head of the content look like the format?
    session: Callable[[TraceBuilder], ImportSession]
    claims_dir: Callable[[Path], bool] = lambda path: False  # a directory that is one source (a run)
    # when no importer's sniff of the head claims a source: read as much of it as the format's
    # structure needs to decide; (claimed, what was found when not claimed)
    probe: Callable[[Source], tuple[bool, str | None]] | None = None


class PerSource:
    """A session for formats whose sources are independent: `ingest(source, builder)` each, no finish."""

    def __init__(self, ingest: Callable[[Source, TraceBuilder], None], builder: TraceBuilder):
        self._ingest, self._builder = ingest, builder

    def add(self, source: Source) -> None:
        self._ingest(source, self._builder)

    def finish(self) -> None:
        pass


def per_source(ingest: Callable[[Source, TraceBuilder], None]) -> Callable[[TraceBuilder], ImportSession]:
    return lambda builder: PerSource(ingest, builder)
