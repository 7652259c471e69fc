"""A build's warnings: every one counted with the events it dropped, the first MAX_WARNINGS_KEPT kept verbatim
(with the file and the position they name); the builder stores them in trace_meta at finish()."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_WARNINGS_KEPT = 200


@dataclass
class Warnings:
    """Warnings with file and position; all are counted, the first MAX_WARNINGS_KEPT kept verbatim."""

    total: int = 0
    kept: list[str] = field(default_factory=list)
    dropped_events: int = 0

    def add(self, file: str, message: str, position: str | None = None, dropped: int = 0) -> None:
        self.total += 1
        self.dropped_events += dropped
        if len(self.kept) < MAX_WARNINGS_KEPT:
            where = f"{file}: {position}" if position else file
            self.kept.append(f"{where}: {message}")
