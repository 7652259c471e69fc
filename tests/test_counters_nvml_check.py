"""bench/nvml_pcie_check.py's parts that need no GPU: the window mean over ingested counters and the verdict."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import _fake_pynvml
from acceltrace.collect.sampler import Sampler, VirtualClock

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "nvml_pcie_check.py"


@pytest.fixture()
def check():
    spec = importlib.util.spec_from_file_location("nvml_pcie_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("byte_fields", [True, False])
def test_window_mean_of_fake_nvml_rx_matches_its_rate_and_the_verdict_uses_10pct(check, monkeypatch, tmp_path,
                                                                                 byte_fields):
    """The byte counter where the driver has it, else the gauge (in KB of 1000 B): either way the window's
    mean is the rate, judged against the link's bytes (payload x 276/256), not the payload."""
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml.make(rx_kib_s=12_000_000, byte_fields=byte_fields))
    from acceltrace.collect.counters.nvml import NvmlSource

    clock = VirtualClock(0)
    name = "gpu0.pcie.rx_bytes" if byte_fields else "gpu0.pcie.rx_throughput"
    src = NvmlSource()
    assert {s.name for s in src.specs()} >= {name}
    assert ("gpu0.pcie.rx_throughput" in {s.name for s in src.specs()}) is not byte_fields
    s = Sampler(src, tmp_path / "n.actr", rate_hz=1000, clock=clock, counters=[name])
    s.run(0.2)
    s.close()
    seen = check.counter_means(tmp_path / "n.actr", [name], 50_000_000, 150_000_000, tmp_path)
    want = 12_000_000 * (1024 if byte_fields else 1000)  # the fake's field ticks in KiB
    assert seen[name] == pytest.approx(want, rel=1e-3)
    payload = want * 256 / 276
    ok, lines = check.verdict(payload * 1.05, seen, payload * 1.05 * 276 / 256, frozenset([name]))
    assert ok and len(lines) == 1
    ok, lines = check.verdict(payload, seen)  # against the payload alone: 7.8 % over, still within 10 %
    assert ok
    ok, lines = check.verdict(payload * 1.3, seen, payload * 1.3 * 276 / 256, frozenset([name]))
    assert not ok and "OFF BY" in lines[0]


def test_without_torch_or_gpu_it_exits_2_with_a_reason(check, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    assert check.main([]) == 2
    assert "PyTorch is not installed" in capsys.readouterr().err
