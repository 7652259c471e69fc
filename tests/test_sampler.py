"""The sampler core: absolute deadlines, missed deadlines, multiplexing bookkeeping, clocks."""

from __future__ import annotations

import numpy as np
import pytest
from _counters_bank import make_bank

from acceltrace.formats.actr.reader import read_actr_path
from acceltrace.collect.counters.base import CounterSource, CounterSpec, DeviceInfo, Reading
from acceltrace.collect.counters.sim import SimSource
from acceltrace.collect.sampler import Sampler, SamplerError, VirtualClock, WallClock


class Ramp(CounterSource):
    """One fixed cumulative counter equal to the clock; optionally slow on chosen reads."""

    NAME = "ramp"

    def __init__(self, clock, slow_reads=None, slow_ns=0):
        self.clock, self.slow_reads, self.slow_ns, self.n = clock, set(slow_reads or ()), slow_ns, 0

    def devices(self):
        return [DeviceInfo("host")]

    def specs(self):
        return [CounterSpec("t", "ns/s", bits=64, device="host")]

    def reader(self, device, names):
        def read():
            self.n += 1
            if self.n in self.slow_reads:
                self.clock.advance(self.slow_ns)  # this read took slow_ns of (virtual) time
            t = self.clock.now_ns()
            return Reading(t, -1, [t])
        return read


def test_virtual_clock_10s_at_1khz_has_no_drift(tmp_path):
    clock = VirtualClock(start_ns=5_000)
    s = Sampler(Ramp(clock), tmp_path / "r.actr", rate_hz=1000, clock=clock)
    stats = s.run(10.0)
    s.close()
    assert stats.ticks == 10_001 and stats.missed_deadlines == 0
    host = read_actr_path(tmp_path / "r.actr").samples[0]["host_ns"]
    assert np.array_equal(host, 5_000 + np.arange(10_001, dtype=np.int64) * 1_000_000)


def test_missed_deadlines_are_counted_and_the_grid_does_not_shift(tmp_path):
    clock = VirtualClock()
    # read 10 takes 3.5 periods: the deadlines in between are missed, later ones stay on the grid
    s = Sampler(Ramp(clock, slow_reads={10}, slow_ns=3_500_000), tmp_path / "r.actr", rate_hz=1000, clock=clock)
    stats = s.run(0.05)
    s.close()
    # the read due at 9 ms ends at 12.5 ms: 10 and 11 ms are missed, 12 ms is taken late
    assert stats.missed_deadlines == 2 and stats.late_ticks == 1
    assert stats.ticks + stats.missed_deadlines == 51
    host = read_actr_path(tmp_path / "r.actr").samples[0]["host_ns"]
    assert np.all(host[11:] % 1_000_000 == 0)  # after the late tick, back on the same grid
    assert read_actr_path(tmp_path / "r.actr").tail["missed_deadlines"] == 2


def test_a_stall_past_the_runs_end_misses_only_the_deadlines_inside_the_run(tmp_path):
    clock = VirtualClock()
    # the read due at 49 ms ends at 52.5 ms: of the deadlines it passes, only 50 ms is the run's (0-50 ms)
    s = Sampler(Ramp(clock, slow_reads={50}, slow_ns=3_500_000), tmp_path / "r.actr", rate_hz=1000, clock=clock)
    stats = s.run(0.05)
    s.close()
    assert (stats.ticks, stats.missed_deadlines) == (50, 1)
    assert read_actr_path(tmp_path / "r.actr").tail["missed_deadlines"] == 1


def test_wall_clock_short_run_keeps_the_rate(tmp_path):
    clock = WallClock()
    s = Sampler(Ramp(clock), tmp_path / "r.actr", rate_hz=200, clock=clock)
    stats = s.run(0.5)
    s.close()
    d = read_actr_path(tmp_path / "r.actr")
    host = d.samples[0]["host_ns"].astype(np.int64)
    assert stats.ticks + stats.missed_deadlines == 101
    # on the absolute grid from the start: no drift over the run, and most reads are prompt
    # (a shared machine may delay single reads; those are the sampler's late or missed ticks)
    k, late = np.divmod(host - d.tail["start_ns"], 5_000_000)
    assert np.all(np.diff(host) > 0)
    # the first sample is on the grid's first deadline unless that one was missed (the thread held off
    # for a whole period by a loaded machine: counted, skipped, never shifted; seen once under the suite)
    assert k[-1] in (100, 101) and k[0] <= stats.missed_deadlines
    assert np.median(late) < 1_000_000, np.median(late)


def test_rate_outside_1hz_to_10khz_is_refused(tmp_path):
    clock = VirtualClock()
    with pytest.raises(SamplerError, match="outside"):
        Sampler(Ramp(clock), tmp_path / "r.actr", rate_hz=20_000, clock=clock)


def test_unknown_counter_is_refused_with_the_list_hint(tmp_path):
    clock = VirtualClock()
    with pytest.raises(SamplerError, match="unknown counter.*--list"):
        Sampler(Ramp(clock), tmp_path / "r.actr", rate_hz=10, counters=["nope"], clock=clock)


def test_more_counters_than_slots_rotate_with_enabled_and_running_time(tmp_path):
    bank = make_bank(n_prog=6, slots=2, span_s=0.1)
    clock = VirtualClock()
    s = Sampler(SimSource(bank, clock), tmp_path / "m.actr", rate_hz=1000, clock=clock)
    s.run(0.03)
    s.close()
    d = read_actr_path(tmp_path / "m.actr")
    groups = {g["id"]: g for g in d.header["groups"]}
    mux = [g for g in groups.values() if g["multiplexed"]]
    assert len(mux) == 3 and all(len(g["counters"]) == 2 for g in mux)
    fixed = [g for g in groups.values() if not g["multiplexed"]]
    assert len(fixed) == 1 and len(d.samples[fixed[0]["id"]]) == 31
    total_running = 0
    for g in mux:
        smp = d.samples[g["id"]]
        en, run = smp["enabled_ns"].astype(np.int64), smp["running_ns"].astype(np.int64)
        assert np.all(np.diff(run) >= 0) and np.all(run <= en)
        # each group counts about a third of the time
        total_running += run[-1]
        assert 0.2 < run[-1] / en[-1] < 0.5
        # within a counting period running grows with enabled; across a gap it stands still
        d_en, d_run = np.diff(en), np.diff(run)
        assert set(np.unique(d_run[d_run > 0] - d_en[d_run > 0])) == {0}
    assert total_running == pytest.approx(0.03e9, rel=0.05)


def test_stop_ends_the_loop_after_the_current_tick(tmp_path):
    clock = VirtualClock()
    s = Sampler(Ramp(clock), tmp_path / "r.actr", rate_hz=100, clock=clock)
    s.run(None, on_tick=lambda smp: smp.stop() if smp.stats.ticks == 7 else None)
    s.close("interrupted")
    d = read_actr_path(tmp_path / "r.actr")
    assert len(d.samples[0]) == 7 and d.tail["ended"] == "interrupted" and not d.truncated


def test_a_rate_too_low_for_a_registers_wrap_time_is_noted_in_the_file(tmp_path):
    bank = make_bank(span_s=3.0)
    clock = VirtualClock()
    s = Sampler(SimSource(bank, clock), tmp_path / "slow.actr", rate_hz=2, clock=clock)
    assert any("dev0.pcie.h2d_bytes" in w and "wraps in 0.172 s" in w for w in s.wrap_risks)
    s.run(1.0)
    s.close()
    notes = [n["message"] for n in read_actr_path(tmp_path / "slow.actr").notes]
    assert any("cannot be recovered" in n for n in notes)
    fast = Sampler(SimSource(bank, VirtualClock()), tmp_path / "fast.actr", rate_hz=100, clock=VirtualClock())
    assert fast.wrap_risks == []
    fast.close()
