"""End to end: the device model injects a problem, ingest runs the passes, the findings match the truth.

Fixed seeds (the benchmark, bench/analysis_accuracy.py, sweeps more seeds and scenarios).
"""

from pathlib import Path

import pytest

from bench.analysis_accuracy import run_one
from acceltrace.store.catalog import Store

sim = pytest.importorskip("sim.cli")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store(tmp_path_factory.mktemp("acc") / "store")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


def test_clean_run_gets_no_warning(store, work):
    r = run_one(store, "clean", 4, work)
    assert r["n_reported"] == 0, r


@pytest.mark.parametrize("scenario,kind", [
    ("pageable-memory", "pageable_memory"),
    ("strided-access", "memory_access_inefficiency"),
    ("sync-stalls", "sync_stalls"),
])
def test_injected_problem_is_found_and_sized(store, work, scenario, kind):
    r = run_one(store, scenario, 4, work)
    assert r["n_found"] == r["n_truth"] == 1, r
    assert r["n_matched"] == r["n_reported"], r  # every warning lies inside the truth's range
    est, true = r["est"].get(kind, 0), r["true"][kind]
    assert abs(est - true) <= 0.25 * true, r
    # the what-if (the pass's findings fixed and the graph replayed) within 10% of the model's
    # counterfactual, where bench/whatif.py measures it so; sync stalls' replay is a lower bound
    if kind != "sync_stalls":
        assert abs(r["whatif"][kind] - true) <= 0.10 * true, r
    assert r["all_fixed"] is not None and r["whatif"][kind] <= r["all_fixed"] <= r["run_ns"], r


A100 = Path(__file__).parent.parent / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


@pytest.mark.skipif(not A100.exists(), reason="A100 Kineto sample not present")
def test_real_kineto_trace_every_pageable_copy_flagged_and_no_pinned_one(store):
    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest.pipeline import ingest_paths

    [res] = ingest_paths(store, [A100], after_publish=after_publish)
    assert res.error is None, res.error
    con = store.connect(res.id)
    rows = con.execute("""
        SELECT s.host_mem, s.direction, count(*), count(f.slice_id)
        FROM slices s JOIN tracks t ON t.track_id = s.track_id
        LEFT JOIN (SELECT DISTINCT slice_id FROM findings WHERE pass = 'pageable_memory') f
          ON f.slice_id = s.slice_id
        WHERE t.lane = 'pcie' AND s.host_mem IS NOT NULL
        GROUP BY ALL ORDER BY ALL""").fetchall()
    assert ("pageable", "h2d", 45, 45) in rows, rows
    assert all(flagged == (n if mem == "pageable" else 0) for mem, _d, n, flagged in rows), rows
    status = dict(con.execute("SELECT pass, status FROM analysis_status").fetchall())
    for pid in ("pageable_memory", "small_transfers", "launch_gaps", "sync_stalls"):
        assert status[pid] == "ran", status
    (total,) = con.execute("SELECT coalesce(sum(exclusive_ns), 0) FROM findings").fetchone()
    (run_ns,) = con.execute("SELECT max(CASE WHEN key='end_ns' THEN value::BIGINT END)"
                            " - max(CASE WHEN key='start_ns' THEN value::BIGINT END) FROM trace_meta").fetchone()
    assert total <= run_ns
