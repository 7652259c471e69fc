"""The builder's greedy depth pass: the compiled one (ingest/_depths.c) gives the Python loop's depths."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from acceltrace.ingest import depths


@pytest.mark.skipif(depths._depths is None, reason="ingest/_depths.c is not built (no compiler)")
@pytest.mark.parametrize("seed", range(6))
def test_compiled_first_free_equals_python(seed):
    rng = np.random.default_rng(seed)
    n = [0, 1, 7, 300, 2000, 5000][seed]
    ts = rng.integers(-50, 10_000, n)
    dur = np.where(rng.random(n) < 0.2, 0, rng.integers(0, 400, n))  # instants among them
    order = np.lexsort((np.arange(n), -dur, ts))
    ts, dur = ts[order].astype(np.int64), dur[order].astype(np.int64)
    fast, slow = depths._first_free(ts, dur, compiled=True), depths._first_free(ts, dur, compiled=False)
    assert fast.dtype == slow.dtype == np.int32
    assert fast.tolist() == slow.tolist()


@pytest.mark.parametrize("span", [10_000, 1 << 61])
def test_packed_sweep_order_equals_the_five_key_order(monkeypatch, span):
    """assign_depths with the (track, time, kind) key packed into one int64 gives the same depths as
    with the three keys apart (the fallback: used when they do not fit, as with the 2^61 span here)."""
    import duckdb

    rng = np.random.default_rng(3)
    n = 4000
    con = duckdb.connect()
    con.execute("CREATE TABLE _slices_staging (slice_id BIGINT, track_id INTEGER, ts BIGINT, dur BIGINT, depth INTEGER)")
    ts = rng.integers(0, 10_000, n) * (span // 10_000)
    dur = np.where(rng.random(n) < 0.2, 0, rng.integers(0, 400, n) * max(1, span // 10_000 // 50))
    con.register("b", {"slice_id": np.arange(n), "track_id": rng.integers(0, 9, n).astype(np.int32),
                       "ts": ts, "dur": dur, "depth": np.full(n, None)})
    con.execute("INSERT INTO _slices_staging SELECT slice_id, track_id, ts, dur, NULL FROM b")
    packed = depths._primary_keys(np.array([0, 8]), np.array([0, int(ts.max() + dur.max())]), np.array([0, 2]))
    assert len(packed) == (1 if span == 10_000 else 3)
    got = depths.assign_depths(con).sort_by("slice_id")
    monkeypatch.setattr(depths, "_primary_keys", lambda track, t, kind: (kind, t, track))
    want = depths.assign_depths(con).sort_by("slice_id")
    assert got.equals(want)
    assert got.num_rows == n and max(got["depth"].to_pylist()) > 0


@pytest.mark.parametrize("seed", range(4))
def test_flat_tracks_skip_the_sweep_with_the_same_depths(seed):
    """depths_of (flat tracks get 0 without the sweep) gives the sweep's depths on every row: flat
    tracks, nested ones, partial overlaps, instants at a slice's start or end, equal starts."""
    rng = np.random.default_rng(seed)
    n = 6000
    track = rng.integers(0, 12, n).astype(np.int64)
    ts = rng.integers(0, 40_000, n).astype(np.int64) * 10
    dur = np.where(rng.random(n) < 0.1, 0, rng.integers(1, 30, n) * 10).astype(np.int64)
    flat = track < 6  # tracks 0-5: back to back (some touching, an instant at a slice's end), never nested
    for tr in range(6):
        rows = np.flatnonzero(track == tr)
        gaps = rng.integers(0, 3, len(rows)) * 10
        d = dur[rows]
        start = np.cumsum(np.r_[0, (d + gaps + (d == 0))[:-1]])  # the next slice starts after an instant
        ts[rows] = start
    sid = rng.permutation(n).astype(np.int64)
    want = np.zeros(n, np.int32)
    depths._sweep(sid, track, ts, dur, want, np.zeros(n, bool))
    got = depths.depths_of(sid, track, ts, dur)
    assert got.dtype == np.int32
    assert got.tolist() == want.tolist()
    assert (got[flat] == 0).all() and got[~flat].max() > 0


@pytest.mark.skipif(depths._depths is None, reason="ingest/_depths.c is not built (no compiler)")
@pytest.mark.parametrize("seed", range(5))
def test_compiled_sweep_equals_the_numpy_sweep(seed):
    """depths_of's compiled walk (a heap of open ends per track) gives the numpy sweep's depths:
    nested calls, partial overlaps (the greedy pass), instants at a slice's start and end, runs of
    equal starts and equal durations (the id decides), rows in any order, many tracks and one."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        track = rng.integers(0, int(rng.integers(1, 5)), n).astype(np.int64) * (seed + 1)
        ts = rng.integers(0, int(rng.integers(1, 40)), n).astype(np.int64)
        dur = np.where(rng.random(n) < 0.25, 0, rng.integers(0, int(rng.integers(1, 30)), n)).astype(np.int64)
        sid = (rng.permutation(n) * 3 + 7).astype(np.int64)
        want = depths.depths_of(sid, track, ts, dur, compiled=False)
        got = depths.depths_of(sid, track, ts, dur)
        assert got.dtype == np.int32
        assert got.tolist() == want.tolist(), (track.tolist(), ts.tolist(), dur.tolist(), sid.tolist())
    # one deep nest of calls per track, shuffled: depths up to a few dozen
    rows = []
    for tr in range(3):
        t = 0
        for _ in range(400):
            d = int(rng.integers(50, 5000))
            rows.append((tr, t, d))
            c, lvl = t, 0
            while lvl < 40 and c < t + d:
                cd = int(rng.integers(0, t + d - c + 1))
                rows.append((tr, c, cd))
                c, lvl = c + int(rng.integers(0, max(1, cd // 2 + 1))), lvl + 1
            t += d + int(rng.integers(0, 3))
    track, ts, dur = (np.array(c, np.int64) for c in zip(*rows))
    sid = rng.permutation(len(ts)).astype(np.int64)
    want = depths.depths_of(sid, track, ts, dur, compiled=False)
    got = depths.depths_of(sid, track, ts, dur)
    assert got.tolist() == want.tolist() and got.max() > 5


@pytest.mark.skipif(depths._depths is None, reason="ingest/_depths.c is not built (no compiler)")
def test_compiled_sweep_leaves_what_its_heap_cannot_order_to_numpy_and_checks_its_input():
    """A negative duration or an end past int64 (the builder drops those slices, then asks again)
    takes the numpy sweep, whatever it gives; a bad order is an error, never a read out of bounds."""
    top = np.iinfo(np.int64).max
    for ts, dur in (([0, 5, 3], [10, -2, 1]), ([0, top - 5, 1], [10, 9, 1])):
        ts, dur = np.array(ts, np.int64), np.array(dur, np.int64)
        sid, track = np.arange(3, dtype=np.int64), np.zeros(3, np.int64)
        assert not depths._sweepable(ts, dur)
        assert depths.depths_of(sid, track, ts, dur).tolist() == depths.depths_of(sid, track, ts, dur,
                                                                                   compiled=False).tolist()
    z = np.zeros(3, np.int64)
    for bad in ([0, 1, 3], [0, 1, -1], [0, 2, 2]):
        with pytest.raises(ValueError, match="each position"):
            depths._depths.sweep(z, z, z, z, np.array(bad, np.int64))
    with pytest.raises(ValueError, match="one length"):
        depths._depths.sweep(z, z, z, z, np.zeros(2, np.int64))


def _nested_trace(path):
    import json
    evs = [{"ph": "X", "ts": 10 * i, "dur": 100 - 10 * i, "name": f"d{i}", "pid": 1, "tid": t}
           for t in (1, 2) for i in range(5)]
    evs += [{"ph": "B", "ts": 500, "name": "b", "pid": 1, "tid": 1}, {"ph": "E", "ts": 600, "pid": 1, "tid": 1},
            {"ph": "X", "ts": 510, "dur": 10, "name": "inner", "pid": 1, "tid": 1}]
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


def test_depths_computed_ahead_equal_depths_computed_in_finish(tmp_path, monkeypatch):
    """The Chrome importer starts the depth pass beside its link queries (builder.start_depths); the
    stored depths are those finish() computes itself (B/E pairs, staged during finish, included)."""
    import duckdb

    from acceltrace.ingest import builder as B
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store

    src = _nested_trace(tmp_path / "t.json")
    started = []
    real = B.TraceBuilder.start_depths
    monkeypatch.setattr(B.TraceBuilder, "start_depths", lambda self: (started.append(1), real(self)))

    def rows(store_dir):
        (r,) = ingest_paths(Store(store_dir), [src], views=False)
        assert r.error is None, r.error
        with duckdb.connect(str(Store(store_dir).trace_path(r.id)), read_only=True) as con:
            return con.execute("SELECT name, track_id, ts, depth FROM slices ORDER BY slice_id").fetchall()

    ahead = rows(tmp_path / "a")
    assert started
    monkeypatch.setattr(B.TraceBuilder, "start_depths", lambda self: None)
    assert ahead == rows(tmp_path / "b")
    assert max(d for *_, d in ahead) == 4  # nested five deep: the depths are real


def test_a_failed_finish_leaves_no_depth_thread(tmp_path, monkeypatch):
    import threading
    import time

    from acceltrace.ingest.builder import TraceBuilder
    from acceltrace.store.errors import IngestError

    slow = depths.assign_depths
    monkeypatch.setattr(depths, "assign_depths", lambda con, **kw: (time.sleep(0.5), slow(con, **kw))[1])  # still running
    b = TraceBuilder(tmp_path / "t.duckdb")
    b.add_slices({"track_id": [b.track("cpu", "t")] * 2, "ts": [5, 1], "dur": [-3, 2], "name": ["a", "b"]})
    b.start_depths()
    with pytest.raises(IngestError, match="negative duration"):
        b.finish("test", "t")
    b.abort()
    assert not [t for t in threading.enumerate() if t.name == "depths-ahead"]


@pytest.mark.parametrize("seed", range(3))
def test_depths_and_order_is_the_depth_pass_then_the_stored_order(seed):
    """depths_and_order refines the depth pass's (track, ts) order by depth: the same depths as depths_of
    and the same permutation as order_by(track, ts, depth), ties in file order; nested rows at one start
    (children listed before their parents) included, and times too wide to pack into one key (lexsort)."""
    rng = np.random.default_rng(seed)
    for wide in (False, True):
        unpacked = 0
        for _ in range(100):
            n = int(rng.integers(1, 200))
            track = rng.integers(0, int(rng.integers(1, 6)), n).astype(np.int64)
            ts = rng.integers(0, int(rng.integers(1, 20)), n).astype(np.int64)
            if wide:
                ts = ts * (1 << 58) // 20 - (1 << 57)
            dur = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 25, n)).astype(np.int64)
            sid = np.arange(n, dtype=np.int64)
            depth, order = depths.depths_and_order(sid, track, ts, dur)
            want = depths.depths_of(sid, track, ts, dur)
            assert depth.tolist() == want.tolist()
            assert order.tolist() == depths.order_by(track, ts, want).tolist()
            unpacked += len(depths._primary_keys(track, ts, want)) > 1
        assert (unpacked > 0) == wide  # the wide times took lexsort's way, the others the refined sort


def test_the_depths_ahead_raise_the_threads_error_in_the_caller_and_close_their_cursor(tmp_path, monkeypatch):
    # depths.Ahead is an OnThread (ingest/made_ahead.py): what the pass raised comes out of result(), after the
    # thread has ended and its cursor is closed; join() and close() only wait
    from acceltrace.ingest.builder import TraceBuilder

    def failing(cur):
        raise RuntimeError("the depth pass failed")

    monkeypatch.setattr(depths, "assign_depths", failing)
    b = TraceBuilder(tmp_path / "t.duckdb")
    b.add_slices({"track_id": [b.track("cpu", "t")] * 2, "ts": [5, 1], "dur": [3, 2], "name": ["a", "b"]})
    ahead = depths.Ahead(b.con)
    ahead.join()  # waits, raises nothing
    with pytest.raises(RuntimeError, match="the depth pass failed"):
        ahead.result()
    with pytest.raises(duckdb.Error):
        ahead._cur.execute("SELECT 1")  # closed
    b.abort()


def _staged_con(seed: int) -> duckdb.DuckDBPyConnection:
    """A staging database as the builder keeps one (ingest/stage.py): slices of four tracks in an order that is
    not slice_id's, some given a depth and some not, tracks nested, partly overlapping and flat."""
    from acceltrace.ingest import stage

    rng = np.random.default_rng(seed)
    n = 3000
    con = duckdb.connect()
    con.execute("CREATE TABLE slices (x INTEGER)")  # the build's own catalog, beside the staging one
    stage.attach(con)
    given = rng.random(n) < 0.3
    con.register("b", {"slice_id": rng.permutation(n).astype(np.int64), "track_id": rng.integers(0, 4, n).astype(np.int32),
                       "ts": rng.integers(0, 5000, n).astype(np.int64), "dur": rng.integers(0, 60, n).astype(np.int64),
                       "depth": np.where(given, rng.integers(0, 3, n), -1).astype(np.int32),
                       "corr_id": rng.integers(0, 50, n).astype(np.int64)})
    con.execute(f"INSERT INTO {stage.NAME}._slices_staging SELECT slice_id, track_id, ts, dur,"
                " CASE WHEN depth < 0 THEN NULL ELSE depth END, corr_id FROM b")
    return con


@pytest.mark.parametrize("seed", range(3))
def test_the_depth_pass_on_the_read_rows_gives_the_depths_of_its_own_read(seed):
    """ordered.made reads the staging table once for the depth pass and finish(): assign_depths on those rows
    gives what it gives reading the table itself, given depths and the tracks it re-places included."""
    from acceltrace.ingest import ordered

    a, b = _staged_con(seed), _staged_con(seed)
    staged = ordered.read_staged(a)
    assert staged["slice_id"].to_pylist() == list(range(3000))  # in slice_id order, whatever the table's
    got = depths.assign_depths(a, staged=staged).sort_by("slice_id")
    want = depths.assign_depths(b).sort_by("slice_id")
    assert got.equals(want) and got.num_rows > 900  # the unknown depths and every row of a re-placed track
    made, by_hand = ordered.made(_staged_con(seed)), ordered.in_order(staged, want)
    assert made.depth.tolist() == by_hand.depth.tolist()
    assert made.order.tolist() == by_hand.order.tolist()
    keys = list(zip(staged["track_id"].to_pylist(), staged["ts"].to_pylist(), made.depth.tolist()))
    assert [keys[i] for i in made.order] == sorted(keys)  # stored order: (track_id, ts, depth)


def test_finish_takes_the_rows_the_depth_pass_made_beside_the_links(tmp_path, monkeypatch):
    """A trace past the LOD build's head start (a Chrome trace of over lod_ahead.MAX_SLICES slices): its
    staging table is read once, on the depth pass's thread, while the links run; finish() reads it no more."""
    import threading

    from acceltrace.ingest import lod_ahead, ordered
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store

    monkeypatch.setattr(lod_ahead, "MAX_SLICES", 5)  # so the links run before finish(), not beside the LOD build
    reads = []
    real = ordered.read_staged
    monkeypatch.setattr(ordered, "read_staged", lambda con: (reads.append(threading.current_thread().name),
                                                             real(con))[1])
    (r,) = ingest_paths(Store(tmp_path / "s"), [_nested_trace(tmp_path / "t.json")], views=False)
    assert r.error is None, r.error
    assert reads == ["depths-ahead"]
