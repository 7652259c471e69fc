"""The store under mistakes and kills: ids are never globs, removal is one step, damage is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from acceltrace.store import catalog
from acceltrace.store.catalog import Store, is_trace_id

ROOT = Path(__file__).resolve().parent.parent


def _cli(store: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def _ready(store: Store, name: str) -> str:
    """A published trace without running an ingester: an empty DuckDB file and its row."""
    import duckdb

    tid, tmp = store.begin(name, 1, None)
    duckdb.connect(str(tmp)).close()
    store.publish(tid, tmp, "test", {"slices": 0})
    store.side_path(tid, "findings").write_bytes(b"")
    return tid


def test_ids_are_checked_against_the_alphabet():
    assert is_trace_id(catalog.new_trace_id())
    for bad in ("*", "?", "[a]", "../x", "a/b", "", "x" * 65, "a b", "a.b"):
        assert not is_trace_id(bad), bad


def test_rm_with_a_glob_touches_nothing(tmp_path):
    store = Store(tmp_path / "s")
    ids = [_ready(store, f"t{i}") for i in range(3)]
    before = sorted(p.name for p in store.traces_dir.iterdir())
    r = _cli(store.root, "rm", "*")
    assert r.returncode == 1 and "'*' is not a trace id" in r.stderr, r.stderr
    assert sorted(p.name for p in store.traces_dir.iterdir()) == before
    assert [store.get(i)["status"] for i in ids] == ["ready"] * 3
    with pytest.raises(ValueError):
        store.remove("t*")


def test_rm_removes_the_row_and_every_file_of_that_trace_only(tmp_path):
    store = Store(tmp_path / "s")
    a, b = _ready(store, "a"), _ready(store, "b")
    r = _cli(store.root, "rm", a)
    assert r.returncode == 0, r.stderr
    assert store.get(a) is None and store.get(b)["status"] == "ready"
    assert {p.name.split(".", 1)[0] for p in store.traces_dir.iterdir()} == {b}


def test_files_left_by_a_removal_killed_after_its_row_went_are_swept(tmp_path, monkeypatch):
    store = Store(tmp_path / "s")
    a = _ready(store, "a")
    with store._db() as db:  # the row is gone, the kill came before the files
        db.execute("DELETE FROM traces WHERE id = ?", (a,))
    monkeypatch.setattr(catalog, "ORPHAN_AGE_S", -1)
    Store(store.root)
    assert list(store.traces_dir.iterdir()) == []


def test_a_young_file_without_a_row_is_left_alone(tmp_path):
    # it may be a publish racing the sweep (the row arrives a moment later)
    store = Store(tmp_path / "s")
    (store.traces_dir / f"{catalog.new_trace_id()}.duckdb").write_bytes(b"")
    Store(store.root)
    assert len(list(store.traces_dir.iterdir())) == 1


def test_a_ready_row_whose_file_is_missing_is_reported_damaged(tmp_path):
    store = Store(tmp_path / "s")
    a = _ready(store, "a")
    store.trace_path(a).unlink()
    row = store.get(a)
    assert row["status"] == "damaged" and "missing" in row["error"]
    r = _cli(store.root, "query", a, "SELECT 1")
    assert r.returncode != 0 and "is damaged" in r.stderr and "Traceback" not in r.stderr, r.stderr
    ls = _cli(store.root, "ls", "--json")
    assert ls.returncode == 0 and "damaged" in ls.stdout, ls.stdout + ls.stderr

    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app

    with TestClient(create_app(store.root)) as client:
        meta = client.get(f"/api/traces/{a}")
        assert meta.status_code == 200 and meta.json()["status"] == "damaged", meta.text
        res = client.get(f"/api/traces/{a}/search", params={"q": "x"})
        assert res.status_code == 409 and "damaged" in res.text and "missing" in res.text, res.text


def test_an_ingest_whose_process_died_disappears_from_the_list(tmp_path):
    store = Store(tmp_path / "s")
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)
    tid, _ = store.begin("killed", 1, None)
    with store._db() as db:
        db.execute("UPDATE traces SET pid = ? WHERE id = ?", (dead_pid, tid))
    assert store.list() == []
    assert store.get(tid) is None


def test_a_side_file_is_built_unsynced_and_published_synced(tmp_path, synced):
    """write_side: the build's commits are not synced one by one (the temp file is thrown away if it
    fails); the whole file is, once, after its last checkpoint and before it replaces the old one."""
    import duckdb

    store = Store(tmp_path / "s")
    tid = _ready(store, "t")
    modes = []

    def build(con):
        modes.append(con.execute("SELECT current_setting('fsync_mode')").fetchall()[0][0])
        con.execute("CREATE TABLE findings AS SELECT 1 AS x")

    path = store.write_side(tid, "findings", build)
    assert modes == ["NONE"]
    assert len(synced) == 1 and Path(synced[0]).parent == store.tmp_dir  # the temp file, before the replace
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT x FROM findings").fetchall() == [(1,)]
    assert con.execute("SELECT current_setting('fsync_mode')").fetchall() == [("STANDARD",)]  # not persisted
