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


def test_window_mean_of_fake_nvml_rx_matches_its_rate_and_the_verdict_uses_10pct(check, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml.make(rx_kib_s=12_000_000))
    from acceltrace.collect.counters.nvml import NvmlSource

    clock = VirtualClock(0)
    names = ["gpu0.pcie.rx_throughput", "gpu0.pcie.rx_bytes"]
    s = Sampler(NvmlSource(), tmp_path / "n.actr", rate_hz=1000, clock=clock, counters=names)
    s.run(0.2)
    s.close()
    seen = check.counter_means(tmp_path / "n.actr", names, 50_000_000, 150_000_000, tmp_path)
    want = 12_000_000 * 1024
    assert seen["gpu0.pcie.rx_throughput"] == pytest.approx(want)
    assert seen["gpu0.pcie.rx_bytes"] == pytest.approx(want, rel=1e-3)
    ok, lines = check.verdict(want * 1.05, seen)
    assert ok and len(lines) == 2
    ok, lines = check.verdict(want * 1.3, seen)
    assert not ok and "OFF BY" in lines[0]


def test_without_torch_or_gpu_it_exits_2_with_a_reason(check, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    assert check.main([]) == 2
    assert "PyTorch is not installed" in capsys.readouterr().err
