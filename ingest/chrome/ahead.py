"""Chunks decoded ahead of the reader, on one thread, and the reads made for them (ingest/chrome/reader.py).

The compiled scanner releases the GIL, so a chunk is scanned on the other core while the reader's
caller turns the previous one into rows. Up to two chunks wait decoded or decoding: with one, the
scanner's thread sat idle while the main thread cut and copied the next chunk (0.5 s of a 1.9 s scan at
830 MB). A decode is taken only for exactly the chunk it was started for, by its stream offset, its
length and the identity of its bytes (its exceptions included); any other text is decoded anew.

The bytes read to cut the second chunk ahead are not the reader's yet: they wait here (`stash`) and
the reader's next reads return them, one read at a time and in order, so its own loop meets the very
same bytes and makes the very same cuts.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

DEPTH = 2  # chunks decoded ahead at most


class ChunksAhead:
    def __init__(self, decode: Callable[[bytes], list]):
        self.decode = decode
        # per read: (data, or the exception it raised; why the stream ended short)
        self.stash: deque[tuple[bytes | Exception, str | None]] = deque()
        self._queue: deque[tuple[int, int, bytes, Future]] = deque()  # (stream offset, length, raw, its decode)
        self._pool: ThreadPoolExecutor | None = None
        # the reader's own join of a tail and the reads stashed after it: (stream offset, the joined
        # bytes, those reads), taken by take_joined instead of a second copy of each read
        self.joined: tuple | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def submit(self, at: int, raw: bytes) -> None:
        """Starts decoding raw, the chunk at stream offset `at`, unless it is already on its way."""
        if self.raw(at, len(raw)) is not None:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chrome-scan")
        self._queue.append((at, len(raw), raw, self._pool.submit(self.decode, raw)))

    def take_joined(self, at: int, rest: bytes) -> bytes:
        """rest (stream offset `at`) with the stashed reads after it, as the reader joined them ahead,
        where that join was made from these very bytes: the same offset and tail, the same reads first
        in the stash (they are taken from it). Else rest as it is: the reader reads them again."""
        joined, self.joined = self.joined, None
        if joined is None:
            return rest
        at0, tail, reads = joined
        stash = self.stash
        if at0 != at or len(tail) - sum(map(len, reads)) != len(rest) or len(stash) < len(reads) \
                or any(stash[i][0] is not d for i, d in enumerate(reads)) or tail[:len(rest)] != rest:
            return rest
        for _ in reads:
            stash.popleft()
        return tail

    def raw(self, at: int, n: int) -> bytes | None:
        """The bytes of the chunk on its way at stream offset `at`, `n` bytes long (spares the reader a copy)."""
        for a, m, raw, _ in self._queue:
            if a == at and m == n:
                return raw
        return None

    def decoded(self, raw: bytes, offset: int) -> list:
        """raw's events: the first chunk on its way if it is this very one, else decoded here. A chunk
        other than the first is read only when a cut went another way: every decode ahead is dropped."""
        if self._queue:
            at, n, praw, fut = self._queue.popleft()
            if at == offset and n == len(raw) and praw is raw:
                return fut.result()
            fut.cancel()
            self.drop()
        return self.decode(raw)

    def drop(self) -> None:
        while self._queue:
            self._queue.popleft()[3].cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._queue.clear()
        self.stash.clear()
        self.joined = None
