"""The memory an ingest allocates: plain 4 KB pages, no transparent huge pages (docs/ingest.md, step 3);
and freed heap kept for reuse while a trace is built.

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

**The freed heap kept** (kept_heap: pipeline.ingest_one, for a small build, from its builder to its end).
glibc maps every block above its mmap threshold (128 kB, rising to at most 32 MB as such blocks are
freed) on its own and unmaps it when it is freed, and trims the heap's free top; the next block of that
size is new memory again, which the kernel faults in a 4 kB page at a time and zeroes. A build frees and
takes such blocks all the time (read blocks, chunk columns, Arrow takes, DuckDB's buffers): the system
time was 22-35 % of an ingest's CPU, most of it page faults (MTIA: 134 k faults, 381 ms of system time in
710 ms). Within a build, blocks up to 1 GB come from the heap and its top is not trimmed, so a freed
block is reused where it lies (MTIA 106 k faults, viewable 0.670 -> 0.617 s; docs/performance.md,
twenty-sixth stop). Only a small build (Chrome JSON up to 256 MB, pipeline._small_build) keeps it: blocks
held in the heap raise the peak (60-100 MB there), and a big build's peak is what its memory bound is
about (the Nsight bench's 2.5 M slices went 1.36 -> 1.64 GB for 5 % less time). When the last build of
the process ends, the thresholds go to what glibc's own rule reaches (32 MB, trim at 64 MB) and the
heap's free pages go back to the system (malloc_trim), so a server or fleet worker that built a trace
holds no more than before. glibc only; a user's MALLOC_* or glibc.malloc tunables are left alone.
"""

from __future__ import annotations

import functools
import os
import threading
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from acceltrace.store import heap


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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
KEPT_MMAP_THRESHOLD = 1 << 30  # within a build: blocks up to this from the heap, reused once freed
KEPT_TRIM_THRESHOLD = (1 << 31) - 1  # ... and its free top not handed back mid-build (mallopt takes an int)
AFTER_MMAP_THRESHOLD = 32 << 20  # after: where glibc's own rule tops out (DEFAULT_MMAP_THRESHOLD_MAX)
AFTER_TRIM_THRESHOLD = 64 << 20  # ... and its trim threshold then (twice the mmap threshold)

_lock = threading.Lock()
_builds = 0  # builds under way in this process (the server and a fleet worker may run several)


def _libc():
    """glibc's malloc tuning, or None: another C library, or the user tunes it (MALLOC_*, glibc.malloc)."""
    if any(k.startswith("MALLOC_") for k in os.environ) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return None
    return heap.glibc()


@contextmanager
def kept_heap():
    """Freed heap memory kept for reuse while the body builds a trace; handed back to the system when the
    last such body of the process ends."""
    global _builds
    libc = _libc()
    if libc is None:
        yield
        return
    with _lock:
        _builds += 1
        if _builds == 1:
            libc.mallopt(M_MMAP_THRESHOLD, KEPT_MMAP_THRESHOLD)
            libc.mallopt(M_TRIM_THRESHOLD, KEPT_TRIM_THRESHOLD)
    try:
        yield
    finally:
        with _lock:
            _builds -= 1
            if _builds == 0:
                libc.mallopt(M_MMAP_THRESHOLD, AFTER_MMAP_THRESHOLD)
                libc.mallopt(M_TRIM_THRESHOLD, AFTER_TRIM_THRESHOLD)
                libc.malloc_trim(0)
