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


# -- tracks and the JSON form of records (ingest and the live view name tracks the same way) ----
DEFAULT_TRACK_NAMES = {0: "thread {}", 1: "queue {}", 2: "engine {}", 3: "unit {}"}  # by lane; {} = tid
EVENT_KINDS = (COMPLETE, BEGIN, END, INSTANT, COUNTER)  # records that are events (the others name things)
_KIND_NAMES = {code: name for name, code in KINDS.items()}


def track_key(lane: int, device: int, pid: int, tid: int) -> tuple[int, int, int, int]:
    """What tells tracks apart: cpu and driver tracks belong to a process, the others do not."""
    return lane, pid if lane <= 1 else 0, device, tid


class TrackNaming:
    """Names of the track a record lands on (docs/formats.md, "Tracks").

    A track is named by its TRACK_NAME record, else "thread N" / "queue N" / "engine N" / "unit N"
    (N = tid, by lane); a counter track (lane "counter") by its counter's name. Its group is the
    device (its name in the metadata's `devices`, else "devN"), else for cpu and driver tracks the
    process (its PROCESS_NAME record, else "pid N"), else "host".
    """

    def __init__(self, devices: list | None = None):
        self.devices: dict[int, str] = {}
        self.processes: dict[int, str] = {}
        self.tracks: dict[tuple, str] = {}
        self.add_devices(devices or [])

    def add_devices(self, devices: list) -> None:
        """Device names from metadata: [{"id" or "index": N, "name"?: text}, ...]."""
        for d in devices:
            dev = d.get("id", d.get("index")) if isinstance(d, dict) else None
            if isinstance(dev, int):
                self.devices[dev] = str(d.get("name") or f"dev{dev}")

    def note(self, kind: int, lane: int, device: int, pid: int, tid: int, text: str) -> None:
        """Remember a TRACK_NAME or PROCESS_NAME record's text."""
        if kind == PROCESS_NAME:
            self.processes[pid] = text
        elif kind == TRACK_NAME:
            self.tracks[track_key(lane, device, pid, tid)] = text

    def device(self, device: int) -> str | None:
        return None if device == NO_DEVICE else self.devices.get(device, f"dev{device}")

    def group(self, lane: int, device: int, pid: int) -> str:
        dev = self.device(device)
        if dev is not None:
            return dev
        return self.processes.get(pid, f"pid {pid}") if lane <= 1 else "host"

    def name(self, lane: int, device: int, pid: int, tid: int, counter: str = "") -> tuple[str, bool]:
        """(the track's name, whether the trace gave it: a TRACK_NAME record or a counter's name)."""
        if lane == LANE_CODES["counter"]:
            return counter, True
        given = self.tracks.get(track_key(lane, device, pid, tid))
        return (given, True) if given else (DEFAULT_TRACK_NAMES[lane].format(tid), False)

    def title(self, lane: int, device: int, pid: int, tid: int, counter: str = "") -> str:
        """One text for the track: its given name, else "<group> <default name>" (the live view's `track`)."""
        name, given = self.name(lane, device, pid, tid, counter)
        return name if given else f"{self.group(lane, device, pid)} {name}"


def json_events(recs: np.ndarray, ts: np.ndarray, end: np.ndarray, names: list[str], tracks: list[str]) -> list[dict]:
    """Event records (kinds EVENT_KINDS, known lanes) as JSON-ready dicts, the live view's wire form
    (docs/tracing.md): {ts, dur, kind, name, lane, track, corr?, bytes?, value?}.

    `ts` and `end` are each record's start and end in the caller's ns (clock-mapped, relative);
    `names` and `tracks` are its name text and its track's title (TrackNaming.title).
    """
    values = counter_values(recs)
    kind, lane, flags = recs["kind"].tolist(), recs["lane"].tolist(), recs["flags"].tolist()
    corr, nbytes = recs["corr"].tolist(), recs["bytes"].tolist()
    ts, end = np.asarray(ts, np.int64).tolist(), np.asarray(end, np.int64).tolist()
    out = []
    for i in range(len(recs)):
        e = {"ts": ts[i], "dur": max(0, end[i] - ts[i]), "kind": _KIND_NAMES[kind[i]], "name": names[i],
             "lane": LANES[lane[i]], "track": tracks[i]}
        if flags[i] & FLAG_HAS_CORR:
            e["corr"] = corr[i]
        if flags[i] & FLAG_HAS_BYTES:
            e["bytes"] = nbytes[i]
        if kind[i] == COUNTER:
            e["value"] = float(values[i])
        out.append(e)
    return out
