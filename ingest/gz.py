"""gzip streams inflated by ISA-L where the `isal` package is installed (a dependency, with wheels for
the usual platforms), else by the standard library's gzip module.

ISA-L inflates 5-6x as fast as zlib here (vLLM's 34 MB in 8 ms against 49, MTIA's 87 MB in 11 against
63, the same loop of decompress calls; read through this module 9.5 ms, through gzip.GzipFile 28), on the
reader's prefetch thread, beside a scan that keeps both cores busy: the 830 MB trace gzipped (85 MB) is
viewable in 4.25-4.60 s against 5.18-5.44 s (docs/performance.md, eighteenth stop). Only the inflate changes: what gzip.GzipFile does with a stream is kept, so every
message a user sees stays the same. Several members are read in turn; zero bytes after a member are
padding; anything else after one is "Not a gzipped file"; a stream that ends inside a member raises
EOFError with the standard library's words (the Chrome reader then loads the whole events before the
cut); a damaged one raises zlib.error (its header, CRC-32 and length are checked by ISA-L).
"""

from __future__ import annotations

import gzip
import io
import zlib

try:
    from isal import isal_zlib
except ImportError:  # pragma: no cover - depends on the install; tested by setting it to None
    isal_zlib = None

READ_BYTES = 1 << 17  # compressed bytes read at a time
_CUT_SHORT = "Compressed file ended before the end-of-stream marker was reached"  # gzip's own words


def open_gzip(fileobj) -> io.RawIOBase | gzip.GzipFile:
    """A readable stream of the decompressed bytes of the gzip stream `fileobj`."""
    if isal_zlib is None:
        return gzip.GzipFile(fileobj=fileobj)
    return _Members(fileobj)


class _Members(io.RawIOBase):
    def __init__(self, fp):
        self.fp = fp
        self._d = isal_zlib.decompressobj(31)  # wbits 31: one gzip member, header and trailer checked
        self._input = b""  # compressed bytes not yet given to the decompressor
        self._in_member = False  # the current member has begun
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(1 << 20), b""))
        while not self._done and size:
            buf = self._d.unconsumed_tail or self._input or self.fp.read(READ_BYTES)
            self._input = b""
            if not buf:
                if self._in_member:
                    raise EOFError(_CUT_SHORT)
                self._done = True
                break
            if not self._in_member:  # a member's first bytes: the magic number, as gzip checks it
                while len(buf) < 2 and (more := self.fp.read(READ_BYTES)):
                    buf += more
                if buf[:2] != b"\x1f\x8b":
                    raise gzip.BadGzipFile(f"Not a gzipped file ({buf[:2]!r})")
            self._in_member = True
            try:
                out = self._d.decompress(buf, size)
            except isal_zlib.error as e:
                raise zlib.error(str(e)) from None
            if self._d.eof:
                self._next_member(self._d.unused_data)
            if out:
                return out
        return b""

    def _next_member(self, rest: bytes) -> None:
        """After a member: zero padding, then another member (or bytes that are not one), or the end."""
        rest = rest.lstrip(b"\x00")
        while not rest and (more := self.fp.read(READ_BYTES)):
            rest = more.lstrip(b"\x00")
        if not rest:
            self._done = True
        else:  # read() checks its magic number first
            self._d = isal_zlib.decompressobj(31)
            self._input = rest
            self._in_member = False
