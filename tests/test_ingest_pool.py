"""The server's ingest processes never outlive it (server/ingest_child.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from acceltrace.server.ingest_child import IngestProcesses


def _children(pid: int) -> set[int]:
    """Every live descendant of pid (from /proc)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out.update(kids)
        todo.extend(kids)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pool_children(pid: int) -> set[int]:
    """The server's ingest processes: forked, they carry its command line; spawned, multiprocessing's."""
    return {c for c in _children(pid) if _alive(c)}


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
    while time.monotonic() < deadline and any(_alive(p) for p in pool):
        time.sleep(0.2)
    left = [p for p in pool if _alive(p)]
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
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        alive = _alive(pid)
        if alive:
            os.kill(pid, signal.SIGKILL)
        assert not alive, "an ingest process ignored SIGTERM"
        procs.close()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
