"""Every counter source honours the interface: specs, devices, readers, and a round trip through ingest."""

from __future__ import annotations

import sys

import duckdb
import numpy as np
import pytest
from _counters_bank import make_bank

import _fake_pynvml
from acceltrace.collect.counters import SOURCES, source_class
from acceltrace.collect.counters.base import CounterSource, DeviceInfo, Reading, SourceUnavailable
from acceltrace.collect.counters.sim import SimSource
from acceltrace.collect.sampler import Sampler, VirtualClock
from acceltrace.ingest.native.actr import ingest_actr
from acceltrace.ingest.builder import TraceBuilder


def _ingested(tmp_path, actr_name: str):
    """Ingest tmp_path/actr_name into a fresh trace and open it read-only."""
    b = TraceBuilder(tmp_path / "t.duckdb")
    ingest_actr(tmp_path / actr_name, b)
    b.finish("actr", actr_name)
    return duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)


def make_source(name, monkeypatch):
    if name == "sim":
        return SimSource(make_bank(span_s=0.5), VirtualClock(),
                         links={"dev0": {"gen": 5, "width": 8, "max_payload_bytes": 512}})
    if name == "nvml":
        monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml.make(n_gpus=2))
        return source_class("nvml")()
    return source_class(name)()


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_source_describes_and_reads_raw_values(name, monkeypatch):
    src = make_source(name, monkeypatch)
    assert isinstance(src, CounterSource) and src.NAME == name
    devices = src.devices()
    assert devices and all(isinstance(d, DeviceInfo) for d in devices)
    specs = src.specs()
    names = [s.name for s in specs]
    assert specs and len(names) == len(set(names))
    assert {s.device for s in specs} <= {d.name for d in devices}
    if src.clock is None:
        src.clock = VirtualClock(1000)
    for dev in {s.device for s in specs}:
        mine = [s for s in specs if s.device == dev and not s.read_group][:8]
        r = src.reader(dev, [s.name for s in mine])()
        assert isinstance(r, Reading) and len(r.values) == len(mine)
        for s, v in zip(mine, r.values):
            assert isinstance(v, int) and 0 <= v < 2**s.bits, (s.name, v)
    assert all(isinstance(n, str) for n in src.notes())
    src.close()


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_source_samples_into_counter_tracks_with_units(name, monkeypatch, tmp_path):
    src = make_source(name, monkeypatch)
    clock = VirtualClock(10**9) if name != "host" else None
    if name == "sim":
        src.clock = clock
    s = Sampler(src, tmp_path / "x.actr", rate_hz=100 if name != "host" else 50, clock=clock)
    if name == "host":
        s.run(0.12)
    else:
        if name == "nvml":
            src.clock = clock
        s.run(0.1)
    s.close()
    con = _ingested(tmp_path, "x.actr")
    tracks = dict(con.execute("SELECT name, unit FROM tracks WHERE lane = 'counter'").fetchall())
    for spec in s.specs:
        assert tracks.get(spec.name) == spec.unit, spec.name
    (n,) = con.execute("SELECT count(*) FROM counters").fetchone()
    assert n > 0


def test_nvml_without_driver_is_unavailable_with_a_clear_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml.make(driver=False))
    with pytest.raises(SourceUnavailable, match="no usable NVIDIA driver.*NVML Shared Library Not Found"):
        source_class("nvml")()


def test_nvml_leaves_out_unsupported_counters_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml.make(replay_supported=False, byte_fields=False))
    src = source_class("nvml")()
    names = {s.name for s in src.specs()}
    assert "gpu0.pcie.replays" not in names and "gpu0.pcie.rx_bytes" not in names
    assert "gpu0.pcie.rx_throughput" in names
    assert any("gpu0.pcie.replays left out: Not Supported" in n for n in src.notes())
    link = src.devices()[0].links["link"]
    assert (link["gen"], link["width"]) == (5, 16)


@pytest.mark.parametrize("byte_fields", [True, False])
def test_nvml_pcie_rx_becomes_bytes_per_second_and_link_utilisation(monkeypatch, tmp_path, byte_fields):
    """NVML counts the link's bytes, TLP headers included (measured on an H200: collect/counters/nvml.py), so
    its utilisation is of the link's raw rate (63.0 GB/s at Gen5 x16), not of its payload rate (57.6 GB/s:
    a saturated link read 103 %). The gauge, read only without the byte counter, is in KB of 1000 B."""
    fake = _fake_pynvml.make(rx_kib_s=20_000_000, byte_fields=byte_fields)  # ~20 GB/s into the GPU
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = source_class("nvml")()
    name = "gpu0.pcie.rx_bytes" if byte_fields else "gpu0.pcie.rx_throughput"
    assert ("gpu0.pcie.rx_throughput" in {s.name for s in src.specs()}) is not byte_fields
    if byte_fields:
        assert any("rx_throughput left out: gpu0.pcie.rx_bytes counts the same bytes" in n for n in src.notes())
    s = Sampler(src, tmp_path / "n.actr", rate_hz=1000, clock=VirtualClock(0), counters=[name])
    s.run(0.05)
    s.close()
    assert fake.state["shutdown"] == 1
    con = _ingested(tmp_path, "n.actr")
    vals = dict(con.execute(
        "SELECT t.name, avg(c.value) FROM counters c JOIN tracks t USING (track_id) GROUP BY 1").fetchall())
    rate = 20_000_000 * (1024 if byte_fields else 1000)  # the fake's field ticks in KiB
    assert vals[name] == pytest.approx(rate, rel=1e-3)
    assert vals["PCIe H2D utilisation (link)"] == pytest.approx(rate / (32e9 / 8 * 128 / 130 * 16) * 100, rel=1e-3)


def test_nvml_byte_counter_of_32_bits_is_read_as_one_and_its_wraps_are_not_2_to_the_64(monkeypatch, tmp_path):
    """An H200 (driver 580) gave its PCIe byte counters as 32-bit field values: read as 64-bit, every 4 GiB
    wrap was taken for one of 2**64 bytes (4.7e9 times the copy loop's rate). Its valueType says the width."""
    fake = _fake_pynvml.make(rx_kib_s=20_000_000, byte_field_bits=32, rx_bytes_start=(1 << 32) - (200 << 20))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = source_class("nvml")()
    spec = {s.name: s for s in src.specs()}["gpu0.pcie.rx_bytes"]
    assert spec.bits == 32
    assert any("gpu0.pcie.rx_bytes: a 32-bit counter" in n for n in src.notes())
    s = Sampler(src, tmp_path / "n.actr", rate_hz=1000, clock=VirtualClock(0), counters=["gpu0.pcie.rx_bytes"])
    s.run(0.05)  # 20 MB a read: the counter passes 2**32 after ~10 reads
    s.close()
    assert fake.state["rx_bytes"] > 1 << 32
    con = _ingested(tmp_path, "n.actr")
    (top,) = con.execute("SELECT max(c.value) FROM counters c JOIN tracks t USING (track_id) "
                         "WHERE t.name = 'gpu0.pcie.rx_bytes'").fetchall()[0]
    assert top == pytest.approx(20_000_000 * 1024, rel=1e-3)


def test_host_source_reports_cpu_busy_as_a_share(tmp_path):
    src = source_class("host")()
    s = Sampler(src, tmp_path / "h.actr", rate_hz=20, counters=["cpu.busy", "memory.used"])
    s.run(0.3)
    s.close()
    con = _ingested(tmp_path, "h.actr")
    busy = np.array([r[0] for r in con.execute(
        "SELECT value FROM counters JOIN tracks USING (track_id) WHERE name = 'cpu.busy'").fetchall()])
    # /proc/stat counts whole jiffies (10 ms): over 50 ms intervals one jiffy more or less is 20 % of a CPU
    assert len(busy) >= 4 and np.all((busy >= 0) & (busy <= 125.0))
    (used,) = con.execute(
        "SELECT max(value) FROM counters JOIN tracks USING (track_id) WHERE name = 'memory.used'").fetchone()
    assert used > 1 << 20


def test_sim_fast_reader_returns_exactly_what_the_bank_reads():
    from acceltrace.collect.counters.sim import CursorReader

    bank = make_bank(seed=11, span_s=0.3)
    names = [s.name for s in bank.specs]
    assert CursorReader.available(bank, names)
    read = CursorReader(bank, names)
    rng = np.random.default_rng(2)
    forward = np.sort(rng.uniform(-1e6, bank.end_ns + 1e6, 400))
    backward = rng.uniform(0, bank.end_ns, 50)  # out of order: it must re-seek, not drift
    for t in np.concatenate([forward, backward, forward[::7]]):
        assert read(t) == bank.read_raw(names, t), t


def test_docs_describe_every_source_role_and_cli_flag():
    from pathlib import Path

    from acceltrace.collect.counters import sim as sim_mod

    doc = (Path(__file__).resolve().parents[1] / "docs" / "counters.md").read_text()
    for name in SOURCES:
        assert f"| `{name}` |" in doc, name
    roles = {r for _, r, _ in sim_mod._ROLES} | {"pcie_h2d_rate", "pcie_d2h_rate", "cpu_busy_jiffies",
                                                  "cpu_total_jiffies"}
    for role in roles:
        assert f"`{role}`" in doc, role
    for flag in ("--source", "--counters", "--rate", "--duration", "--out", "--list", "--socket"):
        assert flag in doc, flag
    for chunk in ("`HEAD`", "`SMPL`", "`NOTE`", "`TAIL`"):
        assert chunk in doc


def test_host_perf_groups_sum_cpus_and_report_mean_enabled_running(monkeypatch):
    import os
    import struct

    from acceltrace.collect.counters import host

    g = host.PerfGroups.__new__(host.PerfGroups)
    n = len(host.PERF_EVENTS)
    g._size, g._fmt = 8 * (3 + n), struct.Struct(f"<{3 + n}Q")
    fds = []
    # two CPUs: (nr, enabled, running, cycles, instructions, misses); CPU 1 was multiplexed half the time
    for rec in ((3, 1000, 1000, 500, 800, 7), (3, 1000, 500, 250, 300, 3)):
        r, w = os.pipe()
        os.write(w, struct.pack(f"<{3 + n}Q", *rec))
        os.close(w)
        fds.append(r)
    g.leaders, g.fds = fds, list(fds)
    totals, enabled, running = g.read()
    g.close()
    assert totals == [750, 1100, 10] and enabled == 1000 and running == 750

    src = host.HostSource(perf=False)
    src.perf = type("P", (), {"read": lambda self: ([10, 20, 30], 2000, 1000)})()
    src.clock = VirtualClock(5)
    r = src.reader("host", ["perf.instructions", "perf.cycles"])()
    assert r.values == [20, 10] and r.times == (2000, 1000) and r.host_ns == 5
