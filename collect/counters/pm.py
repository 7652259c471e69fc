"""Draining a device-side PM sampler into .actr BUFS chunks (docs/counters.md, "Buffered samples").

The device samples its own counters into a ring in device memory at its programmed rate
(1 Hz .. 200 kHz, stamped with the device clock); this collector wakes at `drain_hz`
(10-100 Hz), reads one (host ns, device ticks) clock pair, copies out everything the ring
holds, and writes it as one BUFS chunk per drain: the host's cost is per batch, not per sample,
which is how 64 counters at 10 kHz stay under a few percent of one core. Samples the device
dropped because its ring was full come back as exact counts and are written with the batch.

`pm` is any object with program(names, rate_hz, start_host_ns), drain(host_now_ns) ->
(seq0, dev_ticks, raw (N, K), dropped), sync_pair(host_now_ns) -> (host_ns, dev_ticks),
and the attributes device, clock_hz, period_ticks, rate_hz, names: sim/pm.py's PMSampler is
one; a real driver's PM interface would be another. This module never imports sim/.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from acceltrace.formats.actr.writer import ActrWriter

MIN_DRAIN_HZ, MAX_DRAIN_HZ = 1.0, 1000.0


@dataclass
class DrainStats:
    drains: int = 0
    samples: int = 0
    dropped: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    batches: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"drains": self.drains, "buffered_samples": self.samples, "buffered_dropped": self.dropped,
                "drain_cpu_s": round(self.cpu_s, 6), "drain_wall_s": round(self.wall_s, 6)}


def header_for(units: list, devices: list[dict], source: str = "pm") -> dict:
    """An .actr header declaring each PM unit's registers as one buffered group (ids 0, 1, ...).

    units: (pm, specs) pairs, specs being the header counter entries (name, unit, bits, kind, ...)
    of pm.names, in order.
    """
    counters, groups = [], []
    for gid, (pm, specs) in enumerate(units):
        counters += [dict(s, group=gid) for s in specs]
        groups.append({"id": gid, "counters": list(pm.names), "device": pm.device,
                       "buffered": {"clock_hz": pm.clock_hz, "period_ticks": pm.period_ticks,
                                    "rate_hz": pm.rate_hz}})
    return {"source": source, "rate_hz": max(pm.rate_hz for pm, _ in units), "devices": devices,
            "counters": counters, "groups": groups}


class PMCollector:
    """Drains PM units (one buffered group each: group id = position) into an ActrWriter at
    drain_hz, against absolute deadlines."""

    def __init__(self, units: list, writer: ActrWriter, clock, drain_hz: float = 20.0):
        if not MIN_DRAIN_HZ <= drain_hz <= MAX_DRAIN_HZ:
            raise ValueError(f"drain rate {drain_hz} Hz is outside {MIN_DRAIN_HZ:g}..{MAX_DRAIN_HZ:g} Hz")
        self.units = list(units)
        self.writer, self.clock = writer, clock
        self.period_ns = int(1e9 / drain_hz)
        self.stats = DrainStats()
        self._stop = False

    def drain_once(self) -> int:
        """One drain of every unit: a clock pair, the ring's contents, one BUFS chunk each."""
        host_ns = self.clock.now_ns()
        total = 0
        for gid, pm in enumerate(self.units):
            sync_host, sync_ticks = pm.sync_pair(host_ns)
            seq0, ticks, raw, dropped = pm.drain(host_ns)
            self.writer.append_buffered(gid, seq0=seq0, dropped=dropped, sync_host_ns=sync_host,
                                        sync_dev_ticks=sync_ticks, period_ticks=pm.period_ticks,
                                        dev_ticks=ticks, raw=raw)
            self.stats.samples += len(ticks)
            self.stats.dropped += dropped
            total += len(ticks)
        self.stats.drains += 1
        return total

    def run(self, duration_s: float | None) -> DrainStats:
        """Drain until duration_s has passed (None: until stop()), then once more."""
        c0, w0 = time.thread_time(), time.perf_counter()
        start = self.clock.now_ns()
        end = None if duration_s is None else start + int(duration_s * 1e9)
        k = 1
        while not self._stop:
            deadline = start + k * self.period_ns
            if end is not None and deadline > end:
                self.clock.sleep_until(end)
                break
            self.clock.sleep_until(deadline)
            self.drain_once()
            k = max(k + 1, (self.clock.now_ns() - start) // self.period_ns + 1)  # a late drain skips ahead
        self.drain_once()
        self.stats.cpu_s += time.thread_time() - c0
        self.stats.wall_s += time.perf_counter() - w0
        return self.stats

    def stop(self) -> None:
        self._stop = True
