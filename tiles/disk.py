"""Encoded tiles kept on disk beside their trace: immutable files that every worker process shares.

A tile of a published trace never changes (the trace is immutable and the file name carries
LOD_VERSION and TILE_FORMAT_VERSION), so once any worker has built one, every worker serves
it from `traces/<id>.tile.v<lod>-<fmt>.<level>.<index>.<group>.bin` (and its gzip twin
`.bin.gz`) instead of querying DuckDB again, across restarts too. Files are written to the
store's tmp/ and renamed into place, so a reader never sees half a tile; `Store.remove`
deletes them with the trace (every file named `<id>.*`). ACCELTRACE_TILE_DISK=0 turns the disk
cache off; docs/operations.md.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from acceltrace.tiles.build import LOD_VERSION
from acceltrace.tiles.query import TILE_FORMAT_VERSION

ENCODINGS = ("identity", "gzip")


def enabled() -> bool:
    return os.environ.get("ACCELTRACE_TILE_DISK", "1") not in ("0", "false", "no")


class DiskTiles:
    def __init__(self, traces_dir: Path, tmp_dir: Path):
        self.traces_dir = Path(traces_dir)
        self.tmp_dir = Path(tmp_dir)
        self.on = enabled()

    def path(self, trace_id: str, level: int, index: int, group: str | None, enc: str) -> Path:
        assert enc in ENCODINGS
        name = f"{trace_id}.tile.v{LOD_VERSION}-{TILE_FORMAT_VERSION}.{level}.{index}.{group or 'all'}.bin"
        return self.traces_dir / (name + (".gz" if enc == "gzip" else ""))

    def read(self, trace_id: str, level: int, index: int, group: str | None, enc: str) -> bytes | None:
        if not self.on:
            return None
        try:
            return self.path(trace_id, level, index, group, enc).read_bytes()
        except OSError:
            return None

    def write(self, trace_id: str, level: int, index: int, group: str | None, enc: str, data: bytes) -> None:
        """Best effort (a cache): a full disk or a removed trace just means the next read rebuilds."""
        if not self.on or not (self.traces_dir / f"{trace_id}.duckdb").exists():
            return
        # <token>.<pid>.tile: the store's sweep removes it if this process dies before the rename
        tmp = self.tmp_dir / f"t{secrets.token_hex(6)}.{os.getpid()}.tile"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path(trace_id, level, index, group, enc))
        except OSError:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
