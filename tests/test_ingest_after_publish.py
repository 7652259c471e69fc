"""What runs once a trace is published (ingest/pipeline.py _after_publish): the views' precompute and the
analysis at once, each on a thread of its own, each failure a warning; one after the other for a one-thread
build (a fleet's worker) and for a trace past the spill threshold."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from acceltrace.ingest import pipeline, spill
from acceltrace.store import aggregates, duck
from acceltrace.store.catalog import Store

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"


def _watched(monkeypatch, views_fail: bool = False):
    """build_side and an after_publish that each wait (a bounded time) for the other to have begun."""
    began = {"views": threading.Event(), "after": threading.Event()}
    seen: dict[str, tuple[str, bool]] = {}
    real = aggregates.build_side

    def build_side(store, trace_id):
        began["views"].set()
        seen["views"] = (threading.current_thread().name, began["after"].wait(5))
        if views_fail:
            raise RuntimeError("precompute broke")
        return real(store, trace_id)

    def after(store, trace_id):
        began["after"].set()
        seen["after"] = (threading.current_thread().name, began["views"].wait(5))

    monkeypatch.setattr(aggregates, "build_side", build_side)
    return seen, after


def test_views_and_analysis_run_at_once(tmp_path, monkeypatch):
    seen, after = _watched(monkeypatch)
    store = Store(tmp_path)
    res = pipeline.ingest_one(store, [SAMPLE], SAMPLE.name, after_publish=after)
    assert res.error is None and res.warnings == []
    assert seen["views"] == ("views-precompute", True)  # each saw the other begin before it ended
    assert seen["after"] == (threading.current_thread().name, True)
    assert store.side_path(res.id, aggregates.VIEWS_SIDE).exists()
    assert not any(t.name == "views-precompute" for t in threading.enumerate())


def test_a_failed_precompute_is_a_warning_and_the_analysis_still_runs(tmp_path, monkeypatch):
    seen, after = _watched(monkeypatch, views_fail=True)
    res = pipeline.ingest_one(Store(tmp_path), [SAMPLE], SAMPLE.name, after_publish=after)
    assert res.error is None
    assert res.warnings == [f"{SAMPLE.name}: the views' precompute failed: RuntimeError: precompute broke"]
    assert seen["after"][1] and seen["views"][1]


def test_a_failed_analysis_is_a_warning_and_the_views_are_built(tmp_path, monkeypatch):
    def after(store, trace_id):
        raise ValueError("pass broke")

    store = Store(tmp_path)
    res = pipeline.ingest_one(store, [SAMPLE], SAMPLE.name, after_publish=after)
    assert res.error is None
    assert res.warnings == [f"{SAMPLE.name}: post-ingest step failed: ValueError: pass broke"]
    assert store.side_path(res.id, aggregates.VIEWS_SIDE).exists()


def test_one_thread_build_runs_them_in_turn(tmp_path, monkeypatch):
    order = []
    real = aggregates.build_side

    def build_side(store, trace_id):
        order.append(("views", threading.current_thread().name))
        return real(store, trace_id)

    monkeypatch.setattr(aggregates, "build_side", build_side)
    res = pipeline.ingest_one(Store(tmp_path), [SAMPLE], SAMPLE.name, threads=1,
                              after_publish=lambda store, tid: order.append(("after", threading.current_thread().name)))
    assert res.error is None
    me = threading.current_thread().name  # the views on their thread (off the main thread: Ctrl-C, pipeline.py),
    assert order == [("views", "views-precompute"), ("after", me)]  # waited for before the step


def _limit_of(con) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


@pytest.mark.parametrize("threshold", [100, 115, None])
def test_a_trace_past_the_spill_threshold_runs_them_in_turn_with_less_duckdb_memory(tmp_path, monkeypatch,
                                                                                     threshold):
    # each keeps both cores busy on its own there, and their DuckDB memory would add up; at the threshold itself
    # the builder stays in memory, and so do they (the builder's own decision, not a second count)
    monkeypatch.delenv("ACCELTRACE_DUCKDB_MEMORY", raising=False)
    if threshold is not None:
        monkeypatch.setenv("ACCELTRACE_SPILL_SLICES", str(threshold))  # the sample has 115 slices
    seen = []
    real = aggregates.build_side

    def build_side(store, trace_id):
        seen.append(("views", threading.current_thread().name))
        return real(store, trace_id)

    def after(store, trace_id):
        con = store.connect(trace_id)
        try:
            seen.append(("after", threading.current_thread().name, _limit_of(con)))
        finally:
            con.close()

    monkeypatch.setattr(aggregates, "build_side", build_side)
    res = pipeline.ingest_one(Store(tmp_path), [SAMPLE], SAMPLE.name, after_publish=after)
    assert res.error is None and res.counts["slices"] == 115
    me = threading.current_thread().name
    default, less = (_limit_of(duckdb.connect(config={"memory_limit": limit}))
                     for limit in (duck.DEFAULT_MEMORY, spill.AFTER_MEMORY))
    if threshold != 100:  # the trace not past the threshold: its two steps at once, with the default limit
        assert sorted(seen) == [("after", me, default), ("views", "views-precompute")]
    else:
        assert seen == [("views", "views-precompute"), ("after", me, less)]  # in turn: the views waited for first
        assert less != default
