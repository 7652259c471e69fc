"""Ingest of .actr: rates through wraparound and multiplexing against the bank's truth, units, damage."""

from __future__ import annotations


import duckdb
import numpy as np
import pytest
from _counters_bank import make_bank

from acceltrace.formats.actr.reader import read_actr_path
from acceltrace.collect.counters.sim import SimSource
from acceltrace.collect.sampler import Sampler, VirtualClock
from acceltrace.ingest.native import actr as ingest_actr_mod
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store.errors import IngestError
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

LINKS = {"dev0": {"gen": 4, "width": 16, "max_payload_bytes": 256}}


def sample_bank(tmp_path, bank, rate_hz=1000, span_s=1.0, mux_ticks=1, name="run.actr"):
    clock = VirtualClock()
    s = Sampler(SimSource(bank, clock, links=LINKS), tmp_path / name, rate_hz=rate_hz, clock=clock,
                mux_ticks=mux_ticks)
    s.run(span_s)
    s.close()
    return tmp_path / name


def build(tmp_path, path, **kw):
    b = TraceBuilder(tmp_path / "t.duckdb")
    summary = ingest_actr_mod.ingest_actr(path, b, **kw)
    b.finish("actr", path.name)
    return duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True), summary, b


def series(con, name):
    rows = con.execute(
        "SELECT c.ts, c.value FROM counters c JOIN tracks t USING (track_id) WHERE t.name = ? ORDER BY c.ts",
        [name]).fetchall()
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def truth_pairs(path, bank, name):
    """The true rate over every interval the sampler counted for this counter (pairs with running time)."""
    d = read_actr_path(path)
    gid = next(c["group"] for c in d.header["counters"] if c["name"] == name)
    smp = d.samples[gid]
    h, run = smp["host_ns"].astype(np.int64), smp["running_ns"].astype(np.int64)
    ok = np.diff(run) > 0
    a, b = h[:-1][ok], h[1:][ok]
    return b, np.array([bank.true_rate(name, x, y) for x, y in zip(a, b)])  # values stamped at interval ends


@pytest.mark.parametrize("mux_ticks", [1, 5])
def test_rates_match_truth_within_1pct_through_wrap_and_multiplexing(tmp_path, mux_ticks):
    bank = make_bank(seed=3, span_s=1.2, n_prog=6, slots=2)
    path = sample_bank(tmp_path, bank, mux_ticks=mux_ticks)
    con, _, _ = build(tmp_path, path)
    wrapped = 0
    for spec in bank.specs:
        if spec.kind != "cumulative":
            continue
        ts, got = series(con, spec.name)
        a, want = truth_pairs(path, bank, spec.name)
        assert len(got) == len(want) and len(got) > 100, spec.name
        assert np.array_equal(ts, a)
        busy = want > 0
        err = np.abs(got[busy] - want[busy]) / want[busy]
        assert err.max() < 0.01, (spec.name, err.max())
        wrapped += bank.total(spec.name, 1.0e9) > 2**32
    assert wrapped >= 2, "the bank must make 32-bit registers wrap for this test to mean anything"


def test_multiplexed_counters_get_values_only_for_their_counting_intervals(tmp_path):
    bank = make_bank(seed=4, span_s=0.2, n_prog=6, slots=2)
    path = sample_bank(tmp_path, bank, span_s=0.15)
    con, _, _ = build(tmp_path, path)
    ts_fixed, _ = series(con, "dev0.pcie.h2d_bytes")
    ts_mux, _ = series(con, "dev0.eu.u0.busy_cycles")
    assert len(ts_fixed) == 150
    assert 40 <= len(ts_mux) <= 60  # one group of three: about a third of the intervals


def test_counter_tracks_carry_device_and_unit(tmp_path):
    path = sample_bank(tmp_path, make_bank(seed=5, span_s=0.3), span_s=0.2)
    con, summary, _ = build(tmp_path, path)
    rows = dict(((n, (lane, dev, unit)) for n, lane, dev, unit in
                 con.execute("SELECT name, lane, device, unit FROM tracks").fetchall()))
    assert rows["dev0.pcie.h2d_bytes"] == ("counter", "dev0", "B/s")
    assert rows["dev0.q0.occupancy"] == ("counter", "dev0", "entries")
    assert rows["dev0.eu.u3.busy_cycles"] == ("counter", "dev0", "cycles/s")
    assert rows["PCIe H2D utilisation (link)"] == ("counter", "dev0", "%")
    assert rows["eu.u3 utilisation"] == ("counter", "dev0", "%")
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert (meta["link_gen"], meta["link_width"], meta["max_payload_bytes"]) == ("4", "16", "256")
    assert meta["counters_missed_deadlines"] == "0"


def test_pcie_utilisation_is_rate_over_effective_link_peak(tmp_path):
    bank = make_bank(seed=6, span_s=0.3)
    path = sample_bank(tmp_path, bank, span_s=0.2)
    con, _, _ = build(tmp_path, path)
    _, rate = series(con, "dev0.pcie.d2h_bytes")
    _, util = series(con, "PCIe D2H utilisation (link)")
    peak = ingest_actr_mod.link_peak_bytes_per_s(4, 16, 256)
    assert peak == pytest.approx(31.5e9 * 256 / 280, rel=1e-3)  # about 92 % of 31.5 GB/s at MPS 256
    assert np.allclose(util, rate / peak * 100)


def test_gauges_are_levels_at_sample_times(tmp_path):
    bank = make_bank(seed=7, span_s=0.3)
    path = sample_bank(tmp_path, bank, span_s=0.1)
    con, _, _ = build(tmp_path, path)
    ts, v = series(con, "dev0.q0.occupancy")
    assert len(ts) == 101
    assert v.tolist() == [bank.read_raw(["dev0.q0.occupancy"], t)[0] for t in ts]


def test_a_given_clock_map_places_samples(tmp_path):
    path = sample_bank(tmp_path, make_bank(seed=8, span_s=0.3), span_s=0.05)
    # the device clock runs at 1 tick per ns here; claim the device is 1 ms ahead of the host
    con, _, _ = build(tmp_path, path, clock_map={"dev0": (np.array([0, 10**9]), np.array([10**6, 10**9 + 10**6]))})
    ts, _ = series(con, "dev0.q0.occupancy")
    assert ts[0] == 10**6


def test_pipeline_detects_actr_by_name_and_by_content(tmp_path):
    path = sample_bank(tmp_path, make_bank(seed=9, span_s=0.3), span_s=0.05)
    renamed = tmp_path / "counters.bin"
    renamed.write_bytes(path.read_bytes())
    store = Store(tmp_path / "store")
    r1, r2 = ingest_paths(store, [path]) + ingest_paths(store, [renamed], name="renamed")
    assert r1.error is None and r2.error is None, (r1.error, r2.error)
    assert r1.format == r2.format == "actr"
    assert r1.counts["counters"] == r2.counts["counters"] > 0


def test_cut_off_file_ingests_its_samples_with_a_warning(tmp_path):
    path = sample_bank(tmp_path, make_bank(seed=10, span_s=0.5), span_s=0.4)
    data = path.read_bytes()
    cut = tmp_path / "cut.actr"
    cut.write_bytes(data[: len(data) * 2 // 3])
    store = Store(tmp_path / "store")
    (r,) = ingest_paths(store, [cut])
    assert r.error is None, r.error
    assert r.counts["counters"] > 0 and r.counts["warnings"] >= 1
    assert any("cut short" in w or "no TAIL" in w for w in r.warnings), r.warnings


def test_garbage_with_actr_name_is_refused_with_file_and_position(tmp_path):
    bad = tmp_path / "bad.actr"
    bad.write_bytes(b"\x89ACTR\r\n\x1a" + b"\x07\x00\x00\x00" + b"\x00" * 40)
    store = Store(tmp_path / "store")
    (r,) = ingest_paths(store, [bad])
    assert r.error and "bad.actr" in r.error and "newer than this reader" in r.error and "byte 8" in r.error
    with pytest.raises(IngestError, match="bad.actr: byte 8"):
        ingest_actr_mod.ingest_actr(bad, TraceBuilder(tmp_path / "x.duckdb"))


def test_file_with_a_header_and_no_samples_is_refused_clearly(tmp_path):
    from acceltrace.formats.actr.writer import ActrWriter

    hdr = {"devices": [{"name": "dev0", "clock_hz": None}],
           "counters": [{"name": "a", "unit": "B/s", "bits": 32, "kind": "cumulative", "group": 0}],
           "groups": [{"id": 0, "counters": ["a"]}]}
    ActrWriter(tmp_path / "empty.actr", hdr).close({"ended": "interrupted"})
    store = Store(tmp_path / "store")
    (r,) = ingest_paths(store, [tmp_path / "empty.actr"])
    assert r.error and "empty.actr" in r.error and "no events" in r.error
