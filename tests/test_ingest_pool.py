"""The server's ingest processes never outlive it (server/ingest_child.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from acceltrace.server.ingest_child import IngestProcesses
from tests._proc import alive, descendants


def _pool_children(pid: int) -> set[int]:
    """The server's ingest processes: forked, they carry its command line; spawned, multiprocessing's."""
    return {c for c in descendants(pid) if alive(c)}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ingest_processes_exit_when_the_server_is_killed_outright(tmp_path, live_server_factory):
    server = live_server_factory(tmp_path / "store", extra_args=("--workers", "1"))
    deadline = time.monotonic() + 20
    pool = set()
    while time.monotonic() < deadline and len(pool) < 2:  # the pool is forked at the app's start
        pool = _pool_children(server.proc.pid)
        time.sleep(0.2)
    assert len(pool) >= 2, "no ingest processes found under the server"  # IngestProcesses(workers=2)
    os.kill(server.proc.pid, signal.SIGKILL)  # no shutdown handler runs
    server.proc.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in pool):
        time.sleep(0.2)
    left = [p for p in pool if alive(p)]
    for p in left:  # never leave them behind, even when the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"{len(left)} ingest processes outlived the server"


def test_a_stop_signal_ends_an_ingest_process():
    # forked from a uvicorn worker, the processes used to inherit its SIGTERM handler (which only sets
    # a flag) and ignore a stop signal
    signal.signal(signal.SIGTERM, lambda *_: None)  # as uvicorn leaves it in the server process
    try:
        procs = IngestProcesses(workers=1)
        pid = procs.run(os.getpid)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.1)
        running = alive(pid)
        if running:
            os.kill(pid, signal.SIGKILL)
        assert not running, "an ingest process ignored SIGTERM"
        procs.close()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


_HELD_LOCK_CHILD = '''
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import held  # a module with a lock, imported before the pool starts (as sqlite3 and duckdb are in a server)
from acceltrace.server.ingest_child import IngestProcesses, _start_method
threading.Thread(target=held.hold, daemon=True).start()  # another thread holds the lock...
held.taken.wait(10)
print("method", _start_method(), flush=True)
procs = IngestProcesses(workers=1)  # ...while the pool's process starts
out = []
t = threading.Thread(target=lambda: out.append(procs.run(held.take)), daemon=True)
t.start()
t.join(30)
print("ok" if out == [True] else "hung", flush=True)
import os
os._exit(0)  # never wait for a hung child at exit
'''


def test_an_app_started_in_a_process_with_threads_gets_ingest_processes_that_do_not_inherit_held_locks(tmp_path):
    """A fork copies the locks other threads hold at that instant, locked for good: an app started in a
    process already running threads (the tests start it so) hung an ingest child in sqlite3.connect, and
    with it the interpreter's exit. The pool is forked only while the process has one thread."""
    import subprocess
    import sys

    (tmp_path / "held.py").write_text(
        "import threading, time\nlock = threading.Lock()\ntaken = threading.Event()\n"
        "def hold():\n    with lock:\n        taken.set()\n        time.sleep(60)\n"
        "def take():\n    return lock.acquire(timeout=20)\n")
    out = subprocess.run([sys.executable, "-c", _HELD_LOCK_CHILD, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert "method spawn" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "ok" in out.stdout.splitlines(), out.stdout + out.stderr[-2000:]
    single = subprocess.run([sys.executable, "-c", "from acceltrace.server.ingest_child import _start_method;"
                             " print(_start_method())"], capture_output=True, text=True, timeout=60)
    assert single.stdout.strip() == "fork", single.stderr[-2000:]  # a process without threads: warm forks


def test_close_ends_a_job_in_flight_at_once_and_starts_no_new_processes():
    import threading

    from concurrent.futures.process import BrokenProcessPool

    procs = IngestProcesses(workers=1)
    pid = procs.run(os.getpid)
    out: list = []

    def job():
        try:
            procs.run(time.sleep, 60)  # an ingest that would outlast any stop
            out.append("ran")
        except BrokenProcessPool:
            out.append("broken")

    t = threading.Thread(target=job, daemon=True)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    procs.close()
    t.join(15)
    assert out == ["broken"] and procs.closed
    assert time.monotonic() - t0 < 10  # not the job's 60 s
    assert not alive(pid)
    assert not procs._pool._processes  # the broken pool was not rebuilt: a stopping server starts nothing


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_two_worker_server_stops_without_leaking_its_pools_semaphores(tmp_path, live_server_factory):
    # each worker's pool was let go without a wait: multiprocessing's resource tracker then warned of
    # "leaked semaphore objects" (5 a worker) when the server stopped
    server = live_server_factory(tmp_path / "store", extra_args=("--workers", "2"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_pool_children(server.proc.pid)) < 6:  # 2 workers, 2 each
        time.sleep(0.2)
    import json
    import urllib.request

    sample = next((Path(__file__).parent.parent / "sample_traces" / "chrome" / "kineto").glob("*.json"))
    for _ in range(2):  # an upload to each worker, most likely: each pool has run a job
        req = urllib.request.Request(f"{server.url}/api/traces?name=t.json", data=sample.read_bytes(), method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.load(r)["status"] in ("ready", "ingesting")
    tree = _pool_children(server.proc.pid)  # the workers, their pools, multiprocessing's resource tracker
    server.proc.send_signal(signal.SIGINT)  # Ctrl-C
    server.proc.wait(30)
    deadline = time.monotonic() + 30  # the tracker writes its warning as it ends, after the server
    while time.monotonic() < deadline and any(alive(p) for p in tree):
        time.sleep(0.1)
    log = server.log()
    assert server.proc.returncode == 0, log
    assert "leaked semaphore" not in log, log
