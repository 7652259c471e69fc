"""The scaled run's registers without materialising them: reads map onto the fully simulated run.

A cumulative register at time t inside block copy r reads what the simulated run read at the
same offset into the block, plus r times what one block added; during the pause after a copy it
holds still; in the tail it continues from the simulated tail plus every copy's increment.
Gauges read the level at the mapped time. Memory stays that of the simulated run, whatever the
number of copies (materialised segments of a 100 M-event run would need tens of GB).

Exposes the RegisterBank reading interface (specs, programmable_slots, links, clock_hz,
origin_ns, start_ns, end_ns, read_raw, reader, device_ticks, true_rate) and deliberately not
its internals, so readers take the generic path.
"""

from __future__ import annotations

import bisect

import numpy as np


class PeriodicBank:
    def __init__(self, bank, w0_ns: float, w1_ns: float, shifts: np.ndarray, suffix_shift: float, end_ns: float):
        self._bank = bank
        self.specs = bank.specs
        self.programmable_slots = dict(bank.programmable_slots)
        self.links = dict(bank.links)
        self.clock_hz = dict(bank.clock_hz)
        self.origin_ns = bank.origin_ns
        self.start_ns = bank.start_ns
        self.end_ns = bank.origin_ns + int(round(end_ns))
        self.frozen = True
        self._w0, self._w1 = float(w0_ns), float(w1_ns)
        self._shifts = np.asarray(shifts, dtype=np.float64)
        self._n = len(self._shifts)
        self._shift_list = self._shifts.tolist()
        self._suffix_shift = float(suffix_shift)
        self._delta: dict[str, float] = {}
        self._lists: dict[str, tuple] = {}
        for s in self.specs:
            if s.kind == "cumulative":
                tot = bank._data[s.name].total(np.array([self._w0, self._w1]))
                self._delta[s.name] = float(tot[1] - tot[0])

    def spec(self, name: str):
        return self._bank.spec(name)

    def _map(self, t_rel: float) -> tuple[float, int]:
        """(time in the simulated run, block increments to add)."""
        if t_rel < self._w0:
            return t_rel, 0
        if t_rel >= self._w1 + self._suffix_shift:
            return t_rel - self._suffix_shift, self._n - 1
        r = bisect.bisect_right(self._shift_list, t_rel - self._w0) - 1
        return min(t_rel - self._shifts[r], self._w1), r

    def _value(self, name: str, t_rel: float) -> float:
        tau, k = self._map(t_rel)
        d = self._bank._data[name]
        if self._bank.spec(name).kind == "gauge":
            return float(d.level(np.array([tau]))[0])
        return float(d.total(np.array([tau]))[0]) + k * self._delta[name]

    def _series(self, name: str):
        """(times, values at them, slopes) as Python lists: a bisect per read instead of numpy calls."""
        got = self._lists.get(name)
        if got is None:
            d = self._bank._data[name]
            if self._bank.spec(name).kind == "gauge":
                got = (d.times.tolist(), d.values.tolist(), None)
            else:
                got = (d.times.tolist(), d.totals.tolist(), d.slopes.tolist())
            self._lists[name] = got
        return got

    def reader(self, names: list[str]):
        """Read `names` at one time: the time is mapped once, each register costs one bisect."""
        plan = []
        for n in names:
            s = self._bank.spec(n)
            times, vals, slopes = self._series(n)
            mask = (1 << s.bits) - 1 if s.kind != "gauge" else 0
            plan.append((times, vals, slopes, self._delta.get(n, 0.0), mask))
        origin = self.origin_ns

        def read(t_ns) -> list[int]:
            tau, k = self._map(float(int(t_ns) - origin))
            out = []
            for times, vals, slopes, delta, mask in plan:
                i = bisect.bisect_right(times, tau) - 1
                if slopes is None:  # gauge
                    out.append(int(round(vals[i])) if i >= 0 else 0)
                    continue
                v = (vals[i] + slopes[i] * (tau - times[i]) if i >= 0 else 0.0) + k * delta
                out.append(int(v + 1e-6) & mask)
            return out

        return read

    def read_raw(self, names: list[str], t_ns) -> list[int]:
        return self.reader(names)(t_ns)

    def device_ticks(self, device: str, t_ns) -> int:
        return self._bank.device_ticks(device, t_ns)  # the device clock runs on through the copies

    def true_rate(self, name: str, t0_ns: float, t1_ns: float) -> float:
        a, b = float(int(t0_ns) - self.origin_ns), float(int(t1_ns) - self.origin_ns)
        if b <= a:
            raise ValueError("true_rate needs t1_ns > t0_ns")
        if self._bank.spec(name).kind == "gauge":
            ts = np.linspace(a, b, 1001)
            return float(np.mean([self._value(name, t) for t in ts]))
        return (self._value(name, b) - self._value(name, a)) / (b - a) * 1e9
