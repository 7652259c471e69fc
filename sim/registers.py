"""The simulated accelerator's counter register bank: what the counters helper's sim source reads.

Contract (collect/counters/ reads only this; sim/ writes it while the model runs):

``RegisterBank``
  ``.specs``            list[CounterSpec], one per hardware register, in a stable order.
  ``.programmable_slots`` dict device -> number of programmable counters the device can count at
                        once. Specs with ``group == 'fixed'`` are always counted; specs with
                        ``group == 'programmable'`` compete for those slots (more requested than
                        slots means the sampler multiplexes them round-robin, as perf does).
  ``.start_ns``, ``.end_ns``  host-clock (virtual) time range the model covered.
  ``.read_raw(names, t_ns) -> list[int]``
                        raw register values at host time ``t_ns``: cumulative counters as
                        ``floor(total) mod 2**bits`` (so 32-bit byte counters wrap within a
                        fraction of a second of heavy traffic), gauges as the level at ``t_ns``.
                        Reading does not change state; any order of times is allowed.
  ``.device_ticks(device, t_ns) -> int``  the device's own clock at host time ``t_ns`` (the
                        sampler records (host ns, device ticks) per sample like real hardware).
  ``.true_rate(name, t0_ns, t1_ns) -> float``
                        ground truth for tests: a cumulative counter's mean increase per second
                        over [t0, t1] (no wrap), a gauge's time-weighted mean level.

``CounterSpec`` fields: name ("dev0.pcie.h2d_bytes"), unit (bytes, tlps, ns, cycles, entries),
bits (register width), kind ('cumulative' | 'gauge'), device ("dev0", "switch0"), group
('fixed' | 'programmable'), description, peak_per_s (the rate that means 100 %: a link's effective
payload bandwidth per direction, an EU's clock frequency, HBM peak bandwidth, DMA engines x 1e9 ns/s;
None for gauges without a ceiling).

Counters per device ``devN``: pcie.{h2d,d2h}_bytes and pcie.{h2d,d2h}_tlps on its link (32-bit),
dma.{h2d,d2h}_busy_ns (busy time summed over that direction's engines), hbm.read_bytes,
hbm.write_bytes, hbm.requested_bytes, eu.<unit>.busy_cycles per execution unit, q<k>.occupancy
(gauge, descriptors in the submission ring). When the devices sit behind a switch, ``switch0``
has uplink.{h2d,d2h}_bytes and uplink.{h2d,d2h}_tlps (48-bit).

The model feeds the bank with piecewise-constant rates (``add_rate``) and gauge steps
(``step_level``); ``freeze()`` turns them into sorted breakpoint arrays so reads are a binary
search plus one multiply, vectorised for the sampler's many times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CounterSpec:
    name: str
    unit: str
    bits: int
    kind: str  # 'cumulative' | 'gauge'
    device: str
    group: str  # 'fixed' | 'programmable'
    description: str = ""
    peak_per_s: float | None = None


class _Cumulative:
    """Rate segments (t0, t1, rate per ns) -> a piecewise-linear total."""

    __slots__ = ("segs", "bulk", "times", "totals", "slopes")

    def __init__(self):
        self.segs: list[tuple[float, float, float]] = []  # (t0, t1, rate per ns), one append per change
        self.bulk: list[np.ndarray] = []  # (3, n) arrays added in bulk
        self.times = self.totals = self.slopes = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All segments as (t0, t1, rate) arrays."""
        parts = list(self.bulk)
        if self.segs:
            parts.append(np.asarray(self.segs, dtype=np.float64).T)
        if not parts:
            z = np.zeros(0)
            return z, z, z
        a = np.concatenate(parts, axis=1)
        return a[0], a[1], a[2]

    def freeze(self) -> None:
        t0, t1, r = self.arrays()
        times = np.concatenate([t0, t1])
        dslope = np.concatenate([r, -r])
        order = np.argsort(times, kind="stable")
        times, dslope = times[order], dslope[order]
        slopes = np.cumsum(dslope)
        slopes[np.abs(slopes) < 1e-12] = 0.0  # cancelling float sums must not leave a creeping slope
        totals = np.zeros(len(times))
        if len(times) > 1:
            totals[1:] = np.cumsum(slopes[:-1] * np.diff(times))
        self.times, self.totals, self.slopes = times, totals, slopes

    def total(self, t_ns: np.ndarray) -> np.ndarray:
        if self.times is None or len(self.times) == 0:
            return np.zeros(np.shape(t_ns))
        k = np.searchsorted(self.times, t_ns, side="right") - 1
        before = k < 0
        k = np.maximum(k, 0)
        out = self.totals[k] + self.slopes[k] * (t_ns - self.times[k])
        return np.where(before, 0.0, out)


class _Gauge:
    """Level changes (t, delta) -> a step function; deltas, so callers may report out of time order."""

    __slots__ = ("t", "v", "times", "values")

    def __init__(self):
        self.t: list[float] = []
        self.v: list[float] = []
        self.times = self.values = None

    def freeze(self) -> None:
        t = np.asarray(self.t, dtype=np.float64)
        order = np.argsort(t, kind="stable")
        self.times = t[order]
        self.values = np.cumsum(np.asarray(self.v, dtype=np.float64)[order])

    def level(self, t_ns: np.ndarray) -> np.ndarray:
        if self.times is None or len(self.times) == 0:
            return np.zeros(np.shape(t_ns))
        k = np.searchsorted(self.times, t_ns, side="right") - 1
        return np.where(k < 0, 0.0, self.values[np.maximum(k, 0)])


class RegisterBank:
    """Registers of every simulated device (and the switch); see the module docstring."""

    def __init__(self, origin_ns: int = 0):
        # the model adds rates in ns since its start; readers use absolute host ns = origin_ns + that
        self.origin_ns = int(origin_ns)
        self.specs: list[CounterSpec] = []
        self.programmable_slots: dict[str, int] = {}
        self._by_name: dict[str, CounterSpec] = {}
        self._data: dict[str, _Cumulative | _Gauge] = {}
        self._clocks: dict[str, object] = {}
        self.start_ns = 0.0
        self.end_ns = 0.0
        self.frozen = False
        self.links: dict[str, dict] = {}  # device -> {gen, width, max_payload_bytes} (switch: its uplink)
        self.clock_hz: dict[str, float] = {}  # device -> tick frequency

    # -- building (the model) ------------------------------------------------------------------
    def define(self, spec: CounterSpec) -> None:
        self.specs.append(spec)
        self._by_name[spec.name] = spec
        self._data[spec.name] = _Gauge() if spec.kind == "gauge" else _Cumulative()

    def set_clock(self, device: str, clock) -> None:
        """`clock.ticks(t_ns)` gives the device clock at host time (sim.device.DeviceClock)."""
        self._clocks[device] = clock
        self.clock_hz[device] = float(clock.hz)

    def add_rate(self, name: str, t0_ns: float, t1_ns: float, per_ns: float) -> None:
        """The counter grows by per_ns each ns during [t0, t1)."""
        if t1_ns > t0_ns and per_ns:
            self._data[name].segs.append((t0_ns, t1_ns, per_ns))

    def segments(self, name: str) -> list:
        """The (t0, t1, rate per ns) list of a cumulative register, for producers on a hot path
        that append to it directly (the PCIe fabric closes a segment at every rate change)."""
        return self._data[name].segs

    def add_amount(self, name: str, t0_ns: float, t1_ns: float, amount: float) -> None:
        """The counter grows by amount spread evenly over [t0, t1) (at t0 when the span is empty)."""
        if t1_ns <= t0_ns:
            t1_ns = t0_ns + 1.0
        self.add_rate(name, t0_ns, t1_ns, amount / (t1_ns - t0_ns))

    def step_level(self, name: str, t_ns: float, delta: float) -> None:
        """A gauge changes by delta at t_ns."""
        d = self._data[name]
        d.t.append(t_ns)
        d.v.append(delta)

    def extend_segments(self, name: str, t0, t1, per_ns) -> None:
        """Bulk add_rate from arrays (the scale path replicates steps this way)."""
        seg = np.vstack([np.asarray(t0, dtype=np.float64), np.asarray(t1, dtype=np.float64),
                         np.asarray(per_ns, dtype=np.float64)])
        if seg.shape[1]:
            self._data[name].bulk.append(seg)

    def extend_levels(self, name: str, t, v) -> None:
        """Bulk step_level (deltas)."""
        d = self._data[name]
        d.t.extend(np.asarray(t, dtype=np.float64).tolist())
        d.v.extend(np.asarray(v, dtype=np.float64).tolist())

    def freeze(self, start_ns: float, end_ns: float) -> None:
        for d in self._data.values():
            d.freeze()
        self.start_ns = self.origin_ns + int(round(start_ns))
        self.end_ns = self.origin_ns + int(round(end_ns))
        self.frozen = True

    # -- reading (the sampler) -----------------------------------------------------------------
    def spec(self, name: str) -> CounterSpec:
        return self._by_name[name]

    def read_raw(self, names: list[str], t_ns) -> list[int]:
        """Raw register values at host time t_ns (see the module docstring)."""
        return self.reader(names)(t_ns)

    def read_raw_many(self, name: str, t_ns: np.ndarray) -> np.ndarray:
        """One register at many host times (uint64 array): the vectorised form of read_raw."""
        spec = self._by_name[name]
        d = self._data[name]
        t = self._rel(t_ns)
        if spec.kind == "gauge":
            return np.round(d.level(t)).astype(np.uint64)
        total = np.floor(d.total(t) + 1e-6).astype(np.uint64)
        if spec.bits < 64:
            total &= np.uint64((1 << spec.bits) - 1)
        return total

    def reader(self, names: list[str]):
        """A function t_ns -> raw values of `names` (the sampler's fast path, no per-name lookups)."""
        plan = [(self._by_name[n], self._data[n]) for n in names]

        origin = self.origin_ns

        def read(t_ns) -> list[int]:
            t = np.array([float(int(t_ns) - origin)])
            out = []
            for spec, d in plan:
                if spec.kind == "gauge":
                    out.append(int(round(float(d.level(t)[0]))))
                else:
                    v = int(np.floor(d.total(t)[0] + 1e-6))
                    out.append(v & ((1 << spec.bits) - 1))
            return out

        return read

    def device_ticks(self, device: str, t_ns) -> int:
        clock = self._clocks.get(device)
        if clock is None:  # the switch has no clock of its own; it is read through the host
            return int(t_ns)

        if hasattr(clock, "ticks_at"):
            return clock.ticks_at(float(int(t_ns) - self.origin_ns))
        return int(clock.ticks(self._rel(t_ns))[0])

    def device_host_ns(self, device: str, ticks) -> np.ndarray:
        """Host (model) ns at which `device`'s clock shows `ticks` (int64 array): the inverse of
        device_ticks, for hardware that acts on its own clock (the PM sampler, sim/pm.py)."""
        clock = self._clocks.get(device)
        ticks = np.asarray(ticks, dtype=np.int64)
        if clock is None:
            return ticks.copy()
        return np.ceil(np.asarray(clock.host_ns(ticks), dtype=np.float64)).astype(np.int64) + self.origin_ns

    def true_rate(self, name: str, t0_ns: float, t1_ns: float) -> float:
        """Ground truth: mean increase per second (cumulative) or mean level (gauge) over [t0, t1]."""
        spec = self._by_name[name]
        d = self._data[name]
        if t1_ns <= t0_ns:
            raise ValueError("true_rate needs t1_ns > t0_ns")
        t0_ns, t1_ns = (float(v) for v in self._rel([t0_ns, t1_ns]))
        if spec.kind == "gauge":
            # time-weighted mean of the step function
            ts = d.times
            inside = ts[(ts > t0_ns) & (ts < t1_ns)] if ts is not None else np.array([])
            edges = np.concatenate([[t0_ns], inside, [t1_ns]])
            levels = d.level(edges[:-1])
            return float(np.sum(levels * np.diff(edges)) / (t1_ns - t0_ns))
        tot = d.total(np.array([t0_ns, t1_ns], dtype=np.float64))
        return float((tot[1] - tot[0]) / (t1_ns - t0_ns) * 1e9)

    def total(self, name: str, t_ns: float) -> float:
        """Unwrapped cumulative value (tests and the model's own accounting)."""
        return float(self._data[name].total(self._rel(t_ns))[0])

    def _rel(self, t_ns) -> np.ndarray:
        """Absolute host ns (ints, exact) -> the model's float ns since its start."""
        t = np.atleast_1d(np.asarray(t_ns))
        if t.dtype.kind in "iu":
            return (t.astype(np.int64) - self.origin_ns).astype(np.float64)
        return t.astype(np.float64) - float(self.origin_ns)


def wrap_seconds(spec: CounterSpec) -> float:
    """How long the register takes to wrap at its peak rate (inf when it has no peak)."""
    if spec.kind != "cumulative" or not spec.peak_per_s:
        return math.inf
    return (1 << spec.bits) / spec.peak_per_s
