"""The content hash of an input: what the catalog's `content_hash` holds, so that the same bytes are
stored once (an upload or an ingest of content already there answers with that trace).

BLAKE3 where the `blake3` package is installed (a project dependency, with wheels for the usual
platforms): "blake3:" and 64 hex digits. It hashes ~7 GB/s on one core here, SHA-256 ~1.9 GB/s (with
the CPU's SHA instructions): at 830 MB the hash beside the ingest took 0.44-0.49 s of CPU from a two-core
build that is CPU-bound, 0.14-0.15 s now (docs/performance.md, eighteenth stop). Without the package,
SHA-256 as plain hex: the form every store written before BLAKE3 holds, so such a store still finds
its duplicates. Both are cryptographic, so no one can craft an upload that is taken for another
user's trace. Identical bytes hashed the two ways do not match: at worst a trace is stored twice.
Both release the GIL while they hash.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

try:
    import blake3 as _blake3
except ImportError:  # pragma: no cover - depends on the install; tested by setting it to None
    _blake3 = None

READ_BYTES = 1 << 20


class Hasher:
    """An incremental content hash: update(bytes) as the input arrives, then hexdigest()."""

    def __init__(self):
        self._h = _blake3.blake3() if _blake3 is not None else hashlib.sha256()
        self._tag = "blake3:" if _blake3 is not None else ""

    def update(self, data) -> None:
        self._h.update(data)

    def update_file(self, path: Path) -> None:
        """A whole file, read into one reused buffer. Not mapped (blake3's update_mmap): the mapped pages
        count in the process's resident size, all 2.5 GB of a 2.5 GB file by the end of the hash."""
        buf = bytearray(READ_BYTES)
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                self._h.update(view[:n])

    def hexdigest(self) -> str:
        return self._tag + self._h.hexdigest()


def of_paths(paths: list[Path]) -> str:
    """The content hash of the inputs in turn (a folder: its files in name order)."""
    h = Hasher()
    for p in paths:
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            h.update_file(f)
    return h.hexdigest()
