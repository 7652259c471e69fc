"""The merged pyramid built in numpy (tiles/pyramid.py) is the SQL pyramid, row for row."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from acceltrace.ingest.pipeline import ingest_one
from acceltrace.store.catalog import Store
from acceltrace.tiles import build as lod
from acceltrace.tiles import pyramid

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto"


@pytest.fixture(autouse=True)
def _pyramids_for_small_traces(monkeypatch):
    """The samples here are small enough to get no pyramid (tiles/build.py RAW_TRACE_ROWS): these tests build theirs."""
    monkeypatch.setattr(lod, "RAW_TRACE_ROWS", 0)


def _sql_twin(path: Path, tmp: Path) -> duckdb.DuckDBPyConnection:
    """A copy of the trace whose lod_merged is rebuilt by the SQL pyramid."""
    copy = tmp / f"{path.stem}.sql.duckdb"
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    info = dict(con.execute("SELECT key, value FROM lod_info").fetchall())
    con.execute("DROP TABLE lod_merged")
    con.execute("SET preserve_insertion_order = true")
    lod._build_merged_pyramid(con, int(info["base_level"]), int(info["max_level"]))
    return con


def _assert_same(con: duckdb.DuckDBPyConnection, numpy_file: Path) -> int:
    con.execute(f"ATTACH '{numpy_file}' AS np_build (READ_ONLY)")
    try:
        (n,) = con.execute("SELECT count(*) FROM np_build.lod_merged").fetchone()
        (m,) = con.execute("SELECT count(*) FROM lod_merged").fetchone()
        assert n == m
        for a, b in (("lod_merged", "np_build.lod_merged"), ("np_build.lod_merged", "lod_merged")):
            (extra,) = con.execute(f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})").fetchone()
            assert extra == 0, f"{extra} rows of {a} are not in {b}"
        types = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'lod_merged'"
                            " ORDER BY database_name, column_index").fetchall()
        assert types[:len(types) // 2] == types[len(types) // 2:]  # the same columns and types in both
        return n
    finally:
        con.execute("DETACH np_build")


def _assert_same_as_sql(path: Path, numpy_file: Path, tmp: Path) -> None:
    """numpy_file's lod_merged is the SQL pyramid of the trace at `path`, row for row (and not empty)."""
    twin = _sql_twin(path, tmp)
    try:
        assert _assert_same(twin, numpy_file) > 0
    finally:
        twin.close()


@pytest.mark.parametrize("packed", [True, False], ids=["packed-key", "lexsort"])
@pytest.mark.parametrize("sample", ["mtia-rank0-dma.json.gz", "a100-rank0-memcpy.json.gz",
                                    "mi210-gpu-only.json.gz"])
def test_numpy_pyramid_equals_the_sql_pyramid_on_real_traces(tmp_path, monkeypatch, sample, packed):
    # DMA bytes (MTIA), memcpy bytes with nulls elsewhere (A100), an AMD GPU-only trace; each level's
    # rows grouped by one packed int64 key, or (keys too wide to pack) by a sort on all of them
    assert lod.MERGED_IN_NUMPY
    if not packed:
        monkeypatch.setattr(pyramid, "_packed", lambda *keys: None)
    store = Store(tmp_path / "store")
    res = ingest_one(store, [SAMPLES / sample], sample, views=False)
    assert res.error is None, res.error
    path = store.trace_path(res.id)
    con = _sql_twin(path, tmp_path)
    try:
        assert _assert_same(con, path) > 0
    finally:
        con.close()


def test_numpy_pyramid_equals_the_sql_pyramid_on_the_synthetic_trace(trace_store, tmp_path):
    # 72 tracks, deep stacks, a pyramid from a low base level (the fixture shrinks RAW_WINDOW_ROWS)
    path = Store(trace_store.root, sweep=False).trace_path(trace_store.ids["synthetic"])
    copy = tmp_path / "numpy.duckdb"
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    info = dict(con.execute("SELECT key, value FROM lod_info").fetchall())
    base, top = int(info["base_level"]), int(info["max_level"])
    assert top - base >= 3  # several levels merge
    con.execute("DROP TABLE lod_merged")
    pyramid.build_merged(con, base, top)
    con.close()
    _assert_same_as_sql(path, copy, tmp_path)


def test_numpy_pyramid_in_parts_equals_the_sql_pyramid(trace_store, tmp_path):
    # a trace over the in-memory limit is built in parts of (grp, ts >> max_level) runs; a limit
    # far below the synthetic trace's size forces many parts, some splitting one group in time
    path = Store(trace_store.root, sweep=False).trace_path(trace_store.ids["synthetic"])
    copy = tmp_path / "parts.duckdb"
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    info = dict(con.execute("SELECT key, value FROM lod_info").fetchall())
    base, top = int(info["base_level"]), int(info["max_level"])
    (n, groups) = con.execute("SELECT count(*), count(DISTINCT grp) FROM lod_slices").fetchone()
    limit = max(1, n // 40)
    chunk_log2 = int(info["chunk_log2"])
    parts = pyramid._parts(con, top, limit, chunk_log2)
    assert len(parts) > groups  # more parts than groups: some group is cut in time
    assert parts[0][0].startswith("rowid BETWEEN")  # lod_slices' order keeps each key's rows together
    assert sum(con.execute(f"SELECT count(*) FROM lod_slices WHERE {w}", p).fetchone()[0] for w, p in parts) == n
    con.execute("DROP TABLE lod_merged")
    con.execute("SET preserve_insertion_order = true")
    pyramid.build_merged(con, base, top, limit=limit, chunk_log2=chunk_log2)
    levels = [r[0] for r in con.execute("SELECT level FROM lod_merged").fetchall()]
    assert levels == sorted(levels)  # stored in level order, as the one-part build stores it
    con.close()
    _assert_same_as_sql(path, copy, tmp_path)
    # the same parts by key filter (lod_slices in another order: a key's rows not in one stretch)
    shuffled = tmp_path / "shuffled.duckdb"
    shutil.copy(path, shuffled)
    con = duckdb.connect(str(shuffled))
    con.execute("CREATE TABLE _s AS SELECT * FROM lod_slices ORDER BY hash(slice_id)")
    con.execute("DROP TABLE lod_slices")
    con.execute("ALTER TABLE _s RENAME TO lod_slices")
    parts = pyramid._parts(con, top, limit, chunk_log2)
    assert parts[0][0].startswith("grp BETWEEN")
    assert sum(con.execute(f"SELECT count(*) FROM lod_slices WHERE {w}", p).fetchone()[0] for w, p in parts) == n
    con.execute("DROP TABLE lod_merged")
    con.execute("SET preserve_insertion_order = true")
    pyramid.build_merged(con, base, top, limit=limit, chunk_log2=chunk_log2)
    con.close()
    twin = _sql_twin(path, tmp_path / "t2") if (tmp_path / "t2").mkdir() is None else None
    try:
        assert _assert_same(twin, shuffled) > 0
    finally:
        twin.close()


def test_numpy_pyramid_from_the_rows_in_hand_equals_the_sql_pyramid(trace_store, tmp_path, monkeypatch):
    # the build hands the pyramid lod_slices' rows as it stored them: its parts are stretches of them, the
    # same rows as _parts' rowid ranges, and nothing is read back from lod_slices
    path, copy, con, info = _synthetic_copy(trace_store, tmp_path, threads=1)
    base, top, chunk_log2 = int(info["base_level"]), int(info["max_level"]), int(info["chunk_log2"])
    rows = con.sql("SELECT * FROM lod_slices ORDER BY rowid").to_arrow_table()
    limit = max(1, rows.num_rows // 40)
    spans = pyramid._spans(rows, top, limit, chunk_log2)
    ranges = [p for _, p in pyramid._parts(con, top, limit, chunk_log2)]
    assert len(spans) > 1 and [[a, b - 1] for a, b in spans] == ranges  # rowids are row positions here
    assert pyramid._spans(rows, top, rows.num_rows, chunk_log2) == [(0, rows.num_rows)]
    assert pyramid._spans(rows.take(list(range(rows.num_rows))[::-1]), top, limit, chunk_log2) is None  # not in order
    monkeypatch.setattr(pyramid, "_fetch", lambda *a: pytest.fail("read lod_slices back"))
    con.execute("DROP TABLE lod_merged")
    con.execute("SET preserve_insertion_order = true")
    pyramid.build_merged(con, base, top, limit=limit, chunk_log2=chunk_log2, rows=rows)
    con.close()
    _assert_same_as_sql(path, copy, tmp_path)


def test_the_build_hands_the_pyramid_the_rows_it_stored(tmp_path, monkeypatch):
    seen = []
    spans = pyramid._spans
    monkeypatch.setattr(pyramid, "_spans", lambda rows, *a: seen.append(rows.num_rows) or spans(rows, *a))
    monkeypatch.setattr(pyramid, "_fetch", lambda *a: pytest.fail("read lod_slices back"))
    store = Store(tmp_path / "store")
    res = ingest_one(store, [SAMPLES / "mtia-rank0-dma.json.gz"], "mtia", views=False)
    assert res.error is None, res.error
    con = duckdb.connect(str(store.trace_path(res.id)), read_only=True)
    try:
        assert seen == [con.execute("SELECT count(*) FROM lod_slices").fetchone()[0]]
    finally:
        con.close()


def _synthetic_copy(trace_store, tmp_path: Path, threads: int):
    """The synthetic trace, a copy of its file open with DuckDB at `threads` threads, and its lod_info."""
    path = Store(trace_store.root, sweep=False).trace_path(trace_store.ids["synthetic"])
    copy = tmp_path / f"threads{threads}.duckdb"
    shutil.copy(path, copy)
    con = duckdb.connect(str(copy))
    con.execute(f"SET threads = {threads}")
    return path, copy, con, dict(con.execute("SELECT key, value FROM lod_info").fetchall())


@pytest.mark.parametrize("held", [pyramid.HELD_BYTES, 1], ids=["held-in-memory", "staged-past-budget"])
def test_numpy_pyramid_on_two_threads_equals_the_sql_pyramid(trace_store, tmp_path, monkeypatch, held):
    # a trace of PARALLEL_MIN_SLICES or more is cut into parts built on two threads; each level's rows
    # wait as Arrow batches (or, past HELD_BYTES, in temp tables) and go into lod_merged in part order
    import threading

    path, copy, con, info = _synthetic_copy(trace_store, tmp_path, threads=2)
    base, top = int(info["base_level"]), int(info["max_level"])
    (n,) = con.execute("SELECT count(*) FROM lod_slices").fetchone()
    monkeypatch.setattr(pyramid, "PARALLEL_MIN_SLICES", n // 2)
    monkeypatch.setattr(pyramid, "HELD_BYTES", held)
    threads, staged = set(), []
    levels, stage = pyramid._levels, pyramid._Levels._stage
    monkeypatch.setattr(pyramid, "_levels", lambda *a: (threads.add(threading.current_thread().name), levels(*a))[1])
    monkeypatch.setattr(pyramid._Levels, "_stage", lambda self: (staged.append(1), stage(self))[1])
    con.execute("DROP TABLE lod_merged")
    con.execute("SET preserve_insertion_order = true")
    pyramid.build_merged(con, base, top, chunk_log2=int(info["chunk_log2"]))
    levels_stored = [r[0] for r in con.execute("SELECT level FROM lod_merged").fetchall()]
    assert levels_stored == sorted(levels_stored)
    assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '_merged_l%'").fetchone()[0]
    con.close()
    assert len(threads) == 2 and all(t.startswith("pyramid") for t in threads)  # both parts off the caller's thread
    assert bool(staged) == (held == 1)
    _assert_same_as_sql(path, copy, tmp_path)


def test_a_one_thread_database_builds_the_pyramid_on_one_thread(trace_store, tmp_path, monkeypatch):
    # a fleet's worker builds with DuckDB at one thread: the pyramid stays on the caller's thread
    import threading

    _, _, con, info = _synthetic_copy(trace_store, tmp_path, threads=1)
    monkeypatch.setattr(pyramid, "PARALLEL_MIN_SLICES", 1)
    threads = set()
    levels = pyramid._levels
    monkeypatch.setattr(pyramid, "_levels", lambda *a: (threads.add(threading.current_thread().name), levels(*a))[1])
    con.execute("DROP TABLE lod_merged")
    pyramid.build_merged(con, int(info["base_level"]), int(info["max_level"]), chunk_log2=int(info["chunk_log2"]))
    con.close()
    assert threads == {threading.current_thread().name}


def test_sums_that_could_overflow_take_the_sql_build():
    con = duckdb.connect()
    con.execute("CREATE TABLE lod_slices (grp INTEGER, chunk INTEGER, cls TINYINT, ts BIGINT, dur BIGINT,"
                " track_id INTEGER, depth SMALLINT, slice_id BIGINT, name_id INTEGER, bytes BIGINT)")
    con.execute("INSERT INTO lod_slices VALUES (0, 0, 61, 0, 4611686018427387904, 0, 0, 0, 0, NULL),"
                " (0, 0, 61, 1, 4611686018427387904, 0, 1, 1, 0, NULL)")
    assert not pyramid.fits(con)  # 2 x 2^62 ns of busy time overflows int64
    con.execute("UPDATE lod_slices SET dur = 1000")
    assert pyramid.fits(con)
    con.execute("UPDATE lod_slices SET bytes = -9223372036854775808")
    assert not pyramid.fits(con)  # |INT64_MIN| itself is past int64; no error either


def test_packed_key_sorts_as_the_keys_do_and_refuses_what_does_not_fit():
    import numpy as np

    rng = np.random.default_rng(3)
    grp = rng.integers(0, 40, 5000).astype(np.int32)
    b = rng.integers(-(1 << 30), 1 << 30, 5000).astype(np.int64)
    track = rng.integers(0, 300, 5000).astype(np.int32)
    depth = rng.integers(0, 60, 5000).astype(np.int16)
    key = pyramid._packed(grp, b, track, depth)
    by_key = sorted(range(5000), key=lambda i: (key[i], i))
    by_tuple = sorted(range(5000), key=lambda i: ((grp[i], b[i], track[i], depth[i]), i))
    assert by_key == by_tuple
    wide = np.array([-(1 << 61), 1 << 61], np.int64)
    assert pyramid._packed(np.array([0, 3], np.int32), wide) is None  # 63 bits of b and 2 of grp


def test_a_one_thread_build_takes_the_second_core_when_the_write_beside_it_ends(trace_store, tmp_path, monkeypatch):
    # DuckDB at one thread (the write of `slices` and the LOD build share the cores): the parts are built on
    # the caller's thread until `spare` is set (the write ended), then on a second thread too, and lod_merged
    # is the same table, in part order
    import threading
    import time

    path, copy, con, info = _synthetic_copy(trace_store, tmp_path, threads=1)
    (n,) = con.execute("SELECT count(*) FROM lod_slices").fetchone()
    monkeypatch.setattr(pyramid, "PARALLEL_MIN_SLICES", 1)
    spare, seen = threading.Event(), []
    levels, me = pyramid._levels, threading.current_thread().name

    def record(*a):
        seen.append(threading.current_thread().name)
        if spare.is_set() and seen[-1] == me:
            time.sleep(0.1)  # the second thread (it looks every 5 ms) takes parts and ends them first
        out = levels(*a)
        if len(seen) == 2:
            spare.set()  # the write beside the build ends after its first two parts
        return out

    monkeypatch.setattr(pyramid, "_levels", record)
    con.execute("DROP TABLE lod_merged")
    con.execute("SET preserve_insertion_order = true")
    pyramid.build_merged(con, int(info["base_level"]), int(info["max_level"]), limit=max(2, n // 4),
                         chunk_log2=int(info["chunk_log2"]), spare=spare)
    stored = con.execute("SELECT level, grp, b FROM lod_merged").fetchall()  # as stored
    con.close()
    assert len(seen) >= 4, seen
    assert seen[:2] == [me, me], seen  # nothing on a second thread before the write ended
    assert "pyramid-spare" in seen[2:], seen
    assert stored == sorted(stored)  # in part order, though the second thread ended its parts first
    _assert_same_as_sql(path, copy, tmp_path)


@pytest.mark.parametrize("sample", [SAMPLES / "a100-rank0-memcpy.json.gz",
                                    SAMPLES.parent.parent / "atrace" / "acceltrace-0.1" / "daemon-python-c.atrace"],
                         ids=["chrome-lod-ahead", "atrace-beside"])
@pytest.mark.parametrize("threads", [None, 1], ids=["two-cores", "held-to-one"])
def test_the_builder_offers_the_pyramid_the_core_the_write_frees_unless_held_to_one(tmp_path, monkeypatch, sample,
                                                                                    threads):
    import threading

    got = []
    real = pyramid.build_merged
    monkeypatch.setattr(pyramid, "build_merged", lambda *a, **k: (got.append(k.get("spare")), real(*a, **k))[1])
    res = ingest_one(Store(tmp_path / "store"), [sample], sample.name, threads=threads, views=False)
    assert res.error is None, res.error
    assert len(got) == 1
    if threads == 1:  # a fleet's worker: one core, whatever the write does
        assert got[0] is None
    else:
        assert isinstance(got[0], threading.Event) and got[0].is_set()  # set when the write of `slices` ended


def test_a_failing_part_stops_the_second_thread_too(trace_store, tmp_path, monkeypatch):
    # an error in the caller's part: the second thread begins no further part, and the error is raised
    import threading

    _, _, con, info = _synthetic_copy(trace_store, tmp_path, threads=1)
    (n,) = con.execute("SELECT count(*) FROM lod_slices").fetchone()
    monkeypatch.setattr(pyramid, "PARALLEL_MIN_SLICES", 1)
    spare, seen = threading.Event(), []
    me, real = threading.current_thread().name, pyramid._levels

    def failing(*a):
        seen.append(threading.current_thread().name)
        if seen[-1] == me:
            spare.set()
            raise RuntimeError("a part failed")
        threading.Event().wait(0.05)
        return real(*a)

    monkeypatch.setattr(pyramid, "_levels", failing)
    con.execute("DROP TABLE lod_merged")
    with pytest.raises(RuntimeError, match="a part failed"):
        pyramid.build_merged(con, int(info["base_level"]), int(info["max_level"]), limit=max(2, n // 8),
                             chunk_log2=int(info["chunk_log2"]), spare=spare)
    con.close()
    assert seen.count("pyramid-spare") <= 1, seen  # at most the part it had begun before the error


def test_runs_of_keys_hold_at_most_the_limit_and_a_bigger_key_alone():
    assert pyramid._runs([3, 3, 3, 9, 1, 1], 6) == [(0, 1), (2, 2), (3, 3), (4, 5)]
    assert pyramid._runs([1] * 5, 100) == [(0, 4)]
    assert pyramid._runs([], 5) == []
