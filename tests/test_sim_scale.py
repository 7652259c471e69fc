"""The scale path: repeated fully simulated steps stay a valid, physically consistent trace."""

from __future__ import annotations

import json

import pytest

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store
from acceltrace.sim import scale, scenarios
from acceltrace.sim.session import measure


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


def test_scaled_registers_count_every_copy_and_never_run_backwards():
    import numpy as np

    from acceltrace.sim.run import run_plan
    from acceltrace.sim.scale_bank import PeriodicBank

    plan = scenarios.build("clean", 2)
    result = run_plan(plan, 8)
    lay = scale.Layout(result, 5, np.full(5, 0.002))
    bank = PeriodicBank(result.bank, lay.w0, lay.w1, lay.shifts, lay.suffix_shift, lay.end_ns)
    name = "dev0.hbm.read_bytes"  # 48-bit: no wrap in this run
    origin = bank.origin_ns
    times = np.linspace(origin, origin + int(lay.end_ns), 400).astype(np.int64)
    read = bank.reader([name])
    values = [read(int(t))[0] for t in times]
    assert all(b >= a for a, b in zip(values, values[1:]))
    block = result.bank.total(name, origin + int(lay.w1)) - result.bank.total(name, origin + int(lay.w0))
    expected_end = result.bank.total(name, origin + int(result.end_ns)) + 4 * block
    assert values[-1] == pytest.approx(expected_end, rel=1e-6)
