"""The device model end to end: determinism, counterfactual ground truth, sizing, and every scenario
ingested as one trace with the four lanes and the correlation chain intact."""

from __future__ import annotations

import json

import pytest

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store
from acceltrace.sim import ground_truth, scenarios
from acceltrace.sim.run import run_plan
from acceltrace.sim.session import run_scenario, steps_for
from acceltrace.sim.trace import COLUMNS

SMALL_EVENTS = 800
EXPECTED_KINDS = {
    "pageable-memory": {"pageable_memory"},
    "small-transfers": {"small_transfers"},
    "pcie-saturation": {"pcie_saturation"},
    "strided-access": {"memory_access_inefficiency"},
    "copy-compute-serialization": {"copy_compute_serialization"},
    "launch-gaps": {"launch_gaps"},
    "sync-stalls": {"sync_stalls"},
    "redundant-transfers": {"redundant_transfers"},
    "clean": set(),
    "llm-inference": set(),
    "training-step": set(),
}


def test_same_seed_gives_the_same_bytes(tmp_path):
    a = run_scenario("clean", tmp_path / "a", seed=3, events=800)
    b = run_scenario("clean", tmp_path / "b", seed=3, events=800)
    assert a["events"] == b["events"]
    for name in ("run.atrace", "run.actr", "ground_truth.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_seeds_draw_different_machines():
    configs = {(p.cfg.link, p.cfg.n_devices, p.cfg.uplink) for p in (scenarios.build("clean", s) for s in range(8))}
    assert len(configs) >= 4


def test_impact_is_the_difference_to_a_rerun_without_the_issue():
    plan = scenarios.build("pageable-memory", 2)
    result = run_plan(plan, 4)
    truth = ground_truth.build(result, "pageable-memory", 2, steps=4)
    (issue,) = truth["issues"]
    without = run_plan(plan.remove("pageable_memory"), 4)
    assert issue["impact_ns"] == round(result.duration_ns - without.duration_ns)
    assert issue["impact_ns"] > 0.1 * result.duration_ns
    # the counterfactual really pinned the buffers: no pageable copy is left
    mem = COLUMNS.index("mem")
    assert any(r[mem] == "pageable" for r in result.rec.rows)
    assert not any(r[mem] == "pageable" for r in without.rec.rows)
    assert issue["start_ns"] <= issue["end_ns"]
    assert truth["run_start_ns"] <= issue["start_ns"] and issue["end_ns"] <= truth["run_end_ns"] + 10**7


def test_events_option_scales_the_run():
    plan = scenarios.build("llm-inference", 5)
    for target in (3_000, 12_000):
        n = len(run_plan(plan, steps_for(plan, target)).rec)
        assert 0.6 * target <= n <= 1.4 * target, (target, n)


def test_unknown_scenario_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="expected one of: llm-inference"):
        scenarios.build("no-such-thing", 0)


def _q(con, sql):
    return con.execute(sql).fetchall()


@pytest.mark.parametrize("name", scenarios.SCENARIOS)
def test_every_scenario_runs_ingests_and_keeps_the_chain(name, tmp_path):
    run_dir = tmp_path / "run"
    summary = run_scenario(name, run_dir, seed=1, events=SMALL_EVENTS)
    assert summary["events"] > 0
    truth = json.loads((run_dir / "ground_truth.json").read_text())
    kinds = {i["kind"] for i in truth["issues"]}
    if name == "mixed":
        assert len(kinds) == 3
    else:
        assert kinds == EXPECTED_KINDS[name]
    # the trace itself never names the scenario
    raw = (run_dir / "run.atrace").read_bytes()
    assert name.encode() not in raw and name.replace("-", "_").encode() not in raw

    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [run_dir])
    assert res.error is None, res.error
    con = store.connect(res.id)
    lanes = {lane for (lane,) in _q(con, "SELECT DISTINCT t.lane FROM slices s JOIN tracks t USING (track_id)")}
    assert {"cpu", "driver", "pcie", "eu"} <= lanes
    edges = set(_q(con, """
        SELECT f.kind, ts.lane, td.lane FROM flows f
        JOIN slices s ON s.slice_id = f.src_slice JOIN tracks ts ON ts.track_id = s.track_id
        JOIN slices d ON d.slice_id = f.dst_slice JOIN tracks td ON td.track_id = d.track_id"""))
    assert ("submit", "cpu", "driver") in edges
    assert ("dma", "driver", "pcie") in edges
    assert ("exec", "driver", "eu") in edges
    # no device slice starts before the submission that caused it
    (early,) = _q(con, """
        SELECT count(*) FROM flows f JOIN slices s ON s.slice_id = f.src_slice
        JOIN slices d ON d.slice_id = f.dst_slice
        WHERE f.kind IN ('dma', 'exec') AND d.ts < s.ts""")[0]
    assert early == 0
    (before_submit,) = _q(con, """
        WITH sub AS (SELECT corr_id, min(s.ts) AS ts FROM slices s JOIN tracks t USING (track_id)
                     WHERE t.lane = 'driver' AND s.name = 'submit' GROUP BY corr_id)
        SELECT count(*) FROM slices d JOIN tracks t USING (track_id) JOIN sub USING (corr_id)
        WHERE t.lane IN ('pcie', 'eu') AND d.ts < sub.ts""")[0]
    assert before_submit == 0
    meta = dict(_q(con, "SELECT key, value FROM trace_meta"))
    assert meta["link_gen"] == str(truth["config"]["link_gen"])
    assert meta["max_payload_bytes"] == str(truth["config"]["max_payload_bytes"])
    (n_counters,) = _q(con, "SELECT count(*) FROM counters")[0]
    assert n_counters > 0
    names = {n for (n,) in _q(con, "SELECT name FROM tracks")}
    for issue in truth["issues"]:
        assert issue["affected"], issue["kind"]
        assert {a[0] for a in issue["affected"]} <= names
        if name != "mixed":
            assert issue["impact_ns"] > 0, issue


def test_device_times_come_back_on_the_host_clock_after_ingest(tmp_path):
    from acceltrace.sim.session import write_run

    plan = scenarios.build("clean", 6)
    result = run_plan(plan, 6)
    write_run(result, ground_truth.build(result, "clean", 6, 6), tmp_path / "run", 6)
    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [tmp_path / "run"])
    assert res.error is None, res.error
    con = store.connect(res.id)
    # correlation ids are unique across devices, and a pinned copy has one DMA
    got = dict(_q(con, "SELECT s.corr_id, s.ts FROM slices s JOIN tracks t USING (track_id) WHERE t.lane = 'pcie'"))
    rec = result.rec
    ts_i, tr_i, corr_i = COLUMNS.index("ts"), COLUMNS.index("track"), COLUMNS.index("corr")
    truth = {r[corr_i]: result.machine.origin_ns + round(r[ts_i]) for r in rec.rows
             if rec.tracks[r[tr_i]].lane == "pcie"}
    common = set(truth) & set(got)
    assert len(common) >= 10
    # ticks -> host ns through the sync pairs: off by the pairs' read jitter, not by drift
    assert max(abs(got[c] - truth[c]) for c in common) < 300
