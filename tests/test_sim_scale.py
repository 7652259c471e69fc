"""The scale path: repeated fully simulated steps stay a valid, physically consistent trace."""

from __future__ import annotations

import json

from ingest.pipeline import ingest_paths
from ingest.store import Store
from sim import scale, scenarios
from sim.session import measure


def test_scaled_run_repeats_steps_without_breaking_the_trace(tmp_path, monkeypatch):
    monkeypatch.setattr(scale, "FULL_EVENTS", 1500)
    plan = scenarios.build("sync-stalls", 4)
    fixed, per_step = measure(plan)
    summary = scale.run_scaled("sync-stalls", plan, 12_000, fixed, per_step, tmp_path / "run", 4)
    assert summary["scaled"]["copies"] >= 3
    assert 0.7 * 12_000 <= summary["events"] <= 1.3 * 12_000
    truth = json.loads((tmp_path / "run" / "ground_truth.json").read_text())
    (issue,) = truth["issues"]
    assert issue["kind"] == "sync_stalls" and issue["impact_ns"] > 0
    # the affected ranges follow the copies to the end of the run
    assert issue["end_ns"] > truth["run_start_ns"] + 0.8 * truth["run_ns"]

    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [tmp_path / "run"])
    assert res.error is None, res.error
    assert res.counts["warnings"] == 0, res.warnings
    con = store.connect(res.id)
    (bad,) = con.execute("""
        SELECT count(*) FROM flows f JOIN slices s ON s.slice_id = f.src_slice
        JOIN slices d ON d.slice_id = f.dst_slice WHERE d.ts < s.ts""").fetchone()
    assert bad == 0
    # copies never overlap on a device track (each engine or unit does one thing at a time)
    (overlaps,) = con.execute("""
        SELECT count(*) FROM (
          SELECT s.ts, lag(s.ts + s.dur) OVER (PARTITION BY s.track_id ORDER BY s.ts) AS prev_end
          FROM slices s JOIN tracks t USING (track_id) WHERE t.lane IN ('pcie', 'eu')) WHERE ts < prev_end""").fetchone()
    assert overlaps == 0
    (n_exec,) = con.execute("SELECT count(*) FROM flows WHERE kind = 'exec'").fetchone()
    assert n_exec > 0
