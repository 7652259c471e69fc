"""The device model's counter registers (sim.registers.RegisterBank) as a counter source.

Reads raw register values only (read_raw / device_ticks), never the model's rates. In a
simulated run the sampler's VirtualClock time is the model's host time. In real time
(`acceltrace collect --source sim` with no model running) the model first simulates the
requested span, and the sampler then reads the registers as wall-clock time passes:
model time = bank.start_ns + (CLOCK_MONOTONIC now - when collection began).
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Callable

from collect.counters.base import CounterSource, CounterSpec, DeviceInfo, Reading, SourceUnavailable

REALTIME_SCENARIO = "llm-inference"
# where the device model offers "simulate a scenario for a span, return its frozen bank" (docs/sim-needs.md)
BANK_FACTORIES = ("sim.api:register_bank_for", "sim.scenarios.pipeline:register_bank_for")

# (pattern on the register name after "<device>.", role, unit of the stored value, scale)
_ROLES = [
    (r"pcie\.h2d_bytes", "pcie_h2d_bytes", "B/s"),
    (r"pcie\.d2h_bytes", "pcie_d2h_bytes", "B/s"),
    (r"uplink\.h2d_bytes", "pcie_h2d_bytes", "B/s"),
    (r"uplink\.d2h_bytes", "pcie_d2h_bytes", "B/s"),
    (r"(pcie|uplink)\.(h2d|d2h)_tlps", "pcie_tlps", "TLP/s"),
    (r"dma\.(h2d|d2h)_busy_ns", "dma_busy_ns", "ns/s"),
    (r"hbm\.read_bytes", "hbm_read_bytes", "B/s"),
    (r"hbm\.write_bytes", "hbm_write_bytes", "B/s"),
    (r"hbm\.requested_bytes", "hbm_requested_bytes", "B/s"),
    (r"eu\.[^.]+\.busy_cycles", "eu_busy_cycles", "cycles/s"),
]


def spec_from_bank(s) -> CounterSpec:
    """Our CounterSpec for one sim.registers.CounterSpec (its role found from the register name)."""
    local = s.name[len(s.device) + 1:] if s.name.startswith(s.device + ".") else s.name
    role, unit = "", (s.unit if s.kind == "gauge" else f"{s.unit}/s")
    for pat, r, u in _ROLES:
        if re.fullmatch(pat, local):
            role, unit = r, u
            break
    link = ""
    if role.startswith("pcie"):
        link = "uplink" if local.startswith("uplink") else "link"
    return CounterSpec(
        name=s.name, unit=unit, bits=int(s.bits), kind=s.kind, device=s.device,
        slot="programmable" if s.group == "programmable" else "fixed",
        raw_unit=s.unit, role=role, link=link,
        full_scale=float(s.peak_per_s) if s.peak_per_s else None, description=s.description,
    )


class SimSource(CounterSource):
    """Raw registers of a RegisterBank; `clock` gives host ns, `model_offset_ns` maps it to model time."""

    NAME = "sim"

    def __init__(self, bank, clock=None, model_offset_ns: int = 0, links: dict | None = None,
                 clock_hz: dict | None = None):
        self.bank = bank
        self.clock = clock
        self.model_offset_ns = int(model_offset_ns)
        self._specs = [spec_from_bank(s) for s in bank.specs]
        self._links = links if links is not None else dict(getattr(bank, "links", {}) or {})
        self._clock_hz = clock_hz if clock_hz is not None else dict(getattr(bank, "clock_hz", {}) or {})

    @classmethod
    def realtime(cls, duration_s: float, scenario: str = REALTIME_SCENARIO, seed: int = 0,
                 progress=None) -> "SimSource":
        """A source over a model run simulated up front, read as wall-clock time passes."""
        from collect.sampler import WallClock

        factory = None
        for target in BANK_FACTORIES:
            mod, fn = target.split(":")
            try:
                factory = getattr(importlib.import_module(mod), fn)
                break
            except (ImportError, AttributeError):
                continue
        if factory is None:
            factory = _bank_from_scenario
        need_ns = int((duration_s * 1.02 + 0.05) * 1e9)  # the last tick must still read inside the run
        if factory is _bank_from_scenario:
            bank = factory(scenario, seed, need_ns, progress)
        else:
            bank = factory(scenario, seed, need_ns)
        src = cls(bank, WallClock())
        src.realtime_anchor = True
        return src

    realtime_anchor = False

    def devices(self) -> list[DeviceInfo]:
        out = []
        for dev in dict.fromkeys(s.device for s in self._specs):
            link = self._links.get(dev)
            out.append(DeviceInfo(
                name=dev,
                # a device without its own clock is read through the host: its ticks are host ns
                clock_hz=self._clock_hz.get(dev, 1e9),
                slots=int(self.bank.programmable_slots.get(dev, 0)),
                links={("uplink" if dev.startswith("switch") else "link"): link} if link else {},
            ))
        return out

    def specs(self) -> list[CounterSpec]:
        return list(self._specs)

    def tick_reader(self, groups: list[tuple[str, list[str]]]) -> Callable[[], list[Reading]]:
        """All groups' registers at one instant in one vectorised read (one Reading per group).

        The sampler records only the groups that hold slots at that tick; evaluating the others
        too is how a model is read cheaply, and changes no recorded value.
        """
        names = [n for _, grp in groups for n in grp]
        if not CursorReader.available(self.bank, names):
            return None
        read_all = CursorReader(self.bank, names)
        bank = self.bank
        bounds, pos = [], 0
        for dev, grp in groups:
            bounds.append((dev, pos, pos + len(grp)))
            pos += len(grp)
        devices = list(dict.fromkeys(dev for dev, _ in groups))

        def read() -> list[Reading]:
            host_ns = self.clock.now_ns()
            if self.realtime_anchor:
                self.model_offset_ns = int(bank.start_ns) - host_ns
                self.realtime_anchor = False
            t = host_ns + self.model_offset_ns
            values = read_all(t)
            ticks = {d: bank.device_ticks(d, t) for d in devices}
            return [Reading(host_ns, ticks[dev], values[a:b]) for dev, a, b in bounds]

        return read

    def reader(self, device: str, names: list[str]) -> Callable[[], Reading]:
        bank = self.bank
        names = list(names)
        if CursorReader.available(bank, names):
            read_many = CursorReader(bank, names)
        elif getattr(bank, "reader", None) is not None:
            read_many = bank.reader(names)
        else:
            read_many = lambda t: bank.read_raw(names, t)  # noqa: E731

        def read() -> Reading:
            host_ns = self.clock.now_ns()
            if self.realtime_anchor:  # the first read of the collection is the model's start
                self.model_offset_ns = int(bank.start_ns) - host_ns
                self.realtime_anchor = False
            t = host_ns + self.model_offset_ns
            return Reading(host_ns, bank.device_ticks(device, t), read_many(t))

        return read


def _bank_from_scenario(scenario: str, seed: int, duration_ns: int, progress=None):
    """Simulate `scenario` long enough to cover duration_ns of model time; its frozen register bank.

    Uses the model's public entry points (sim.scenarios.build, sim.run.run_plan): one run at
    the scenario's own length tells the model time per step, a second run takes enough steps.
    """
    try:
        from sim.run import run_plan
        from sim.scenarios import build
    except ImportError as e:
        raise SourceUnavailable(f"sim: the device model cannot be imported ({e})") from None
    try:
        plan = build(scenario, seed)
    except (ValueError, KeyError) as e:
        raise SourceUnavailable(f"sim: {e}") from None
    res = run_plan(plan)
    if res.duration_ns < duration_ns:
        steps = int(math.ceil(plan.steps * duration_ns / max(res.duration_ns, 1.0) * 1.05))
        if progress:
            progress(f"simulating {scenario}: {steps} steps for {duration_ns / 1e9:.1f} s of model time")
        res = run_plan(plan, steps=steps)
    return res.bank


class CursorReader:
    """Reads many registers of a frozen RegisterBank at non-decreasing times in one numpy pass.

    The bank's own reader evaluates one register at a time (a numpy call each, ~20 us);
    at 64 registers and 1 kHz that alone would exceed the sampler's budget. This keeps a
    breakpoint cursor per register over the bank's frozen breakpoint arrays and evaluates
    every register with one expression, with the bank's arithmetic exactly (a test checks
    equality with read_raw). It relies on the arrays RegisterBank.freeze() builds
    (times/totals/slopes, times/values); `available()` says whether they are there.
    """

    _MAX_STEPS = 2  # cursor advances per read before falling back to the vectorised seek

    @staticmethod
    def available(bank, names) -> bool:
        data = getattr(bank, "_data", None)
        if not getattr(bank, "frozen", False) or not isinstance(data, dict):
            return False
        for n in names:
            d = data.get(n)
            if d is None or getattr(d, "times", None) is None:
                return False
            if not (hasattr(d, "totals") and hasattr(d, "slopes")) and not hasattr(d, "values"):
                return False
        return True

    def __init__(self, bank, names):
        import numpy as np

        self.np = np
        times, base, slope, starts, lens = [], [], [], [], []
        masks, gauge = [], []
        pos = 0
        for n in names:
            spec, d = bank.spec(n), bank._data[n]
            is_gauge = spec.kind == "gauge"
            t = np.asarray(d.times, dtype=np.float64)
            b = np.asarray(d.values if is_gauge else d.totals, dtype=np.float64)
            s = np.zeros(len(t)) if is_gauge else np.asarray(d.slopes, dtype=np.float64)
            # a leading sentinel holds 0 before the first breakpoint; a trailing one is never passed
            times += [np.array([-1e300]), t, np.array([np.inf])]
            base += [np.array([0.0]), b, np.array([b[-1] if len(b) else 0.0])]
            slope += [np.array([0.0]), s, np.array([0.0])]
            starts.append(pos)
            lens.append(len(t))
            pos += len(t) + 2
            masks.append((1 << spec.bits) - 1 if spec.bits < 64 else (1 << 64) - 1)
            gauge.append(is_gauge)
        self.times, self.base, self.slope = np.concatenate(times), np.concatenate(base), np.concatenate(slope)
        self.starts, self.lens = np.array(starts), np.array(lens)
        # One globally sorted key array for a vectorised seek: register i's times shifted into its own
        # band [i * span, (i + 1) * span). Float rounding may misplace a query that falls within an ulp
        # of a breakpoint; _seek checks every result exactly and redoes those registers alone.
        finite = self.times[np.isfinite(self.times) & (self.times > -1e299)]
        self.tmin = float(finite.min()) if len(finite) else 0.0
        rng = float(finite.max()) - self.tmin if len(finite) else 0.0
        self.span = 4.0 * max(rng, 1e9)
        band = np.repeat(np.arange(len(names), dtype=np.float64) * self.span, self.lens + 2)
        rel = np.clip(self.times - self.tmin, -self.span / 4, self.span * 3 / 4)
        self.keys = band + rel
        self.bands = np.arange(len(names), dtype=np.float64) * self.span
        self.ends = self.starts + self.lens
        self.mask = np.array(masks, dtype=np.uint64)
        # floor(total + 1e-6) for counters as the bank does; levels round to nearest (a level exactly
        # halfway between integers rounds up here, to even in the bank: levels are whole entries)
        self.offset = np.where(np.array(gauge), 0.5, 1e-6)
        self.k = self.starts.copy()
        self._load()
        self.last_t = -np.inf
        # the bank keeps model-relative float ns and reads absolute int host ns (RegisterBank.reader)
        self.origin_ns = int(getattr(bank, "origin_ns", 0))

    def _load(self) -> None:
        """Cache the current segment of every register (start time, value there, slope, next breakpoint)."""
        k = self.k
        self.seg_t, self.seg_v, self.seg_s = self.times[k], self.base[k], self.slope[k]
        self.next_t = self.times[k + 1]

    def _seek(self, t: float) -> None:
        """Place every cursor at the segment holding t: one searchsorted over all bands, then an exact check."""
        np = self.np
        q = self.bands + min(max(t - self.tmin, -self.span / 4 + 1.0), self.span * 3 / 4 - 1.0)
        k = np.searchsorted(self.keys, q, side="right") - 1
        np.maximum(k, self.starts, out=k)  # np.clip with array bounds is several times slower
        np.minimum(k, self.ends, out=k)
        bad = ~((self.times[k] <= t) & (self.times[k + 1] > t))
        for i in (np.flatnonzero(bad) if bad.any() else ()):
            s, n = self.starts[i], self.lens[i]
            k[i] = s + np.searchsorted(self.times[s + 1 : s + 1 + n], t, side="right")
        self.k = k
        self._load()

    def __call__(self, t_ns) -> list[int]:
        np = self.np
        t = float(int(t_ns) - self.origin_ns)
        if t < self.last_t or self.last_t == -np.inf:
            self._seek(t)
        elif (self.next_t <= t).any():
            for _ in range(self._MAX_STEPS):
                adv = self.next_t <= t
                if not adv.any():
                    self._load()
                    break
                self.k += adv
                self.next_t = self.times[self.k + 1]
            else:
                self._seek(t)
        self.last_t = t
        # the bank's own arithmetic, operation for operation, so the values are bit-identical
        v = self.seg_s * (t - self.seg_t)
        v += self.seg_v
        v += self.offset
        return (np.floor(v).astype(np.uint64) & self.mask).tolist()
