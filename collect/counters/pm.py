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


def header_for(pm, specs: list[dict], devices: list[dict], group: int = 0, source: str = "pm") -> dict:
    """An .actr header declaring the PM unit's registers as one buffered group.

    specs: the header counter entries (name, unit, bits, kind, ...) of pm.names, in order.
    """
    return {"source": source, "rate_hz": pm.rate_hz, "devices": devices,
            "counters": [dict(s, group=group) for s in specs],
            "groups": [{"id": group, "counters": list(pm.names), "device": pm.device,
                        "buffered": {"clock_hz": pm.clock_hz, "period_ticks": pm.period_ticks,
                                     "rate_hz": pm.rate_hz}}]}


class PMCollector:
    """Drains one PM unit into an ActrWriter at drain_hz against absolute deadlines."""

    def __init__(self, pm, writer: ActrWriter, clock, group: int = 0, drain_hz: float = 20.0):
        if not MIN_DRAIN_HZ <= drain_hz <= MAX_DRAIN_HZ:
            raise ValueError(f"drain rate {drain_hz} Hz is outside {MIN_DRAIN_HZ:g}..{MAX_DRAIN_HZ:g} Hz")
        self.pm, self.writer, self.clock, self.group = pm, writer, clock, group
        self.period_ns = int(1e9 / drain_hz)
        self.stats = DrainStats()
        self._stop = False

    def drain_once(self) -> int:
        """One drain: clock pair, the ring's contents, one BUFS chunk. Returns the samples drained."""
        host_ns = self.clock.now_ns()
        sync_host, sync_ticks = self.pm.sync_pair(host_ns)
        seq0, ticks, raw, dropped = self.pm.drain(host_ns)
        self.writer.append_buffered(self.group, seq0=seq0, dropped=dropped, sync_host_ns=sync_host,
                                    sync_dev_ticks=sync_ticks, period_ticks=self.pm.period_ticks,
                                    dev_ticks=ticks, raw=raw)
        self.stats.drains += 1
        self.stats.samples += len(ticks)
        self.stats.dropped += dropped
        return len(ticks)

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
