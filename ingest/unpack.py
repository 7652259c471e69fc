"""Single-stream compressions besides gzip (ingest/gz.py), known by their magic bytes: xz (the standard library's
lzma), bzip2 (bz2) and zstd (pyarrow's codec, a dependency already). Traces are passed around as .json.xz,
.json.bz2 and .json.zst as well as .json.gz; each is read as a stream, bounded by the same decompression-bomb
guard (ingest/sources.py BombGuard), and a stream cut short raises EOFError with the standard library's words, as a
cut gzip does, so a Chrome trace cut inside its event array loads its whole events before the cut with a warning.
"""

from __future__ import annotations

import io

_CUT_SHORT = "Compressed file ended before the end-of-stream marker was reached"  # the standard library's words
CODEC_OF_SUFFIX = {".xz": "xz", ".bz2": "bzip2", ".zst": "zstd", ".zstd": "zstd"}
SUFFIXES = tuple(CODEC_OF_SUFFIX)


def codec_of(head: bytes) -> str | None:
    """'xz', 'bzip2' or 'zstd' when `head` (a file's first bytes) opens such a stream, else None."""
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"BZh") and head[3:4].isdigit() and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2"  # (block size 1-9, then a block's or the empty stream's end magic)
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


def open_stream(codec: str, fileobj) -> io.RawIOBase:
    """A readable stream of the decompressed bytes of `fileobj`, a `codec` stream (several streams or frames one
    after another are read in turn, as `cat a.xz b.xz` makes them)."""
    if codec == "xz":  # (imported here: a Python built without liblzma or libbz2 still reads every other input)
        import lzma

        return _Errors(lzma.LZMAFile(fileobj), lzma.LZMAError)
    if codec == "bzip2":
        import bz2

        return bz2.BZ2File(fileobj)
    if codec == "zstd":
        return _Zstd(fileobj)
    raise ValueError(f"unknown codec {codec!r}")


class _Errors(io.RawIOBase):
    """lzma's damaged-data error as OSError, the one BombGuard reports (lzma.LZMAError is none of its kinds)."""

    def __init__(self, inner, error: type[Exception]):
        self.inner, self.error = inner, error

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self.inner.readinto(b)
        except self.error as e:
            raise OSError(str(e)) from None

    def close(self) -> None:
        self.inner.close()
        super().close()


class _Zstd(io.RawIOBase):
    """pyarrow's zstd input stream, its errors in the standard library's kinds: a cut stream EOFError, damaged
    data OSError."""

    def __init__(self, fileobj):
        import pyarrow as pa

        self._pa = pa
        self._s = pa.CompressedInputStream(pa.PythonFile(fileobj, mode="r"), "zstd")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            data = self._s.read(len(b))
        except OSError as e:
            if "runcated" in str(e):
                raise EOFError(_CUT_SHORT) from None
            raise OSError(str(e)) from None
        except self._pa.ArrowException as e:  # (ArrowInvalid is a ValueError: damaged data)
            raise OSError(str(e)) from None
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._s.close()
        super().close()
