"""SQL queries in a process started ahead (store/sandbox.py run_limited(ahead=True), make_ahead): the same
answers and limits as a fresh process, one process waiting per store, none left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from acceltrace.store import sandbox
from acceltrace.store.catalog import Store
from acceltrace.store.sandbox import QueryError, make_ahead, run_limited, stop_ahead, waiting
from tests._proc import alive, descendants


@pytest.fixture
def store(trace_store):
    st = Store(trace_store.root)
    stop_ahead(st)  # an app of another test on this store (same process) may have left one waiting
    yield st, trace_store.ids["chain"]
    stop_ahead(st)


def _wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_a_query_takes_the_process_started_ahead_and_leaves_the_next_one(store):
    st, tid = store
    assert waiting(st) is None
    make_ahead(st)
    first = waiting(st)
    assert first is not None
    make_ahead(st)  # one waits per store and priority: a second call starts nothing
    assert waiting(st) == first
    cols, rows, truncated = run_limited(st, tid, "SELECT count(*) AS n FROM slices", ahead=True)
    assert (cols, rows, truncated) == (["n"], [(61,)], False)
    assert _wait_gone(first)  # it ran the query and ended
    second = waiting(st)
    assert second is not None and second != first
    # a query without ahead (the CLI's) neither takes it nor leaves one
    assert run_limited(st, tid, "SELECT count(*) FROM slices")[1] == [(61,)]
    assert waiting(st) == second


def test_a_process_started_ahead_keeps_every_limit(store):
    st, tid = store
    make_ahead(st)
    with pytest.raises(QueryError) as e:
        run_limited(st, tid, "SELECT * FROM read_csv('/etc/passwd')", ahead=True)
    assert e.value.code == "query_refused" and "PermissionException" in str(e.value)  # the locked-down instance
    with pytest.raises(QueryError) as e:
        run_limited(st, tid, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
                    timeout_s=1.0, ahead=True)
    assert e.value.code == "query_timeout"
    with pytest.raises(QueryError) as e:  # the memory cap counts from the query, not from the process's start
        run_limited(st, tid, "SELECT length(repeat('x', 600000000)) AS n", memory_bytes=256 << 20, ahead=True)
    assert e.value.code == "query_memory"
    # the priority is the query's own (set once its arguments arrive): any waiting process serves it
    make_ahead(st)
    pid = waiting(st)
    assert run_limited(st, tid, "SELECT count(*) FROM slices", nice=5, ahead=True)[1] == [(61,)]
    assert _wait_gone(pid) and waiting(st) not in (None, pid)


def test_a_dead_process_started_ahead_is_replaced(store):
    st, tid = store
    make_ahead(st)
    pid = waiting(st)
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid)
    assert run_limited(st, tid, "SELECT count(*) FROM slices", ahead=True)[1] == [(61,)]
    assert waiting(st) not in (None, pid)


def test_processes_started_ahead_end_with_their_store_and_at_exit(store, tmp_path):
    st, tid = store
    other = Store(tmp_path / "other")
    make_ahead(st)
    make_ahead(other)
    mine, theirs = waiting(st), waiting(other)
    stop_ahead(st)
    assert waiting(st) is None and _wait_gone(mine)
    assert waiting(other) == theirs  # another store's is its own
    sandbox._AHEAD.stop_all()  # what the exit hook runs
    assert waiting(other) is None and _wait_gone(theirs)


def test_the_views_page_starts_its_queries_process_and_the_server_stops_it(trace_store):
    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app

    st, tid = Store(trace_store.root), trace_store.ids["chain"]
    stop_ahead(st)
    with TestClient(create_app(trace_store.root)) as c:
        assert c.get(f"/t/{tid}/views").status_code == 200
        pid = waiting(st)
        assert pid is not None
        r = c.post(f"/api/traces/{tid}/query", json={"sql": "SELECT count(*) AS n FROM slices"})
        assert r.status_code == 200 and r.json()["rows"] == [[61]]
        assert _wait_gone(pid)
        last = waiting(st)
        assert last not in (None, pid)
    assert waiting(st) is None and _wait_gone(last)


def _query_processes(root_pid: int) -> set[int]:
    """The waiting query processes under a server (every descendant running the sandbox's boot)."""
    return descendants(root_pid, sandbox._BOOT.encode())


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_every_served_worker_starts_its_first_querys_process(tmp_path, live_server_factory):
    # a query may reach any worker, not the one that served its page: each worker starts one at its start
    server = live_server_factory(tmp_path / "store", extra_args=("--workers", "2"))
    deadline = time.monotonic() + 30
    found: set[int] = set()
    while time.monotonic() < deadline and len(found) < 2:
        found = _query_processes(server.proc.pid)
        time.sleep(0.1)
    assert len(found) == 2, found
    server.stop()
    assert all(_wait_gone(p) for p in found)


def test_a_process_that_cannot_start_ahead_is_left_to_the_query(store, tmp_path):
    st, tid = store
    gone = Store(tmp_path / "gone")
    root = gone.root
    import shutil

    shutil.rmtree(root)  # its folder removed under a running server: the process cannot start there
    make_ahead(gone)  # no error for the page that asked
    assert waiting(gone) is None
    make_ahead(st)
    assert waiting(st) is not None
