"""The process's freed heap handed back to the system (glibc's malloc_trim), for any part that frees a lot.

glibc keeps freed blocks below its mmap threshold (up to 32 MB) in the heap, and trims only the heap's free
top: after a step that allocated and freed many such blocks (an ingest's chunks, the what-if graph's build)
the process keeps their pages. ingest/memory.py tunes the thresholds around a build; this is only the trim.
"""

from __future__ import annotations

import ctypes
import functools
import platform


@functools.cache
def glibc():
    """glibc (mallopt, malloc_trim), or None: another C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt.argtypes, libc.malloc_trim.argtypes = [ctypes.c_int, ctypes.c_int], [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


def hand_back() -> None:
    """The heap's free pages back to the system now (a process that lives on after a big step)."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
