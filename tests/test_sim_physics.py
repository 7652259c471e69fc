"""Physics of the device model: PCIe rates and sharing, HBM access granules, clocks, registers."""

from __future__ import annotations

import numpy as np
import pytest

from acceltrace.sim.config import fixed_machine
from acceltrace.sim.device import DeviceConfig, Kernel, fetched_bytes
from acceltrace.sim.machine import Machine
from acceltrace.sim.pcie import LinkConfig, achieved_bytes_per_ns
from acceltrace.sim.runtime import Runtime
from acceltrace.sim.trace import COLUMNS

KB, MB = 1 << 10, 1 << 20
TS, DUR, TRACK, NAME, NBYTES = (COLUMNS.index(c) for c in ("ts", "dur", "track", "name", "nbytes"))


def run_copies(cfg, plan_per_device):
    """plan_per_device[d] = list of (queue, nbytes, direction); each list issued at t=0, then synchronised."""
    m = Machine(cfg)
    for d, copies in enumerate(plan_per_device):
        rt = Runtime(m, d, f"t{d}", d)

        def prog(rt=rt, copies=copies):
            bufs = []
            for q, nbytes, direction in copies:
                bufs.append((yield from rt.host_alloc(nbytes, pinned=True)))
            for (q, nbytes, direction), buf in zip(copies, bufs):
                yield from rt.memcpy(q, buf, nbytes, direction)
            yield from rt.device_synchronize()

        m.sim.process(prog())
    m.run()
    m.bank.freeze(0.0, m.sim.now)
    dmas = [r for r in m.rec.rows if m.rec.tracks[r[TRACK]].lane == "pcie"]
    return m, dmas


def test_link_rates_follow_generation_width_encoding_and_payload_size():
    assert LinkConfig(3, 16).wire_bytes_per_ns == pytest.approx(15.754, rel=1e-3)
    assert LinkConfig(4, 16).wire_bytes_per_ns == pytest.approx(31.51, rel=1e-3)
    assert LinkConfig(5, 16).wire_bytes_per_ns == pytest.approx(63.02, rel=1e-3)
    assert LinkConfig(6, 16).wire_bytes_per_ns == pytest.approx(128 * 236 / 256, rel=1e-3)
    eff = {mps: LinkConfig(4, 16, mps).payload_bytes_per_ns / LinkConfig(4, 16, mps).wire_bytes_per_ns
           for mps in (128, 256, 512)}
    assert eff[128] == pytest.approx(0.84, abs=0.01)
    assert eff[256] == pytest.approx(0.92, abs=0.01)
    assert eff[512] == pytest.approx(0.955, abs=0.01)


@pytest.mark.parametrize("size", [4 * KB, 64 * KB, 512 * KB, 16 * MB])
def test_single_transfer_achieves_s_over_l_plus_s_over_b(size):
    link = LinkConfig(4, 16, 256, 512)
    cfg = fixed_machine(link)
    _m, dmas = run_copies(cfg, [[(1, size, "h2d")]])
    (dma,) = dmas
    expected = achieved_bytes_per_ns(size, cfg.device.dma_latency_ns, link.payload_bytes_per_ns)
    assert size / dma[DUR] == pytest.approx(expected, rel=1e-4)
    # latency-bound when small, near the effective peak when large
    if size <= 4 * KB:
        assert size / dma[DUR] < 0.1 * link.payload_bytes_per_ns
    if size >= 16 * MB:
        assert size / dma[DUR] > 0.98 * link.payload_bytes_per_ns


def test_concurrent_engines_share_one_device_link():
    link = LinkConfig(4, 16, 256, 512)
    cfg = fixed_machine(link)
    size = 32 * MB
    _m, dmas = run_copies(cfg, [[(1, size, "h2d"), (3, size, "h2d")]])
    assert len(dmas) == 2
    start = min(d[TS] for d in dmas)
    end = max(d[TS] + d[DUR] for d in dmas)
    # together they move 2S at the link's payload rate: the link, not the engines, is the limit
    flow_ns = end - start - cfg.device.dma_latency_ns
    assert 2 * size / flow_ns == pytest.approx(link.payload_bytes_per_ns, rel=0.02)
    for d in dmas:
        assert size / d[DUR] < 0.55 * link.payload_bytes_per_ns


def test_full_duplex_h2d_and_d2h_do_not_halve_each_other():
    link = LinkConfig(4, 16, 256, 512)
    cfg = fixed_machine(link)
    size = 32 * MB
    _m, dmas = run_copies(cfg, [[(1, size, "h2d"), (2, size, "d2h")]])
    for d in dmas:
        # the H2D read requests cost the upstream direction ~24/512 of the data rate, nothing more
        assert size / d[DUR] > 0.9 * link.payload_bytes_per_ns


def test_switch_uplink_saturates_before_the_device_links():
    link = LinkConfig(4, 16, 256, 512)
    size = 32 * MB
    shared = fixed_machine(link, n_devices=2, uplink=LinkConfig(4, 16, 256, 512))
    own = fixed_machine(link, n_devices=2, uplink=None)
    m_shared, dmas_shared = run_copies(shared, [[(1, size, "h2d")], [(1, size, "h2d")]])
    _m, dmas_own = run_copies(own, [[(1, size, "h2d")], [(1, size, "h2d")]])
    for d in dmas_own:
        assert size / d[DUR] > 0.95 * link.payload_bytes_per_ns
    for d in dmas_shared:
        assert size / d[DUR] == pytest.approx(link.payload_bytes_per_ns / 2, rel=0.03)
    # the registers agree: the uplink carried both devices' bytes, each link half its peak
    bank = m_shared.bank
    end = bank.end_ns
    assert bank.total("switch0.uplink.h2d_bytes", end) == pytest.approx(2 * size, rel=1e-6)
    assert bank.total("dev0.pcie.h2d_bytes", end) == pytest.approx(size, rel=1e-6)


def test_strided_access_fetches_whole_granules():
    assert fetched_bytes(1 * MB, 4, 4, 64) == 1 * MB
    assert fetched_bytes(1 * MB, 4, 16, 64) == 4 * MB
    assert fetched_bytes(1 * MB, 4, 256, 64) == 16 * MB
    assert fetched_bytes(1 * MB, 4, 256, 32) == 8 * MB
    dev = DeviceConfig(hbm_bytes_per_ns=2000.0, hbm_granule_bytes=64)
    contiguous = Kernel("gather", "vector", 1e3, 64 * MB, 4, 4)
    strided = Kernel("gather", "vector", 1e3, 64 * MB, 4, 128)
    # memory-bound: 16x the bytes, 16x the time (plus the fixed start cost)
    assert (strided.duration_ns(dev) - 600) == pytest.approx(16 * (contiguous.duration_ns(dev) - 600), rel=1e-9)


def test_kernel_records_and_hbm_registers_carry_the_fetched_bytes():
    import json

    cfg = fixed_machine(LinkConfig(4, 16))
    m = Machine(cfg)
    rt = Runtime(m, 0, "main", 0)
    k = Kernel("gather", "vector", 1e3, 8 * MB, 4, 128)

    def prog():
        for _ in range(3):
            yield from rt.launch(0, k)
        yield from rt.device_synchronize()

    m.sim.process(prog())
    m.run()
    m.bank.freeze(0.0, m.sim.now)
    rows = [r for r in m.rec.rows if m.rec.tracks[r[TRACK]].lane == "eu"]
    assert len(rows) == 3
    args = json.loads(rows[0][COLUMNS.index("args")])
    assert args["bytes_requested"] == 8 * MB and args["bytes_fetched"] == 16 * 8 * MB
    end = m.bank.end_ns
    assert m.bank.total("dev0.hbm.read_bytes", end) == pytest.approx(3 * 16 * 8 * MB, rel=1e-9)
    assert m.bank.total("dev0.hbm.requested_bytes", end) == pytest.approx(3 * 8 * MB, rel=1e-9)


def test_device_clock_drifts_and_piecewise_sync_pairs_correct_it():
    from acceltrace.sim.device import DeviceClock

    clock = DeviceClock(hz=1.4e9, offset_ticks=2.0**40, t0_ns=0.0, drift_ppm=30.0, wander_ppm=5.0,
                        wander_period_ns=4e9)
    host = np.linspace(0, 2e9, 20001)
    ticks = clock.ticks(host)
    assert np.all(np.diff(ticks) > 0)
    # inverse
    assert np.max(np.abs(clock.host_ns(ticks) - host)) < 2.0
    # one straight line through the end points misses by hundreds of ns (the wander) ...
    pairs_t = np.arange(0, 2e9 + 1, 1e6)
    pairs_k = clock.ticks(pairs_t)
    line = np.interp(ticks, pairs_k[[0, -1]], pairs_t[[0, -1]])
    assert np.max(np.abs(line - host)) > 300
    # ... while interpolating between pairs every millisecond stays within a few ns
    piecewise = np.interp(ticks, pairs_k, pairs_t)
    assert np.max(np.abs(piecewise - host)) < 5.0
    # and the device runs fast by its drift
    rate = (ticks[-1] - ticks[0]) / (host[-1] - host[0]) / 1.4
    assert rate == pytest.approx(1 + 30e-6, abs=5e-6)


def test_registers_wrap_at_their_width_and_report_true_rates():
    from acceltrace.sim.registers import CounterSpec, RegisterBank

    bank = RegisterBank(origin_ns=10**12)
    bank.define(CounterSpec("dev0.pcie.h2d_bytes", "bytes", 32, "cumulative", "dev0", "fixed", "", 25e9))
    bank.define(CounterSpec("dev0.q0.occupancy", "entries", 16, "gauge", "dev0", "fixed"))
    bank.add_rate("dev0.pcie.h2d_bytes", 0.0, 1e9, 25.0)  # 25 GB/s for one second
    bank.step_level("dev0.q0.occupancy", 5e8, 3.0)
    bank.step_level("dev0.q0.occupancy", 2e8, 1.0)  # reported out of order on purpose
    bank.freeze(0.0, 1e9)
    t = 10**12 + 500_000_000
    raw, occ = bank.read_raw(["dev0.pcie.h2d_bytes", "dev0.q0.occupancy"], t)
    assert raw == (25 * 500_000_000) % (1 << 32)
    assert occ == 4
    assert bank.true_rate("dev0.pcie.h2d_bytes", 10**12, 10**12 + 10**9) == pytest.approx(25e9)
    assert bank.true_rate("dev0.q0.occupancy", 10**12, 10**12 + 10**9) == pytest.approx(0.3 * 1 + 0.5 * 4)
    many = bank.read_raw_many("dev0.pcie.h2d_bytes", np.array([t, t + 1000], dtype=np.int64))
    assert int(many[0]) == raw
    # a 32-bit byte counter at 25 GB/s wraps in well under a second
    from acceltrace.sim.registers import wrap_seconds

    assert wrap_seconds(bank.spec("dev0.pcie.h2d_bytes")) < 0.2
