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

from acceltrace.tiles import layout
from acceltrace.tiles.build import LOD_VERSION, TILE_BUCKETS_LOG2
from acceltrace.tiles.query import TILE_FORMAT_VERSION, LodInfo, build_pages, page_key

ENCODINGS = ("identity", "gzip")
PREBUILD_LEVELS = 3     # the coarsest levels: 1 + 2 + 4 tiles per group, what every first view shows
PREBUILD_MAX_TILES = 1200  # tile files (every depth page counts)
NAMES_IN_MEMORY_MAX = 200_000


def empty_sections(slices: int, instants: int, counters: int) -> frozenset[str]:
    """The tile sections a group with these row counts cannot have rows in (their queries are skipped)."""
    empty = set()
    if not slices:
        empty |= {"slices", "merged"}
    if not instants:
        empty.add("instants")
    if not counters:
        empty.add("counters")
    return frozenset(empty)


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

    def has(self, trace_id: str, level: int, index: int, group: str | None, enc: str) -> bool:
        """Whether the file is there (one stat: cheap enough for the event loop, unlike a read)."""
        return self.on and os.path.exists(self.path(trace_id, level, index, group, enc))

    def read(self, trace_id: str, level: int, index: int, group: str | None, enc: str) -> bytes | None:
        if not self.on:
            return None
        try:
            return self.path(trace_id, level, index, group, enc).read_bytes()
        except OSError:
            return None

    def write(self, trace_id: str, level: int, index: int, group: str | None, enc: str, data: bytes) -> bool:
        """Best effort (a cache): a full disk or a removed trace just means the next read rebuilds;
        False when nothing was kept."""
        if not self.on or not (self.traces_dir / f"{trace_id}.duckdb").exists():
            return False
        # <token>.<pid>.tile: the store's sweep removes it if this process dies before the rename
        tmp = self.tmp_dir / f"t{secrets.token_hex(6)}.{os.getpid()}.tile"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            final = self.path(trace_id, level, index, group, enc)
            os.replace(tmp, final)
            if not (self.traces_dir / f"{trace_id}.duckdb").exists():  # removed meanwhile: no orphan
                final.unlink(missing_ok=True)
                return False
            return True
        except OSError:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return False


def prebuild(store, trace_id: str, levels: int = PREBUILD_LEVELS, max_tiles: int = PREBUILD_MAX_TILES) -> int:
    """Build the coarsest `levels` levels of every group into the disk cache (what the first viewer
    of a trace asks for first), every depth page of each; the tiles already there are skipped.
    Returns the tile files written. The bytes are the route's: the same build_pages, the same
    skipped sections, the same names."""
    disk = DiskTiles(store.traces_dir, store.tmp_dir)
    if not disk.on:
        return 0
    con = store.connect(trace_id, sides=())
    try:
        con.execute("SET threads = 1")
        try:
            info = LodInfo.load(con)
        except Exception:  # a trace without LOD tables has no tiles to prebuild
            return 0
        counts = layout.group_counts(con)
        depths = layout.group_depths(con)
        names = layout.name_dictionary(con, NAMES_IN_MEMORY_MAX)
        written = 0
        for level in range(info.max_level, max(-1, info.max_level - levels), -1):
            n_tiles = max(1, -(-max(1, info.duration_ns) // (1 << (level + TILE_BUCKETS_LOG2))))
            for grp in sorted(counts):
                for index in range(n_tiles):
                    if written >= max_tiles:
                        return written
                    group = f"g{grp}"
                    if disk.path(trace_id, level, index, group, "identity").exists():
                        continue
                    pages = build_pages(con, info, level, index, grp, group, empty_sections(*counts[grp]), names,
                                        depths.get(grp, 0))
                    for page, body in pages.items():
                        if not disk.write(trace_id, level, index, page_key(group, page), "identity", body):
                            return written  # removed meanwhile (or the disk is full): stop
                        written += 1
        return written
    finally:
        con.close()
