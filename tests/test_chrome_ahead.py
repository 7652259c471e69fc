"""Chunks decoded two ahead on the scan thread (ingest/chrome/ahead.py): the reads made for the second are
handed to the reader again in order, so chunks, offsets, errors and reports equal a reader's without it."""

import io
import json
import random
import threading

import pytest

from acceltrace.ingest.chrome import ahead as ahead_mod
from acceltrace.ingest.chrome import reader as chrome_reader
from acceltrace.ingest.chrome.columns import decode_events
from acceltrace.store.errors import IngestError


def _event(i: int, arg: str) -> bytes:
    return json.dumps({"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {"k": arg}}).encode()


def _read_all(stream, prefetch: bool, block: int = 2048, slow: float = 0.0):
    threads = []

    def decode(raw):
        threads.append(threading.current_thread().name)
        return decode_events(raw)

    reader = chrome_reader.ChromeReader(stream, "t.json", decode, block=block, prefetch=prefetch)
    chunks = []
    try:
        for c in reader.chunks():
            chunks.append((c.offset, c.first_index, len(c.events), c.raw))
            if slow:  # the caller turning the chunk into rows: the scan thread runs ahead meanwhile
                threading.Event().wait(slow)
    except Exception as e:
        chunks.append(repr(e))
    r = reader.result
    return (chunks, r.events, r.cut_off, r.partial_event, r.truncated, r.meta), threads


@pytest.fixture
def queued(monkeypatch):
    """The most chunks on their way at once, seen after each start."""
    seen = []
    submit = ahead_mod.ChunksAhead.submit

    def recording(self, at, raw):
        submit(self, at, raw)
        seen.append(len(self))

    monkeypatch.setattr(ahead_mod.ChunksAhead, "submit", recording)
    return seen


@pytest.mark.parametrize("ending", [b"]}", b"", b"]} junk"])
def test_two_chunks_ahead_read_as_one_reader_in_line_does(queued, ending):
    body = b", ".join(_event(i, "x" * (i % 70)) for i in range(600))
    text = b'{"traceEvents": [' + body + ending
    ahead, threads = _read_all(io.BytesIO(text), prefetch=True, slow=0.002)
    assert max(queued) == 2  # a second chunk was on its way while the first was still taken
    inline, _ = _read_all(io.BytesIO(text), prefetch=False)
    assert ahead == inline
    assert len(ahead[0]) > 10
    assert sum(t.startswith("chrome-scan") for t in threads) >= len(ahead[0]) - 2  # all but the first few


def test_cuts_that_fail_inside_strings_are_dropped_and_read_again():
    """'},' inside strings makes the fast cut guess wrong: a chunk decoded ahead from a wrong guess is
    never used, and the one after it, cut from the same guess, is dropped with it."""
    body = b", ".join(_event(i, '}, {"ph": "X"}, ' * (i % 9)) for i in range(500))
    text = b'{"traceEvents": [' + body + b"]}"
    assert _read_all(io.BytesIO(text), prefetch=True, block=1024)[0] == \
        _read_all(io.BytesIO(text), prefetch=False, block=1024)[0]


class _FailsAt(io.BytesIO):
    """A stream whose reads fail past a byte, as a corrupt compressed stream's do."""

    def __init__(self, data: bytes, at: int):
        super().__init__(data)
        self.at = at

    def read(self, n=-1):
        if self.tell() >= self.at:
            raise IngestError("t.json.gz", "invalid compressed data", f"decompressed byte {self.tell()}")
        return super().read(n)


def test_a_read_that_fails_ahead_fails_as_the_reader_in_line_does(queued):
    """The error of a read made for a chunk two ahead waits with the reads until the reader gets there:
    the same error, and no chunk the reader in line would not have given before it (reading ahead at
    all, one chunk or two, may end the chunks given before the error sooner: the ingest fails either way)."""
    body = b", ".join(_event(i, "y" * (i % 40)) for i in range(800))
    text = b'{"traceEvents": [' + body + b"]}"
    for at in (5000, 20000, 40000):
        queued.clear()
        ahead, _ = _read_all(_FailsAt(text, at), prefetch=True, slow=0.001)
        inline, _ = _read_all(_FailsAt(text, at), prefetch=False)
        assert "invalid compressed data" in ahead[0][-1] and ahead[0][-1] == inline[0][-1]
        assert ahead[0][:-1] == inline[0][:len(ahead[0]) - 1]
        assert at == 5000 or max(queued) == 2


class _ShortReads(io.BytesIO):
    """A stream whose reads return fewer bytes than asked, by a seeded random amount (a pipe, a socket,
    an upload arriving, a decompressor's output)."""

    def __init__(self, data: bytes, seed: int):
        super().__init__(data)
        self.rng = random.Random(seed)

    def read(self, n=-1):
        return super().read(self.rng.randint(1, n) if n and n > 0 else n)


@pytest.mark.parametrize("arg", ["x", '}, {"ph": "X"}, '])  # the fast cut, and cuts guessed inside strings
def test_chunks_end_where_the_bytes_put_them_whatever_the_reads_return(arg):
    """Track ids follow the order tracks first appear chunk by chunk, so the chunks must not depend on
    how many bytes each read returned (they did: two ingests of one file could number tracks apart)."""
    body = b", ".join(_event(i, arg * (i % 13)) for i in range(1500))
    text = b'{"traceEvents": [' + body + b"]}"
    cuts = set()
    for prefetch in (False, True):
        for seed in range(4):
            got, _ = _read_all(_ShortReads(text, seed), prefetch=prefetch, block=4096)
            cuts.add(tuple((offset, len(raw)) for offset, _, _, raw in got[0]))
    assert len(cuts) == 1 and len(next(iter(cuts))) > 20


def test_reads_follow_the_chunks_so_a_cut_carries_one_event_and_each_read_is_joined_once(monkeypatch):
    """Reads are sized in the chunks' own schedule (blocks.read_sizes): what a cut leaves to carry into
    the next chunk is the slack and the events' starts cut so far (~130 B a chunk), not most of a read;
    and the look-ahead's join of that tail with the next read is the one the reader goes on with, not
    joined a second time. The chunks are a reader's without prefetch."""
    from acceltrace.ingest.chrome import blocks

    monkeypatch.setattr(chrome_reader, "FIRST_BLOCK_BYTES", 4096)
    monkeypatch.setattr(blocks, "READ_SLACK", 1024)
    body = b", ".join(_event(i, "x" * (i % 50)) for i in range(3000))
    text = b'{"traceEvents": [' + body + b"]}"
    sizes, tails, taken = [], [], []

    class Recording(io.BytesIO):
        def read(self, n=-1):
            sizes.append(n)
            return super().read(n)

    take = ahead_mod.ChunksAhead.take_joined

    def recording(self, at, rest):
        out = take(self, at, rest)
        tails.append(len(rest))
        taken.append(out is not rest)
        return out

    monkeypatch.setattr(ahead_mod.ChunksAhead, "take_joined", recording)
    got, _ = _read_all(Recording(text), prefetch=True, block=32768)
    want, _ = _read_all(io.BytesIO(text), prefetch=False, block=32768)
    assert got == want and len(got[0]) > 10
    assert sizes[:5] == [4096 + 1024, 8192, 16384, 32768, 32768]
    # the slack, then one event's start more at each cut at most (the cut falls before the block's end)
    assert len(tails) > 8 and tails[0] < 1024 + 200 and all(b - a < 200 for a, b in zip(tails, tails[1:])), tails
    assert sum(taken) >= len(taken) - 2, taken  # all but the first two (no look-ahead before them)


def test_the_last_chunk_is_cut_before_log_arrays_that_follow_the_events(monkeypatch):
    """Newer Kineto writes "INFO" and "ERROR" arrays of log lines after the events, each line with a ']'
    of its own (MTIA's trace: 34 of them). The end-of-input cut passes over every ']' that does not close
    an event, so the last chunk is the one decoded ahead, not found again by the structural scan and
    decoded a second time on the caller's thread (50-70 ms of MTIA's 87 MB); the same events as before."""
    from acceltrace.ingest.chrome import blocks

    logs = [f"INFO:2024-11-11 10:02:56 3100453:{i} CuptiActivityProfiler.cpp:{i}] [Profiler] step {i}"
            for i in range(40)]
    body = b", ".join(_event(i, "x" * (i % 70)) for i in range(600))
    suffix = (b'\n  ],\n  "INFO": ' + json.dumps(logs).encode() + b',\n  "ERROR": ["E: [x] failed]"],'
              b'\n  "traceName": "t.json"\n}')
    text = b'{"traceEvents": [' + body + suffix
    plan = blocks.final_plan(text, text.index(b"[") + 1, lambda after: bool(json.loads(b'{"_": 0' + after)))
    assert plan is not None and text[plan[0] + 1:].startswith(b',\n  "INFO"')
    at_end, exact = [], []
    final_cut, exact_cut = chrome_reader.ChromeReader._final_cut, chrome_reader.ChromeReader._exact_cut

    def final(self, buf, lead):
        at_end.append(1)
        try:
            return final_cut(self, buf, lead)
        finally:
            at_end.pop()

    monkeypatch.setattr(chrome_reader.ChromeReader, "_final_cut", final)
    monkeypatch.setattr(chrome_reader.ChromeReader, "_exact_cut",
                        lambda self, buf: exact.append(bool(at_end)) or exact_cut(self, buf))
    got, threads = _read_all(io.BytesIO(text), prefetch=True, block=16384, slow=0.002)
    assert exact == [], exact  # the last chunk came from the cut made ahead (not found by the exact scan)
    assert got[1] == 600 and got[5]["traceName"] == "t.json" and len(got[5]["INFO"]) == 40
    monkeypatch.undo()
    assert got == _read_all(io.BytesIO(text), prefetch=False, block=16384)[0]
