"""An upload ingested as it arrives (ingest/arriving.py): the reader waits at the end of what has
been written until the writer marks the file complete or failed; archives wait for the whole file;
the trace built equals the one built from the finished file."""

from __future__ import annotations

import gzip
import json
import threading
import time
import zipfile
from pathlib import Path

import duckdb
import pytest

from acceltrace.ingest import pipeline, sources
from acceltrace.ingest.arriving import Arriving, ArrivingReader
from acceltrace.store.catalog import Store
from acceltrace.store.errors import IngestError


def _trace(n: int = 3000) -> bytes:
    events = [{"ph": "X", "name": f"op{i % 11}", "ts": i * 10, "dur": 4 + i % 5, "pid": 1, "tid": 1 + i % 3,
               "args": {"i": i}} for i in range(n)]
    return json.dumps({"traceEvents": events}).encode()


class _Writer(threading.Thread):
    """Writes `data` to `path` in `pieces`, pausing between them, then marks it complete (or failed)."""

    def __init__(self, path: Path, data: bytes, pieces: int = 8, pause_s: float = 0.03, fail: str | None = None,
                 stop_at: int | None = None):
        super().__init__(daemon=True)
        self.path, self.data, self.pieces, self.pause_s, self.fail, self.stop_at = \
            path, data, pieces, pause_s, fail, stop_at
        self.written_at_end = None
        self.path.write_bytes(b"")

    def run(self) -> None:
        step = -(-len(self.data) // self.pieces)
        end = len(self.data) if self.stop_at is None else self.stop_at
        with open(self.path, "ab") as f:
            for lo in range(0, end, step):
                f.write(self.data[lo:min(lo + step, end)])
                f.flush()
                time.sleep(self.pause_s)
        self.written_at_end = time.monotonic()
        if self.fail is not None:
            Arriving.failed(self.path, self.fail)
        else:
            Arriving.complete(self.path, len(self.data))


def test_the_reader_waits_for_every_byte_and_ends_only_at_the_complete_mark(tmp_path):
    data = bytes(range(256)) * 4000
    path = tmp_path / "up.json"
    w = _Writer(path, data, pieces=10)
    w.start()
    r = ArrivingReader(Arriving(path, len(data)))
    got = bytearray()
    buf = bytearray(7919)
    while n := r.readinto(buf):
        got += buf[:n]
    ended = time.monotonic()
    w.join()
    assert bytes(got) == data
    assert ended >= w.written_at_end  # not before the writer was done


def test_a_failed_mark_fails_the_read_naming_the_file_and_why(tmp_path):
    data = _trace(500)
    path = tmp_path / "up.json"
    w = _Writer(path, data, pieces=4, stop_at=len(data) // 2, fail="upload exceeds the limit of 10 bytes")
    w.start()
    r = ArrivingReader(Arriving(path))
    with pytest.raises(IngestError) as e:
        while r.readinto(bytearray(4096)):
            pass
    assert "up.json" in str(e.value) and "did not arrive whole" in str(e.value)
    assert "exceeds the limit" in str(e.value)


def test_a_failed_mark_stops_a_reader_that_still_gets_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(ArrivingReader, "CHECK_BYTES", 1000)
    path = tmp_path / "dup.json"
    path.write_bytes(b"x" * 100_000)
    Arriving.failed(path, "the same content is already stored")
    r = ArrivingReader(Arriving(path))
    with pytest.raises(IngestError, match="already stored"):
        while r.readinto(bytearray(512)):
            pass


def test_a_stalled_upload_fails_after_its_stall_time(tmp_path, monkeypatch):
    monkeypatch.setattr(Arriving, "STALL_S", 0.2)
    path = tmp_path / "slow.json"
    path.write_bytes(b'{"traceEvents": [')
    r = ArrivingReader(Arriving(path))
    r.readinto(bytearray(100))
    with pytest.raises(IngestError, match="stalled"):
        r.readinto(bytearray(100))


@pytest.mark.parametrize("gz", [False, True])
def test_a_trace_ingested_as_it_arrives_equals_the_finished_files(tmp_path, gz):
    data = _trace()
    if gz:
        data = gzip.compress(data)
    name = "t.json.gz" if gz else "t.json"
    whole = tmp_path / "whole" / name
    whole.parent.mkdir()
    whole.write_bytes(data)
    (ref,) = pipeline.ingest_paths(Store(tmp_path / "a"), [whole], views=False)
    assert ref.error is None, ref.error

    path = tmp_path / "up" / name
    path.parent.mkdir()
    w = _Writer(path, data, pieces=12, pause_s=0.02)
    w.start()
    store = Store(tmp_path / "b")
    trace_id, tmp = store.begin(name, len(data), None)
    res = pipeline.ingest_one(store, [path], name, trace_id=trace_id, tmp_path=tmp, views=False,
                              arriving=Arriving(path, len(data)))
    w.join()
    assert res.error is None, res.error
    assert res.counts == ref.counts
    rows = []
    for root, tid in ((tmp_path / "a", ref.id), (tmp_path / "b", trace_id)):
        con = duckdb.connect(str(root / "traces" / f"{tid}.duckdb"), read_only=True)
        rows.append(con.execute("SELECT slice_id, track_id, ts, dur, depth, name, args FROM slices"
                                " ORDER BY slice_id").fetchall())
        con.close()
    assert rows[0] == rows[1] and len(rows[0]) == 3000


def test_an_archive_is_read_once_it_is_whole(tmp_path):
    zpath = tmp_path / "z.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("rank0.json", _trace(200))
    data = zpath.read_bytes()
    path = tmp_path / "up.zip"
    w = _Writer(path, data, pieces=6, pause_s=0.05)
    w.start()
    srcs = sources.open_sources(path, arriving=Arriving(path, len(data)))
    assert w.written_at_end is not None  # it waited for the writer to finish (a zip's directory is at its end)
    assert [s.name for s in srcs] == ["up.zip!rank0.json"] and all(s.arriving is None for s in srcs)


def test_a_reader_of_random_access_gets_the_whole_file(tmp_path):
    data = _trace(300)
    path = tmp_path / "up.json"
    w = _Writer(path, data, pieces=6, pause_s=0.05)
    w.start()
    (src,) = sources.open_sources(path, arriving=Arriving(path, len(data)))
    assert src.path is None and src.arriving is not None  # no half-written path handed to a random-access reader
    out = src.materialize(tmp_path / "work")
    assert out.read_bytes() == data


def test_a_file_shorter_than_its_complete_mark_fails_instead_of_waiting(tmp_path):
    path = tmp_path / "short.json"
    path.write_bytes(b'{"traceEvents": []}')
    Arriving.complete(path, 1000)
    r = ArrivingReader(Arriving(path))
    assert r.readinto(bytearray(100)) == 19
    with pytest.raises(IngestError, match="marked complete at 1000 bytes"):
        r.readinto(bytearray(100))


def test_the_last_bytes_written_between_a_read_and_the_mark_s_check_are_read(tmp_path, monkeypatch):
    """The writer writes its last bytes and marks the file complete just after a read came back empty, before
    the reader looks for the mark: the reader reads them (it refused the upload as short, a real drop's race)."""
    data = bytes(range(256)) * 40
    path = tmp_path / "race.json"
    path.write_bytes(data[:5000])
    arriving = Arriving(path)
    check = Arriving.check

    def writer_finishes_now(self):
        if not Path(str(path) + ".complete").exists():
            with open(path, "ab") as f:
                f.write(data[5000:])
            Arriving.complete(path, len(data))
        return check(self)

    monkeypatch.setattr(Arriving, "check", writer_finishes_now)
    r = ArrivingReader(arriving)
    got, buf = bytearray(), bytearray(4096)
    while n := r.readinto(buf):
        got += buf[:n]
    assert bytes(got) == data


def test_a_gzip_of_undeclared_size_is_read_once_whole(tmp_path):
    """Its decompression budget goes by its size: the first bytes of a chunked upload would set it far too
    low, so it waits for the whole file (a declared size lets it be read as it arrives)."""
    data = gzip.compress(_trace(300))
    path = tmp_path / "up.json.gz"
    w = _Writer(path, data, pieces=6, pause_s=0.05)
    w.start()
    (src,) = sources.open_sources(path, arriving=Arriving(path, None))
    assert w.written_at_end is not None and src.arriving is None
    w.join()
    path2 = tmp_path / "declared.json.gz"
    w2 = _Writer(path2, data, pieces=6, pause_s=0.05)
    w2.start()
    (src2,) = sources.open_sources(path2, arriving=Arriving(path2, len(data)))
    assert src2.arriving is not None  # read as it arrives
    with src2.open() as f:
        assert f.read() == gzip.decompress(data)
    w2.join()
