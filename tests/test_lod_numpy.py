"""The LOD tables built from one numpy read of the slices (tiles/lod_numpy.py) are the SQL build's:
the same rows, stored in the same key order, the same lod_info; and the build falls back to SQL."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from acceltrace.ingest.pipeline import ingest_one
from acceltrace.store.catalog import Store
from acceltrace.tiles import build as lod
from acceltrace.tiles import lod_numpy

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto"
TABLES = ("lod_names", "lod_tracks", "lod_groups", "lod_slices", "lod_long", "lod_instants", "lod_counters",
          "lod_merged", "lod_instant_merged", "lod_counter_merged", "lod_group_counts")
# the order each table is stored in (what tile queries and zonemaps rely on)
ORDER = {"lod_slices": ("grp", "chunk", "cls", "ts"), "lod_long": ("grp", "cls", "ts"), "lod_instants": ("grp", "ts"),
         "lod_merged": ("level", "grp", "b", "track_id", "depth"), "lod_names": ("name_id",)}


def _rebuild(path: Path, copy: Path, numpy: bool, monkeypatch) -> duckdb.DuckDBPyConnection:
    """A copy of the trace with every lod_* table built again from its slices, one way or the other."""
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'lod_%'").fetchall():
        con.execute(f"DROP TABLE {t}")
    monkeypatch.setattr(lod, "SLICES_IN_NUMPY", numpy)
    lod.build(con)
    return con


def _assert_same_build(path: Path, tmp: Path, monkeypatch) -> dict:
    sql = _rebuild(path, tmp / "sql.duckdb", False, monkeypatch)
    fast = _rebuild(path, tmp / "numpy.duckdb", True, monkeypatch)
    try:
        info = dict(sql.execute("SELECT key, value FROM lod_info WHERE key <> 'build_ms'").fetchall())
        assert dict(fast.execute("SELECT key, value FROM lod_info WHERE key <> 'build_ms'").fetchall()) == info
        counts = {}
        for t in TABLES:
            cols = sql.execute(f"SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = '{t}'"
                               " ORDER BY column_index").fetchall()
            assert fast.execute(f"SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = '{t}'"
                                " ORDER BY column_index").fetchall() == cols, t
            a = sql.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
            b = fast.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
            assert a == b, f"{t}: {len(a)} rows by SQL, {len(b)} by numpy, first difference " + str(
                next(((x, y) for x, y in zip(a, b) if x != y), None))
            counts[t] = len(a)
            if t in ORDER:  # stored in key order (rowid order), as the SQL build stores it
                keys = ", ".join(ORDER[t])
                stored = fast.execute(f"SELECT {keys} FROM {t} ORDER BY rowid").fetchall()
                assert stored == sorted(stored), f"{t} is not stored in ({keys}) order"
        return counts
    finally:
        sql.close()
        fast.close()


@pytest.mark.parametrize("sample", ["mtia-rank0-dma.json.gz", "a100-rank0-memcpy.json.gz", "mi210-gpu-only.json.gz",
                                    "v100-resnet50-2021-old-schema.json.gz"])
def test_numpy_lod_tables_equal_the_sql_ones_on_real_traces(tmp_path, monkeypatch, sample):
    if not (SAMPLES / sample).exists():
        pytest.skip(f"{sample} is not in sample_traces")
    store = Store(tmp_path / "store")
    res = ingest_one(store, [SAMPLES / sample], sample, views=False)
    assert res.error is None, res.error
    counts = _assert_same_build(store.trace_path(res.id), tmp_path, monkeypatch)
    assert counts["lod_slices"] > 0 and counts["lod_merged"] > 0


def test_numpy_lod_tables_equal_the_sql_ones_on_the_synthetic_traces(trace_store, tmp_path, monkeypatch):
    # 72 tracks, deep stacks and counters (synthetic); a chain with an instant and nulls (chain)
    store = Store(trace_store.root, sweep=False)
    counts = _assert_same_build(store.trace_path(trace_store.ids["synthetic"]), tmp_path, monkeypatch)
    assert counts["lod_slices"] > 1000 and counts["lod_counters"] > 0 and counts["lod_merged"] > 1000
    counts = _assert_same_build(store.trace_path(trace_store.ids["chain"]), tmp_path, monkeypatch)
    assert counts["lod_instants"] > 0


def test_over_the_limit_the_sql_build_runs(trace_store, tmp_path, monkeypatch):
    path = Store(trace_store.root, sweep=False).trace_path(trace_store.ids["synthetic"])
    monkeypatch.setattr(lod_numpy, "MAX_SLICES", 10)
    calls = []
    real = lod._sql_slice_tables
    monkeypatch.setattr(lod, "_sql_slice_tables", lambda *a: calls.append(1) or real(*a))
    con = _rebuild(path, tmp_path / "t.duckdb", True, monkeypatch)
    try:
        assert calls == [1]
        assert con.execute("SELECT count(*) FROM lod_slices").fetchone()[0] > 1000
    finally:
        con.close()


@pytest.mark.parametrize("dur", [1, 2, 3, 4, 7, 8, 1023, 1024, 1025, (1 << 53) - 1, 1 << 53, (1 << 53) + 1,
                                 (1 << 61) - 1, 1 << 61, (1 << 62) - 1, 1 << 62])
def test_duration_class_is_floor_log2_exactly(dur):
    assert int(lod_numpy.dur_class(np.array([dur], np.int64))[0]) == dur.bit_length() - 1


def test_one_pass_instant_and_counter_pyramids_equal_the_level_by_level_ones(trace_store, tmp_path, monkeypatch):
    store = Store(trace_store.root, sweep=False)
    for trace in ("synthetic", "chain"):
        path = store.trace_path(trace_store.ids[trace])
        one = _rebuild(path, tmp_path / f"{trace}-one.duckdb", True, monkeypatch)
        monkeypatch.setattr(lod, "ONE_PASS_ROWS", 0)
        levels = _rebuild(path, tmp_path / f"{trace}-levels.duckdb", True, monkeypatch)
        monkeypatch.undo()
        try:
            for t in ("lod_instant_merged", "lod_counter_merged"):
                cols = "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index"
                assert one.execute(cols, [t]).fetchall() == levels.execute(cols, [t]).fetchall()
                a = one.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                assert a == levels.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall(), t
                keys = one.execute(f"SELECT level, grp, b, track_id FROM {t} ORDER BY rowid").fetchall()
                assert keys == sorted(keys)
            assert one.execute("SELECT count(*) FROM lod_counter_merged").fetchone()[0] > (trace == "synthetic") * 100
        finally:
            one.close()
            levels.close()


@pytest.mark.parametrize("groups,spread", [(3, 1024), (5000, 1024), (2, 1 << 30)])
def test_peak_rate_counts_the_densest_group_bucket_with_or_without_a_bin_array(groups, spread):
    # few groups and the usual 1025 buckets take one bincount; very many groups, or times spread far
    # (a capture's own start), a sort: the same peak either way, and no bin array of groups x spread
    rng = np.random.default_rng(groups)
    grp = rng.integers(0, groups, 20_000).astype(np.int32)
    ts = rng.integers(0, spread << 4, 20_000).astype(np.int64)
    grp[:50], ts[:50] = groups - 1, 7 << 4  # the densest: 50 events in one (group, bucket)
    keys, counts = np.unique(np.stack([grp.astype(np.int64), ts >> 4]), axis=1, return_counts=True)
    assert lod_numpy._peak_rate(grp, ts, 4) == counts.max() / 16.0
