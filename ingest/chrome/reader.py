"""Streams a Chrome trace's event array as decoded chunks of whole events.

The file is never held whole: blocks are read (decompressed in a background thread, since zlib releases
the GIL), and each block is cut after its last whole event. The cut is found cheaply: the last '}' in the
block is tried first, and a wrong guess cannot decode (it would leave an event or a string open), so a
failed decode falls back to an exact structural scan of the block (numpy, string- and escape-aware). The
top-level keys around "traceEvents" (deviceProperties, baseTimeNanoseconds, distributedInfo, ...) are kept
and decoded as metadata. A file cut off inside the array yields its whole events and reports the cut.
While the caller works on a chunk, the next ones are decoded on another core (the scanner releases the GIL).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

import msgspec
import numpy as np

from acceltrace.store.errors import IngestError
from acceltrace.ingest.chrome.ahead import DEPTH, ChunksAhead
from acceltrace.ingest.chrome.blocks import (WS as _WS, WS_COMMA as _WS_COMMA, bracketed, candidate, decode_error,
                                            fail_if_malformed, final_plan, joined, quotes as _quotes, read_sizes, reads,
                                            structure, structure_from, without_events)
from acceltrace.ingest.made_ahead import MadeAhead
from acceltrace.ingest.sources import BombGuard, TruncatedStream

# Chunks start at FIRST_BLOCK_BYTES and double up to BLOCK_BYTES (reads too: blocks.read_sizes): a small first
# chunk overlaps the rest at once, big later ones keep the per-chunk cost low (performance.md, 4th stop).
BLOCK_BYTES = 8 << 20
FIRST_BLOCK_BYTES = 2 << 20
MAX_EVENT_BYTES = 512 << 20
MAX_META_BYTES = 64 << 20
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOM = b"\xef\xbb\xbf"


@dataclass
class Chunk:
    events: list
    raw: bytes  # "[" + events text + "]" (kept for a second, exact-time decode)
    offset: int  # byte offset of the chunk's first event in the decompressed stream
    first_index: int  # index of the chunk's first event in the array


@dataclass
class ReadResult:
    meta: dict = field(default_factory=dict)
    events: int = 0
    cut_off: str | None = None  # why the array did not end properly, if it did not
    partial_event: bool = False  # the cut fell inside an event (one event lost)
    truncated: str | None = None  # the compressed stream ended early (its message)
    ignored_tail: int = 0  # bytes after the array that are not valid JSON (ignored)
    bad_prefix: str | None = None  # where the top-level keys before the array stop being JSON (then ignored)
    unread: int = 0  # events of a second top-level "traceEvents" array after the one read (a file with the key twice)


class ChromeReader:
    """Yields Chunks from the event array of one source; fills `result` as it goes."""

    def __init__(self, stream: BinaryIO, label: str, decode: Callable[[bytes], list],
                 block: int | None = None, prefetch: bool = True, on_prefix: Callable[[dict], None] | None = None):
        self.label, self.decode = label, decode
        self.on_prefix = on_prefix  # gets the top-level keys before "traceEvents", before any chunk
        self.max_block = block or BLOCK_BYTES  # read at call time, so tests can shrink it
        self.block = min(self.max_block, FIRST_BLOCK_BYTES)  # grows chunk by chunk (_grow)
        # a cut-short .gz is read up to the cut, like a cut-off array (see BombGuard)
        if isinstance(guard := getattr(stream, "raw", None), BombGuard):
            guard.lenient_eof = True
        self._guard = guard
        self.src = MadeAhead(reads(stream, read_sizes(self.block, self.max_block).__next__)) if prefetch else None
        self.stream = stream
        self.result = ReadResult()
        self.pos = 0  # stream offset of buf[0]
        self.eof = False
        self._prefix = b""
        self._prefix_at = 0  # the stream byte the top-level object starts at
        self.speculate = prefetch  # decode the next chunks in a thread (see _speculate)
        self._ahead = ChunksAhead(decode)  # chunks decoded on a thread ahead of the caller (see _speculate)
        self._final: tuple | None = None  # (bytes, lead, final_plan's answer) worked out by _speculate
        self._partial: tuple | None = None  # (stream offset, structure_from state) of an unfinished event

    def _read(self) -> bytes:
        if self.eof:
            return b""
        data, truncated = self._ahead.stash.popleft() if self._ahead.stash else self._read_source()
        if isinstance(data, BaseException):  # a read ahead failed: raised where the read belongs
            raise data
        if truncated:  # keep what came before the cut, like a cut-off array
            self.result.truncated = truncated
        if not data:
            self.eof = True
            if isinstance(self._guard, BombGuard) and self._guard.truncated:
                self.result.truncated = self._guard.truncated
        return data

    def _read_source(self) -> tuple[bytes, str | None]:
        try:
            return (next(self.src, b"") if self.src else self.stream.read(self.block)), None
        except TruncatedStream as e:
            return b"", e.detail

    def _grow(self) -> None:  # the next chunks twice as big, up to max_block
        self.block = min(self.max_block, self.block * 2)

    def close(self):
        if self.src:
            self.src.close()
        self._ahead.close()

    # -- the container ---------------------------------------------------------------
    def _find_array(self) -> bytes:
        """Reads up to the '[' that opens the events; returns the bytes after it."""
        buf = b""
        while len(buf) < 8 and not self.eof:
            buf += self._read()
        skip = 0
        if buf.startswith(_BOM):
            skip = 3
        stripped = buf[skip:].lstrip(_WS)
        while not stripped and not self.eof:
            more = self._read()
            buf += more
            stripped = buf[skip:].lstrip(_WS)
        start = len(buf) - len(stripped)
        if not stripped:
            raise IngestError(self.label, "holds only whitespace; expected a JSON trace", f"byte {start}")
        first = stripped[:1]
        if first == b"[":
            self.pos = start + 1
            return buf[start + 1:]
        if first != b"{":
            raise IngestError(self.label, f"starts with {first!r}; expected a JSON object with"
                              " \"traceEvents\" or a JSON array of events", f"byte {start}")
        searched = start
        while True:
            found = self._key_position(buf, start, searched)
            if found is not None:
                self._prefix = buf[start:found[0]]
                self._prefix_at = start
                self.pos = found[1]
                return buf[found[1]:]
            if self.eof:
                raise without_events(self.label, buf, start)
            if len(buf) > MAX_META_BYTES:
                raise IngestError(self.label, f"no \"traceEvents\" array in the first {MAX_META_BYTES} bytes;"
                                  " expected it near the start")
            searched = max(start, len(buf) - 16)
            buf += self._read()

    def _key_position(self, buf: bytes, start: int, from_pos: int) -> tuple[int, int] | None:
        """(start of the "traceEvents" key, index after its '[') if it is a top-level key."""
        i = buf.find(b'"traceEvents"', from_pos)
        while i >= 0:
            m = _KEY.match(buf, i)
            if m:
                _, depth = structure(buf[start:i])
                outside_strings = len(_quotes(np.frombuffer(buf[start:i], dtype=np.uint8))) % 2 == 0
                if outside_strings and len(depth) and int(depth[-1]) == 1:
                    return i, m.end()
            i = buf.find(b'"traceEvents"', i + 1)
        return None

    # -- the events ------------------------------------------------------------------
    def chunks(self) -> Iterator[Chunk]:
        try:
            buf = self._find_array()
            if self._prefix and self.on_prefix:
                self.on_prefix(self._meta(self._prefix + b'"traceEvents": []}'))
            yield from self._events(buf)
        finally:
            self.close()

    def _events(self, buf: bytes) -> Iterator[Chunk]:
        # Each read is copied twice on the usual path, without the GIL (blocks.joined): onto the tail of the last
        # chunk (once: _look_ahead's join is taken again), then into its chunk "[...]"; the leading comma skipped.
        checked = None  # the stream offset whose unfinished event was checked for bad JSON
        while True:
            if not self.eof and len(buf) < self.block:
                buf += self._read()
                continue
            lead = _WS_COMMA.match(buf).end()
            if buf[lead:lead + 1] == b"]":
                self.pos += lead
                self._suffix(buf[lead + 1:])
                return
            if not self.eof:
                # an event known to go on past the last read: only the exact scan, from where it stopped
                unfinished = self._partial is not None and self._partial[0] == self.pos + lead
                chunk, rest = (None, buf) if unfinished else self._fast_cut(buf, lead)
                if chunk is None:
                    if lead:
                        buf, self.pos = buf[lead:], self.pos + lead
                    chunk, rest, closed = self._exact_cut(buf)
                    if closed is not None:
                        if chunk is not None:
                            yield chunk
                        self._suffix(closed)
                        return
                    if chunk is not None:
                        self._grow()
                if chunk is None:
                    if len(buf) >= self.block and checked != self.pos:
                        # a block without one whole event: a bad byte (it lies in this block, so one check
                        # per event, not one at each read of a huge event), or one huge event
                        fail_if_malformed(self.label, buf, self.pos, self.result.events)
                        checked = self.pos
                    if len(buf) > MAX_EVENT_BYTES:
                        raise IngestError(self.label, f"an event longer than {MAX_EVENT_BYTES} bytes;"
                                          " expected events of reasonable size", f"byte {self.pos}")
                    if not isinstance(buf, bytearray):  # an event of many blocks grows in place, not by a
                        buf = bytearray(buf)  # copy of all of it at each read (quadratic to the 512 MB limit)
                    buf += self._read()
                    continue
                yield chunk
                buf = rest
                continue
            # end of input: the array must close here, or the file was cut off
            buf = bytes(buf) if isinstance(buf, bytearray) else buf
            self.pos += lead
            chunk, rest, closed = self._final_cut(buf, lead)
            if chunk is not None:
                yield chunk
            if closed is not None:
                self._suffix(closed)
            else:
                self._cut_off(rest)
            return

    def _decode(self, raw: bytes, offset: int) -> Chunk:
        """A chunk from raw = "[" + events text + "]" whose first event starts at stream byte `offset`."""
        events = self._ahead.decoded(raw, offset)
        c = Chunk(events, raw, offset, self.result.events)
        self.result.events += len(events)
        return c

    def _try(self, raw: bytes, offset: int) -> Chunk | None:
        try:
            return self._decode(raw, offset)
        except (msgspec.DecodeError, RecursionError):
            return None

    def _chunk_raw(self, buf: bytes, start: int, end: int) -> bytes:
        """ "[" + buf[start:end] + "]" in one copy; the speculated chunk's own bytes when it is that one."""
        ahead = self._ahead.raw(self.pos + start, end - start + 2)
        return ahead if ahead is not None else bracketed(buf, start, end)

    def _fast_cut(self, buf: bytes, lead: int = 0):
        p = candidate(buf, lead, self.block)
        if p is None:
            return None, buf
        c = self._try(self._chunk_raw(buf, lead, p + 1), self.pos + lead)
        if c is None:
            return None, buf
        self.pos += p + 1
        self._grow()  # before the next chunk is speculated: the main loop then cuts at the same place
        return c, self._speculate(buf[p + 1:])

    # -- decoding the next chunks while the caller works on this one ----------------------
    def _speculate(self, rest: bytes) -> bytes:
        """Reads ahead to the next chunk's fast-cut candidate and starts decoding it in a thread
        (ingest/chrome/ahead.py), and the chunk after it too (_look_ahead). Nothing about the result
        changes: the main loop computes the same candidate from the same bytes (this very buffer,
        returned to it) and takes a decode only for exactly its chunk."""
        if not self.speculate:
            return rest
        rest = self._ahead.take_joined(self.pos, rest)
        while not self.eof and len(rest) < self.block:
            rest = joined((rest, data)) if (data := self._read()) else rest
        lead = _WS_COMMA.match(rest).end()
        if rest[lead:lead + 1] == b"]":
            return rest
        if self.eof:  # the last events: _final_cut's plan for these bytes, its chunk decoded here too
            self._final = (rest, lead, final_plan(rest, lead, self._suffix_ok))
            if self._final[2] is not None and self._final[2][2] is not None:
                self._ahead.submit(self.pos + lead, self._final[2][2])
            return rest
        p = candidate(rest, lead, self.block)
        if p is not None:
            self._ahead.submit(self.pos + lead, self._chunk_raw(rest, lead, p + 1))
            self._look_ahead(rest[p + 1:], self.pos + p + 1)
        return rest

    def _look_ahead(self, tail: bytes, at: int) -> None:
        """The chunk after the one just started, from `tail` (stream offset `at`), started too: read as _speculate
        will read it (to the block _fast_cut will have grown to), the reads kept for _read to hand over again
        and their join for _speculate. The end of the input is left to the main loop."""
        if len(self._ahead) >= DEPTH or self._ahead.stash:
            return
        block = min(self.max_block, self.block * 2)
        reads, size = [], len(tail)
        while size < block:
            try:
                data, truncated = self._read_source()
            except Exception as e:  # bad bytes in a compressed stream: raised where _read meets them
                data, truncated = e, None
            self._ahead.stash.append((data, truncated))
            if not isinstance(data, bytes) or not data:
                return
            reads.append(data)
            size += len(data)
        tail = joined([tail, *reads]) if reads else tail  # one copy, without the GIL (blocks.joined)
        self._ahead.joined = (at, tail, reads)  # taken again by _speculate (ChunksAhead.take_joined)
        lead = _WS_COMMA.match(tail).end()
        p = candidate(tail, lead, block) if tail[lead:lead + 1] != b"]" else None
        if p is not None:
            self._ahead.submit(at + lead, bracketed(tail, lead, p + 1))

    def _exact_cut(self, buf: bytes):
        """(chunk or None, rest, bytes after the array's ']' or None) from a structural scan. An event
        that does not end in buf is scanned on from where the last scan of it stopped as more arrives
        (`_partial`), not from its start at every read (quadratic: a 100 MB event took 8.7 s)."""
        partial, self._partial = self._partial, None
        resume = partial[1] if partial is not None and partial[0] == self.pos and partial[1][0] <= len(buf) else None
        st, depth, state = structure_from(buf, resume) if resume is not None else structure_from(buf)
        closes = np.flatnonzero(depth < 0)
        end_at = len(buf)
        closed = None
        if len(closes):
            k = int(st[closes[0]])
            end_at, closed = k, bytes(buf[k + 1:])
        ends = st[(depth == 0) & (st < end_at)]
        if closed is None and len(ends):  # the last event to end within the block, else the first to end at all
            inside = ends[ends < self.block]
            ends = inside if len(inside) else ends[:1]
        p = int(ends[-1]) if len(ends) else -1
        if closed is not None:
            tail = buf[p + 1:end_at].strip(_WS + b",")
            if tail:
                raise IngestError(self.label, f"unexpected {tail[:40]!r} in the event array; expected"
                                  " events (JSON objects)", f"byte {self.pos + p + 1}")
        if p < 0:
            if closed is None:
                self._partial = (self.pos, state)
            return None, buf, closed
        text = buf[:p + 1]
        chunk = self._decode_or_fail(text)
        self.pos += p + 1
        return chunk, bytes(buf[p + 1:]), closed

    def _final_cut(self, buf: bytes, lead: int):
        """At end of input, the events from buf[lead:] (stream offset self.pos): the array's close found
        by final_plan (the one _speculate made for these very bytes, if any), else by the exact scan."""
        made, self._final = self._final, None
        plan = made[2] if made is not None and made[0] is buf and made[1] == lead else \
            final_plan(buf, lead, self._suffix_ok)
        if plan is not None:
            p, after, raw = plan
            if raw is None:
                return None, b"", after
            c = self._try(raw, self.pos)
            if c is not None:
                self.pos += p - lead
                return c, b"", after
        return self._exact_cut(buf[lead:])

    def _suffix_ok(self, after: bytes) -> bool:
        if not self._prefix:
            return not after.strip(_WS)
        try:
            json.loads(b'{"_": 0' + after)
            return True
        except ValueError:
            return False

    def _decode_or_fail(self, text: bytes) -> Chunk:
        try:
            return self._decode(b"[" + text + b"]", self.pos)
        except RecursionError:
            raise IngestError(self.label, "JSON nested too deeply inside an event (over 1000 levels);"
                              " expected flat event objects", f"bytes {self.pos}-{self.pos + len(text)}") from None
        except msgspec.DecodeError as e:
            raise decode_error(self.label, e, text, self.pos, self.result.events) from None

    def _suffix(self, after: bytes) -> None:
        """Reads what follows the array (bounded) and decodes the top-level metadata."""
        tail = after
        while not self.eof and len(tail) <= MAX_META_BYTES:
            tail += self._read()
        if not self._prefix:
            self.result.ignored_tail = len(tail.strip(_WS))
            return
        self.result.meta = self._meta(self._prefix + b'"traceEvents": []' + tail)

    def _cut_off(self, rest: bytes) -> None:
        partial = rest.strip(_WS + b",")
        if partial:
            lead = _WS_COMMA.match(rest).end()
            fail_if_malformed(self.label, rest[lead:], self.pos + lead, self.result.events)
        why = f" because {self.result.truncated}" if self.result.truncated else ""
        self.result.cut_off = (
            f"the event array is cut off at byte {self.pos + len(rest)} (no closing ']'){why}; loaded its"
            f" {self.result.events} whole events" + (", dropped the partial last one" if partial else "")
        )
        self.result.partial_event = bool(partial)
        if self._prefix:
            self.result.meta = self._meta(self._prefix + b'"traceEvents": []}')

    def _meta(self, text: bytes) -> dict:
        """The top-level keys of `text` (the keys before the array, an empty one, what follows); {} if not JSON."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            if e.pos < len(self._prefix):
                self.result.bad_prefix = (f"the top-level keys before the event array are not valid JSON at byte"
                                          f" {self._prefix_at + e.pos} (near {self._prefix[e.pos:e.pos + 24]!r}):"
                                          " they were ignored, the events were read")
            else:
                self.result.ignored_tail = len(text)
            return {}
        except (ValueError, RecursionError):
            self.result.ignored_tail = len(text)
            return {}
        if isinstance(d, dict):
            later = d.pop("traceEvents", None)  # (json keeps the last of a key given twice: the array not read)
            self.result.unread = len(later) if isinstance(later, list) else 0
            return d
        return {}
