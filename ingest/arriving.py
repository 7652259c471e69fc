"""An upload still being written, ingested as it arrives (server/upload.py starts its ingest as its first
bytes are written; ingest/sources.py reads plain and gzip streams through ArrivingReader, archives once
they are whole). The writer and the reader may be different processes: they share only the file and two
marks beside it."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

from acceltrace.store.errors import IngestError


class Arriving:
    """A file an upload is still writing (server/upload.py), ingested as it arrives: its reader waits at
    the end of what is there until the writer marks the file complete (the reader then ends at its final
    size) or failed (the ingest then fails, saying why). The marks are files beside it, written once and
    atomically, so the writer and the ingest may be different processes: `<file>.complete` holds the
    final size, `<file>.failed` the reason. `expected`: what the upload declared (its body's length), the
    size the progress and the decompression budget go by until the final size is known."""

    POLL_S = 0.003  # how often a reader at the end of what arrived looks again
    STALL_S = 300.0  # an upload that sends nothing for this long fails its ingest

    def __init__(self, path: Path, expected: int | None = None):
        self.path = Path(path)
        self.expected = expected
        self._final: int | None = None

    @staticmethod
    def complete(path: Path, size: int) -> None:
        """The writer's mark: every byte of `path` is written (`size` of them)."""
        _mark(Path(str(path) + ".complete"), str(size))

    @staticmethod
    def failed(path: Path, reason: str) -> None:
        """The writer's mark: `path` will not be complete (the upload was refused, cut off or is a duplicate)."""
        _mark(Path(str(path) + ".failed"), reason)

    def check(self) -> int | None:
        """The final size once the file is complete, None while it arrives; IngestError once it failed."""
        if self._final is None:
            try:
                reason = Path(str(self.path) + ".failed").read_text()
            except FileNotFoundError:
                pass
            else:
                raise IngestError(self.path.name, f"the upload did not arrive whole: {reason}")
            try:
                self._final = int(Path(str(self.path) + ".complete").read_text())
            except (FileNotFoundError, ValueError):
                return None
        return self._final

    def known_size(self) -> int | None:
        """The size the share read goes by: the final one once known, else the declared one, else None (a
        chunked upload's, until it is whole). Never raises: the reader is the one that fails the ingest."""
        if self._final is None and not self.expected:
            try:
                self.check()
            except IngestError:
                return None
        return self._final or self.expected

    def marked(self) -> bool:
        """The writer has marked it, complete or failed (the writer is done with it)."""
        return any(Path(str(self.path) + k).exists() for k in (".complete", ".failed"))

    def until_marked(self, timeout_s: float = 3600.0) -> None:
        """Until the writer has marked it (the upload's receive has ended), at most timeout_s."""
        deadline = time.monotonic() + timeout_s
        while not self.marked() and time.monotonic() < deadline:
            time.sleep(0.05)

    def size(self) -> int:
        """Bytes of it on disk now (all of them once complete)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def wait(self, nbytes: int | None = None) -> int:
        """Until it holds `nbytes` (None: until it is complete); its size then (less only if it is complete)."""
        last, since = -1, time.monotonic()
        while True:
            final = self.check()
            have = self.size()
            if final is not None or (nbytes is not None and have >= nbytes):
                return have
            if have != last:
                last, since = have, time.monotonic()
            elif time.monotonic() - since > self.STALL_S:
                raise IngestError(self.path.name, f"the upload stalled: no byte arrived for {self.STALL_S:.0f} s",
                                  f"byte {have}")
            time.sleep(self.POLL_S)

    def budget_size(self) -> int:
        """The size a decompression budget is set by: the final one, else the declared one."""
        final = self.check()
        return final if final is not None else max(self.size(), self.expected or 0)


def _mark(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except FileNotFoundError:  # its directory is gone: the ingest that would read the mark has ended
        pass


class ArrivingReader(io.RawIOBase):
    """Reads an Arriving file from its start: at the end of what has arrived it waits for more, and ends
    only where the writer marked the file complete. A failed mark is seen within CHECK_BYTES of reading
    even while bytes still come (a duplicate upload's ingest stops early)."""

    CHECK_BYTES = 16 << 20

    def __init__(self, arriving: Arriving):
        self.arriving = arriving
        self.f = open(arriving.path, "rb", buffering=0)
        self.pos = 0
        self._next_check = self.CHECK_BYTES

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        short_after_mark = False  # a read came back short after the complete mark was seen
        while True:
            n = self.f.readinto(b)
            if n:
                self.pos += n
                if self.pos >= self._next_check:
                    self._next_check = self.pos + self.CHECK_BYTES
                    self.arriving.check()
                return n
            final = self.arriving.check()
            if final is None:
                self.arriving.wait(self.pos + 1)
            elif self.pos >= final:
                return 0
            elif not short_after_mark:  # the last bytes and the mark may both have come since this read: again
                short_after_mark = True
            else:  # marked complete at a size its file never reached: never wait on it
                raise IngestError(self.arriving.path.name, f"the upload was marked complete at {final} bytes"
                                  f" but its file ends at {self.pos}", f"byte {self.pos}")

    def close(self) -> None:
        self.f.close()
        super().close()
