"""The .atrace file: round trip, cut-off tails, corrupt chunks, newer versions, tiny chunks."""

import io
import struct

import numpy as np
import pytest

from acceltrace.formats import record as R
from acceltrace.formats.atrace.layout import CHUNK_HEADER, FILE_HEADER, MAGIC, AtraceError
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.formats.atrace.writer import AtraceWriter, default_header


def _write(n_events=1000, chunk_events=100, **hdr):
    buf = io.BytesIO()
    w = AtraceWriter(buf, default_header(**hdr), chunk_events=chunk_events)
    name = w.intern("op")
    recs = np.zeros(n_events, R.RECORD_DTYPE)
    recs["kind"], recs["name"], recs["ts"] = R.COMPLETE, name, np.arange(n_events) * 10
    recs["dur"] = 5
    w.add_records(recs)
    w.add_clock_sync(1, [0, 1000], [0, 1500])
    w.close(lost_events=3, producers=[{"stream": 0, "lost": 3}])
    return buf.getvalue()


def test_round_trip_keeps_records_strings_sync_and_trailer():
    data = _write(devices=[{"index": 0, "link_gen": 4}])
    r = AtraceReader.from_bytes(data)
    recs, streams = r.read_all()
    assert len(recs) == 1000 and recs["ts"][-1] == 9990 and set(streams.tolist()) == {0}
    assert r.strings[0][recs["name"][0]] == "op"
    assert r.sync["host_ns"].tolist() == [0, 1000] and r.sync["dev_ticks"].tolist() == [0, 1500]
    assert r.lost_events() == (3, {0: 3})
    assert r.header["devices"][0]["link_gen"] == 4
    assert r.problems == []


def test_cut_off_file_reads_to_its_last_whole_chunk_with_a_warning():
    data = _write()
    # cut in the middle of the 5th events chunk: 4 chunks of 100 survive
    cut = FILE_HEADER.size
    r_full = AtraceReader.from_bytes(data)
    ev = r_full.event_chunks()
    cut = ev[4].offset + CHUNK_HEADER.size + 640
    r = AtraceReader.from_bytes(data[:cut])
    recs, _ = r.read_all()
    assert len(recs) == 400
    assert r.trailer is None
    assert len(r.problems) == 1 and "cut short" in r.problems[0].message
    assert r.problems[0].offset == ev[4].offset


def test_cut_inside_a_chunk_header_is_also_a_clean_cut():
    data = _write()
    ev = AtraceReader.from_bytes(data).event_chunks()
    r = AtraceReader.from_bytes(data[: ev[2].offset + 7])
    assert len(r.read_all()[0]) == 200
    assert "chunk header" in r.problems[0].message


def test_corrupt_event_chunk_is_skipped_and_reported_with_its_offset():
    data = bytearray(_write())
    ev = AtraceReader.from_bytes(bytes(data)).event_chunks()
    data[ev[3].offset + CHUNK_HEADER.size + 100] ^= 0xFF
    r = AtraceReader.from_bytes(bytes(data))
    recs, _ = r.read_all()
    assert len(recs) == 900
    (p,) = r.problems
    assert p.offset == ev[3].offset and "CRC32" in p.message and p.dropped_events == 100


def test_corrupt_chunk_header_stops_reading_there():
    data = bytearray(_write())
    ev = AtraceReader.from_bytes(bytes(data)).event_chunks()
    struct.pack_into("<I", data, ev[5].offset, 999)  # unknown chunk type
    r = AtraceReader.from_bytes(bytes(data))
    assert len(r.read_all()[0]) == 500
    assert r.problems[0].offset == ev[5].offset and "corrupt chunk header" in r.problems[0].message


def test_newer_major_version_is_refused_clearly():
    data = bytearray(_write())
    struct.pack_into("<H", data, 8, 2)
    with pytest.raises(AtraceError, match="newer acceltrace.*version 2.0.*upgrade"):
        AtraceReader.from_bytes(bytes(data))


def test_newer_minor_version_is_read():
    data = bytearray(_write())
    struct.pack_into("<H", data, 10, 7)
    assert AtraceReader.from_bytes(bytes(data)).version == (1, 7)


def test_not_an_atrace_file_is_refused_at_byte_0():
    with pytest.raises(AtraceError, match="not an .atrace file") as e:
        AtraceReader.from_bytes(b"{" + b"\0" * 40)
    assert e.value.offset == 0


def test_strings_are_written_before_the_events_that_use_them():
    buf = io.BytesIO()
    w = AtraceWriter(buf, chunk_events=2)
    for i in range(10):
        w.add_records(R.encode(R.INSTANT, w.intern(f"name{i}"), ts=i))
    w.close()
    # walk chunks in order: every event's name must already be defined
    r = AtraceReader.from_bytes(buf.getvalue())
    known = {0}
    from acceltrace.formats.atrace.layout import EVENTS, STRINGS

    data = buf.getvalue()
    for ch in r.chunks:
        payload = data[ch.payload_offset: ch.payload_offset + ch.length]
        if ch.type == STRINGS:
            (count,) = struct.unpack_from("<I", payload)
            pos = 4
            for _ in range(count):
                sid, n = struct.unpack_from("<II", payload, pos)
                known.add(sid)
                pos += 8 + n
        elif ch.type == EVENTS:
            assert set(R.decode(payload)["name"].tolist()) <= known


def test_file_written_chunk_by_chunk_reads_the_same_as_in_one_piece(tmp_path):
    data = _write(n_events=257, chunk_events=7)
    p = tmp_path / "t.atrace"
    p.write_bytes(data)
    a = AtraceReader.open(p)
    b = AtraceReader.from_bytes(data)
    assert a.read_all()[0].tobytes() == b.read_all()[0].tobytes()
    # batches of any size concatenate to the same records
    got = np.concatenate([x for x, _ in a.iter_events(batch_events=3)])
    assert got.tobytes() == b.read_all()[0].tobytes()
    assert data.startswith(MAGIC)


def test_tail_follower_reads_a_file_growing_a_few_bytes_at_a_time(tmp_path):
    from acceltrace.formats.atrace.follower import AtraceTail

    data = _write(n_events=300, chunk_events=37)
    p = tmp_path / "grow.atrace"
    p.write_bytes(b"")
    tail = AtraceTail(p)
    got = []
    with open(p, "ab") as f:
        for off in range(0, len(data), 101):  # pieces that end anywhere: inside headers and payloads
            f.write(data[off: off + 101])
            f.flush()
            recs, _ = tail.poll()
            got.append(recs)
    recs = np.concatenate(got)
    assert recs.tobytes() == AtraceReader.from_bytes(data).read_all()[0].tobytes()
    assert tail.trailer["lost_events"] == 3 and tail.problems == []


def test_gzipped_atrace_ingests_like_the_plain_file(tmp_path):
    import gzip

    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store

    data = _write(n_events=50, chunk_events=16)
    (tmp_path / "a.atrace").write_bytes(data)
    (tmp_path / "b.atrace.gz").write_bytes(gzip.compress(data))
    store = Store(tmp_path / "s")
    a, b = ingest_paths(store, [tmp_path / "a.atrace", tmp_path / "b.atrace.gz"])
    assert a.error is None and b.error is None, (a.error, b.error)
    assert a.counts["slices"] == b.counts["slices"] == 50


def _follow(path, data: bytes, piece: int = 64):
    """Grow `path` to `data` a piece at a time, polling a follower after each; its records and the follower."""
    from acceltrace.formats.atrace.follower import AtraceTail

    path.write_bytes(b"")
    tail, got = AtraceTail(path), []
    with open(path, "ab") as f:
        for off in range(0, len(data), piece):
            f.write(data[off: off + piece])
            f.flush()
            got.append(tail.poll()[0])
    return np.concatenate(got), tail


def test_follower_reports_the_lost_counts_of_loss_chunks_as_the_reader_does(tmp_path):
    buf = io.BytesIO()
    w = AtraceWriter(buf, chunk_events=4)
    w.add_records(R.encode(R.INSTANT, w.intern("a"), ts=1))
    w.add_loss({0: 5, 2: 1})
    w.add_records(R.encode(R.INSTANT, w.intern("b"), ts=2))
    w.add_loss({0: 7, 2: 1})  # cumulative: the last loss chunk counts
    w.flush()  # no trailer yet: a file still being written (or whose writer was killed)
    data = buf.getvalue()
    recs, tail = _follow(tmp_path / "loss.atrace", data)
    r = AtraceReader.from_bytes(data)
    assert len(recs) == 2 and tail.trailer is None
    assert tail.losses == r.losses == {0: 7, 2: 1}
    assert tail.lost_events() == r.lost_events() == (8, {0: 7, 2: 1})
    assert tail.problems == r.problems == []


def test_follower_refuses_an_over_long_chunk_length_exactly_as_the_reader(tmp_path):
    from acceltrace.formats.atrace.layout import MAX_CHUNK_BYTES

    data = bytearray(_write(n_events=300, chunk_events=50))
    ev = AtraceReader.from_bytes(bytes(data)).event_chunks()
    struct.pack_into("<I", data, ev[2].offset + 8, MAX_CHUNK_BYTES + 8)  # a length over the limit (a multiple of 8)
    data = bytes(data) + b"\0" * 4096  # bytes after it: the follower must not wait for the "chunk" to land
    r = AtraceReader.from_bytes(data)
    recs, tail = _follow(tmp_path / "long.atrace", data, piece=1000)
    assert len(recs) == len(r.read_all()[0]) == 100
    assert [(p.offset, p.message) for p in tail.problems] == [(p.offset, p.message) for p in r.problems]
    assert tail.problems[0].offset == ev[2].offset and "corrupt chunk header" in tail.problems[0].message
    assert tail.stopped_at == r.truncated_at == ev[2].offset
    assert len(tail.poll()[0]) == 0  # stopped: nothing after the damage is read


def test_follower_skips_a_corrupt_events_chunk_with_the_readers_problem(tmp_path):
    data = bytearray(_write(n_events=300, chunk_events=50))
    ev = AtraceReader.from_bytes(bytes(data)).event_chunks()
    data[ev[1].offset + CHUNK_HEADER.size + 10] ^= 0xFF
    r = AtraceReader.from_bytes(bytes(data))
    recs, tail = _follow(tmp_path / "crc.atrace", bytes(data), piece=333)
    assert recs.tobytes() == r.read_all()[0].tobytes() and len(recs) == 250
    assert [(p.offset, p.message, p.dropped_events) for p in tail.problems] == \
        [(p.offset, p.message, p.dropped_events) for p in r.problems]


def test_follower_reads_a_chunk_bigger_than_one_polls_read(tmp_path, monkeypatch):
    from acceltrace.formats.atrace import follower

    monkeypatch.setattr(follower, "MAX_READ_BYTES", 1000)  # chunks of 100 records are 6,400 bytes
    data = _write(n_events=300, chunk_events=100)
    p = tmp_path / "big.atrace"
    p.write_bytes(data)
    tail = follower.AtraceTail(p)
    got = [tail.poll()[0] for _ in range(20)]
    assert sum(len(x) for x in got) == 300 and tail.trailer is not None


def test_event_records_bounds_what_iter_events_yields_for_files_and_live_windows():
    """The native importer sizes its columns by event_records() (ingest/native/handover.Pending): whole files,
    cut and corrupt ones, and a live capture's window reader (no chunks: its own records) all yield at most that."""
    from acceltrace.formats.atrace.window import Context
    from acceltrace.server.live_build import WindowReader

    whole = _write()
    corrupt = bytearray(whole)
    corrupt[AtraceReader.from_bytes(whole).event_chunks()[3].offset + CHUNK_HEADER.size + 100] ^= 0xFF
    for data, n in ((whole, 1000), (whole[:len(whole) // 2], None), (bytes(corrupt), 900)):
        r = AtraceReader.from_bytes(data)
        got = sum(len(recs) for recs, _ in r.iter_events(64))
        assert got <= r.event_records() and (n is None or got == n), (got, r.event_records())
    r = AtraceReader.from_bytes(whole)
    recs, streams = r.read_all()
    win = WindowReader(Context(r.header, r.metadata, r.strings, r.sync), recs[:300], streams[:300], "window")
    assert win.event_records() == 300 == sum(len(x) for x, _ in win.iter_events(64))
