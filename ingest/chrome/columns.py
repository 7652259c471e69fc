"""Decoding event chunks and turning their fields into columns.

msgspec decodes a chunk into typed structs (no dicts), the fields we need are pulled
out with C-level map(attrgetter) and converted to numpy/Arrow in bulk. Times arrive
as ints or floats: ints and floats below 2**42 us are exact on this path (a double
there keeps the three decimals; see to_ns); anything else re-decodes the chunk with
times kept as raw text and parses the digits exactly (chrome_numbers).

With the compiled scanner (ingest/chrome/_scan.c, built at install) a chunk is read in
one C pass straight into column buffers: decode_events then returns an EventColumns
(chrome_scanned), which the functions below read column-wise (strings as Arrow arrays over the scanner's
buffers, times as exact int64 ns computed from the digits), and which still behaves as
the list of Ev structs for the rare code that wants events one by one (those are decoded
by msgspec from the event's own bytes). The scanner returns None for anything it is not
sure of; that chunk then takes the msgspec path above, so both paths give the same
columns. ACCELTRACE_CHROME_SCANNER=python (or USE_COMPILED = False) forces msgspec.
"""

from __future__ import annotations

import os
from operator import attrgetter, itemgetter

import msgspec
import numpy as np
import pyarrow as pa
from msgspec import Raw, Struct, field

from acceltrace.ingest.chrome import numbers as chrome_numbers
from acceltrace.ingest.chrome.scanned import (_FIELDS, _STR_FIELDS, ArgFieldColumns, ArgsColumn,  # noqa: F401
                                              EventColumns, TimeColumn, _scan, scan_columns)
from acceltrace.ingest.chrome.structs import _FAST, _RAW, Ev, RawEv  # noqa: F401 - Ev, RawEv: the public names

USE_COMPILED = True  # tests flip it to run both paths on the same inputs

# Below 2**42 us (51 days) a double keeps a value's three decimals exactly.
_FLOAT_EXACT_US = float(1 << 42)
_INT_MAX_US = 9_223_372_036_854_775


class ArgFields(Struct, gc=False):
    """The args Kineto uses to link and type events (everything else stays in the args text)."""

    correlation: object = None
    ext: object = field(default=None, name="External id")
    ext_lower: object = field(default=None, name="external id")
    nbytes: object = field(default=None, name="bytes")
    size: object = None
    direction: object = None


_ARGS = msgspec.json.Decoder(list[ArgFields])
_ARG_ONE = msgspec.json.Decoder(ArgFields)


def compiled() -> bool:
    """Whether chunks go through the compiled scanner now."""
    return (_scan is not None and USE_COMPILED
            and os.environ.get("ACCELTRACE_CHROME_SCANNER", "").lower() != "python")


def decode_events(raw: bytes):
    """A chunk '[{...}, ...]' as columns (compiled) or Ev structs; string times fall back to RawEv."""
    if compiled():
        cols = scan_columns(raw)
        if cols is not None:
            return cols
    try:
        return _FAST.decode(raw)
    except msgspec.ValidationError:
        return _RAW.decode(raw)


def raw_events(raw: bytes) -> list:
    return _RAW.decode(raw)


def take(seq: list, idx: np.ndarray) -> list:
    """seq[i] for i in idx, in C."""
    if isinstance(seq, (EventColumns, ArgFieldColumns)):
        return seq if len(idx) == len(seq) else seq.take(idx)
    if len(idx) == len(seq):
        return seq
    if len(idx) == 0:
        return []
    if len(idx) == 1:
        return [seq[int(idx[0])]]
    return list(itemgetter(*idx.tolist())(seq))


class _ArgInts:
    """values(ArgFieldColumns, name) for ints(): read as one int64 column, never as a list."""

    __slots__ = ("cols", "name")

    def __init__(self, cols: ArgFieldColumns, name: str):
        self.cols, self.name = cols, name


def arg_ints(af, name: str) -> pa.Array:
    """ints(values(af, name)); on the compiled path straight from the scanner's columns."""
    if isinstance(af, ArgFieldColumns):
        return ints(_ArgInts(af, name))
    return ints(values(af, name))


def values(evs: list, name: str) -> list:
    if isinstance(evs, (EventColumns, ArgFieldColumns)):
        return evs.values(name)
    return list(map(attrgetter(name), evs))


def has_field(evs: list, name: str, raw: bytes) -> bool:
    """Whether any event may have field `name`: the scanner's tags, else a search of the chunk's text
    for the quoted key (a superset: the field's readers then see the values)."""
    if isinstance(evs, EventColumns):
        return evs.has(name)
    return f'"{name}"'.encode() in raw


def phase_bytes(evs: list) -> np.ndarray | None:
    """Each event's one-character ph as a byte, on the compiled path (else None: read the strings)."""
    return evs.phase_bytes() if isinstance(evs, EventColumns) else None


def id_ints(evs: list, name: str) -> np.ndarray | None:
    """An id field as int64 when every event has an integer there, on the compiled path (else None)."""
    return evs.int_values(name) if isinstance(evs, EventColumns) else None


def strings(evs: list, name: str) -> pa.Array:
    if isinstance(evs, EventColumns) and name in _STR_FIELDS:
        return evs.strings(name)
    return pa.array(values(evs, name), type=pa.string())


def to_ns(vals: list, exact_fallback) -> chrome_numbers.Parsed:
    """Microsecond times (ints/floats/raw text) to exact int64 ns.

    exact_fallback() returns the same values as raw JSON tokens; it is called only
    when the fast path cannot prove exactness (or the values are not plain numbers).
    """
    if isinstance(vals, TimeColumn):
        return vals.cols.times(vals.name)
    n = len(vals)
    kinds = set(map(type, vals))
    if kinds <= {int}:
        try:
            a = np.fromiter(vals, dtype=np.int64, count=n)
        except OverflowError:
            a = None
        if a is not None and (n == 0 or int(np.abs(a).max()) < _INT_MAX_US):
            return chrome_numbers.Parsed(a * 1000, np.ones(n, dtype=bool), np.zeros(n, dtype=bool))
    elif kinds <= {int, float}:
        x = np.fromiter(vals, dtype=np.float64, count=n)
        if np.isfinite(x).all() and (np.abs(x) < _FLOAT_EXACT_US).all():
            ip = np.floor(x)
            ns = ip.astype(np.int64) * 1000 + np.rint((x - ip) * 1000.0).astype(np.int64)
            return chrome_numbers.Parsed(ns, np.ones(n, dtype=bool), np.zeros(n, dtype=bool))
    raws = vals if kinds <= {Raw} else exact_fallback()
    return chrome_numbers.parse_decimal(raws, 3)


def ints(vals: list) -> pa.Array:
    """Integer ids/sizes as int64 with nulls for anything that is not an integer in range."""
    if isinstance(vals, _ArgInts):
        return vals.cols.ints(vals.name, _as_int)
    kinds = set(map(type, vals))
    if kinds <= {int, type(None)}:
        try:
            return pa.array(vals, type=pa.int64())
        except (OverflowError, pa.ArrowInvalid):
            pass
    return pa.array([_as_int(v) for v in vals], type=pa.int64())


def _as_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else None
    if isinstance(v, float) and v.is_integer() and abs(v) < 9.2e18:
        return int(v)
    if isinstance(v, str):
        s = v.strip()
        if s.lstrip("-").isdigit():
            return _as_int(int(s))
    return None


def arg_fields(args: list) -> list[ArgFields] | None:
    """The linking args of each event; None when no event in the batch has any of them."""
    if not args:
        return None
    if isinstance(args, ArgsColumn):  # the scanner noted these keys already: no search, no second decode
        return ArgFieldColumns(args.cols, _arg_one) if args.cols.has_arg_keys() else None
    body = b",".join(args)
    if not any(k in body for k in (b'"correlation"', b'xternal id"', b'"bytes"', b'"size"', b'"direction"')):
        return None
    try:
        return _ARGS.decode(b"[" + body + b"]")
    except msgspec.ValidationError:  # an args that is not an object (a string, a number) links nothing
        return [_arg_one(bytes(a)) for a in args]


def _arg_one(raw: bytes) -> ArgFields:
    return _ARG_ONE.decode(raw) if raw[:1] == b"{" else ArgFields()


def raw_text(raws: list) -> pa.Array:
    """Raw JSON values as strings; '{}' (no args) becomes null."""
    if isinstance(raws, ArgsColumn):
        return _args_text(raws)
    n = len(raws)
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    valid = lens > 2
    data = pa.py_buffer(b"".join(raws))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.Array.from_buffers(pa.large_binary(), n, [bitmap, pa.py_buffer(offs), data],
                                null_count=int(n - valid.sum()))
    try:
        return arr.cast(pa.large_string())
    except pa.ArrowInvalid:  # invalid UTF-8 inside args: keep what can be read
        return pa.array([None if not v else bytes(r).decode("utf-8", "replace")
                         for r, v in zip(raws, valid)], type=pa.large_string())


def args_objects(evs) -> list:
    """Each event's args as Python values (None where absent or not JSON), decoded in one msgspec call:
    on the compiled path the args' bytes are joined in C, without an event struct each."""
    if isinstance(evs, EventColumns):
        buf, starts, lens = evs.args()
        has = np.flatnonzero(lens > 0)
        body = _scan.gather(buf, np.ascontiguousarray(starts[has]), np.ascontiguousarray(lens[has]), b",")
        try:
            decoded = msgspec.json.decode(b"[" + body + b"]")
        except (msgspec.DecodeError, RecursionError):
            pass
        else:
            out = [None] * len(lens)
            for i, v in zip(has.tolist(), decoded):
                out[i] = v
            return out
    raws = [ev.args for ev in evs]
    try:
        return msgspec.json.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.DecodeError, RecursionError):  # one bad value: each alone
        out = []
        for r in raws:
            try:
                out.append(msgspec.json.decode(r))
            except (msgspec.DecodeError, RecursionError):
                out.append(None)
        return out


def _args_text(col: ArgsColumn) -> pa.Array:
    buf, starts, lens = col.cols.args()
    n = len(lens)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    valid = lens > 2
    data = _scan.gather(buf, np.ascontiguousarray(starts), np.ascontiguousarray(lens), b"")
    nulls = int(n - np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    # the scanner checked every string's UTF-8 and JSON outside strings is ASCII: valid text
    return pa.Array.from_buffers(pa.large_string(), n, [bitmap, pa.py_buffer(offs), pa.py_buffer(data)],
                                 null_count=nulls)


def id_strings(vals: list) -> pa.Array:
    """norm_id over a list, in C when the ids are plain ints (the common case)."""
    if set(map(type, vals)) <= {int}:
        try:
            return pa.array(vals, type=pa.int64()).cast(pa.string())
        except (OverflowError, pa.ArrowInvalid):
            pass
    return pa.array([norm_id(v) for v in vals], type=pa.string())


def norm_id(v) -> str:
    """pid/tid/flow id as a string key: 25738, "25738" and 25738.0 are one thread."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return str(v)


def string_codes(evs: list, name: str) -> tuple[np.ndarray, list]:
    """(codes, values) of strings(evs, name).fill_null("").dictionary_encode(); on the compiled path
    from the chunk's codes, worked out once on the scan thread (no strings built or hashed here)."""
    if isinstance(evs, EventColumns) and name in _STR_FIELDS:
        return evs.string_codes(name)
    enc = strings(evs, name).fill_null("").dictionary_encode()
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def coded_strings(evs: list, name: str) -> pa.Array:
    """strings(evs, name).fill_null(""), dictionary-encoded from the chunk's codes on the compiled path
    (the builder holds a slice's name until the write: 4 bytes a slice instead of its text)."""
    if isinstance(evs, EventColumns) and name in _STR_FIELDS:
        codes, vals = evs.string_codes(name)
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(vals, pa.string()))
    return strings(evs, name).fill_null("")


def id_codes(evs: list, name: str) -> tuple[np.ndarray, list]:
    """codes(values(evs, name)); for integer ids on the compiled path without a Python int per event."""
    if isinstance(evs, EventColumns):
        got = evs.int_codes(name)
        if got is not None:
            return got
    return codes(values(evs, name))


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(a, return_inverse=True) for integers, by hashing (Arrow) and sorting only the
    distinct values: a chunk has tens of thousands of events and a handful of threads or tracks.
    Codes in a small range (the usual case: pairs of dense codes) are counted instead of hashed."""
    if len(a) > 256 and a.dtype.kind in "iu":
        lo, hi = int(a.min()), int(a.max())
        if hi - lo < max(1 << 16, len(a) // 4):  # a bincount no bigger than a hash table
            b = a.astype(np.int64) - lo
            present = np.flatnonzero(np.bincount(b, minlength=hi - lo + 1))
            rank = np.zeros(hi - lo + 1, dtype=np.int64)
            rank[present] = np.arange(len(present), dtype=np.int64)
            return (present + lo).astype(a.dtype), rank[b]
    enc = pa.array(a).dictionary_encode()
    uniq = enc.dictionary.to_numpy(zero_copy_only=False)
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[enc.indices.to_numpy(zero_copy_only=False)]


def codes(vals: list) -> tuple[np.ndarray, list]:
    """Dense codes for hashable values (in order of first appearance) and the distinct values in code order."""
    kinds = set(map(type, vals))
    if kinds == {int} or kinds == {str}:  # the common case, in Arrow
        try:
            enc = pa.array(vals, type=pa.int64() if kinds == {int} else pa.string()).dictionary_encode()
            return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()
        except (OverflowError, pa.ArrowInvalid):
            pass
    # in order of first appearance, as the Arrow path: a set's order moves with the process's string hash
    # seed, and with it the ids of the tracks made from these codes (mixed int and string pids)
    uniq = {v: i for i, v in enumerate(dict.fromkeys(vals))}
    c = np.fromiter(map(uniq.__getitem__, vals), dtype=np.int64, count=len(vals))
    return c, list(uniq)
