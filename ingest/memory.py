"""The memory an ingest allocates: plain 4 KB pages, no transparent huge pages (docs/ingest.md, step 3).

Arrow's default pool (mimalloc, in the pyarrow wheels) reserves 1 GB arenas marked MADV_HUGEPAGE, and
numpy marks every array of 4 MB or more the same way. On a kernel whose THP setting is `madvise` (this
machine's), the first touch of such a 2 MB range has the kernel find a huge page (compacting memory when
none is free) and zero all 2 MB of it, and again each time the allocator hands freed pages back and
takes them anew. Profiled at 830 MB of Kineto JSON (perf, cpu-clock), the kernel
zeroing pages was the largest single symbol, 11.5 % of the ingest's CPU; with Arrow's system pool (glibc
malloc) and numpy's hint off, 1.7 %. Six alternations at 830 MB: median 6.02 -> 5.55 s, 9.74 -> 8.73
CPU-s, system time 2.16 -> 1.38 s, peak 1,280 -> 1,158 MB; Nsight and native inputs gain 8-12 %, real
Kineto traces of 30-90 MB are level (docs/performance.md, sixteenth stop).

A process-wide setting, made once, by the first TraceBuilder of a process (every ingest path makes
one). Allocations made before keep their pool; a user's own choice, ARROW_DEFAULT_MEMORY_POOL or
NUMPY_MADVISE_HUGEPAGE in the environment, is left alone.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pyarrow as pa


@functools.cache  # once a process (two threads at once would only set the same values twice)
def use_small_pages() -> None:
    """Arrow's system pool and numpy's huge-page hint off, for this process."""
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        pa.set_memory_pool(pa.system_memory_pool())
    if "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
        core = getattr(np, "_core", None) or getattr(np, "core", None)  # numpy 2 / 1 (a private switch)
        setter = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
        if setter is not None:
            setter(False)
