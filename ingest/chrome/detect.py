"""Is this JSON a Chrome trace? Decided by structure, wherever the deciding key sits.

A Chrome trace is a top-level array of events, or a top-level object with a `traceEvents`
key (Kineto and harnesses may put tens of KB of `metadata`, `deviceProperties` and the like
before it). `top_level_keys` walks the top-level object's keys in a stream without building
any value: values are skipped by a tokenizer over blocks (strings with their escapes,
brackets and braces counted), so it runs at regex speed and in bounded memory.
"""

from __future__ import annotations

import re
from typing import BinaryIO

TRACE_KEYS = ("traceEvents", "systemTraceEvents")  # either makes an object a Chrome trace
BLOCK = 1 << 20
MAX_KEYS_REPORTED = 12

# a string (closed, or running to the block's end: then carried over), or a structural character
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:(?P<closed>")|\\?\Z)|[{}\[\]:,]', re.S)
_WS = b" \t\r\n"


def top_level_keys(stream: BinaryIO, stop_at: tuple[str, ...] = TRACE_KEYS) -> tuple[str, list[str], bool]:
    """(kind, keys, complete): kind is 'object', 'array', 'empty' or 'other' (by the first byte
    after a BOM and white space); for an object, its top-level keys in order up to and including
    the first key in stop_at; complete says the walk reached a stop key or the object's end."""
    buf = stream.read(BLOCK)
    if buf.startswith(b"\xef\xbb\xbf"):
        buf = buf[3:]
    buf = buf.lstrip(_WS)
    while not buf:
        more = stream.read(BLOCK)
        if not more:
            return "empty", [], True
        buf = more.lstrip(_WS)
    if buf[:1] == b"[":
        return "array", [], True
    if buf[:1] != b"{":
        return "other", [], True
    keys: list[str] = []
    depth, expect_key, pos = 0, False, 0
    while True:
        carry = b""
        for m in _TOKEN.finditer(buf, pos):
            tok = m.group()
            c = tok[:1]
            if c == b'"' and m.group("closed") is None:
                carry = tok  # the block ends inside this string
                break
            if c == b'"':
                if depth == 1 and expect_key:
                    key = _decode_key(tok)
                    keys.append(key)
                    if key in stop_at:
                        return "object", keys, True
                    expect_key = False
            elif c in b"{[":
                depth += 1
                if depth == 1:
                    expect_key = True
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return "object", keys, True
            elif c == b"," and depth == 1:
                expect_key = True
        more = stream.read(BLOCK)
        if not more:
            return "object", keys, False
        buf, pos = carry + more, 0


def _decode_key(tok: bytes) -> str:
    text = tok[1:-1].decode("utf-8", "replace")
    if "\\" in text:
        import json

        try:
            text = json.loads(tok.decode("utf-8", "replace"))
        except ValueError:
            pass
    return text


def describe(kind: str, keys: list[str], complete: bool) -> str:
    """What was found, for the refusal of a JSON file that is not a Chrome trace."""
    if kind == "empty":
        return "the file is empty"
    if kind != "object":
        return "the content is not a JSON object or array"
    if not keys:
        return "a JSON object with no keys" if complete else "a JSON object cut off before its first key"
    shown = ", ".join(keys[:MAX_KEYS_REPORTED]) + (f" and {len(keys) - MAX_KEYS_REPORTED} more"
                                                  if len(keys) > MAX_KEYS_REPORTED else "")
    tail = "" if complete else " (the file ends inside the object)"
    return f"a JSON object whose top-level keys are {shown}, with no traceEvents{tail}"
