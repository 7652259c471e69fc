"""Against the device model's own truth: sampled raw registers -> ingested rates within 1% per interval,
through 32-bit wraparound and multiplexing (issue 7's acceptance criterion)."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from acceltrace.formats.actr.reader import read_actr_path
from acceltrace.collect.counters.sim import SimSource
from acceltrace.collect.sampler import Sampler, VirtualClock
from acceltrace.ingest.native.actr import ingest_actr
from acceltrace.ingest.builder import TraceBuilder

try:  # the model lands in parallel; its scenario API is sim.scenarios.pipeline.build + sim.run.run_plan
    from acceltrace.sim.run import run_plan
    from acceltrace.sim.scenarios.pipeline import build
except ImportError as e:  # pragma: no cover - only while sim/ is incomplete
    pytest.skip(f"device model not importable: {e}", allow_module_level=True)


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    plan = build("pcie-saturation", 1)  # heavy PCIe traffic: 32-bit byte counters wrap
    res = run_plan(plan, steps=plan.steps * 5)  # about 0.9 s of model time
    bank = res.bank
    clock = VirtualClock(int(bank.start_ns))
    out = tmp_path_factory.mktemp("model") / "run.actr"
    s = Sampler(SimSource(bank, clock), out, rate_hz=2000, clock=clock)
    s.run_until(int(bank.end_ns))
    s.close()
    b = TraceBuilder(out.with_suffix(".duckdb"))
    ingest_actr(out, b)
    b.finish("actr", out.name)
    return bank, out, duckdb.connect(str(out.with_suffix(".duckdb")), read_only=True)


def test_model_rates_reconstructed_within_1pct_per_interval(model_run):
    bank, path, con = model_run
    d = read_actr_path(path)
    groups = {c["name"]: c["group"] for c in d.header["counters"]}
    assert any(g["multiplexed"] for g in d.header["groups"]), "the model must offer more counters than slots"
    wrapped = checked = 0
    for spec in bank.specs:
        if spec.kind != "cumulative":
            continue
        smp = d.samples[groups[spec.name]]
        h, run = smp["host_ns"].astype(np.int64), smp["running_ns"].astype(np.int64)
        ok = np.diff(run) > 0
        a, b = h[:-1][ok], h[1:][ok]
        want = np.array([bank.true_rate(spec.name, x, y) for x, y in zip(a, b)])
        got = np.array([r[0] for r in con.execute(
            "SELECT value FROM counters JOIN tracks USING (track_id) WHERE name = ? ORDER BY ts",
            [spec.name]).fetchall()])
        assert len(got) == len(want), spec.name
        # registers count whole events: allow 1 % plus two counts per interval of quantisation
        slack = 0.01 * np.abs(want) + 2 / ((b - a) / 1e9)
        assert np.all(np.abs(got - want) <= slack), (spec.name, np.max(np.abs(got - want) - slack))
        checked += 1
        wrapped += bank.total(spec.name, bank.end_ns) >= 2**spec.bits
    assert checked >= 10 and wrapped >= 1


def test_fast_reader_equals_the_model_banks_own_reads(model_run):
    from acceltrace.collect.counters.sim import CursorReader

    bank = model_run[0]
    names = [s.name for s in bank.specs]
    read = CursorReader(bank, names)
    rng = np.random.default_rng(5)
    lo, hi = int(bank.start_ns) - 10**6, int(bank.end_ns) + 10**6
    times = np.concatenate([np.sort(rng.integers(lo, hi, 600)), rng.integers(lo, hi, 60)])
    for t in times:
        assert read(t) == bank.read_raw(names, t), t
