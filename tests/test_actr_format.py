"""The .actr writer/reader: round trip, cut-off and corrupted files, versions, tiny reads."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from acceltrace.formats.actr import layout as actr
from acceltrace.formats.actr.layout import ActrFormatError
from acceltrace.formats.actr.writer import ActrWriter
from acceltrace.formats.actr.reader import read_actr, read_actr_path

HEADER = {
    "source": "test",
    "devices": [{"name": "dev0", "clock_hz": 1e9, "slots": 1, "links": {}, "props": {}}],
    "counters": [
        {"name": "a", "unit": "B/s", "bits": 32, "kind": "cumulative", "group": 0, "device": "dev0"},
        {"name": "b", "unit": "entries", "bits": 16, "kind": "gauge", "group": 0, "device": "dev0"},
        {"name": "c", "unit": "cycles/s", "bits": 48, "kind": "cumulative", "group": 1, "device": "dev0"},
    ],
    "groups": [{"id": 0, "device": "dev0", "counters": ["a", "b"]},
               {"id": 1, "device": "dev0", "counters": ["c"]}],
}


def write_sample_file(path, n=100, flush_records=16):
    w = ActrWriter(path, HEADER, flush_records=flush_records)
    for i in range(n):
        w.append(0, 1000 + i * 10, 5000 + i * 7, i * 10, i * 10, [(i * 3_000_000_000) % 2**32, i % 7])
        if i % 2:
            w.append(1, 1001 + i * 10, 5001 + i * 7, i * 10, i * 5, [i * 11])
    w.note({"message": "hello"})
    w.close({"ended": "completed", "missed_deadlines": 0})
    return path


def test_round_trip_keeps_every_sample_and_value(tmp_path):
    p = write_sample_file(tmp_path / "x.actr")
    d = read_actr_path(p)
    assert d.version == actr.VERSION
    assert d.header["counters"][0]["name"] == "a"
    assert not d.truncated and not d.warnings
    g0, g1 = d.samples[0], d.samples[1]
    assert len(g0) == 100 and len(g1) == 50
    assert g0["host_ns"][5] == 1050 and g0["dev_ticks"][5] == 5035
    assert g0["raw"][7].tolist() == [(7 * 3_000_000_000) % 2**32, 0]
    assert g1["raw"][:, 0].tolist() == [i * 11 for i in range(1, 100, 2)]
    assert g1["running_ns"][-1] == 99 * 5
    assert d.notes == [{"message": "hello"}]
    assert d.tail["ended"] == "completed" and d.tail["samples"] == 150


def test_reader_does_not_depend_on_read_sizes(tmp_path):
    data = write_sample_file(tmp_path / "x.actr").read_bytes()

    class Dribble(io.RawIOBase):
        def __init__(self):
            self.pos = 0
            self.step = 0

        def read(self, n=-1):
            self.step = self.step % 7 + 1  # 1..7 bytes per read, whatever was asked
            out = data[self.pos : self.pos + min(n, self.step)]
            self.pos += len(out)
            return out

    a = read_actr(Dribble())
    b = read_actr(io.BytesIO(data))
    assert np.array_equal(a.samples[0], b.samples[0]) and np.array_equal(a.samples[1], b.samples[1])


@pytest.mark.parametrize("cut", [57, 200, 777, 1500])
def test_cut_off_file_keeps_whole_samples_and_warns(tmp_path, cut):
    full = read_actr_path(write_sample_file(tmp_path / "x.actr"))
    data = (tmp_path / "x.actr").read_bytes()
    first_samples = data.index(b"SMPL")  # cut somewhere after the header
    d = read_actr(io.BytesIO(data[: first_samples + cut]))
    assert d.truncated
    assert d.warnings, "a cut-off file must say so"
    for gid in (0, 1):
        got = d.samples[gid]
        # a prefix of the true samples, every one of them whole and equal
        assert np.array_equal(got, full.samples[gid][: len(got)])
    assert len(d.samples[0]) < 100


def test_cut_inside_a_sample_chunk_keeps_its_whole_records(tmp_path):
    write_sample_file(tmp_path / "x.actr", n=40, flush_records=1000)  # one big SMPL chunk per group
    data = (tmp_path / "x.actr").read_bytes()
    # find group 0's chunk and cut 1.5 records into its body
    i = data.index(b"SMPL")
    rec = actr.record_dtype(2).itemsize
    cut = i + actr.CHUNK_HEADER.size + actr.SMPL_HEADER.size + rec + rec // 2
    d = read_actr(io.BytesIO(data[:cut]))
    assert len(d.samples[0]) == 1
    assert any("kept its 1 whole samples" in w[1] for w in d.warnings)


def test_corrupt_chunk_is_skipped_and_reported_with_its_offset(tmp_path):
    write_sample_file(tmp_path / "x.actr")
    data = bytearray((tmp_path / "x.actr").read_bytes())
    i = data.index(b"SMPL")
    data[i + actr.CHUNK_HEADER.size + 40] ^= 0xFF
    d = read_actr(io.BytesIO(bytes(data)))
    # the message itself says how many samples went (docs/counters.md, "Damage")
    assert any(off == i and "checksum" in msg and "16 samples lost" in msg and dropped == 16
               for off, msg, dropped in d.warnings)
    assert len(d.samples[0]) == 100 - 16
    assert not d.truncated


def test_newer_major_version_is_refused_clearly(tmp_path):
    data = bytearray(write_sample_file(tmp_path / "x.actr").read_bytes())
    struct.pack_into("<H", data, 8, actr.VERSION[0] + 1)
    with pytest.raises(ActrFormatError, match=r"newer than this reader"):
        read_actr(io.BytesIO(bytes(data)))


def test_newer_minor_version_with_unknown_chunks_is_read(tmp_path):
    data = bytearray(write_sample_file(tmp_path / "x.actr").read_bytes())
    struct.pack_into("<H", data, 10, actr.VERSION[1] + 3)
    extra = actr.CHUNK_HEADER.pack(b"XTRA", 3, __import__("zlib").crc32(b"abc")) + b"abc"
    pos = data.index(b"SMPL")
    data[pos:pos] = extra
    d = read_actr(io.BytesIO(bytes(data)))
    assert len(d.samples[0]) == 100 and not d.warnings


def test_not_an_actr_file_is_refused_at_byte_zero():
    with pytest.raises(ActrFormatError, match="byte 0: not an .actr file"):
        read_actr(io.BytesIO(b'{"traceEvents": []}' + b" " * 40))


def test_header_without_required_fields_is_refused_by_the_writer(tmp_path):
    bad = {"counters": [{"name": "a", "unit": "x", "bits": 99, "kind": "cumulative", "group": 0}],
           "groups": [{"id": 0, "counters": ["a"]}]}
    with pytest.raises(ValueError, match="bits"):
        ActrWriter(tmp_path / "y.actr", bad)


@pytest.mark.parametrize("path, value, field", [
    (("counters", 0), 7, r"counters\[0\] must be an object"),
    (("counters", 0, "name"), {"x": 1}, r"counters\[0\].name"),
    (("counters", 0, "group"), "g", r"counters\[0\].group"),
    (("groups", 1), [1], r"groups\[1\] must be an object"),
    (("groups", 1, "counters"), [{"c": 1}], r"groups\[1\] names unknown counter"),
    (("groups", 0, "id"), None, r"groups\[0\] needs an integer 'id'"),
    (("devices",), 5, r"devices must be a list"),
    (("devices", 0), None, r"devices\[0\] must be an object"),
    (("devices", 0, "links"), {"up": 3}, r"devices\[0\].links"),
    (("counters", 0, "scale"), 1e308, r"counters\[0\].scale"),
    (("counters", 2, "full_scale"), "fast", r"counters\[2\].full_scale"),
])
def test_header_of_the_wrong_shape_is_refused_naming_the_field(tmp_path, path, value, field):
    # a crafted or damaged HEAD (with a valid checksum): a clear refusal, never a TypeError in ingest
    import copy
    import json
    import zlib

    header = copy.deepcopy(HEADER)
    node = header
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    body = json.dumps(header).encode()
    data = bytearray(write_sample_file(tmp_path / "x.actr").read_bytes())
    (old_len,) = struct.unpack_from("<I", data, 16 + 4)
    head = actr.CHUNK_HEADER.pack(b"HEAD", len(body), zlib.crc32(body)) + body
    data[16: 16 + actr.CHUNK_HEADER.size + old_len] = head
    with pytest.raises(ActrFormatError, match="not a valid counter description.*" + field):
        read_actr(io.BytesIO(bytes(data)))


def test_file_without_tail_is_read_with_a_warning(tmp_path):
    w = ActrWriter(tmp_path / "z.actr", HEADER, flush_records=4)
    for i in range(10):
        w.append(0, i, i, i, i, [i, i])
    w.flush()  # the collector dies here: no close(), no TAIL
    d = read_actr_path(tmp_path / "z.actr")
    assert len(d.samples[0]) == 10 and d.truncated and d.tail is None
    assert any("no TAIL" in m for _, m, _ in d.warnings)
