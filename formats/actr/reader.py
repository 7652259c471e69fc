"""The .actr reader: every whole sample, damage reported with its byte offset (layout.py)."""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from acceltrace.formats.actr.layout import ActrFormatError, BUFS_HEADER, CHUNK_HEADER, FILE_HEADER, MAGIC, MAX_CHUNK_BYTES, SMPL_HEADER, VERSION, buffered_dtype, record_dtype, validate_header


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
    # format 1.1: buffered (device-sampled) groups -> list of drains, each a dict with seq0, dropped,
    # sync_host_ns, sync_dev_ticks, period_ticks and records (buffered_dtype), in file order
    buffered: dict[int, list[dict]] = field(default_factory=dict)

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
        elif tag == b"BUFS":
            err = _take_bufs(payload, header, data)
            if err:
                data.warnings.append((offset, err, 0))
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


def _take_bufs(payload: bytes, header: dict, data: ActrData) -> str | None:
    if len(payload) < BUFS_HEADER.size:
        return "BUFS chunk shorter than its own header; skipped"
    gid, k, n, _, seq0, dropped, sync_host, sync_ticks, period = BUFS_HEADER.unpack_from(payload)
    g = next((g for g in header["groups"] if g["id"] == gid), None)
    if g is None or g.get("buffered") is None:
        return f"BUFS chunk for group {gid}, which the header does not declare as buffered; skipped"
    if k != len(g["counters"]):
        return f"BUFS chunk for group {gid} carries {k} values per sample; the header says {len(g['counters'])}"
    dt = buffered_dtype(k)
    if len(payload) != BUFS_HEADER.size + n * dt.itemsize or dropped < 0 or period <= 0 or seq0 < 0:
        return f"BUFS chunk for group {gid} does not match its {n} samples (or has a negative count); skipped"
    recs = np.frombuffer(payload, dtype=dt, count=n, offset=BUFS_HEADER.size).copy()
    data.buffered.setdefault(gid, []).append({"seq0": seq0, "dropped": dropped, "sync_host_ns": sync_host,
                                              "sync_dev_ticks": sync_ticks, "period_ticks": period,
                                              "records": recs})
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
