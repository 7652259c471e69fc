"""The shared-memory ring between one producer thread and the daemon (docs/formats.md, "Ring").

Single producer, single consumer. The producer writes 64-byte records at slot
write_idx % capacity and then publishes write_idx; the daemon copies [read_idx, write_idx)
and publishes read_idx. In discard mode the producer never overtakes read_idx + capacity
and counts each record it could not write in `lost`; in ring mode it always writes, and
the daemon counts what was overwritten before it could read it. Indices only grow (64-bit).
"""

from __future__ import annotations

import struct

import numpy as np

from acceltrace.formats.record import RECORD_SIZE

RING_MAGIC = 0x474E5241  # "ARNG"
RING_VERSION = 1
DATA_OFFSET = 4096  # records start on their own page
# header fields: (name, byte offset, struct code); the hot indices sit on separate cache lines
INFO = struct.Struct("<IIIIIIII")  # magic, version, record_size, capacity, mode, pid, tid, flags
WRITE_OFF, READ_OFF, LOST_OFF = 64, 128, 192
MODE_DISCARD, MODE_RING = 0, 1
MODES = {"discard": MODE_DISCARD, "ring": MODE_RING}
FLAG_CLOSED = 1  # the producer closed this ring cleanly


def ring_bytes(capacity: int) -> int:
    return DATA_OFFSET + capacity * RECORD_SIZE


def init_ring(mem, capacity: int, mode: int, pid: int, tid: int) -> None:
    """Write a fresh header into `mem` (the daemon does this before handing the ring out)."""
    if capacity & (capacity - 1):
        raise ValueError("ring capacity must be a power of two")
    INFO.pack_into(mem, 0, RING_MAGIC, RING_VERSION, RECORD_SIZE, capacity, mode, pid, tid, 0)
    struct.pack_into("<Q", mem, WRITE_OFF, 0)
    struct.pack_into("<Q", mem, READ_OFF, 0)
    struct.pack_into("<Q", mem, LOST_OFF, 0)


def read_info(mem) -> dict:
    magic, version, rsize, cap, mode, pid, tid, flags = INFO.unpack_from(mem, 0)
    return {"magic": magic, "version": version, "record_size": rsize, "capacity": cap, "mode": mode,
            "pid": pid, "tid": tid, "flags": flags}


def index_view(mem) -> np.ndarray:
    """uint64 view of the header: [WRITE_OFF//8] write_idx, [READ_OFF//8] read_idx, [LOST_OFF//8] lost.

    Assigning one element is a single aligned 8-byte store, so the other side never sees a
    torn index.
    """
    return np.frombuffer(mem, dtype="<u8", count=DATA_OFFSET // 8)


W, R, L = WRITE_OFF // 8, READ_OFF // 8, LOST_OFF // 8
