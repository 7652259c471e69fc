"""The device-side PM sampler (sim/pm.py) drained in batches (collect/counters/pm.py) into .actr
BUFS chunks (format 1.1), and their ingest: device time mapped to host time with the drains'
clock pairs, rates against the bank's truth, overflow counted exactly, old files still read."""

from __future__ import annotations

import struct

import duckdb
import numpy as np
import pytest
from _counters_bank import make_bank

from acceltrace.collect.counters.pm import PMCollector, header_for
from acceltrace.collect.counters.sim import SimSource
from acceltrace.collect.sampler import VirtualClock
from acceltrace.formats.actr import layout
from acceltrace.formats.actr.reader import read_actr_path
from acceltrace.formats.actr.writer import ActrWriter
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.native import actr as ingest_actr_mod
from acceltrace.sim.device import DeviceClock
from acceltrace.sim.pm import PMSampler

CLOCK = DeviceClock(hz=1.5e9, offset_ticks=7_777_777, t0_ns=0.0, drift_ppm=60.0, wander_ppm=8.0,
                    wander_period_ns=0.7e9)


def _bank():
    bank = make_bank(seed=5, span_s=1.0, n_prog=6, slots=2)
    bank.set_clock("dev0", CLOCK)
    return bank


def _record(tmp_path, rate_hz=10_000, drain_hz=20, ring=1 << 14, span_s=0.8, stall_at=None):
    bank = _bank()
    src = SimSource(bank)
    specs = {s.name: s for s in src.specs()}
    names = [s.name for s in bank.specs]
    clock = VirtualClock(int(0.05e9))
    pm = PMSampler(bank, "dev0", ring_samples=ring)
    pm.program(names, rate_hz, clock.now_ns())
    hdr = header_for([(pm, [specs[n].header_entry(0) for n in names])], [d.header_entry() for d in src.devices()])
    path = tmp_path / "pm.actr"
    w = ActrWriter(path, hdr)
    col = PMCollector([pm], w, clock, drain_hz=drain_hz)
    if stall_at is None:
        stats = col.run(span_s)
    else:  # the host stops draining for a while: the device ring fills and drops samples
        stats = col.run(stall_at)
        clock.advance(int(0.3e9))
        stats = col.run(span_s - stall_at)
    w.close(stats.as_dict())
    return bank, pm, path, stats


def test_no_sample_is_lost_and_the_grid_is_exact(tmp_path):
    bank, pm, path, stats = _record(tmp_path)
    d = read_actr_path(path)
    assert d.version == layout.VERSION == (1, 1)
    drains = d.buffered[0]
    recs = np.concatenate([x["records"] for x in drains])
    assert stats.dropped == 0 and len(recs) == stats.samples == pm.taken
    assert len(drains) == stats.drains and stats.drains >= 16  # batches, not samples
    assert np.all(np.diff(recs["dev_ticks"]) == pm.period_ticks) and pm.period_ticks == 150_000
    seq = np.concatenate([x["seq0"] + np.arange(len(x["records"])) for x in drains])
    assert np.array_equal(seq, np.arange(len(recs)))
    assert d.tail["buffered_samples"] == len(recs) and d.tail["buffered_dropped"] == 0


def test_overflow_is_counted_exactly_and_no_rate_spans_the_gap(tmp_path):
    ring = 2048
    bank, pm, path, stats = _record(tmp_path, ring=ring, stall_at=0.3)
    d = read_actr_path(path)
    recs = np.concatenate([x["records"] for x in d.buffered[0]])
    # 0.3 s of stall at 10 kHz = ~3,000 samples due into a ring of 2,048 (some already drained)
    assert stats.dropped > 0 and stats.dropped == pm.dropped == d.tail["buffered_dropped"]
    assert len(recs) + stats.dropped == pm.taken  # every sample the device took: in the file or counted
    b = TraceBuilder(tmp_path / "t.duckdb")
    ingest_actr_mod.ingest_actr(path, b)
    b.finish("actr", path.name)
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert meta["counters_buffered_dropped"] == str(stats.dropped)
    ts = np.array([r[0] for r in con.execute(
        "SELECT c.ts FROM counters c JOIN tracks t USING (track_id) WHERE t.name = 'dev0.pcie.h2d_bytes' "
        "ORDER BY c.ts").fetchall()])
    # rate values = intervals between consecutive kept samples, minus the one interval over the gap
    assert len(ts) == len(recs) - 1 - 1


def test_ingest_maps_device_time_to_host_time_and_rates_match_truth(tmp_path):
    bank, pm, path, stats = _record(tmp_path, rate_hz=2000, span_s=0.6)
    b = TraceBuilder(tmp_path / "t.duckdb")
    ingest_actr_mod.ingest_actr(path, b)
    b.finish("actr", path.name)
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    rows = con.execute("SELECT c.ts, c.value FROM counters c JOIN tracks t USING (track_id) "
                       "WHERE t.name = 'dev0.pcie.h2d_bytes' ORDER BY c.ts").fetchall()
    ts, v = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    d = read_actr_path(path)
    ticks = np.concatenate([x["records"] for x in d.buffered[0]])["dev_ticks"]
    true_host = CLOCK.host_ns(ticks)  # the model's host time of each device sample
    # the sync pairs (one per 50 ms drain) through a drifting, wandering clock: within 2 us
    assert np.abs(ts - true_host[1:]).max() < 2_000
    truth = np.array([bank.true_rate("dev0.pcie.h2d_bytes", a, c) for a, c in zip(true_host[:-1], true_host[1:])])
    busy = truth > 1e8
    assert busy.sum() > 100
    assert np.abs(v[busy] / truth[busy] - 1).max() < 0.01  # through 32-bit wraps


def test_programming_limits_and_a_version_1_0_file_still_reads(tmp_path):
    bank = _bank()
    pm = PMSampler(bank, "dev0")
    for bad in (0.5, 250_000):
        with pytest.raises(ValueError, match="outside"):
            pm.program([bank.specs[0].name], bad, 0)
    with pytest.raises(ValueError, match="no register"):
        pm.program(["nope"], 1000, 0)
    pm.program([bank.specs[0].name], 200_000, 0)  # the top of the range
    assert pm.period_ticks == 7500
    # a 1.0 file (no BUFS, minor 0) reads as before
    hdr = {"counters": [{"name": "a", "unit": "B/s", "bits": 32, "kind": "cumulative", "group": 0}],
           "groups": [{"id": 0, "counters": ["a"]}]}
    w = ActrWriter(tmp_path / "old.actr", hdr)
    w.append(0, 1, -1, 1, 1, [5])
    w.close()
    raw = bytearray((tmp_path / "old.actr").read_bytes())
    struct.pack_into("<HH", raw, 8, 1, 0)
    (tmp_path / "old.actr").write_bytes(bytes(raw))
    d = read_actr_path(tmp_path / "old.actr")
    assert d.version == (1, 0) and len(d.samples[0]) == 1 and d.buffered == {}
    # a BUFS chunk for a group not declared buffered is skipped with a warning, not a crash
    w = ActrWriter(tmp_path / "bad.actr", hdr)
    w._chunk(b"BUFS", layout.BUFS_HEADER.pack(0, 1, 0, 0, 0, 0, 0, 0, 1))
    w.close()
    d = read_actr_path(tmp_path / "bad.actr")
    assert any("not declare as buffered" in m for _, m, _ in d.warnings)


def test_collect_command_with_device_sampling(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "pm.actr"
    rate_hz, duration_s = 5000, 0.5
    r = subprocess.run([sys.executable, "-m", "acceltrace", "collect", "--source", "sim", "--device-sampling",
                        "--rate", str(rate_hz), "--duration", str(duration_s), "--drain-hz", "50", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "dropped by the devices (ring full): 0" in r.stdout
    d = read_actr_path(out)
    assert d.header["source"] == "sim-pm" and d.tail["buffered_dropped"] == 0
    period_ns = 1e9 / rate_hz
    for gid, drains in d.buffered.items():
        ticks = np.concatenate([x["records"] for x in drains])["dev_ticks"]
        period = drains[0]["period_ticks"]
        assert len(ticks) >= rate_hz * duration_s * 0.96, (gid, len(ticks))  # at least the duration's worth
        assert (np.diff(ticks) == period).all(), gid  # each sample once, none missing
        # ... and none after the last drain, which took every sample up to its moment: the samples end
        # within one period before it. The count is then the collection's own span (0.5 s, or longer
        # where the collector's last drain came late on a busy machine: 4,392 samples in a loaded CI run)
        last = drains[-1]
        last_sample_ns = last["sync_host_ns"] + (int(ticks[-1]) - last["sync_dev_ticks"]) * period_ns / period
        assert 0 <= last["sync_host_ns"] - last_sample_ns <= period_ns + 1_000, gid
    bad = subprocess.run([sys.executable, "-m", "acceltrace", "collect", "--source", "host", "--device-sampling",
                          "--duration", "1", "--out", str(tmp_path / "x.actr")], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "only --source sim" in bad.stderr
