"""Items made on a thread of their own, a few ahead of the one the caller takes: the Chrome reader's reads
(a gzip member inflated beside the decoding, ingest/chrome/reader.py), the streamed write's batches
(Arrow's takes beside DuckDB's append, ingest/stage.py) and the Nsight reader's batches (SQLite stepping
beside DuckDB's insert, ingest/nsys/read.py). The making lets go of the GIL for most of its time (reads,
inflation, Arrow and numpy kernels, SQLite), so it runs on the other core.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator


class MadeAhead:
    """An iterator over `items`, which a thread of its own runs from the start, at most `depth` items ahead
    of the one taken. What making an item raised is raised where that item would have come; after it, or
    after the last item, the iterator is done. close(), or dropping the last reference, stops the making
    (after the item under way)."""

    def __init__(self, items: Iterator, depth: int = 2, name: str = "made-ahead"):
        self._made: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._done = False
        # the thread holds the queue and the event, not this object: dropping it stops the making
        self._thread = threading.Thread(target=_make, args=(items, self._made, self._stop), name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> "MadeAhead":
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        more, item = self._made.get()
        if more:
            return item
        self._done = True
        if item is not None:
            raise item
        raise StopIteration

    def close(self) -> None:
        self._done = True
        self._stop.set()
        self._thread.join()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # (at interpreter exit)
            pass


def _make(items: Iterator, made: queue.Queue, stop: threading.Event) -> None:
    def put(entry) -> bool:
        while not stop.is_set():
            try:
                made.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in items:
            if not put((True, item)):
                return
        put((False, None))
    except BaseException as e:  # raised again on the caller's thread
        put((False, e))
