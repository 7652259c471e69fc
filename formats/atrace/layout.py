"""The .atrace on-disk layout: file header, chunk header, chunk types and payload records.

docs/formats.md is the specification; the writer (writer.py), the reader (reader.py) and the
follower of a growing file (follower.py) all take their constants from here.
"""

from __future__ import annotations

import struct

import numpy as np

MAGIC = b"\x89ATRACE\n"
FORMAT_VERSION = (1, 0)  # (major, minor): readers refuse a newer major
FILE_HEADER = struct.Struct("<8sHHI")  # magic, major, minor, reserved
CHUNK_HEADER = struct.Struct("<IIII")  # type, stream, payload length (multiple of 8), crc32(payload)
MAX_CHUNK_BYTES = 256 << 20

HEADER, STRINGS, EVENTS, CLOCK_SYNC, METADATA, TRAILER, LOSS = 1, 2, 3, 4, 5, 6, 7
CHUNK_NAMES = {HEADER: "header", STRINGS: "strings", EVENTS: "events", CLOCK_SYNC: "clock-sync",
               METADATA: "metadata", TRAILER: "trailer", LOSS: "loss"}

SYNC_DTYPE = np.dtype([("domain", "<u4"), ("reserved", "<u4"), ("host_ns", "<i8"), ("dev_ticks", "<i8")])
LOSS_DTYPE = np.dtype([("stream", "<u4"), ("reserved", "<u4"), ("lost", "<u8")])
STRING_ENTRY = struct.Struct("<II")  # id, utf-8 length; then the bytes

class AtraceError(ValueError):
    """An .atrace file that cannot be read; `offset` is the byte where the problem is."""

    def __init__(self, message: str, offset: int | None = None):
        self.offset = offset
        self.detail = message
        super().__init__(f"byte {offset}: {message}" if offset is not None else message)
