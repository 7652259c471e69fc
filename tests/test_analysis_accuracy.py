"""End to end: the device model injects a problem, ingest runs the passes, the findings match the truth.

Fixed seeds (the benchmark, bench/analysis_accuracy.py, sweeps more seeds and scenarios).
"""

import pytest

from bench.analysis_accuracy import run_one
from ingest.store import Store

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
