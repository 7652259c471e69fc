"""Instant and counter pyramids of small tables, built by one statement (tiles/build.py
_pyramid_one_pass), are the level-by-level build's tables, row for row and in the same order."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from acceltrace.store.catalog import Store
from acceltrace.tiles import build as lod


def _rebuild(path: Path, copy: Path) -> duckdb.DuckDBPyConnection:
    """A copy of the trace with every lod_* table built again from its slices."""
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'lod_%'").fetchall():
        con.execute(f"DROP TABLE {t}")
    lod.build(con)
    return con


def test_one_pass_instant_and_counter_pyramids_equal_the_level_by_level_ones(trace_store, tmp_path, monkeypatch):
    store = Store(trace_store.root, sweep=False)
    for trace in ("synthetic", "chain"):  # counters on 2 tracks; a chain with an instant
        path = store.trace_path(trace_store.ids[trace])
        one = _rebuild(path, tmp_path / f"{trace}-one.duckdb")
        monkeypatch.setattr(lod, "ONE_PASS_ROWS", 0)
        levels = _rebuild(path, tmp_path / f"{trace}-levels.duckdb")
        monkeypatch.undo()
        try:
            for t in ("lod_instant_merged", "lod_counter_merged"):
                cols = "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index"
                assert one.execute(cols, [t]).fetchall() == levels.execute(cols, [t]).fetchall()
                a = one.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                assert a == levels.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall(), t
                keys = one.execute(f"SELECT level, grp, b, track_id FROM {t} ORDER BY rowid").fetchall()
                assert keys == sorted(keys)
            n = {t: one.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                 for t in ("lod_instant_merged", "lod_counter_merged")}
            assert n["lod_counter_merged"] > 100 if trace == "synthetic" else n["lod_instant_merged"] > 0
        finally:
            one.close()
            levels.close()
