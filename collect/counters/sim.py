"""The device model's counter registers (sim.registers.RegisterBank) as a counter source.

Reads raw register values only (read_raw / device_ticks), never the model's rates. In a
simulated run the sampler's VirtualClock time is the model's host time. In real time
(`acceltrace collect --source sim` with no model running) sim/counters.py simulates the
requested span first and hands the bank over; this module never imports the model.
"""

from __future__ import annotations

import re
from typing import Callable

from acceltrace.collect.counters.base import CounterSource, CounterSpec, DeviceInfo, Reading
from acceltrace.collect.counters.sim_reader import CursorReader

# where the device model offers "simulate a scenario for a span, return its frozen bank" (docs/sim-needs.md)

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
