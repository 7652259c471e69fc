"""The build's DuckDB instance made ahead (ingest/opening.py make_spare): taken by the next build of the
same process, at the thread count that build asks for, and the same trace as a build that opens its own."""

import os

import duckdb
import pytest
from _helpers import numbered_slices

from acceltrace.ingest import opening
from acceltrace.ingest.builder import TraceBuilder


@pytest.fixture(autouse=True)
def no_spare_left():
    opening._take_spare()  # none from another test
    yield
    opening._take_spare()


def _threads(con) -> int:
    return con.execute("SELECT current_setting('threads')").fetchall()[0][0]


def _build(path, small):
    b = TraceBuilder(path, small=small)
    con = b.con
    threads = _threads(con)
    numbered_slices(b, 2_000, dur=30)
    counts = b.finish("test", "t")
    return con, threads, counts


def _tables(path) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    names = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in names if t != "lod_info"}


@pytest.mark.parametrize("small", [True, False])
def test_the_next_build_opens_its_file_in_the_spare_at_its_own_thread_count(tmp_path, small):
    default = _threads(duckdb.connect())
    opening.make_spare()
    spare = opening._spare.get()
    con, threads, counts = _build(tmp_path / "spare.duckdb", small)
    assert con is spare  # the instance made ahead, not a new one
    assert opening._spare is None  # taken once
    assert threads == (1 if small else default)
    _, own_threads, own_counts = _build(tmp_path / "own.duckdb", small)
    assert (threads, counts) == (own_threads, own_counts)
    assert _tables(tmp_path / "spare.duckdb") == _tables(tmp_path / "own.duckdb")


def test_a_spare_is_made_once_and_never_taken_by_another_process(tmp_path):
    opening.make_spare()
    first = opening._spare
    opening.make_spare()
    assert opening._spare is first  # one at a time
    first.pid = os.getpid() + 1  # as if made before a fork: the child's build opens its own instance
    con, _, counts = _build(tmp_path / "t.duckdb", True)
    assert con is not first.get() and counts["slices"] == 2_000
    assert opening._spare is None


def test_a_spare_that_failed_leaves_the_build_to_open_its_own(tmp_path, monkeypatch):
    real = duckdb.connect

    def failing(*a, config=None, **k):
        if config is not None:  # the spare's instance
            raise duckdb.IOException("no memory for another instance")
        return real(*a, **k)

    monkeypatch.setattr(opening.duckdb, "connect", failing)
    opening.make_spare()
    with pytest.raises(duckdb.IOException):
        opening._spare.get()
    con, threads, counts = _build(tmp_path / "t.duckdb", True)
    assert threads == 1 and counts["slices"] == 2_000


def test_an_upload_process_makes_the_next_uploads_instance_after_each_ingest(tmp_path, monkeypatch):
    """server/ingest_child.py: the pool process makes a spare at its start and after every ingest, so an
    upload's build attaches its file to an instance already made (the first upload's too)."""
    from pathlib import Path

    from acceltrace.server import ingest_child
    from acceltrace.store.catalog import Store

    monkeypatch.setattr(ingest_child, "set_priority", lambda idle: None)  # (this is the test's own process)
    monkeypatch.setattr(ingest_child, "_exit_with_parent", lambda parent: None)
    monkeypatch.setattr(os, "nice", lambda n: 0)
    monkeypatch.setattr(ingest_child.signal, "signal", lambda *a: None)  # pytest's handlers stay
    ingest_child._init(0)
    made = opening._spare
    assert made is not None and made.get() is not None
    kineto = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto"
    sample = kineto / "a100-rank0-memcpy.json.gz"
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("a100", sample.stat().st_size, None)
    assert ingest_child.ingest(str(tmp_path / "store"), str(sample), "a100", tid, str(tmp)) is None
    assert store.get(tid)["status"] == "ready"
    assert opening._spare is not None and opening._spare is not made  # the first taken, the next made


@pytest.mark.parametrize("made", [
    "from acceltrace.ingest.opening import make_spare; make_spare()",
    "from acceltrace.ingest.opening import Opening; Opening(Path(sys.argv[1]) / 't.duckdb', '1GB', 1)",
], ids=["spare", "open"])
def test_a_process_that_ends_while_duckdb_is_being_opened_on_a_thread_exits_cleanly(tmp_path, made):
    """The exit waits for the open (made_ahead.OnThread's at_exit): a daemon thread still inside DuckDB at the
    interpreter's finalisation aborted the process (status 134, "FATAL: exception not rethrown"); an upload's
    ingest process that ended right after it began its next build's instance did, every time."""
    import subprocess
    import sys

    code = f"import sys; from pathlib import Path; {made}"
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "rethrown" not in r.stderr, (r.returncode, r.stderr)
