"""Uploads' ingests, in processes of their own (docs/operations.md).

A small pool of processes at lower CPU priority (os.nice), started with the worker (forked from
a process without threads, else spawned: _start_method; spawned when the pool is rebuilt) and kept
warm (imports done, memory handed back to the system after each ingest), so an ingest never runs
in a server worker's event loop or thread pool and a small upload does not wait for a Python
start-up. Each ingest fills the catalog row the server began (progress included, through the
catalog like the CLI's) and runs the post-publish step; then the coarsest tiles of the new
trace are prebuilt into the disk cache (tiles/disk.py), in a task of its own so the upload is
answered first. A process that dies (killed, out of memory) fails only its own trace; the pool
is rebuilt.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

INGEST_NICE = 10  # the ingest yields the CPU to the workers serving viewers
IDLE_FROM_BYTES = 16 << 20  # an upload this big ingests at idle priority (a small one answers within the wait)
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}  # the ioprio_set syscall's number (no os wrapper for it)


def _init(nice: int) -> None:
    # forked from a server worker, the process inherits uvicorn's SIGTERM/SIGINT handlers, which only
    # set a flag in this copy of the server: a stop signal must end it as it ends any process
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _exit_with_parent(os.getppid())
    try:
        os.nice(nice)
    except OSError:
        pass
    import acceltrace.analysis.runner  # noqa: F401  (imported once, before the first upload)
    import acceltrace.ingest.pipeline  # noqa: F401
    import numpy.ma  # noqa: F401  (Arrow and DuckDB import it at an ingest's first chunk: 15 ms there)
    from acceltrace.ingest.opening import make_spare

    make_spare()  # the first upload's DuckDB instance (ingest/opening.py); each ingest makes the next one's


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """A server worker killed outright (SIGKILL, OOM) cannot stop its pool: each process watches its
    parent and exits once it is gone, so no ingest process outlives the server (an ingest in flight
    then is lost, as its trace is: the catalog's sweep removes the row and the temp file)."""
    def watch() -> None:
        while True:
            time.sleep(every_s)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def set_priority(idle: bool) -> None:
    """idle: run this job only when the workers serving viewers leave the CPU and the disk idle:
    SCHED_IDLE (nice 10 still took a share of both cores from them: +231 % viewers' p95 during a
    344 MB upload, bench/load.py) and the idle I/O class; else back to nice 10 (SCHED_OTHER, the
    I/O class that follows nice). Set at the start of a job, before its DuckDB instance starts
    threads, so they inherit it. Best effort: a system that refuses keeps what it had.
    ACCELTRACE_INGEST_PRIORITY=nice keeps nice 10 for every job (the comparison bench/load.py prints)."""
    if os.environ.get("ACCELTRACE_INGEST_PRIORITY", "idle") == "nice":
        idle = False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    import platform

    number = _IOPRIO_SET.get(platform.machine())
    if number is None:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(number, 1, 0, (3 << 13) if idle else 0)  # IOPRIO_WHO_PROCESS, this thread; IDLE or NONE
    except (OSError, AttributeError):
        pass


def ingest(root: str, path: str, name: str, trace_id: str, tmp_path: str, expected: int | None = None,
           arriving: bool = False) -> str | None:
    """In a pool process: ingest one upload into its begun row; the error, or None when published.
    arriving: the upload is still being written (`expected` bytes declared): read as it arrives
    (ingest/arriving.py), so the ingest runs beside the upload instead of after it."""
    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest import pipeline
    from acceltrace.ingest.arriving import Arriving
    from acceltrace.store.catalog import Store

    try:  # a big upload waits for idle CPU; a small one is answered within the upload's wait
        set_priority((expected if arriving and expected else os.path.getsize(path)) >= IDLE_FROM_BYTES)
    except OSError:
        set_priority(False)
    store = Store(root, sweep=False)
    last = [0.0]

    def progress(_label: str, fraction: float) -> None:
        now = time.monotonic()
        if now - last[0] > 0.2 or fraction >= 1.0:  # the catalog is SQLite: don't write per read()
            last[0] = now
            try:
                store.set_progress(trace_id, min(0.99, fraction))
            except Exception:
                pass

    try:
        res = pipeline.ingest_one(store, [Path(path)], name, keep_failed=True, progress=progress,
                                  trace_id=trace_id, tmp_path=Path(tmp_path), after_publish=after_publish,
                                  arriving=Arriving(Path(path), expected) if arriving else None)
        return res.error
    finally:
        _give_memory_back()
        from acceltrace.ingest.opening import make_spare

        make_spare()  # the next upload's DuckDB instance, made now rather than inside its ingest


def _give_memory_back() -> None:
    """This process lives on for the next upload: return the freed heap of a big ingest to the OS."""
    import gc

    from acceltrace.store import heap

    gc.collect()
    heap.hand_back()


def whatif(root: str, trace_id: str) -> bool:
    """The what-if step after an upload's analysis (analysis/whatif.py store_if_skipped): a trace whose
    graph analysis did not replay (past whatif_max_nodes) is replayed here and its findings' impacts
    stored, at idle priority (at 10 M events it takes tens of seconds and GBs: never in a server worker).
    True when it stored them."""
    from acceltrace.analysis.whatif import store_if_skipped
    from acceltrace.store.catalog import Store

    set_priority(True)  # nobody waits for it: the findings are already shown, with impact_ns NULL until then
    try:
        return store_if_skipped(Store(root, sweep=False), trace_id)
    finally:
        _give_memory_back()


def prebuild(root: str, trace_id: str) -> int:
    from acceltrace.store.catalog import Store
    from acceltrace.tiles.disk import prebuild as build

    set_priority(True)  # nobody waits for it: the viewers come first
    return build(Store(root, sweep=False), trace_id)


def _start_method() -> str:
    """"fork" while this process has one thread (the processes come up with everything imported), else
    "spawn": a fork copies every lock another thread holds at that instant (SQLite's, DuckDB's, the
    allocator's) locked for good, and a child that needs one hangs (an app started inside a process
    already running threads, as the tests start it, hung an ingest child in sqlite3.connect, and with it
    the interpreter's exit). Threads of C libraries count too: /proc lists every thread of the process.
    A uvicorn worker has threads by the time its app starts (uvicorn's own health-check thread, the
    allocator's background thread), so a served app's pool is spawned (about a second of imports, at
    the worker's start, not at the first upload's)."""
    try:
        single = len(os.listdir("/proc/self/task")) == 1
    except OSError:
        single = threading.active_count() == 1
    return "fork" if single else "spawn"


class IngestProcesses:
    def __init__(self, workers: int = 2, nice: int = INGEST_NICE):
        """Call at the app's lifespan start: the processes are started then (forked or spawned:
        _start_method), so the first uploads find them warm."""
        self.workers, self.nice = workers, nice
        self._lock = threading.Lock()
        self._closed = False
        self._pool = self._new(_start_method())

    def _new(self, method: str) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context(method),
                                   initializer=_init, initargs=(self.nice,))
        # start the processes now, warm for the first uploads: a fork starts them all at once; spawned ones
        # start one per job that finds no idle process, so one job each
        for _ in range(1 if method == "fork" else self.workers):
            pool.submit(int)
        return pool

    def run(self, fn, *args):
        """fn(*args) in a pool process, waited for here (a thread of the caller's)."""
        with self._lock:
            pool = self._pool
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool and not self._closed:  # the first to see it rebuilds the pool
                    pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = self._new("spawn")  # threads run now: never fork from here
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Ends the processes at once, an ingest in flight with them (lost: its row says the server stopped,
        server/upload.py), and waits for them: a pool let go without that wait left its queues' semaphores
        to the resource tracker's warning ("leaked semaphore objects") at a served app's exit."""
        with self._lock:
            self._closed = True
            pool = self._pool
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            try:
                proc.terminate()  # SIGTERM: _init left it at the default action
            except (OSError, AttributeError):
                pass
        pool.shutdown(wait=True, cancel_futures=True)
