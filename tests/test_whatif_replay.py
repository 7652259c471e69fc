"""The compiled replay (analysis/_replay.c) and the Python one give the same schedule and the same
critical path; a bad graph is a clear error from both, never a crash."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acceltrace.analysis import params as P
from acceltrace.analysis import replay as R
from acceltrace.analysis import runner
from acceltrace.analysis import transform as T
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "sample_traces" / "run" / "acceltrace-sim-0.1"
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"
compiled = pytest.mark.skipif(R._C is None, reason="analysis/_replay.c is not built (no compiler)")


def _same(g: R.Graph) -> R.Schedule:
    a, b = R.replay(g), R.replay(g, compiled=False)
    for f in ("start", "end", "why", "why_end"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert R.critical_path(g, a) == R.critical_path(g, a, compiled=False)
    return a


@compiled
@pytest.mark.parametrize("path", [RUNS / "llm-inference-seed2", RUNS / "strided-access-seed2", A100],
                         ids=["sim-llm", "sim-strided", "a100"])
def test_compiled_and_python_replays_agree_as_traced_and_with_every_pass_fixed(tmp_path, path):
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    con = store.connect(res.id, sides=())
    values = P.resolve(None)
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", values)
    g = R.build(con)
    s = _same(g)
    assert np.array_equal(s.start, g.ts) and np.array_equal(s.end, g.ts + g.dur)
    _same(R.without_slack(g))
    # every pass's candidates fixed together: the transformed graphs agree too
    specs = runner.discover()
    fixes = []
    for pid in runner.dependency_order(specs, list(specs)):
        st = runner._run_one(con, specs[pid], values)
        if st.status == "ran":
            fixes += [T.Fix(pid, sid, int(t or 0), int(d or 0), int(ln or 0)) for sid, t, d, ln in
                      con.execute(f"SELECT slice_id, ts, dur, local_ns FROM _cand_{pid}").fetchall()]
    con.close()
    assert fixes
    h = g.copy()
    assert T.apply_all(h, fixes) > 0
    fixed = _same(h)
    assert fixed.makespan <= s.makespan
    # the transformation edited its copy only: the graph it was copied from replays as before
    assert np.array_equal(R.replay(g).end, s.end)


def _random_dag(rng, n: int, m: int) -> R.Graph:
    order = rng.permutation(n)  # a hidden topological order: edges go from earlier to later in it
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    lo, hi = np.minimum(order[a], order[b]), np.maximum(order[a], order[b])
    keep = lo < hi
    inv = np.argsort(order)
    src, dst = inv[lo[keep]], inv[hi[keep]]
    k = len(src)
    ts = rng.integers(0, 10_000, n)
    dur = rng.integers(0, 500, n)
    kind = rng.integers(0, 2, n).astype(np.int8)
    return R.Graph(np.arange(n, dtype=np.int64), kind, rng.integers(0, 5, n).astype(np.int8), ts, dur,
                   np.minimum(dur, rng.integers(0, 500, n)), rng.integers(0, 3, n) * rng.integers(0, 100, n),
                   src.astype(np.int64), dst.astype(np.int64), rng.integers(0, 3, k).astype(np.int8),
                   rng.integers(-50, 200, k))


@compiled
def test_compiled_and_python_replays_agree_on_random_graphs():
    rng = np.random.default_rng(18)
    for trial in range(40):
        n = int(rng.integers(1, 300))
        g = _random_dag(rng, n, int(rng.integers(0, 4 * n)))
        _same(g)


def _tiny(**over) -> R.Graph:
    base = dict(slice_id=np.arange(3), kind=np.array([0, 1, 1], np.int8), lane=np.array([0, 2, 3], np.int8),
                ts=np.array([0, 10, 20]), dur=np.array([5, 5, 5]), own=np.array([5, 5, 5]), slack=np.zeros(3, np.int64),
                src=np.array([0, 1]), dst=np.array([1, 2]), ekind=np.array([0, 0], np.int8), weight=np.array([0, 0]))
    base.update(over)
    return R.Graph(**{k: np.asarray(v) for k, v in base.items()})


@pytest.mark.parametrize("use_c", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("over, error, match", [
    (dict(src=np.array([0, 1, 2]), dst=np.array([1, 2, 0]), ekind=np.array([0, 2, 0], np.int8),
          weight=np.zeros(3, np.int64)), ValueError, "cycle"),
    (dict(src=np.array([0, 1]), dst=np.array([1, 1])), ValueError, "cycle"),  # a node after itself
    (dict(src=np.array([0, 7]), dst=np.array([1, 2])), ValueError, "outside 0..2"),
    (dict(src=np.array([0, 1]), dst=np.array([1, -1])), ValueError, "outside 0..2"),
    (dict(ekind=np.array([0, 9], np.int8)), ValueError, "kind 9"),
    (dict(weight=np.array([0])), ValueError, "differ in length|edges"),
    (dict(own=np.array([5, 5])), ValueError, "differ in length|nodes"),
    (dict(weight=np.array([0, np.iinfo(np.int64).max])), OverflowError, "overflows int64"),
])
def test_a_bad_graph_is_a_clear_error_not_a_crash(use_c, over, error, match):
    if use_c and R._C is None:
        pytest.skip("analysis/_replay.c is not built")
    with pytest.raises(error, match=match):
        R.replay(_tiny(**over), compiled=use_c)


@pytest.mark.parametrize("use_c", [True, False], ids=["compiled", "python"])
def test_a_schedule_pointing_outside_the_graph_is_refused_by_the_critical_path(use_c):
    if use_c and R._C is None:
        pytest.skip("analysis/_replay.c is not built")
    g = _tiny()
    s = R.replay(g, compiled=False)
    s.why = np.array([-1, 0, 5])
    with pytest.raises(ValueError, match="outside 0..2"):
        R.critical_path(g, s, compiled=use_c)
    empty = R.Graph(*(np.zeros(0, np.int8 if f in ("kind", "lane", "ekind") else np.int64) for f in
                      ("slice_id", "kind", "lane", "ts", "dur", "own", "slack", "src", "dst", "ekind", "weight")))
    assert R.critical_path(empty, R.replay(empty, compiled=use_c), compiled=use_c) == []


def test_the_graph_built_without_the_compiled_helpers_is_the_same(tmp_path, monkeypatch):
    from acceltrace.analysis import arrays
    from acceltrace.analysis import graph as G

    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [A100])
    con = store.connect(res.id, sides=())
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", P.resolve(None))
    a = G.build(con)
    monkeypatch.setattr(arrays, "_C", None)
    b = G.build(con)
    for f in ("slice_id", "kind", "lane", "ts", "dur", "own", "slack", "src", "dst", "ekind", "weight"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert (np.diff(a.src) >= 0).all()  # edges by source: the replay walks them in memory order
