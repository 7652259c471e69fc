"""The .actr raw counter dump (docs/counters.md, "The .actr format"): its layout.

A file is a 16-byte file header followed by chunks, each `tag(4) length(u32) crc32(u32)`
and a payload, all little-endian:

  HEAD  (first, once)  UTF-8 JSON: devices, counters (name, unit, bits, kind, group, ...), groups
  SMPL  (any number)   u32 group, u32 K values, u32 N samples, u32 0; then N records of
                       i64 host_ns, i64 dev_ticks, u64 enabled_ns, u64 running_ns, K x u64 raw
  BUFS  (any number)   buffered samples (format 1.1): one drain of a device-side PM sampler's ring:
                       u32 group, u32 K, u32 N, u32 0, i64 seq0, i64 dropped, i64 sync_host_ns,
                       i64 sync_dev_ticks, i64 period_ticks; then N records of i64 dev_ticks, K x u64 raw
  NOTE  (any number)   UTF-8 JSON: something the collector wants the reader to know
  TAIL  (last, once)   UTF-8 JSON: totals (samples, ticks, missed deadlines) and how collection ended

The writer appends whole chunks, so a collector killed mid-write leaves a file whose
prefix is valid; the reader takes every whole sample of a cut-off last chunk and says so.
Raw values are written exactly as the registers read (no wraparound fix, no scaling):
that is ingest's job (ingest/native/actr.py), where it can be checked against the header.
"""

from __future__ import annotations

import struct

import numpy as np

MAGIC = b"\x89ACTR\r\n\x1a"  # 8 bytes; the high byte and CR LF catch text-mode mangling
VERSION = (1, 1)  # 1.1 added BUFS (a 1.0 reader skips it as an unknown tag; 1.0 files read as before)
FILE_HEADER = struct.Struct("<8sHHI")  # magic, major, minor, flags
CHUNK_HEADER = struct.Struct("<4sII")  # tag, payload length, crc32(payload)
SMPL_HEADER = struct.Struct("<IIII")  # group id, values per record, records, reserved
# group, K, N, reserved, seq of the first sample, samples the device dropped since the previous
# BUFS of the group, one (host ns, device ticks) clock pair read at the drain, sample period in ticks
BUFS_HEADER = struct.Struct("<IIIIqqqqq")
RECORD_FIXED_BYTES = 32
MAX_CHUNK_BYTES = 256 << 20  # a larger length field is corruption, not data
KINDS = ("cumulative", "gauge")
NO_DEV_TICKS = -1  # dev_ticks of a sample whose group has no device clock


class ActrFormatError(Exception):
    """The bytes are not a readable .actr file; says where and what was expected."""

    def __init__(self, message: str, offset: int | None = None):
        self.offset = offset
        self.detail = message
        super().__init__(f"byte {offset}: {message}" if offset is not None else message)


def record_dtype(n_values: int) -> np.dtype:
    """The numpy dtype of one SMPL record with n_values raw values (unaligned, packed)."""
    return np.dtype(
        [
            ("host_ns", "<i8"),
            ("dev_ticks", "<i8"),
            ("enabled_ns", "<u8"),
            ("running_ns", "<u8"),
            ("raw", "<u8", (n_values,)),
        ]
    )


def buffered_dtype(n_values: int) -> np.dtype:
    """The numpy dtype of one BUFS record: the device's timestamp and n_values raw values."""
    return np.dtype([("dev_ticks", "<i8"), ("raw", "<u8", (n_values,))])


def validate_header(header: dict) -> None:
    """Refuse a header the reader could not interpret (raises ValueError naming the field)."""
    if not isinstance(header, dict):
        raise ValueError("header must be a JSON object")
    counters = header.get("counters")
    groups = header.get("groups")
    if not isinstance(counters, list) or not counters:
        raise ValueError("header.counters must be a non-empty list")
    if not isinstance(groups, list) or not groups:
        raise ValueError("header.groups must be a non-empty list")
    devices = header.get("devices", [])
    if not isinstance(devices, list):
        raise ValueError("header.devices must be a list")
    for i, d in enumerate(devices):
        if not (isinstance(d, dict) and isinstance(d.get("name"), str)):
            raise ValueError(f"header.devices[{i}] must be an object with a string 'name'")
        if not isinstance(d.get("clock_hz") or 0, (int, float)) or not isinstance(d.get("links") or {}, dict):
            raise ValueError(f"header.devices[{i}]: clock_hz must be a number and links an object")
        if not all(isinstance(v, dict) for v in (d.get("links") or {}).values()):
            raise ValueError(f"header.devices[{i}].links: each link must be an object")
    names = set()
    for i, c in enumerate(counters):
        if not isinstance(c, dict):
            raise ValueError(f"header.counters[{i}] must be an object")
        for key in ("device", "role", "pcie_bytes"):
            if c.get(key) is not None and not isinstance(c[key], str):
                raise ValueError(f"header.counters[{i}].{key} is {c[key]!r}; expected a string")
        for key in ("name", "unit", "bits", "kind", "group"):
            if key not in c:
                raise ValueError(f"header.counters[{i}] lacks '{key}'")
        for key in ("name", "unit"):
            if not isinstance(c[key], str):
                raise ValueError(f"header.counters[{i}].{key} is {c[key]!r}; expected a string")
        for key in ("scale", "full_scale"):
            v = c.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and 0 < abs(v) <= 1e30):
                # values are raw * scale or rates * scale: a huge scale would store inf, which no
                # JSON answer can carry
                raise ValueError(f"header.counters[{i}].{key} is {v!r}; expected a number, 0 < |x| <= 1e30")
        if not _is_int(c["group"]):
            raise ValueError(f"header.counters[{i}].group is {c['group']!r}; expected a group id")
        if c["kind"] not in KINDS:
            raise ValueError(f"header.counters[{i}].kind is {c['kind']!r}; expected one of {KINDS}")
        if not (isinstance(c["bits"], int) and 1 <= c["bits"] <= 64):
            raise ValueError(f"header.counters[{i}].bits is {c['bits']!r}; expected an integer 1..64")
        if c["name"] in names:
            raise ValueError(f"header.counters[{i}]: duplicate counter name {c['name']!r}")
        names.add(c["name"])
    ids = set()
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or "id" not in g or "counters" not in g:
            raise ValueError(f"header.groups[{i}] must be an object with 'id' and 'counters'")
        if not _is_int(g["id"]) or not isinstance(g["counters"], list):
            raise ValueError(f"header.groups[{i}] needs an integer 'id' (0..2^32-1) and a list of counter names")
        if g["id"] in ids:
            raise ValueError(f"header.groups[{i}]: duplicate group id {g['id']}")
        ids.add(g["id"])
        b = g.get("buffered")
        if b is not None and not (isinstance(b, dict) and isinstance(b.get("clock_hz"), (int, float))
                                  and b["clock_hz"] > 0 and _is_int(b.get("period_ticks")) and b["period_ticks"] > 0):
            raise ValueError(f"header.groups[{i}].buffered needs clock_hz > 0 and an integer period_ticks > 0")
        for n in g["counters"]:
            if not isinstance(n, str) or n not in names:
                raise ValueError(f"header.groups[{i}] names unknown counter {n!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 32
