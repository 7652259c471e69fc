"""The one event record layout (docs/formats.md, "Event record"), shared by rings, .atrace and the C client.

Every event is a fixed 64-byte little-endian record, so a ring slot, an .atrace event
chunk and a numpy structured array are the same bytes: encode with `RECORD.pack`, decode
a whole chunk with `np.frombuffer(payload, RECORD_DTYPE)`.
"""

from __future__ import annotations

import struct

import numpy as np

RECORD_VERSION = (1, 0)
RECORD_SIZE = 64

# kind
COMPLETE, BEGIN, END, INSTANT, COUNTER, TRACK_NAME, PROCESS_NAME = 1, 2, 3, 4, 5, 6, 7
KINDS = {"complete": COMPLETE, "begin": BEGIN, "end": END, "instant": INSTANT, "counter": COUNTER,
         "track_name": TRACK_NAME, "process_name": PROCESS_NAME}

# lane (index = code); matches store.schema.LANES
LANES = ("cpu", "driver", "pcie", "eu", "counter")
LANE_CODES = {n: i for i, n in enumerate(LANES)}

# direction (0 = none)
DIRECTIONS = (None, "h2d", "d2h", "d2d", "p2p")
DIRECTION_CODES = {n: i for i, n in enumerate(DIRECTIONS) if n}

# memory kind of the host side / buffer (0 = none); only pageable and pinned reach slices.host_mem
MEM_KINDS = (None, "pageable", "pinned", "device", "managed")
MEM_CODES = {n: i for i, n in enumerate(MEM_KINDS) if n}

# flow kind carried by a record's explicit flow id (0 = none); matches store.schema.FLOW_KINDS
FLOW_KINDS = (None, "submit", "launch", "dma", "exec", "dependency", "other")
FLOW_CODES = {n: i for i, n in enumerate(FLOW_KINDS) if n}

# flags
FLAG_FLOW_OUT = 1  # this event is the source of flow `flow`
FLAG_FLOW_IN = 2  # this event is the destination of flow `flow`
FLAG_HAS_BYTES = 4  # `bytes` holds a value (0 is a valid size)
FLAG_HAS_CORR = 8  # `corr` holds a correlation id

NO_DEVICE = 255
HOST_CLOCK = 0  # clock domain 0: host CLOCK_MONOTONIC ns (or virtual ns for simulated runs)

# One definition; the struct format and the numpy dtype are derived from it.
FIELDS = (
    ("kind", "u1", "B"),
    ("lane", "u1", "B"),
    ("clock", "u1", "B"),
    ("direction", "u1", "B"),
    ("mem", "u1", "B"),
    ("flow_kind", "u1", "B"),
    ("flags", "u1", "B"),
    ("device", "u1", "B"),
    ("name", "<u4", "I"),
    ("cat", "<u4", "I"),
    ("pid", "<u4", "I"),
    ("tid", "<u4", "I"),
    ("ts", "<i8", "q"),
    ("dur", "<i8", "q"),  # COUNTER records: the value as float64 bits (see `value` view)
    ("corr", "<u8", "Q"),
    ("bytes", "<u8", "Q"),
    ("flow", "<u4", "I"),
    ("args", "<u4", "I"),
)
RECORD = struct.Struct("<" + "".join(f[2] for f in FIELDS))
RECORD_DTYPE = np.dtype([(f[0], f[1]) for f in FIELDS])
assert RECORD.size == RECORD_SIZE and RECORD_DTYPE.itemsize == RECORD_SIZE

# Offsets, for code that writes a few fields in place (clients, C header cross-check).
OFFSETS = {name: RECORD_DTYPE.fields[name][1] for name, _, _ in FIELDS}


def encode(
    kind: int,
    name: int,
    ts: int,
    dur: int = 0,
    *,
    lane: int = 0,
    clock: int = HOST_CLOCK,
    direction: int = 0,
    mem: int = 0,
    flow_kind: int = 0,
    flags: int = 0,
    device: int = NO_DEVICE,
    cat: int = 0,
    pid: int = 0,
    tid: int = 0,
    corr: int = 0,
    nbytes: int = 0,
    flow: int = 0,
    args: int = 0,
) -> bytes:
    """One record as bytes (convenient, not the hot path: clients pack pre-built prefixes)."""
    return RECORD.pack(kind, lane, clock, direction, mem, flow_kind, flags, device,
                       name, cat, pid, tid, ts, dur, corr, nbytes, flow, args)


def encode_counter(name: int, ts: int, value: float, **kw) -> bytes:
    """A COUNTER record: the value travels as the float64 bit pattern in `dur`."""
    (bits,) = struct.unpack("<q", struct.pack("<d", float(value)))
    return encode(COUNTER, name, ts, bits, lane=LANE_CODES["counter"], **kw)


def decode(buf: bytes | memoryview) -> np.ndarray:
    """Records from a buffer whose length is a multiple of RECORD_SIZE (zero-copy view)."""
    if len(buf) % RECORD_SIZE:
        raise ValueError(f"record buffer of {len(buf)} bytes is not a multiple of {RECORD_SIZE}")
    return np.frombuffer(buf, dtype=RECORD_DTYPE)


def counter_values(recs: np.ndarray) -> np.ndarray:
    """The float64 values of COUNTER records (reinterpreting `dur`)."""
    return np.ascontiguousarray(recs["dur"]).view("<f8")
