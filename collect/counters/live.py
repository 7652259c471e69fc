"""Rates from samples as they arrive, for the terminal summary and live streaming to the daemon.

The same arithmetic as ingest/native/actr.py (delta mod 2**bits over running time, times scale),
one sample at a time; the file keeps raw values, so nothing here decides what is stored.
"""

from __future__ import annotations

from acceltrace.collect.counters.base import CounterSpec, Reading


class LiveRates:
    """Feed (group, reading) pairs; get (counter name, value in its unit) for every counter with a new value."""

    def __init__(self, specs: list[CounterSpec]):
        self.specs = {s.name: s for s in specs}
        self._last: dict[int, tuple[int, list[int]]] = {}  # group id -> (running ns, raw values)
        self.latest: dict[str, float] = {}

    def update(self, group_id: int, names: list[str], running_ns: int, reading: Reading) -> list[tuple[str, float]]:
        out = []
        prev = self._last.get(group_id)
        values = list(reading.values)
        self._last[group_id] = (running_ns, values)
        for i, name in enumerate(names):
            s = self.specs[name]
            if s.kind == "gauge":
                out.append((name, values[i] * s.scale))
            elif prev is not None and running_ns > prev[0]:
                delta = (values[i] - prev[1][i]) % (1 << s.bits)
                out.append((name, delta / (running_ns - prev[0]) * 1e9 * s.scale))
        for name, v in out:
            self.latest[name] = v
        return out


def human(value: float, unit: str) -> str:
    """1.23 G B/s style, for one summary line."""
    a = abs(value)
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= factor and unit not in ("%",):
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
