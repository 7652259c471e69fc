"""Every DuckDB connection of the product spills inside the store, bounded, never into the cwd."""

from __future__ import annotations

import os
import threading
import subprocess
import sys
from pathlib import Path

import duckdb

from acceltrace.store import duck

ROOT = Path(__file__).resolve().parent.parent


def test_a_connection_has_a_memory_limit_and_a_spill_directory_in_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELTRACE_DUCKDB_MEMORY", "300MB")
    monkeypatch.setenv("ACCELTRACE_DUCKDB_TEMP_MAX", "1GB")
    con = duck.memory_connection(tmp_path)
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit.replace(" ", "").upper() in ("286.1MIB", "300.0MB", "300MB", "286MIB"), limit
    tdir = Path(con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    assert tdir.parent.parent == tmp_path and tdir.parent.name == f"duck.{os.getpid()}.spill"
    con.close()


def test_a_limit_for_this_thread_applies_to_its_connections_only_and_the_operators_wins(tmp_path, monkeypatch):
    def limit() -> str:
        con = duck.memory_connection(tmp_path)
        try:
            return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        finally:
            con.close()

    monkeypatch.delenv("ACCELTRACE_DUCKDB_MEMORY", raising=False)
    default = limit()
    with duck.memory_limit_here("300MB"):
        here = limit()
        elsewhere = []
        t = threading.Thread(target=lambda: elsewhere.append(limit()))
        t.start()
        t.join()
        monkeypatch.setenv("ACCELTRACE_DUCKDB_MEMORY", "400MB")
        operators = limit()
    assert here.replace(" ", "").upper() in ("286.1MIB", "300.0MB"), here
    assert elsewhere == [default] and here != default
    assert operators.replace(" ", "").upper() in ("381.4MIB", "400.0MB"), operators
    monkeypatch.delenv("ACCELTRACE_DUCKDB_MEMORY")
    assert limit() == default  # the body's end restores the default


def test_a_big_sort_spills_into_the_store_not_the_working_directory(tmp_path):
    # run in a child whose cwd is an empty folder: nothing may appear there, and the spill
    # directory inside the store is gone when the child exits
    cwd, store_tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    store_tmp.mkdir()
    code = (
        "import sys; from acceltrace.store import duck\n"
        "con = duck.memory_connection(sys.argv[1], memory_limit='64MB')\n"
        "con.execute('SET threads = 1')\n"
        "n = con.execute(\"SELECT count(*) FROM (SELECT md5(i::VARCHAR) AS h FROM range(3000000) t(i) ORDER BY h)\").fetchone()[0]\n"
        "assert n == 3000000\n"
        "import os; assert os.listdir('.') == [], os.listdir('.')  # no .tmp in the working directory\n"
        "print(sorted(os.listdir(sys.argv[1])))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(store_tmp)], cwd=cwd, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "duck." in r.stdout  # the spill directory was inside the store while the query ran
    assert list(cwd.iterdir()) == []
    assert list(store_tmp.iterdir()) == []


def test_the_store_connection_uses_the_bounds(tmp_path):
    from acceltrace.store.catalog import Store

    store = Store(tmp_path / "s")
    tid, tmp = store.begin("t", 1, None)
    duckdb.connect(str(tmp)).close()
    store.publish(tid, tmp, "test", {})
    con = store.connect(tid)
    tdir = Path(con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    assert tdir.parent.parent == store.tmp_dir
    con.close()


def test_a_dead_process_spill_root_is_swept_by_the_store(tmp_path):
    from acceltrace.store.catalog import Store

    store = Store(tmp_path / "s")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root = store.tmp_dir / f"duck.{int(dead.stdout)}.spill" / "0"
    root.mkdir(parents=True)
    (root / "duckdb_temp_block-1.block").write_bytes(b"x" * 10)
    Store(store.root)
    assert not root.parent.exists()


def test_a_step_gives_up_its_connections_memory_unless_the_operator_set_it(tmp_path, monkeypatch):
    def limit_after_giving_up() -> str:
        con = duck.memory_connection(tmp_path)
        try:
            duck.give_up_memory(con, "300MB")
            return con.execute("SELECT current_setting('memory_limit')").fetchone()[0].replace(" ", "").upper()
        finally:
            con.close()

    monkeypatch.delenv("ACCELTRACE_DUCKDB_MEMORY", raising=False)
    assert limit_after_giving_up() in ("286.1MIB", "300.0MB")
    monkeypatch.setenv("ACCELTRACE_DUCKDB_MEMORY", "400MB")
    assert limit_after_giving_up() in ("381.4MIB", "400.0MB")
