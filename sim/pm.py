"""The device's performance-monitor (PM) sampler: counter registers sampled by the device itself.

Real accelerators sample their counters in hardware (Nsight Systems' GPU metrics: 10 kHz by
default, up to 200 kHz): the PM unit reads its registers every `period` ticks of the device
clock and writes each sample, stamped with the device clock, into a ring in device memory. The
host only drains that ring now and then, in batches; it never wakes per sample. When the host
drains too slowly the ring fills and the PM unit drops new samples, counting each one.

`PMSampler` models exactly that on a RegisterBank (sim/registers.py):

- `program(names, rate_hz)` chooses the registers (one group, read together) and the rate
  (1 Hz .. 200 kHz), rounded to a whole number of device ticks (`period_ticks`).
- the ring is `ring_samples` slots of (dev_ticks, K raw values) in "device memory" (a numpy
  array); `seq` numbers every sample the unit took, dropped or not.
- `drain(host_now_ns)` is what a host read of the ring returns: the unit first catches up
  with every sample due up to `host_now_ns` (the model is evaluated lazily, vectorised, which
  is indistinguishable from having run all along), then the host copies out what the ring
  holds and frees it. Returns (seq of the first sample, dev_ticks, raw (N, K), samples
  dropped since the previous drain).
- `sync_pair(host_now_ns)` reads the device clock from the host: one (host ns, device ticks)
  pair, as a driver does around each drain, for ingest to map device time to host time.

This is the device side only; collect/counters/pm.py is the collector that drains it (it
never imports sim/: it is handed any object with these methods).
"""

from __future__ import annotations

import time

import numpy as np

MIN_RATE_HZ = 1.0
MAX_RATE_HZ = 200_000.0


class PMSampler:
    """One device's PM sampling unit (see the module docstring)."""

    def __init__(self, bank, device: str, ring_samples: int = 1 << 16, model_offset_ns: int = 0):
        if ring_samples < 2:
            raise ValueError("the PM ring needs at least 2 slots")
        self.bank = bank
        self.device = device
        self.ring_samples = int(ring_samples)
        self.model_offset_ns = int(model_offset_ns)  # host ns + offset = the model's time
        self.clock_hz = float(getattr(bank, "clock_hz", {}).get(device, 1e9))
        self.names: list[str] = []
        self.period_ticks = 0
        self.rate_hz = 0.0

    def program(self, names: list[str], rate_hz: float, start_host_ns: int) -> None:
        """Start sampling `names` at `rate_hz` from `start_host_ns` (the first sample is taken then)."""
        if not MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ:
            raise ValueError(f"PM sampling rate {rate_hz} Hz is outside {MIN_RATE_HZ:g}..{MAX_RATE_HZ:g} Hz")
        unknown = [n for n in names if n not in {s.name for s in self.bank.specs}]
        if unknown or not names:
            raise ValueError(f"the PM unit has no register {unknown[0]!r}" if unknown else "no registers to sample")
        self.names = list(names)
        self.period_ticks = max(1, int(round(self.clock_hz / rate_hz)))
        self.rate_hz = self.clock_hz / self.period_ticks
        self.first_tick = int(self.bank.device_ticks(self.device, start_host_ns + self.model_offset_ns))
        k = len(self.names)
        self.ring_ticks = np.zeros(self.ring_samples, dtype=np.int64)
        self.ring_raw = np.zeros((self.ring_samples, k), dtype=np.uint64)
        self.taken = 0  # samples the unit has taken (its seq counter), dropped ones included
        self.write = 0  # samples written into the ring (monotonic)
        self.read = 0  # samples the host has drained (monotonic)
        self.dropped = 0  # samples the unit could not write (ring full), in all
        self.dropped_reported = 0
        # CPU time spent evaluating the model's registers for the unit's samples: work the PM
        # hardware does on a real device, which benchmarks subtract from the host's drain cost
        self.model_cpu_s = 0.0

    def _catch_up(self, host_now_ns: int) -> None:
        """Take every sample due up to host_now_ns: write what fits, count the rest as dropped."""
        now_tick = int(self.bank.device_ticks(self.device, host_now_ns + self.model_offset_ns))
        due = (now_tick - self.first_tick) // self.period_ticks + 1  # samples due so far (the first at start)
        new = due - self.taken
        if new <= 0:
            return
        room = self.ring_samples - (self.write - self.read)
        fit = min(new, room)
        if fit:
            seqs = np.arange(self.taken, self.taken + fit, dtype=np.int64)
            ticks = self.first_tick + seqs * self.period_ticks
            t_model = self.bank.device_host_ns(self.device, ticks)
            slots = (np.arange(self.write, self.write + fit) % self.ring_samples)
            self.ring_ticks[slots] = ticks
            for j, name in enumerate(self.names):
                self.ring_raw[slots, j] = self.bank.read_raw_many(name, t_model)
            self.write += fit
        # a full ring: the unit keeps its grid and counts what it could not store. What the host
        # frees later is filled only by later samples (the dropped ones are gone).
        self.dropped += new - fit
        self.taken = due

    def drain(self, host_now_ns: int) -> tuple[int, np.ndarray, np.ndarray, int]:
        """(seq of the first returned sample, dev_ticks, raw (N, K), dropped since the last drain)."""
        c0 = time.thread_time()
        self._catch_up(host_now_ns)
        self.model_cpu_s += time.thread_time() - c0
        n = self.write - self.read
        slots = np.arange(self.read, self.write) % self.ring_samples
        ticks, raw = self.ring_ticks[slots], self.ring_raw[slots]
        # the seq of the first sample still in the ring: samples before it were drained or dropped
        seq0 = self._seq_of_read
        self.read = self.write
        dropped = self.dropped - self.dropped_reported
        self.dropped_reported = self.dropped
        return seq0, ticks, raw, dropped if n or dropped else 0

    @property
    def _seq_of_read(self) -> int:
        # ring slot seqs are not stored: a sample's seq follows from its tick (the grid is exact)
        if self.write == self.read:
            return self.taken
        return int((self.ring_ticks[self.read % self.ring_samples] - self.first_tick) // self.period_ticks)

    def sync_pair(self, host_now_ns: int) -> tuple[int, int]:
        """One (host ns, device ticks) reading of the device clock."""
        return int(host_now_ns), int(self.bank.device_ticks(self.device, host_now_ns + self.model_offset_ns))
