"""The counter-source interface: what a source describes and how the sampler reads it.

A source is one module in collect/counters/ holding a CounterSource subclass, registered
by name in collect/counters/__init__.py. It describes its devices (with their device
clock, programmable slots and PCIe links) and its counters (CounterSpec), and hands the
sampler one `reader` per group of counters: a closure the sampler calls once per tick
that returns raw register values, never rates (wraparound, multiplex scaling and unit
scaling happen at ingest, from the spec written into the .actr header).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, NamedTuple, Sequence

KINDS = ("cumulative", "gauge")
SLOTS = ("fixed", "programmable")


class SourceUnavailable(Exception):
    """The source cannot run here (no driver, no permission, ...); str() is the user-facing reason."""


@dataclass(frozen=True)
class CounterSpec:
    """One counter as the hardware exposes it, and how ingest turns it into a track.

    cumulative: the register counts events (mod 2**bits); ingest shows
        (delta / seconds) * scale in `unit`.
    gauge: the register holds a level; ingest shows value * scale in `unit`.
    """

    name: str
    unit: str  # unit of the value ingest stores (after scale): "B/s", "%", "W", "Hz", ...
    bits: int = 64
    kind: str = "cumulative"
    device: str = "host"
    slot: str = "fixed"  # "programmable": needs one of the device's slots (multiplexed beyond them)
    raw_unit: str = ""  # what one register count means: "B", "cycles", "jiffies", "mW"
    scale: float = 1.0
    role: str = ""  # what derived metrics know it as (docs/counters.md, "Roles")
    link: str = ""  # PCIe roles: the link it measures (a key of the device's links)
    full_scale: float | None = None  # raw units per second that mean 100 % (utilisation roles)
    # PCIe roles: "link" where it counts the link's bytes, TLP framing and headers included (NVML's);
    # else payload. Its utilisation is then of the link's raw rate, not its payload rate (store/link.py)
    pcie_bytes: str = ""
    description: str = ""
    read_group: str = ""  # fixed counters with different read_group are read (and timed) separately

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"counter {self.name}: kind {self.kind!r} not in {KINDS}")
        if self.slot not in SLOTS:
            raise ValueError(f"counter {self.name}: slot {self.slot!r} not in {SLOTS}")
        if not 1 <= self.bits <= 64:
            raise ValueError(f"counter {self.name}: bits {self.bits} outside 1..64")

    def header_entry(self, group: int) -> dict:
        d = {k: v for k, v in asdict(self).items() if v not in ("", None)}
        d["group"] = group
        return d


@dataclass
class DeviceInfo:
    """A device whose counters a source reads."""

    name: str
    clock_hz: float | None = None  # frequency of its dev_ticks; None: no device clock (host time only)
    slots: int = 0  # programmable counter slots
    links: dict = field(default_factory=dict)  # link name -> {gen, width, max_payload_bytes}
    props: dict = field(default_factory=dict)  # anything else worth keeping (model, driver, ...)

    def header_entry(self) -> dict:
        return {"name": self.name, "clock_hz": self.clock_hz, "slots": self.slots,
                "links": self.links, "props": self.props}


class Reading(NamedTuple):
    """What one read of a group returns. host_ns on the sampler's clock; dev_ticks -1 when none.

    times: (enabled_ns, running_ns) when the source multiplexes by itself (perf_event),
    else None and the sampler supplies its own.
    """

    host_ns: int
    dev_ticks: int
    values: Sequence[int]
    times: tuple[int, int] | None = None


class CounterSource:
    """Base class of counter sources; see the module docstring."""

    NAME = ""
    clock = None  # set by the sampler before reader() is called: readers take host_ns from clock.now_ns()

    def devices(self) -> list[DeviceInfo]:
        raise NotImplementedError

    def specs(self) -> list[CounterSpec]:
        raise NotImplementedError

    def reader(self, device: str, names: list[str]) -> Callable[[], Reading]:
        """A function reading these counters of one device, in this order, now."""
        raise NotImplementedError

    def notes(self) -> list[str]:
        """Things the user should know (counters unavailable and why); written as NOTE chunks."""
        return []

    def header_extra(self) -> dict:
        return {}

    def close(self) -> None:
        pass
