"""ingest/gz.py: gzip inflated by ISA-L behaves as the standard library's gzip.GzipFile does, on good
streams (several members, padding, any read size) and bad ones (cut short, damaged, trailing bytes)."""

import gzip
import io
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from acceltrace.ingest import gz

DATA = b"".join(b'{"ph": "X", "name": "kernel_%d", "ts": %d, "dur": 5},' % (i % 97, i) for i in range(40_000))


def _both(blob: bytes, size: int = 1 << 16):
    """(what gzip.GzipFile reads or raises, what ours does): bytes or (exception type, message)."""
    def run(opener):
        f = opener(io.BytesIO(blob))
        out = []
        try:
            while chunk := f.read(size):
                out.append(chunk)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            return type(e), str(e), len(b"".join(out))
        return b"".join(out)
    return run(lambda b: gzip.GzipFile(fileobj=b)), run(gz.open_gzip)


def test_isal_is_what_an_install_inflates_with():
    assert gz.isal_zlib is not None
    assert not isinstance(gz.open_gzip(io.BytesIO(gzip.compress(b"x"))), gzip.GzipFile)


@pytest.mark.parametrize("size", [7, 4096, 1 << 16, 1 << 22])
def test_the_same_bytes_at_any_read_size(size):
    theirs, ours = _both(gzip.compress(DATA), size)
    assert ours == theirs == DATA


def test_byte_by_byte():
    f = gz.open_gzip(io.BytesIO(gzip.compress(DATA)))
    assert b"".join(f.read(1) for _ in range(5000)) == DATA[:5000]


def test_members_in_turn_and_zero_padding():
    blob = gzip.compress(DATA[:1000]) + gzip.compress(DATA[1000:5000]) + b"\x00" * 700 + gzip.compress(b"tail")
    theirs, ours = _both(blob)
    assert ours == theirs == DATA[:5000] + b"tail"
    theirs, ours = _both(gzip.compress(DATA) + b"\x00" * 3)
    assert ours == theirs == DATA


def test_bytes_after_a_member_that_are_not_gzip_are_refused_as_the_library_does():
    for tail in (b"garbage!", b"\x1f", b"\x00\x00xy"):
        theirs, ours = _both(gzip.compress(DATA) + tail)
        assert theirs[0] is gzip.BadGzipFile and ours[0] is gzip.BadGzipFile, (tail, theirs, ours)
        # the same error; ours hands over every byte of the good member first (gzip stops a buffer earlier)
        assert ours[1] == theirs[1] and ours[2] == len(DATA) >= theirs[2]


def test_a_stream_cut_short_raises_the_same_eoferror_after_the_same_bytes():
    blob = gzip.compress(DATA)
    for cut in (5, 11, len(blob) // 3, len(blob) - 8, len(blob) - 1):
        theirs, ours = _both(blob[:cut])
        assert theirs[0] is EOFError and ours[0] is EOFError, (cut, theirs, ours)
        assert ours[1] == theirs[1]
        assert abs(ours[2] - theirs[2]) <= 1 << 16, (cut, ours[2], theirs[2])  # decoded up to the cut, by read


def test_damage_is_refused_as_the_library_refuses_it():
    blob = gzip.compress(DATA)
    for at in (40, len(blob) // 2, len(blob) - 6, len(blob) - 2):  # deflate data, CRC-32, length
        bad = bytearray(blob)
        bad[at] ^= 0x55
        theirs, ours = _both(bytes(bad))
        assert not isinstance(theirs, bytes) and not isinstance(ours, bytes), (at, theirs, ours)
        assert ours[2] == theirs[2], at  # after the same bytes handed over


def test_without_isal_the_standard_library_reads(monkeypatch):
    monkeypatch.setattr(gz, "isal_zlib", None)
    f = gz.open_gzip(io.BytesIO(gzip.compress(DATA)))
    assert isinstance(f, gzip.GzipFile) and f.read() == DATA


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=4), st.integers(0, 5), st.integers(1, 9000),
       st.integers(0, 10_000))
def test_any_members_padding_read_size_and_cut(parts, zeros, size, cut):
    blob = b"".join(gzip.compress(p) + b"\x00" * zeros for p in parts)
    theirs, ours = _both(blob, size)
    assert ours == theirs
    theirs, ours = _both(blob[:cut], size)
    if isinstance(theirs, bytes):
        assert ours == theirs
    else:
        assert not isinstance(ours, bytes) and ours[0] is theirs[0], (theirs, ours)
