"""A chunk read by the compiled scanner (_scan.c): its events as columns.

EventColumns is what decode_events returns on the compiled path. columns.py reads it
column-wise (strings as Arrow arrays over the scanner's buffers, times as exact int64
ns, args as one gathered buffer); it also behaves as the list of Ev structs for the
rare code that wants events one by one: those are decoded by msgspec from the event's
own bytes, so they are exactly what the msgspec path would give.
"""

from __future__ import annotations

import operator
from decimal import Decimal

import numpy as np
import pyarrow as pa
from msgspec import Raw
from msgspec.json import decode as msgspec_decode

from acceltrace.ingest.chrome import numbers as chrome_numbers
from acceltrace.ingest.chrome.structs import _FAST

try:  # built by `pip install` (setup.py); optional: without it every chunk takes msgspec
    from acceltrace.ingest.chrome import _scan
except ImportError:  # pragma: no cover - depends on the install
    _scan = None

_FIELDS = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "s", "args", "bind_id", "flow_in",
           "flow_out")
_F = {name: k for k, name in enumerate(_FIELDS)}
_IV = {"pid": 0, "tid": 1, "ts": 2, "dur": 3, "id": 4, "bind_id": 5}  # rows of _Scanned.ival
_STR_FIELDS = {"ph", "name", "cat", "bp", "s"}
_ID_FIELDS = {"pid", "tid", "id", "bind_id"}
_TIME_FIELDS = {"ts", "dur"}
# the fields whose chunk codes (_Scanned.codes) every chunk's rows ask for: worked out on the scan thread
_PRECOMPUTED = ("pid", "tid", "cat", "name", "bp")
T_ABSENT, T_STR, T_INT, T_NUM, T_TRUE, T_FALSE, T_NULL = range(7)
# the keys _scan.c notes at the top of args, by ArgFields' attribute (the same order as its ARG_KEYS)
ARG_KEYS = {"correlation": 0, "ext": 1, "ext_lower": 2, "nbytes": 3, "size": 4, "direction": 5}


class _Scanned:
    """One chunk's column buffers from _scan.scan (see the layout in _scan.c)."""

    __slots__ = ("raw", "n", "ev", "tags", "ival", "span", "soffs", "sdata", "_strings", "_args", "atag", "aival",
                 "aspan", "_codes")

    def __init__(self, raw: bytes, out: tuple):
        n, ev, tags, ival, span, soffs, sdata, atag, aival, aspan = out
        self.atag = np.frombuffer(atag, dtype=np.uint8).reshape(len(ARG_KEYS), n)
        self.aival = np.frombuffer(aival, dtype=np.int64).reshape(len(ARG_KEYS), n)
        self.aspan = np.frombuffer(aspan, dtype=np.int64).reshape(len(ARG_KEYS), n, 2)
        self.raw, self.n = raw, n
        self.ev = np.frombuffer(ev, dtype=np.int64).reshape(n, 2)
        self.tags = np.frombuffer(tags, dtype=np.uint8).reshape(len(_FIELDS), n)
        self.ival = np.frombuffer(ival, dtype=np.int64).reshape(len(_IV), n)
        self.span = np.frombuffer(span, dtype=np.int64).reshape(n, 2)
        self.soffs = soffs
        self.sdata = sdata
        self._strings: dict = {}
        self._args = None
        self._codes: dict = {}

    def strings(self, f: int) -> pa.Array:
        """Field f's strings over the whole chunk (null where the value is not a string)."""
        arr = self._strings.get(f)
        if arr is None:
            n = self.n
            valid = self.tags[f] == T_STR
            nulls = int(n - np.count_nonzero(valid))
            offs = pa.py_buffer(self.soffs)
            off_bytes = 4 * (n + 1)
            bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
            arr = pa.Array.from_buffers(pa.string(), n, [bitmap, offs.slice(f * off_bytes, off_bytes),
                                                         pa.py_buffer(self.sdata[f])], null_count=nulls)
            self._strings[f] = arr
        return arr

    def codes(self, name: str) -> tuple[np.ndarray, list]:
        """The whole chunk's values of a field as dense codes (int64) in order of first appearance and
        the distinct values in code order, as pyarrow's dictionary_encode gives them: integer ids
        (pid, tid) over the events where they are integers (code -1 elsewhere); strings (name, cat, bp)
        with a missing value read as "". Worked out once per chunk, on the scan thread (precompute),
        so the rows of each phase take their codes by index instead of hashing their values again."""
        got = self._codes.get(name)
        if got is None:
            if name in _ID_FIELDS:
                is_int = self.tags[_F[name]] == T_INT
                enc = pa.array(self.ival[_IV[name]], mask=~is_int).dictionary_encode()
                codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            else:
                enc = self.strings(_F[name]).fill_null("").dictionary_encode()
                codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            got = self._codes[name] = (codes, enc.dictionary.to_pylist())
        return got

    def precompute(self) -> None:
        """What every chunk's rows ask for, worked out on the thread that scanned it (Arrow and
        numpy release the GIL), off the main thread that turns the chunk into rows."""
        flows = any(p in self.sdata[_F["ph"]] for p in (b"s", b"t", b"f"))  # names are coded for flow events only
        for name in _PRECOMPUTED:
            if (name != "name" or flows) and (self.tags[_F[name]] != T_ABSENT).any():
                self.codes(name)

    def args(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        """(buffer, starts, lengths) of each event's args text in the chunk's own bytes; an absent args
        has length 0 (no JSON value has: readers take it as '{}', msgspec's default). Not a copy of
        the chunk with a '{}' appended for them: that was a whole chunk's memcpy per chunk."""
        if self._args is None:
            starts, lens = self.span[:, 0], self.span[:, 1]
            absent = self.tags[_F["args"]] == T_ABSENT
            if absent.any():
                starts, lens = np.where(absent, 0, starts), np.where(absent, 0, lens)
            self._args = (self.raw, starts, lens)
        return self._args


_bytes_per_event = 0.0  # of the last chunk scanned in this process (a hint, nothing more)


def scan_columns(raw: bytes) -> "EventColumns | None":
    global _bytes_per_event
    # the rows to make room for: this chunk's bytes at the chunks' last bytes per event, a tenth over (fewer
    # than it holds are moved down within the scanner's outputs; more grow them: either way, the same columns)
    out = _scan.scan(raw, int(len(raw) / _bytes_per_event * 1.1) + 64) if _bytes_per_event else _scan.scan(raw)
    if out is None:
        return None
    if out[0]:
        _bytes_per_event = len(raw) / out[0]
    scanned = _Scanned(raw, out)
    scanned.precompute()
    return EventColumns(scanned, None)


def dense_codes(codes: np.ndarray, values: list) -> tuple[np.ndarray, list]:
    """A selection's codes (of a whole chunk's dense codes, all >= 0) made dense again in order of first
    appearance within the selection, with its distinct values: what dictionary_encode of the selected
    values gives, without hashing them (one pass of minimum.at over a handful of codes)."""
    n = len(codes)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    first = np.full(len(values), n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
    present = np.flatnonzero(first < n)
    order = present[np.argsort(first[present], kind="stable")]
    if len(order) == len(values) and (order == np.arange(len(order))).all():
        return codes, values  # already dense in this order (the selection met every value first in chunk order)
    remap = np.empty(len(values), dtype=np.int64)
    remap[order] = np.arange(len(order), dtype=np.int64)
    return remap[codes], [values[i] for i in order.tolist()]


class EventColumns:
    """A chunk's events (or a selection of them) as columns; also a sequence of Ev structs."""

    __slots__ = ("_s", "_idx", "_structs")

    def __init__(self, scanned: _Scanned, idx: np.ndarray | None):
        self._s, self._idx, self._structs = scanned, idx, None

    def __len__(self) -> int:
        return self._s.n if self._idx is None else len(self._idx)

    def __bool__(self) -> bool:
        return len(self) > 0

    def rows(self) -> np.ndarray:
        return np.arange(self._s.n) if self._idx is None else self._idx

    def take(self, idx: np.ndarray) -> "EventColumns":
        idx = np.asarray(idx, dtype=np.int64)
        return EventColumns(self._s, idx if self._idx is None else self._idx[idx])

    def _sel(self, a: np.ndarray) -> np.ndarray:
        return a if self._idx is None else a[self._idx]

    def _row(self, i: int) -> int:
        """The scanned chunk's row of event i of this selection: one event read by index costs O(1)
        (selecting a whole column first made reading n events one by one O(n^2))."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        i %= n
        return i if self._idx is None else int(self._idx[i])

    def arg_text(self, i: int) -> bytes:
        """Event i's args text ('{}' when it has none)."""
        buf, starts, lens = self._s.args()
        r = self._row(i)
        return buf[int(starts[r]):int(starts[r] + lens[r])] if lens[r] else b"{}"

    def tags(self, name: str) -> np.ndarray:
        return self._sel(self._s.tags[_F[name]])

    def phase_bytes(self) -> np.ndarray | None:
        """Each event's ph as its one byte (uint8) when every ph is a one-character string, read
        from the scanner's string buffer without building strings; else None."""
        s, f = self._s, _F["ph"]
        if s.n == 0 or not (s.tags[f] == T_STR).all() or len(s.sdata[f]) != s.n:
            return None
        offs = np.frombuffer(s.soffs, dtype=np.int32, count=s.n + 1, offset=4 * f * (s.n + 1))
        if offs[0] != 0 or not (np.diff(offs) == 1).all():
            return None
        return self._sel(np.frombuffer(s.sdata[f], dtype=np.uint8))

    def int_values(self, name: str) -> np.ndarray | None:
        """An id field as int64 when every event's value is an integer token, else None."""
        tags = self.tags(name)
        if not len(tags) or not (tags == T_INT).all():
            return None
        return self._sel(self._s.ival[_IV[name]])

    def has(self, name: str) -> bool:
        """Whether any event of the selection has field `name` (the scanner's tags, no text search)."""
        return bool((self.tags(name) != T_ABSENT).any())

    def has_arg_keys(self) -> bool:
        """Whether any event's args has one of the linking keys at its top (ARG_KEYS) that
        arg_fields reads: the scanner noted them, so the args text is not searched."""
        a = self._s.atag
        return bool((a if self._idx is None else a[:, self._idx]).any())

    # -- columns
    def strings(self, name: str) -> pa.Array:
        arr = self._s.strings(_F[name])
        return arr if self._idx is None else arr.take(pa.array(self._idx))

    def int_codes(self, name: str) -> tuple[np.ndarray, list] | None:
        """columns.codes(self.values(name)) for an id field that is an integer in every event (else
        None): dense codes in order of first appearance, and the distinct ints in code order."""
        tags = self.tags(name)
        if not len(tags) or not (tags == T_INT).all():
            return None
        codes, values = self._s.codes(name)  # the whole chunk's, hashed once on the scan thread
        return dense_codes(self._sel(codes), values)

    def string_codes(self, name: str) -> tuple[np.ndarray, list]:
        """What strings(name).fill_null("").dictionary_encode() gives (codes int64, values in code
        order), from the chunk's codes (_Scanned.codes) without building or hashing the strings."""
        codes, values = self._s.codes(name)
        return dense_codes(self._sel(codes), values)

    def times(self, name: str) -> chrome_numbers.Parsed:
        tags = self.tags(name)
        ok = (tags == T_INT) | (tags == T_NUM)
        vals = np.where(ok, self._sel(self._s.ival[_IV[name]]), 0)
        return chrome_numbers.Parsed(vals, ok, ~ok)

    def args(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        buf, starts, lens = self._s.args()
        return buf, self._sel(starts), self._sel(lens)

    def values(self, name: str):
        """What list(map(attrgetter(name), events)) gives for Ev structs (times: a TimeColumn)."""
        if name in _TIME_FIELDS:
            return TimeColumn(self, name)
        if name == "args":
            return ArgsColumn(self)
        tags = self.tags(name)
        if name in _STR_FIELDS:
            return self.strings(name).to_pylist()
        if name in _ID_FIELDS:
            ints_ = self._sel(self._s.ival[_IV[name]])
            if len(tags) and (tags == T_INT).all():
                return ints_.tolist()
            out = np.full(len(tags), None, dtype=object)
            is_int = tags == T_INT
            if is_int.any():
                out[is_int] = ints_[is_int].tolist()
            is_str = tags == T_STR
            if is_str.any():
                out[is_str] = self.strings(name).filter(pa.array(is_str)).to_pylist()
            return out.tolist()
        if name in ("flow_in", "flow_out"):
            lut = np.array([None, None, None, None, True, False, None, None, None], dtype=object)
            return lut[tags].tolist()
        return [getattr(ev, name) for ev in self]

    # -- the sequence of Ev structs (rare paths: metadata, counters, problem reports)
    def structs(self) -> list:
        if self._structs is None:
            ev = self._sel(self._s.ev)
            body = _scan.gather(self._s.raw, np.ascontiguousarray(ev[:, 0]),
                                np.ascontiguousarray(ev[:, 1] - ev[:, 0]), b",")
            self._structs = _FAST.decode(b"[" + body + b"]")
        return self._structs

    def __iter__(self):
        return iter(self.structs())

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = operator.index(i)
        if self._structs is not None:
            return self._structs[i]
        start, end = self._s.ev[self._row(i)]
        return _FAST.decode(b"[" + self._s.raw[int(start):int(end)] + b"]")[0]


class TimeColumn:
    """A time field of EventColumns: to_ns reads its exact ns; as a sequence, what msgspec gives."""

    __slots__ = ("cols", "name")

    def __init__(self, cols: EventColumns, name: str):
        self.cols, self.name = cols, name

    def __len__(self) -> int:
        return len(self.cols)

    def __getitem__(self, i):
        return _time_value(self.cols, self.name, operator.index(i))

    def __iter__(self):
        return (_time_value(self.cols, self.name, i) for i in range(len(self.cols)))


def _time_value(cols: EventColumns, name: str, i: int):
    r = cols._row(i)
    tag = int(cols._s.tags[_F[name], r])
    ns = int(cols._s.ival[_IV[name], r])
    if tag == T_INT:
        return ns // 1000
    if tag == T_NUM:
        return float(Decimal(ns) / 1000)
    return None


class ArgFieldColumns:
    """What arg_fields gives on the compiled path: ArgFields' attributes as columns.

    values(name) equals [getattr(f, name) for f in the ArgFields structs]: integers from the
    scanner's int64s, any other value decoded by msgspec from its own token (rare: the
    DMA direction strings, floats); indexing gives the struct itself.
    """

    __slots__ = ("cols", "decode_one")

    def __init__(self, cols: EventColumns, decode_one):
        self.cols, self.decode_one = cols, decode_one

    def __len__(self) -> int:
        return len(self.cols)

    def values(self, name: str) -> list:
        s, k = self.cols._s, ARG_KEYS[name]
        tags = self.cols._sel(s.atag[k])
        ints_ = self.cols._sel(s.aival[k])
        if len(tags) and (tags == T_INT).all():
            return ints_.tolist()
        out = np.full(len(tags), None, dtype=object)
        is_int = tags == T_INT
        if is_int.any():
            out[is_int] = ints_[is_int].tolist()
        other = np.flatnonzero((tags != T_INT) & (tags != T_ABSENT) & (tags != T_NULL))
        if len(other):
            spans = self.cols._sel(s.aspan[k])
            raw = s.raw
            out[other] = [msgspec_decode(raw[int(a):int(a + n)]) for a, n in spans[other].tolist()]
        return out.tolist()

    def ints(self, name: str, as_int) -> pa.Array:
        """columns.ints(self.values(name)) without a Python object per event: the scanner's int64s
        where the token is an integer, as_int of the decoded value for the other tokens (rare)."""
        s, k = self.cols._s, ARG_KEYS[name]
        tags = self.cols._sel(s.atag[k])
        vals = self.cols._sel(s.aival[k]).copy()
        valid = tags == T_INT
        other = np.flatnonzero((tags != T_INT) & (tags != T_ABSENT) & (tags != T_NULL))
        if len(other):
            spans = self.cols._sel(s.aspan[k])
            raw = s.raw
            for i, (a, n) in zip(other.tolist(), spans[other].tolist()):
                v = as_int(msgspec_decode(raw[int(a):int(a + n)]))
                if v is not None:
                    vals[i], valid[i] = v, True
        return pa.array(vals, type=pa.int64(), mask=~valid)

    def take(self, idx: np.ndarray) -> "ArgFieldColumns":
        return ArgFieldColumns(self.cols.take(idx), self.decode_one)

    def __getitem__(self, i):
        return self.decode_one(self.cols.arg_text(operator.index(i)))

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class ArgsColumn:
    """The args of EventColumns: raw_text and arg_fields join them in C; as a sequence, msgspec Raw values."""

    __slots__ = ("cols",)

    def __init__(self, cols: EventColumns):
        self.cols = cols

    def __len__(self) -> int:
        return len(self.cols)

    def __getitem__(self, i):
        return Raw(self.cols.arg_text(operator.index(i)))

    def __iter__(self):
        return (self[i] for i in range(len(self)))


