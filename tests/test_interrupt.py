"""Ctrl-C during an ingest (ingest/pipeline.py): the command says "interrupted" and exits 130; the build's
threads are stopped before the interpreter's exit (they ran on into it and the process aborted); nothing of
the build is left, neither its row nor its temp files; a trace already published stays whole.

DuckDB takes SIGINT itself while a query runs on the main thread and raises "Query interrupted" (a
RuntimeError in 2.0.1) in place of KeyboardInterrupt: that is an interrupt too, never an "internal error"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from acceltrace.ingest import pipeline
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.made_ahead import Pool
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def _left(store: Store) -> list[str]:
    """What is in the store's tmp, but for this process's DuckDB spill folder (its connections share it)."""
    return sorted(p.name for p in store.tmp_dir.iterdir() if p.name != f"duck.{os.getpid()}.spill")


@pytest.mark.parametrize("raised", [
    KeyboardInterrupt(), RuntimeError("Query interrupted!"),
    # a Ctrl-C met while DuckDB read a registered Arrow object (seen in an Nsight ingest's add_slices)
    duckdb.InvalidInputException("Invalid Input Error: reading the schema of the object registered as '_batch'"
                                 " failed: KeyboardInterrupt: "),
], ids=["keyboard-interrupt", "duckdb-query-interrupted", "duckdb-error-around-it"])
def test_an_interrupted_build_leaves_no_row_and_no_file_and_is_raised(tmp_path, monkeypatch, raised):
    store = Store(tmp_path / "store")
    aborted = []
    real_finish, real_abort = TraceBuilder.finish, TraceBuilder.abort

    # only this test's builds: the patch is process-wide, and a thread an earlier test left behind may be
    # building (a CI run counted a live capture's finalisation here)
    def ours(builder) -> bool:
        return Path(builder.path).is_relative_to(tmp_path)

    def finish(self, *args, **kwargs):
        if ours(self):
            raise raised
        return real_finish(self, *args, **kwargs)

    def abort(self):
        if ours(self):
            aborted.append(self)
        real_abort(self)

    monkeypatch.setattr(TraceBuilder, "finish", finish)
    monkeypatch.setattr(TraceBuilder, "abort", abort)
    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest_paths(store, [A100], views=False)
    assert len(aborted) == 1  # its threads stopped and its connection closed before the interrupt goes on
    assert store.list() == [] and _left(store) == [] and list(store.traces_dir.iterdir()) == []


def test_ctrl_c_during_the_views_precompute_lets_it_end_and_keeps_the_published_trace(tmp_path, monkeypatch):
    # the precompute runs off the main thread, where DuckDB does not stop its (recursive) queries: a Ctrl-C on
    # the main thread meanwhile is raised once it has ended, its side file written
    import _thread

    from acceltrace.store import aggregates

    store = Store(tmp_path / "store")
    real = aggregates.build_side
    ran = []

    def build_side(store, trace_id):
        _thread.interrupt_main()  # the KeyboardInterrupt arrives in the main thread while this runs
        time.sleep(0.2)
        ran.append(real(store, trace_id))

    monkeypatch.setattr(aggregates, "build_side", build_side)
    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest_paths(store, [A100])
    (row,) = store.list()
    assert ran and row["status"] == "ready" and store.trace_path(row["id"]).exists()
    assert store.side_path(row["id"], "views").exists()
    assert _left(store) == []


def test_duckdbs_query_interrupted_in_the_analysis_stops_the_command_and_keeps_the_trace(tmp_path):
    # the analysis runs on the main thread: there DuckDB takes the Ctrl-C and raises "Query interrupted"
    def after(store, trace_id):
        raise RuntimeError("Query interrupted!")

    store = Store(tmp_path / "store")
    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest_paths(store, [A100], after_publish=after)
    (row,) = store.list()
    assert row["status"] == "ready" and _left(store) == []


def test_a_side_file_whose_build_fails_leaves_no_temp_file(tmp_path):
    store = Store(tmp_path / "store")
    (res,) = pipeline.ingest_paths(store, [A100], views=False)

    def build(con):
        con.execute("CREATE TABLE t AS SELECT 1 AS x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.write_side(res.id, "views", build)
    assert _left(store) == [] and not store.side_path(res.id, "views").exists()


def test_a_pool_waits_for_its_running_jobs_through_ctrl_c_and_cancels_the_rest():
    started, ended = threading.Event(), threading.Event()

    def job():
        started.set()
        time.sleep(0.3)
        ended.set()

    with pytest.raises(KeyboardInterrupt):
        with Pool(1) as pool:
            running = pool.submit(job)
            waiting = pool.submit(job)
            started.wait(5)
            raise KeyboardInterrupt
    assert ended.is_set() and running.done() and waiting.cancelled()


def test_ctrl_c_during_acceltrace_ingest_exits_130_and_leaves_nothing(tmp_path):
    from bench.native_ingest import make_file

    src = tmp_path / "big.atrace"
    make_file(src, 1_000_000)  # about a second of ingest: long enough to be interrupted in the middle
    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", "--no-analyze",
                             str(src)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 60
    while not any((store / "tmp").glob("*.duckdb")):  # the build has begun
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in out, out
    assert "terminate called" not in out and "Traceback" not in out, out
    assert list((store / "tmp").iterdir()) == [] and list((store / "traces").iterdir()) == []
    listed = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ls"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert listed.returncode == 0 and "big.atrace" not in listed.stdout, listed.stdout


def test_an_interrupt_is_told_through_the_chain_and_a_looping_chain_ends():
    inner = KeyboardInterrupt()
    outer = RuntimeError("closing a connection a thread still used")
    outer.__context__ = inner
    assert pipeline.interrupted(outer) and not pipeline.interrupted(ValueError("bad bytes"))
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a  # set by hand: Python makes no such loop itself
    assert not pipeline.interrupted(a)
