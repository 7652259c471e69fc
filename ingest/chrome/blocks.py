"""What the Chrome reader does with raw blocks: read them in its schedule of sizes, scan their structure."""

from __future__ import annotations

import re
from typing import BinaryIO, Callable, Iterator

import msgspec
import numpy as np

from acceltrace.ingest.chrome.detect import describe
from acceltrace.store.errors import IngestError

try:  # built by `pip install` (setup.py), as the scanner is; without it, b"".join
    from acceltrace.ingest.chrome._scan import join as _join
except ImportError:  # pragma: no cover - depends on the install; tested by setting it to None
    _join = None

_LUT = np.zeros(256, dtype=np.int8)
_LUT[[ord("{"), ord("[")]] = 1
_LUT[[ord("}"), ord("]")]] = -1


WS_COMMA = re.compile(rb"[ \t\r\n,]*")
_KEY_VALUE = re.compile(rb'"traceEvents"\s*:\s*')  # (where a "traceEvents" that is not an array has its value)
READ_SLACK = 64 << 10  # the first read's bytes beyond the first block, for the document's start


def reads(stream: BinaryIO, size: Callable[[], int]) -> Iterator[bytes]:
    """The stream's reads, each of size() bytes (asked before each read), to its end."""
    while data := stream.read(size()):
        yield data


def read_sizes(first: int, max_block: int) -> Iterator[int]:
    """The reads' sizes in the Chrome reader's own schedule of chunks: the first block and READ_SLACK
    for the bytes before the array, then doubling; never past max_block. Each chunk is then cut from
    about one read, and what is left after its cut is the start of the next event, not most of a read.
    The thread reads ahead, so sizes taken from the reader's block as it stood were a step behind: a
    4 MB tail was joined, and copied again, to each 8 MB read (the cuts are the same either way)."""
    yield min(max_block, first + READ_SLACK)
    while True:
        first = min(max_block, first * 2)
        yield first


def quotes(a: np.ndarray) -> np.ndarray:
    """Positions of the quotes that open or close strings (not escaped ones)."""
    q = np.flatnonzero(a == 34)
    if len(q) and (a == 92).any():
        # a quote preceded by an odd run of backslashes is escaped
        idx = np.arange(len(a))
        last_plain = np.maximum.accumulate(np.where(a == 92, -1, idx))
        prev = q - 1
        run = np.where(prev >= 0, prev - last_plain[np.maximum(prev, 0)], 0)
        q = q[(run & 1) == 0]
    return q


def structure(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Positions of brackets/braces outside strings and the nesting depth after each."""
    st, depth, _ = structure_from(buf)
    return st, depth


def structure_from(buf: bytes, state: tuple[int, int, bool] = (0, 0, False)
                   ) -> tuple[np.ndarray, np.ndarray, tuple[int, int, bool]]:
    """structure() of buf[start:] given the scan's state there, state = (start, depth, inside a
    string), as an earlier call on a prefix of buf returned it: positions in buf, and the state at
    the end for the next call (where buf has grown). The end is moved back over a run of backslashes
    (they change neither depth nor string; whether the quote after them is escaped depends on the run)."""
    start, depth0, in_string = state
    a = np.frombuffer(buf, dtype=np.uint8)[start:]
    q = quotes(a)
    c = _LUT[a]
    st = np.flatnonzero(c)
    st = st[((np.searchsorted(q, st) + in_string) & 1) == 0]
    depth = depth0 + np.cumsum(c[st], dtype=np.int64)
    end = len(buf)
    while end > start and buf[end - 1] == 92:
        end -= 1
    n_quotes = int(np.searchsorted(q, end - start))
    end_depth = int(depth[-1]) if len(depth) else depth0
    return st + start, depth, (end, end_depth, bool((n_quotes + in_string) & 1))


WS = b" \t\r\n"  # JSON whitespace


def final_plan(buf: bytes, lead: int, suffix_ok: Callable[[bytes], bool]) -> tuple | None:
    """The quick cut at the end of input, for the events from buf[lead:]: (index of the ']' that closes
    the array, the bytes after it, "[" + the events before it + "]", or None where there are none). The
    last ']' are tried, from the end, the first that closes an event ('}' before it, or nothing at all)
    and is followed by a valid end of document counting (a trailing comma is dropped, as catapult
    tolerates): the ']' of what follows the events (Kineto's "INFO": [...] and "ERROR": [...] log lines,
    ']' inside their strings too) are passed over, not decoded to fail. At most 32 are checked as an end
    of document, and 4096 looked at. None: no such ']' (the exact structural scan decides)."""
    p = len(buf)
    checked = 0
    for _ in range(4096):
        p = buf.rfind(b"]", lead, p)
        if p < 0:
            return None
        end = _rstrip_ws(buf, lead, p)
        if end > lead and buf[end - 1] == 0x2C:
            end = _rstrip_ws(buf, lead, end - 1)
        if end > lead and buf[end - 1] != 0x7D:  # not an event's '}': some later array's end
            continue
        checked += 1
        if checked > 32:
            return None
        after = buf[p + 1:]
        if suffix_ok(after):
            if end == lead:
                return p, after, None
            return p, after, bracketed(buf, lead, end)
    return None


def _rstrip_ws(buf: bytes, lead: int, end: int) -> int:
    """The end of buf[lead:end].rstrip(), 4 kB at a time rather than a copy of the body."""
    while end > lead:
        seg = buf[max(lead, end - 4096):end]
        kept = seg.rstrip(WS)
        end -= len(seg) - len(kept)
        if kept:
            break
    return end


def joined(parts) -> bytes:
    """The bytes-like parts as one bytes (b"".join's result). The compiled join copies without holding the GIL:
    b"".join holds it wherever a part is a memoryview, and bytes' + always does, so each 8 MB copy of the
    reader's (and its faults on fresh pages) stopped the scan threads from handing over their chunks."""
    return _join(parts) if _join is not None else b"".join(parts)


def candidate(buf: bytes, start: int, end: int) -> int | None:
    """Where the reader's fast cut tries first: the last '}' before `end` (the block: so a chunk ends where the
    bytes put it, not where a read happened to stop) that is followed by ','."""
    p = min(end, len(buf))
    for _ in range(16):
        p = buf.rfind(b"}", start, p)
        if p < 0:
            return None
        nxt = WS_COMMA.match(buf, p + 1)
        if b"," in buf[p + 1:nxt.end()]:
            break
    return p


def bracketed(buf: bytes, start: int, end: int) -> bytes:
    """ "[" + buf[start:end] + "]" in one copy."""
    with memoryview(buf) as view:
        return joined((b"[", view[start:end], b"]"))


def fail_if_malformed(label: str, text: bytes, offset: int, first_index: int) -> None:
    """Raises the error of `text` (events from stream byte `offset` on, never closed) when it is bad
    JSON, not JSON cut short: the structural scan reads a stray quote as the start of a string and would
    take all that follows for one unfinished event (a cut-off array, the rest dropped). A cut inside a
    token (a number, a literal, an escape) fails at the very end, with no bracket after the failing byte;
    bad JSON fails before its last few bytes, or with a '}' or ']' still to come (a stray quote in the
    last event of a file that does close its array)."""
    try:
        msgspec.json.decode(b"[" + text)
    except msgspec.DecodeError as e:
        at = error_byte(e)  # in "[" + text
        if at is not None and (at < len(text) - 16 or any(c in text[max(0, at - 1):] for c in (b"}", b"]"))):
            raise decode_error(label, e, text, offset, first_index) from None
    except RecursionError:  # too deep to tell here; the chunk's own decode says so
        pass


def error_byte(e: Exception) -> int | None:
    """The byte msgspec's error names, in the text it decoded."""
    m = re.search(r"\(byte (\d+)\)", str(e))
    return int(m.group(1)) if m else None


def decode_error(label: str, e: Exception, text: bytes, offset: int, first_index: int) -> IngestError:
    """A msgspec error on "[" + text (stream byte `offset` on, its first event `first_index`) as the user
    should read it: file, byte or event, what was expected."""
    msg = str(e)
    at = error_byte(e)
    if at is not None:
        at = max(0, at - 1)  # the decoded text starts with an added '['
        near = text[at:at + 24]
        if near.lstrip(b"-").startswith((b"NaN", b"Infinity", b"nan", b"inf")):
            what = "NaN or Infinity, which JSON does not allow; expected a finite number"
        else:
            what = f"invalid JSON near {near!r}; expected a JSON value"
        return IngestError(label, what, f"byte {offset + at}")
    m = re.search(r"at `\$\[(\d+)\](.*)`", msg)
    if m:
        field_path = m.group(2).lstrip(".")
        return IngestError(label, f"field '{field_path}': {msg.split(' - at ')[0]}", f"event {first_index + int(m.group(1))}")
    if "UTF-8" in msg:  # msgspec names no byte: the first that is not UTF-8
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as u:
            return IngestError(label, f"bytes that are not UTF-8 near {text[u.start:u.start + 24]!r}; expected UTF-8"
                               " text (JSON is UTF-8)", f"byte {offset + u.start}")
    if "truncated" in msg:
        return IngestError(label, "an event is cut off; expected a complete JSON object", f"byte {offset + len(text)}")
    return IngestError(label, f"invalid JSON ({msg})", f"byte {offset}")


def without_events(label: str, buf: bytes, start: int) -> IngestError:
    """The error for a file that ended with no top-level "traceEvents" array (`buf`: all of it, its object from
    `start`): where its JSON is cut off or goes wrong, if it does (a download cut off in Kineto's header reads so),
    else that the key is missing."""
    try:
        top = msgspec.json.decode(buf[start:])
    except msgspec.DecodeError as e:
        at = error_byte(e)
        if at is None:  # msgspec says only that the input was truncated
            return IngestError(label, "ends inside its JSON object, before any \"traceEvents\" array (cut off?);"
                               " expected {\"traceEvents\": [...]}", f"byte {len(buf)}")
        return IngestError(label, f"invalid JSON near {buf[start + at:start + at + 24]!r}; expected a JSON object"
                           " with a \"traceEvents\" array", f"byte {start + at}")
    except RecursionError:  # too deep to say where: that the array is missing is still true
        top = None
    if isinstance(top, dict) and "traceEvents" in top:
        key = _KEY_VALUE.search(buf, start)
        kind = {type(None): "null", dict: "an object", str: "a string", bool: "a boolean"}.get(
            type(top["traceEvents"]), "a number")
        return IngestError(label, f"its \"traceEvents\" is {kind}; expected an array of events",
                           f"byte {key.end() if key else start}")
    what = describe("object", list(top), True) if isinstance(top, dict) else "a JSON object without a \"traceEvents\" array"
    return IngestError(label, f"is {what}; expected {{\"traceEvents\": [...]}}")
