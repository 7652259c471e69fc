"""Work done on a thread of its own while the caller goes on. OnThread: one call, its result taken later (the
build's open and the instance made ahead for the next one, ingest/opening.py; the depths beside the links,
ingest/depths.py). MadeAhead: items made a few ahead of the one the caller takes: the Chrome reader's reads
(a gzip member inflated beside the decoding, ingest/chrome/reader.py), the streamed write's batches
(Arrow's takes beside DuckDB's append, ingest/stage.py) and the Nsight reader's batches (SQLite stepping
beside DuckDB's insert, ingest/nsys/read.py). The making lets go of the GIL for most of its time (reads,
inflation, Arrow and numpy kernels, SQLite), so it runs on the other core.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator


def to_its_end(wait: Callable[[bool], None]) -> KeyboardInterrupt | None:
    """wait(interrupted) until it returns, called again after each Ctrl-C that breaks it off (`interrupted` then
    true); the last such KeyboardInterrupt, for the caller to raise once what it waited for has ended."""
    stopped = None
    while True:
        try:
            wait(stopped is not None)
            return stopped
        except KeyboardInterrupt as e:
            stopped = e


class Pool(ThreadPoolExecutor):
    """A thread pool whose `with` block waits for its running jobs even through a Ctrl-C, cancelling those not
    begun, and then raises the KeyboardInterrupt: the jobs use the caller's connections, which the interrupt on
    its way would close under them (an Nsight export's copy: the process aborted at its exit)."""

    def __exit__(self, kind, value, tb) -> bool:
        stopped = to_its_end(lambda interrupted: self.shutdown(wait=True,
                                                              cancel_futures=kind is not None or interrupted))
        if stopped is not None:
            raise stopped
        return False


class OnThread:
    """fn(*args) on a thread of its own, started at once; get() waits for it and returns what it returned or
    raises what it raised, in the caller's thread; join() only waits.

    `at_exit`: the interpreter's exit waits for the thread (DuckDB's open, a spare instance: a few tens of ms).
    The thread is a daemon's, and a daemon thread still inside a C++ library when the interpreter finalises is
    unwound through that library's code and aborts the process ("FATAL: exception not rethrown", status 134): an
    upload's ingest process that ended while its next build's instance was being made did."""

    def __init__(self, fn: Callable, *args, name: str, at_exit: bool = False):
        self._result, self._error = None, None
        self.pid = os.getpid()  # (a forked child has the object but not the thread, nor what it made)
        self._thread = threading.Thread(target=self._run, args=(fn, args), name=name, daemon=True)
        if at_exit:
            _finish_at_exit(self)
        self._thread.start()

    def _run(self, fn: Callable, args: tuple) -> None:
        try:
            self._result = fn(*args)
        except BaseException as e:  # raised again by get(), in the caller's thread
            self._error = e

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def get(self):
        self.join()
        if self._error is not None:
            raise self._error
        return self._result


# the OnThreads the interpreter's exit waits for (a running one is held by its thread), and the process that
# registered the wait (a forked child inherits the hook, not the threads)
_at_exit: weakref.WeakSet = weakref.WeakSet()
_at_exit_pid: int | None = None


def _finish_at_exit(t: OnThread) -> None:
    global _at_exit_pid
    if _at_exit_pid != os.getpid():
        _at_exit_pid = os.getpid()
        atexit.register(_join_at_exit)
    _at_exit.add(t)


def _join_at_exit() -> None:
    for t in list(_at_exit):
        if t.pid == os.getpid():
            t.join(timeout=30)


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
