"""The .actr raw counter dump (docs/counters.md, "The .actr format"): writer and reader.

A file is a 16-byte file header followed by chunks, each `tag(4) length(u32) crc32(u32)`
and a payload, all little-endian:

  HEAD  (first, once)  UTF-8 JSON: devices, counters (name, unit, bits, kind, group, ...), groups
  SMPL  (any number)   u32 group, u32 K values, u32 N samples, u32 0; then N records of
                       i64 host_ns, i64 dev_ticks, u64 enabled_ns, u64 running_ns, K x u64 raw
  NOTE  (any number)   UTF-8 JSON: something the collector wants the reader to know
  TAIL  (last, once)   UTF-8 JSON: totals (samples, ticks, missed deadlines) and how collection ended

The writer appends whole chunks, so a collector killed mid-write leaves a file whose
prefix is valid; the reader takes every whole sample of a cut-off last chunk and says so.
Raw values are written exactly as the registers read (no wraparound fix, no scaling):
that is ingest's job (ingest/actr.py), where it can be checked against the header.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

MAGIC = b"\x89ACTR\r\n\x1a"  # 8 bytes; the high byte and CR LF catch text-mode mangling
VERSION = (1, 0)
FILE_HEADER = struct.Struct("<8sHHI")  # magic, major, minor, flags
CHUNK_HEADER = struct.Struct("<4sII")  # tag, payload length, crc32(payload)
SMPL_HEADER = struct.Struct("<IIII")  # group id, values per record, records, reserved
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
        for key in ("device", "role"):
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
        for n in g["counters"]:
            if not isinstance(n, str) or n not in names:
                raise ValueError(f"header.groups[{i}] names unknown counter {n!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 32


class ActrWriter:
    """Appends chunks to a new .actr file. Not thread-safe: one sampler owns it.

    Samples are packed per group into a bytearray (struct.pack_into, the cheapest per-sample
    path in CPython) and written as one SMPL chunk when `flush_records` of a group are
    buffered, or on flush()/close().
    """

    def __init__(self, path: str | os.PathLike, header: dict, flush_records: int = 1024):
        validate_header(header)
        self.path = os.fspath(path)
        self.header = header
        self._f: BinaryIO = open(self.path, "wb")
        self._f.write(FILE_HEADER.pack(MAGIC, VERSION[0], VERSION[1], 0))
        self._chunk(b"HEAD", json.dumps(header, sort_keys=True).encode())
        self._f.flush()
        self.flush_records = max(1, int(flush_records))
        self._structs: dict[int, struct.Struct] = {}
        self._bufs: dict[int, bytearray] = {}
        self._fill: dict[int, int] = {}
        self._k: dict[int, int] = {}
        for g in header["groups"]:
            k = len(g["counters"])
            st = struct.Struct(f"<qqQQ{k}Q")
            self._structs[g["id"]] = st
            self._bufs[g["id"]] = bytearray(st.size * self.flush_records)
            self._fill[g["id"]] = 0
            self._k[g["id"]] = k
        self.samples_written = 0
        self.closed = False

    def _chunk(self, tag: bytes, payload) -> None:
        self._f.write(CHUNK_HEADER.pack(tag, len(payload), zlib.crc32(payload)))
        self._f.write(payload)

    def append(self, group: int, host_ns: int, dev_ticks: int, enabled_ns: int, running_ns: int, raw) -> None:
        """One sample of one group; raw: the group's register values (ints 0..2**64-1) in header order.

        Raises ValueError (nothing written) when a value does not fit its field.
        """
        st = self._structs[group]
        i = self._fill[group]
        try:
            st.pack_into(self._bufs[group], i * st.size, host_ns, dev_ticks, enabled_ns, running_ns, *raw)
        except struct.error as e:
            raise ValueError(f"sample for group {group} does not fit the record ({e}); "
                             f"expected {self._k[group]} unsigned 64-bit values") from None
        i += 1
        self._fill[group] = i
        if i == self.flush_records:
            self._write_group(group)

    def append_many(self, group: int, host_ns, dev_ticks, enabled_ns, running_ns, raw) -> None:
        """Many samples of one group at once (arrays of equal length; raw shaped (N, K))."""
        self._write_group(group)
        n = len(host_ns)
        if n == 0:
            return
        k = self._k[group]
        arr = np.zeros(n, dtype=record_dtype(k))
        arr["host_ns"], arr["dev_ticks"] = host_ns, dev_ticks
        arr["enabled_ns"], arr["running_ns"] = enabled_ns, running_ns
        arr["raw"] = np.asarray(raw, dtype=np.uint64).reshape(n, k)
        step = self.flush_records
        for s in range(0, n, step):
            self._write_records(group, arr[s : s + step])

    def _write_group(self, group: int) -> None:
        n = self._fill[group]
        if n:
            st = self._structs[group]
            self._write_payload(group, n, memoryview(self._bufs[group])[: n * st.size])
            self._fill[group] = 0

    def _write_records(self, group: int, recs: np.ndarray) -> None:
        self._write_payload(group, len(recs), recs.tobytes())

    def _write_payload(self, group: int, n: int, body) -> None:
        payload = SMPL_HEADER.pack(group, self._k[group], n, 0) + bytes(body)
        self._chunk(b"SMPL", payload)
        self.samples_written += n

    def note(self, obj: dict) -> None:
        """A NOTE chunk (e.g. a source that could not open some counters), written at once."""
        self.flush()
        self._chunk(b"NOTE", json.dumps(obj, sort_keys=True).encode())
        self._f.flush()

    def flush(self) -> None:
        """Write every buffered sample as chunks and hand them to the OS."""
        for g in self._bufs:
            self._write_group(g)
        self._f.flush()

    def close(self, tail: dict | None = None) -> None:
        """Flush, write the TAIL chunk (totals, how collection ended) and close; idempotent."""
        if self.closed:
            return
        self.flush()
        t = dict(tail or {})
        t.setdefault("samples", self.samples_written)
        self._chunk(b"TAIL", json.dumps(t, sort_keys=True).encode())
        self._f.flush()
        try:
            os.fsync(self._f.fileno())
        except OSError:
            pass
        self._f.close()
        self.closed = True


@dataclass
class ActrData:
    """A read .actr file: its header, every group's samples, notes, tail and what went wrong."""

    header: dict
    version: tuple[int, int]
    samples: dict[int, np.ndarray]  # group id -> record array (record_dtype), in file order
    notes: list[dict] = field(default_factory=list)
    tail: dict | None = None
    warnings: list[tuple[int, str, int]] = field(default_factory=list)  # (offset, message, samples dropped)
    truncated: bool = False

    def group(self, gid: int) -> dict:
        for g in self.header["groups"]:
            if g["id"] == gid:
                return g
        raise KeyError(gid)

    @property
    def counters(self) -> dict[str, dict]:
        return {c["name"]: c for c in self.header["counters"]}


def sniff(head: bytes) -> bool:
    return head[:8] == MAGIC


def read_actr(f: BinaryIO) -> ActrData:
    """Read a whole .actr stream. Raises ActrFormatError for what cannot be read at all.

    Damage after the header does not raise: a chunk whose checksum fails is skipped and
    reported with its offset; a file cut short keeps every whole sample before the cut.
    Reads only with read(n), so it does not depend on where a read happens to end.
    """
    head = _read_exact(f, FILE_HEADER.size)
    if len(head) < FILE_HEADER.size or head[:8] != MAGIC:
        raise ActrFormatError(f"not an .actr file (expected the magic bytes {MAGIC!r})", 0)
    _, major, minor, _flags = FILE_HEADER.unpack(head)
    if major > VERSION[0]:
        raise ActrFormatError(
            f"written in .actr format {major}.{minor}, newer than this reader ({VERSION[0]}.x); "
            "upgrade acceltrace to read it", 8)
    if major < 1:
        raise ActrFormatError(f"unknown .actr format version {major}.{minor}", 8)
    offset = FILE_HEADER.size
    header = None
    parts: dict[int, list[np.ndarray]] = {}
    dtypes: dict[int, np.dtype] = {}
    data = ActrData(header={}, version=(major, minor), samples={})
    while True:
        ch = _read_exact(f, CHUNK_HEADER.size)
        if not ch:
            break
        if len(ch) < CHUNK_HEADER.size:
            data.truncated = True
            data.warnings.append((offset, "file cut short inside a chunk header; the rest is lost", 0))
            break
        tag, length, crc = CHUNK_HEADER.unpack(ch)
        if length > MAX_CHUNK_BYTES or not tag.isalpha():
            if header is None:
                raise ActrFormatError(f"chunk header is damaged (tag {tag!r}, length {length})", offset)
            data.warnings.append((offset, f"damaged chunk header (tag {tag!r}, length {length}); stopped reading", 0))
            data.truncated = True
            break
        payload = _read_exact(f, length)
        body_at = offset + CHUNK_HEADER.size
        if header is None:
            if tag != b"HEAD":
                raise ActrFormatError(f"expected the HEAD chunk first, found {tag!r}", offset)
            if len(payload) < length or zlib.crc32(payload) != crc:
                raise ActrFormatError("the HEAD chunk is cut short or fails its checksum", offset)
            try:
                header = json.loads(payload)
                validate_header(header)
            except (ValueError, UnicodeDecodeError) as e:
                raise ActrFormatError(f"the HEAD chunk is not a valid counter description: {e}", body_at) from None
            data.header = header
            for g in header["groups"]:
                dtypes[g["id"]] = record_dtype(len(g["counters"]))
                parts[g["id"]] = []
        elif len(payload) < length:
            data.truncated = True
            if tag == b"SMPL":
                _take_partial(payload, dtypes, parts, data, offset)
            else:
                data.warnings.append((offset, f"file cut short inside a {tag.decode()} chunk", 0))
            break
        elif zlib.crc32(payload) != crc:
            dropped = _claimed_records(payload, dtypes)
            held = f" (its {dropped} samples lost)" if dropped else ""
            data.warnings.append((offset, f"{tag.decode()} chunk fails its checksum; skipped{held}", dropped))
        elif tag == b"SMPL":
            err = _take_smpl(payload, dtypes, parts)
            if err:
                data.warnings.append((offset, err, _claimed_records(payload, dtypes)))
        elif tag in (b"NOTE", b"TAIL"):
            try:
                obj = json.loads(payload)
            except ValueError:
                data.warnings.append((offset, f"{tag.decode()} chunk is not JSON; skipped", 0))
            else:
                if tag == b"NOTE":
                    data.notes.append(obj)
                else:
                    data.tail = obj
        elif tag == b"HEAD":
            data.warnings.append((offset, "a second HEAD chunk; ignored", 0))
        # other tags: a newer minor version's additions, skipped by design
        offset = body_at + length
    if header is None:
        raise ActrFormatError("file ends before its HEAD chunk", offset)
    if data.tail is None and not data.truncated:
        data.truncated = True
        data.warnings.append((offset, "no TAIL chunk: the collector did not finish (crash or kill); "
                                      "samples up to here are kept", 0))
    for gid, lst in parts.items():
        data.samples[gid] = np.concatenate(lst) if lst else np.zeros(0, dtype=dtypes[gid])
    return data


def read_actr_path(path: str | os.PathLike) -> ActrData:
    with open(path, "rb") as f:
        return read_actr(f)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    parts = []
    while n > 0:
        b = f.read(n)
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _take_smpl(payload: bytes, dtypes: dict, parts: dict) -> str | None:
    if len(payload) < SMPL_HEADER.size:
        return "SMPL chunk shorter than its own header; skipped"
    gid, k, n, _ = SMPL_HEADER.unpack_from(payload)
    dt = dtypes.get(gid)
    if dt is None:
        return f"SMPL chunk for group {gid}, which the header does not declare; skipped"
    if k != dt["raw"].shape[0]:
        return f"SMPL chunk for group {gid} carries {k} values per sample; the header says {dt['raw'].shape[0]}"
    if len(payload) != SMPL_HEADER.size + n * dt.itemsize:
        return f"SMPL chunk length does not match its {n} samples; skipped"
    parts[gid].append(np.frombuffer(payload, dtype=dt, count=n, offset=SMPL_HEADER.size).copy())
    return None


def _take_partial(payload: bytes, dtypes: dict, parts: dict, data: ActrData, offset: int) -> None:
    """The last whole samples of a SMPL chunk the file was cut inside of."""
    if len(payload) < SMPL_HEADER.size:
        data.warnings.append((offset, "file cut short inside a SMPL chunk header", 0))
        return
    gid, k, n, _ = SMPL_HEADER.unpack_from(payload)
    dt = dtypes.get(gid)
    if dt is None or k != dt["raw"].shape[0]:
        data.warnings.append((offset, "file cut short inside a SMPL chunk whose header does not match", 0))
        return
    whole = min(n, (len(payload) - SMPL_HEADER.size) // dt.itemsize)
    if whole:
        parts[gid].append(np.frombuffer(payload, dtype=dt, count=whole, offset=SMPL_HEADER.size).copy())
    data.warnings.append((offset, f"file cut short inside a SMPL chunk: kept its {whole} whole samples "
                                  f"(checksum not verifiable), lost {n - whole}", n - whole))


def _claimed_records(payload: bytes, dtypes: dict) -> int:
    """How many samples a damaged SMPL chunk says it held (0 when that is not believable)."""
    if len(payload) < SMPL_HEADER.size:
        return 0
    gid, k, n, _ = SMPL_HEADER.unpack_from(payload)
    dt = dtypes.get(gid)
    if dt is not None and len(payload) == SMPL_HEADER.size + n * dt.itemsize:
        return n
    return 0
