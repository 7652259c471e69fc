"""The builder's greedy depth pass: the compiled one (ingest/_depths.c) gives the Python loop's depths."""

from __future__ import annotations

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
