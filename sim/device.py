"""The accelerator itself: execution units, HBM, roofline-timed kernels and the device clock."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DeviceConfig:
    n_matrix: int = 2
    n_vector: int = 2
    matrix_flops_per_ns: float = 200_000.0  # 200 TFLOP/s per matrix unit
    vector_flops_per_ns: float = 20_000.0
    hbm_bytes_per_ns: float = 2_000.0  # 2 TB/s
    hbm_granule_bytes: int = 64  # smallest HBM access; a scattered 4-byte load still moves this much
    clock_hz: float = 1.4e9
    dispatch_ns: float = 1_200.0  # command processor: descriptor decode to EU start
    fetch_ns: float = 900.0  # descriptor fetch over PCIe after an idle queue's doorbell
    dma_latency_ns: float = 3_000.0  # per transfer: setup and first round trip (L in S/(L+S/B))
    h2d_engines: int = 2
    d2h_engines: int = 1

    def unit_names(self) -> list[tuple[str, str]]:
        """(kind, name) of every execution unit, e.g. ("matrix", "matrix 0")."""
        return [("matrix", f"matrix {i}") for i in range(self.n_matrix)] + [
            ("vector", f"vector {i}") for i in range(self.n_vector)
        ]

    def peak_flops_per_ns(self, kind: str) -> float:
        return self.matrix_flops_per_ns if kind == "matrix" else self.vector_flops_per_ns


def fetched_bytes(requested_bytes: float, elem_bytes: int, stride_bytes: int, granule_bytes: int) -> float:
    """HBM bytes moved to serve `requested_bytes` of elem_bytes-wide loads spaced stride_bytes apart.

    Contiguous loads (stride == elem) share granules and move what they use; once the stride
    reaches the granule every load moves a whole granule of which it uses elem_bytes.
    """
    if stride_bytes <= elem_bytes:
        return float(requested_bytes)
    per_elem = min(stride_bytes, granule_bytes)
    amplification = max(1.0, per_elem / elem_bytes)
    return float(requested_bytes) * amplification


@dataclass(frozen=True)
class Kernel:
    """One kernel launch: its work, as a range profiler would count it."""

    name: str
    unit_kind: str  # "matrix" | "vector"
    flops: float
    bytes_requested: float
    elem_bytes: int = 4
    stride_bytes: int = 4

    def bytes_fetched(self, dev: DeviceConfig) -> float:
        return fetched_bytes(self.bytes_requested, self.elem_bytes, self.stride_bytes, dev.hbm_granule_bytes)

    def duration_ns(self, dev: DeviceConfig) -> float:
        """Roofline: the slower of compute and HBM traffic, plus the unit's fixed start cost."""
        compute = self.flops / dev.peak_flops_per_ns(self.unit_kind)
        memory = self.bytes_fetched(dev) / dev.hbm_bytes_per_ns
        return max(compute, memory) + 600.0


@dataclass(frozen=True)
class DeviceClock:
    """Device ticks as a function of host ns: own frequency, offset, constant drift and a slow wander.

    The wander (temperature, spread spectrum) is why one linear fit over a long run is not
    enough and the ingester interpolates piecewise between sync pairs.
    """

    hz: float
    offset_ticks: float
    t0_ns: float
    drift_ppm: float
    wander_ppm: float
    wander_period_ns: float

    def ticks(self, t_ns):
        t = np.asarray(t_ns, dtype=np.float64) - self.t0_ns
        per_ns = self.hz * 1e-9
        w = 2.0 * math.pi / self.wander_period_ns
        drift = t * (1.0 + self.drift_ppm * 1e-6) + self.wander_ppm * 1e-6 * (1.0 - np.cos(w * t)) / w
        return np.floor(self.offset_ticks + per_ns * drift).astype(np.int64)

    def ticks_at(self, t_ns: float) -> int:
        """ticks() for one time without numpy (the counter sampler reads it once per sample)."""
        t = t_ns - self.t0_ns
        w = 2.0 * math.pi / self.wander_period_ns
        drift = t * (1.0 + self.drift_ppm * 1e-6) + self.wander_ppm * 1e-6 * (1.0 - math.cos(w * t)) / w
        return math.floor(self.offset_ticks + self.hz * 1e-9 * drift)

    def host_ns(self, ticks) -> np.ndarray:
        """Inverse of ticks() (tests use it as the truth the ingester's correction approximates)."""
        ticks = np.asarray(ticks, dtype=np.float64)
        per_ns = self.hz * 1e-9
        t = (ticks - self.offset_ticks) / per_ns  # first guess ignoring drift
        w = 2.0 * math.pi / self.wander_period_ns
        for _ in range(4):  # Newton on f(t) = ticks(t) - target; the drift terms are tiny
            f = self.offset_ticks + per_ns * (
                t * (1.0 + self.drift_ppm * 1e-6) + self.wander_ppm * 1e-6 * (1.0 - np.cos(w * t)) / w
            ) - ticks
            df = per_ns * (1.0 + self.drift_ppm * 1e-6 + self.wander_ppm * 1e-6 * np.sin(w * t))
            t = t - f / df
        return t + self.t0_ns
